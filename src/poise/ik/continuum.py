"""Single-target IK for constant-curvature arms (``cc3d_N``): Jacobian, DLS and VVL (seed 001).

Every method iterates on the base-frame (spatial) pose error of seed 001::

    V_D = log(T_D T_e⁻¹) = [ω; v]          (twist taking T_e to T_D: T_D = exp(V̂_D) T_e)
    e   = ‖V_D‖² = ‖ω‖² + ‖v‖²             (eq. 21; radians and metres mixed 1 : 1, L = 1)

with the spatial Jacobian ``J`` of :mod:`poise.models.cc3d` (same frame, ``dV_e = J dx``):

* ``jacobian`` (II-B, eq. 10):  ``Δx = β J⁺ V_D``
* ``dls``      (II-C, eq. 11):  ``Δx = β Jᵀ (J Jᵀ + λ² I)⁻¹ V_D``,  λ = 0.01
* ``vvl``      (II-D): iterate ``x' = (κ_i, φ_i, l_i)`` from ``l = L/3`` (``start_length_ratio``).
  Phase 1, free lengths (eq. 15): ``Δx' = β J'⁺ V_D``, until the error at the virtual lengths
  is below ``vvl_switch`` (1e-2) or ``vvl_free_iters`` (20) iterations have passed. Phase 2,
  restoration (eq. 18): ``Δx' = β J_a⁺ [V_D; L − l]``, ``J_a = [J'; E]`` (``E`` selects the
  lengths); where ``J_a`` has full row rank the lengths return by a factor ``(1 − β)`` per
  iteration. Lengths are clipped to ``≥ min_length_ratio · L``. The convergence metric is always
  evaluated at the **nominal** lengths, so a converged VVL ``q`` solves the real arm; the
  remaining virtual-length error is reported in the message.

``J⁺`` is the minimum-norm pseudo-inverse, computed from the smaller Gram matrix by a symmetric
eigen-decomposition with singular values below ``RCOND · σ_max`` dropped: that drops the exactly
zero singular values of the straight (neutral) start cleanly. The same kernels (:func:`step`)
serve the batch engine :mod:`poise.ik.continuum_batch`, so both give identical iterates.

Stopping: at iterate k (k updates applied) the solver stops when ``e_k < tol`` or ``k = max_iter``.
Status: ``converged`` (tolerance met, every ``|κ_i L_i| ≤ 2π``), ``deadlock`` (some segment coiled
past 2π at the end, whether or not the tolerance was met; ``success = False``), ``iteration_cap``,
``stalled`` (the iterate became non-finite).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from poise.ik import se3
from poise.ik.result import FloatArray, IKResult, InvalidInputError, Status, as_vector
from poise.models.cc3d import CC3D, pose_and_jacobian

METHODS = ("jacobian", "dls", "vvl")
"""The paper's methods (seed 001), iterated by :func:`solve` and the batch engine."""
ROBUST_METHOD = "robust"
"""Beyond seed 001: bounded, projected LM with restarts, only uncoiled answers
(:mod:`poise.ik.continuum_robust`)."""
ALL_METHODS = (*METHODS, ROBUST_METHOD)
"""Every method name :func:`solve`, ``poise solve`` and ``poise bench vvl`` accept."""
DEFAULT_BETA = 0.5
"""Step size β (not given in seed 001; chosen by the benchmark, see docs/continuum.md)."""
DLS_DAMPING = 0.01
"""λ of the damped least-squares method (seed 001, III-B)."""
START_LENGTH_RATIO = 1.0 / 3.0
"""VVL start lengths as a fraction of nominal (seed 001 II-D, III-A: "approximately one third")."""
RCOND = 1e-7
"""Relative singular-value cutoff of the pseudo-inverse (the Gram eigen-decomposition resolves
σ down to ~√eps·σ_max; smaller ones are treated as exact zeros)."""
VVL_SWITCH = 1e-2
"""VVL: the free-length phase ends when ``‖log(T_D T_e(κ, φ, l)⁻¹)‖²`` drops below this."""
VVL_FREE_ITERS = 20
"""VVL: the free-length phase lasts at most this many iterations."""
MIN_LENGTH_RATIO = 0.05
"""VVL: virtual lengths are kept ≥ this fraction of nominal (a segment never shrinks to a point)."""
COIL_LIMIT = 2.0 * math.pi
"""A segment with ``|κ l|`` above this is coiled (deadlock, infeasible under CC)."""


@dataclass(frozen=True)
class ContinuumOptions:
    """Solver settings (all documented constants in one place).

    Attributes:
        method: ``"jacobian"``, ``"dls"`` or ``"vvl"``.
        beta: step size β ∈ (0, 1] [-].
        tol: stopping tolerance on ``e = ‖log(T_D T_e⁻¹)‖²`` [rad² + m²].
        max_iter: iteration cap.
        damping: λ for DLS [-].
        start_length_ratio: VVL start lengths ``l_0 = ratio · L``.
        rcond: relative singular-value cutoff of the pseudo-inverse.
        vvl_switch: VVL free-length phase ends when the error at the virtual lengths < this.
        vvl_free_iters: VVL free-length phase lasts at most this many iterations.
        min_length_ratio: VVL virtual lengths are clipped to ``≥ ratio · L``.
        max_step: None (seed 001) or a bound on ``max|Δx|`` per iteration (the whole step is
            scaled down, direction kept) — a safeguard beyond the paper, see :data:`ROBUST`.
    """

    method: str = "vvl"
    beta: float = DEFAULT_BETA
    tol: float = 1e-4
    max_iter: int = 500
    damping: float = DLS_DAMPING
    start_length_ratio: float = START_LENGTH_RATIO
    rcond: float = RCOND
    vvl_switch: float = VVL_SWITCH
    vvl_free_iters: int = VVL_FREE_ITERS
    min_length_ratio: float = MIN_LENGTH_RATIO
    max_step: float | None = None

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise InvalidInputError(f"method: expected one of {METHODS}, got {self.method!r}")
        checks = {
            "beta": 0.0 < self.beta <= 1.0,
            "tol": self.tol > 0.0,
            "max_iter": self.max_iter >= 0,
            "damping": self.damping >= 0.0,
            "start_length_ratio": self.start_length_ratio > 0.0,
            "rcond": 0.0 < self.rcond < 1.0,
            "vvl_switch": self.vvl_switch >= 0.0,
            "vvl_free_iters": self.vvl_free_iters >= 0,
            "min_length_ratio": 0.0 < self.min_length_ratio <= 1.0,
        }
        if self.max_step is not None and not (self.max_step > 0 and math.isfinite(self.max_step)):
            raise InvalidInputError(f"max_step: must be None or > 0 ({self.max_step!r})")
        for name, ok in checks.items():
            value = getattr(self, name)
            if not ok or not math.isfinite(value):
                raise InvalidInputError(f"{name}: out of range ({value!r})")


ROBUST = ContinuumOptions(method="dls", beta=DEFAULT_BETA, max_step=0.5)
"""Beyond seed 001: DLS with every step clipped to ``max|Δx| ≤ 0.5`` (1/m for κ, rad for φ).
In the benchmark this reaches the tolerance with every ``|κ l| ≤ 2π`` for 96–100 % of targets
with N ≥ 4 and ~90 % with N = 3 (docs/continuum.md); the paper's unclipped steps coil segments
in the first few iterations."""


# ---------------------------------------------------------------------------------------------
# Kernels shared with the batch engine (all broadcast over a leading batch dimension)
# ---------------------------------------------------------------------------------------------


def error_twist(T_D: FloatArray, T_e: FloatArray) -> FloatArray:
    """``V_D = log(T_D T_e⁻¹)`` (..., 6), ``[ω; v]`` in the base frame."""
    return se3.log(T_D @ se3.inverse(T_e))


def metric(V: FloatArray) -> FloatArray:
    """Eq. (21): ``e = ‖V‖²`` of the 6-vector error twist."""
    return np.sum(V * V, axis=-1)


def pinv_solve(J: FloatArray, V: FloatArray, rcond: float = RCOND) -> FloatArray:
    """Minimum-norm least-squares ``J⁺ V`` for ``J (..., m, k)``, ``V (..., m)``.

    From the smaller Gram matrix ``G`` (``JᵀJ`` if k ≤ m, else ``JJᵀ``) and its eigen-decomposition
    ``G = U Λ Uᵀ``; eigenvalues ``λ ≤ rcond² λ_max`` (``σ ≤ rcond σ_max``) are dropped.
    """
    m, k = J.shape[-2:]
    Jt = np.swapaxes(J, -1, -2)
    if k <= m:
        G, y = Jt @ J, np.einsum("...ij,...j->...i", Jt, V)
    else:
        G, y = J @ Jt, V
    lam, U = np.linalg.eigh(G)
    cut = (rcond * rcond) * lam[..., -1:]
    inv = np.where(lam > cut, 1.0 / np.where(lam > cut, lam, 1.0), 0.0)
    z = np.einsum("...ji,...j->...i", U, y) * inv
    z = np.einsum("...ij,...j->...i", U, z)
    return z if k <= m else np.einsum("...ij,...j->...i", Jt, z)


def dls_solve(J: FloatArray, V: FloatArray, damping: float) -> FloatArray:
    """``Jᵀ (J Jᵀ + λ² I)⁻¹ V`` (computed as ``(JᵀJ + λ² I)⁻¹ Jᵀ V`` when that is smaller)."""
    m, k = J.shape[-2:]
    Jt = np.swapaxes(J, -1, -2)
    lam2 = damping * damping
    if k <= m:
        G = Jt @ J + lam2 * np.eye(k)
        return np.linalg.solve(G, np.einsum("...ij,...j->...i", Jt, V)[..., None])[..., 0]
    G = J @ Jt + lam2 * np.eye(m)
    z = np.linalg.solve(G, V[..., None])[..., 0]
    return np.einsum("...ij,...j->...i", Jt, z)


def split_state(x: FloatArray, method: str, L: FloatArray) -> tuple[FloatArray, ...]:
    """``(κ, φ, l)`` from the iterate (``(κ, φ)`` pairs, or ``(κ, φ, l)`` triples for VVL)."""
    if method == "vvl":
        return x[..., 0::3], x[..., 1::3], x[..., 2::3]
    return x[..., 0::2], x[..., 1::2], np.broadcast_to(L, x[..., 0::2].shape)


def initial_state(q0: FloatArray, method: str, L: FloatArray, ratio: float) -> FloatArray:
    """Iterate from a start ``q0 (..., 2N)``: VVL appends ``l_0 = ratio · L`` per segment."""
    if method != "vvl":
        return np.array(q0, dtype=float)
    n = L.size
    x = np.empty((*q0.shape[:-1], 3 * n))
    x[..., 0::3], x[..., 1::3] = q0[..., 0::2], q0[..., 1::2]
    x[..., 2::3] = ratio * L
    return x


def evaluate(x: FloatArray, T_D: FloatArray, opts: ContinuumOptions, L: FloatArray):
    """At iterate ``x``: error twist ``V_D`` and Jacobian (``J`` or, for VVL, ``J'``) at the
    current lengths, the metric ``e`` and coil flag at **nominal** lengths, and the metric
    ``e_virtual`` at the current lengths. Returns ``(V_D, J, e, coiled, e_virtual)``."""
    kappa, phi, length = split_state(x, opts.method, L)
    vvl = opts.method == "vvl"
    T_e, J = pose_and_jacobian(kappa, phi, length, with_length=vvl)
    V = error_twist(T_D, T_e)
    e_virtual = metric(V)
    if vvl:
        e = metric(error_twist(T_D, pose_and_jacobian(kappa, phi, L, jacobian=False)[0]))
    else:
        e = e_virtual
    coiled = np.any(np.abs(kappa * L) > COIL_LIMIT, axis=-1)
    return V, J, e, coiled, e_virtual


def augment(x: FloatArray, J: FloatArray, V: FloatArray, L: FloatArray,
            restoring: NDArray[np.bool_] | bool) -> tuple[FloatArray, FloatArray]:
    """VVL task: ``J_a = [J'; E]``, ``[V_D; L − l]`` (seed 001 eq. 16–18), ``E`` selecting the
    lengths. Where ``restoring`` is false (free-length phase) the length rows are zero, so the
    minimum-norm step is ``β J'⁺ V_D`` (eq. 15)."""
    n = L.size
    w = np.asarray(restoring, dtype=float)[..., None]
    Ja = np.zeros((*J.shape[:-2], 6 + n, 3 * n))
    Ja[..., :6, :] = J
    Ja[..., 6 + np.arange(n), 2 + 3 * np.arange(n)] = w
    return Ja, np.concatenate([V, w * (L - x[..., 2::3])], axis=-1)


def restoring_phase(previous: NDArray[np.bool_] | bool, e_virtual: FloatArray, k: int,
                    opts: ContinuumOptions) -> NDArray[np.bool_]:
    """VVL schedule: lengths are free until the pose error at the virtual lengths drops below
    ``vvl_switch`` or ``vvl_free_iters`` iterations have passed; from then on (for good) the
    augmented task restores them."""
    return np.asarray(previous | (e_virtual < opts.vvl_switch) | (k >= opts.vvl_free_iters))


def step(x: FloatArray, J: FloatArray, V: FloatArray, opts: ContinuumOptions,
         L: FloatArray) -> FloatArray:
    """The next iterate ``x + Δx`` of the chosen method (eqs. 10, 11, 15/18); VVL lengths are
    clipped to ``≥ min_length_ratio · L``."""
    if opts.method == "dls":
        dx = opts.beta * dls_solve(J, V, opts.damping)
    else:
        dx = opts.beta * pinv_solve(J, V, opts.rcond)
    if opts.max_step is not None:
        big = np.max(np.abs(dx), axis=-1, keepdims=True)
        dx = dx * np.minimum(1.0, opts.max_step / np.maximum(big, 1e-300))
    x_new = x + dx
    if opts.method == "vvl":
        x_new[..., 2::3] = np.maximum(x_new[..., 2::3], opts.min_length_ratio * L)
    return x_new


def to_q(x: FloatArray, method: str) -> FloatArray:
    """``(κ_1, φ_1, …)`` from the iterate (drops the VVL lengths)."""
    if method != "vvl":
        return np.array(x)
    q = np.empty((*x.shape[:-1], 2 * (x.shape[-1] // 3)))
    q[..., 0::2], q[..., 1::2] = x[..., 0::3], x[..., 1::3]
    return q


# ---------------------------------------------------------------------------------------------
# Validation and the solver
# ---------------------------------------------------------------------------------------------


_BOTTOM = np.array([0.0, 0.0, 0.0, 1.0])
_EYE3 = np.eye(3)


def check_target(T_D: ArrayLike, name: str = "target") -> FloatArray:
    """A (4, 4) rigid transform or raise :class:`InvalidInputError`.

    The tests are those of ``numpy.allclose`` (``|a − b| ≤ atol + 1e-5 |b|``; atol 1e-8 for the
    last row, 1e-6 for ``RᵀR = I``) and ``det R ≥ 0``, written out (this runs on every solve).
    """
    flat = as_vector(T_D, 16, name)
    T = flat.reshape(4, 4)
    R = T[:3, :3]
    (a, b, c), (d, e, f), (g, h, i) = R.tolist()
    det = a * (e * i - f * h) - b * (d * i - f * g) + c * (d * h - e * g)
    if not (np.abs(T[3] - _BOTTOM) <= 1e-8 + 1e-5 * _BOTTOM).all() \
            or not (np.abs(R.T @ R - _EYE3) <= 1e-6 + 1e-5 * _EYE3).all() or det < 0:
        raise InvalidInputError(f"{name}: not a rigid transform (rotation part not orthonormal "
                                "with det +1, or last row not (0, 0, 0, 1))")
    return T


def solve(
    model: CC3D,
    target: ArrayLike,
    q0: ArrayLike | None = None,
    options: ContinuumOptions | None = None,
    record_path: bool = False,
    **overrides,
) -> IKResult:
    """Solve ``T_e(q) = T_D`` for one target with the Jacobian, DLS or VVL method — or, with
    ``method="robust"`` or a :class:`~poise.ik.continuum_robust.RobustOptions`, the robust
    method (:func:`poise.ik.continuum_robust.solve_robust`, its own options and counting).

    Args:
        model: a :class:`~poise.models.cc3d.CC3D` arm.
        target: desired tip pose ``T_D`` (4, 4) in the base frame.
        q0: start ``(κ_1, φ_1, …, κ_N, φ_N)``; default the neutral (straight) configuration 0.
        options: :class:`ContinuumOptions`; keyword ``overrides`` replace single fields
            (``method="dls"``, ``beta=0.3`` …).
        record_path: keep the iterates ``q`` in ``result.path`` (not for ``robust``).

    Returns:
        :class:`IKResult` with ``q`` the (κ, φ) pairs (lengths nominal), ``x`` the tip pose (4, 4)
        reached, ``position_error``/``orientation_error`` the norms of the ``v``/``ω`` parts of
        ``log(T_D T_e⁻¹)``, ``residual_history`` the metric ``e_k`` for k = 0…iterations.
    """
    if overrides.get("method") == ROBUST_METHOD or not isinstance(options, ContinuumOptions | None):
        return _solve_robust(model, target, q0, options, record_path, overrides)
    start = time.perf_counter()
    opts = options or ContinuumOptions()
    if overrides:
        opts = ContinuumOptions(**{**opts.__dict__, **overrides})
    T_D = check_target(target)
    q_start = np.zeros(model.n) if q0 is None else as_vector(q0, model.n, "q0")
    L = model.L
    x = initial_state(q_start, opts.method, L, opts.start_length_ratio)
    history: list[float] = []
    path: list[FloatArray] = []
    status = Status.ITERATION_CAP
    k = 0
    restoring = np.asarray(opts.method != "vvl")
    while True:
        V, J, e, coiled, e_virtual = evaluate(x, T_D, opts, L)
        restoring = restoring_phase(restoring, e_virtual, k, opts)
        history.append(float(e))
        if record_path:
            path.append(to_q(x, opts.method))
        if e < opts.tol:
            status = Status.CONVERGED
            break
        if k >= opts.max_iter:
            break
        if opts.method == "vvl":
            J, V = augment(x, J, V, L, restoring)
        x_new = step(x, J, V, opts, L)
        if not np.all(np.isfinite(x_new)):
            status = Status.STALLED
            break
        x = x_new
        k += 1
    return _result(model, T_D, x, opts, k, status, bool(coiled), history, path, start)


def _solve_robust(model, target, q0, options, record_path, overrides) -> IKResult:
    """``method="robust"``: :func:`poise.ik.continuum_robust.solve_robust` (imported here, so
    the paper's methods do not load Numba)."""
    from poise.ik.continuum_robust import RobustOptions, solve_robust

    if options is not None and not isinstance(options, RobustOptions):
        raise InvalidInputError("options: expected ContinuumOptions (jacobian, dls, vvl) or "
                                "RobustOptions (robust, poise.ik.continuum_robust), got "
                                f"{type(options).__name__}")
    if record_path:
        raise InvalidInputError("record_path: not available for the robust method (its "
                                "iterates jump between restarts; see residual_history)")
    rest = {k: v for k, v in overrides.items() if k != "method"}
    return solve_robust(model, target, q0, options, **rest)


def _result(model, T_D, x, opts, k, status, coiled, history, path, start) -> IKResult:
    q = to_q(x, opts.method)
    kappa, phi, length = split_state(x, opts.method, model.L)
    T_e, J = pose_and_jacobian(kappa, phi, model.L)
    V = error_twist(T_D, T_e)
    angles = np.abs(kappa * model.L)
    parts = [f"e = {history[-1]:.3e} after {k} iterations ({opts.method}, β = {opts.beta:g})"]
    if opts.method == "vvl":
        err = np.max(np.abs(length - model.L))
        parts.append(f"final virtual-length error max|l − L| = {err:.2e}")
    if coiled:
        bad = [int(i) + 1 for i in np.flatnonzero(angles > COIL_LIMIT)]
        what = "tolerance met but" if status is Status.CONVERGED else "not converged;"
        parts.insert(0, f"deadlock: {what} segment(s) {bad} coiled past 2π "
                        f"(max |κl| = {angles.max():.2f} rad)")
        status = Status.DEADLOCK
    elif status is Status.ITERATION_CAP:
        parts.insert(0, f"iteration cap {opts.max_iter} reached before tol {opts.tol:g}")
    elif status is Status.STALLED:
        parts.insert(0, "the next iterate was non-finite; returning the last finite one")
    return IKResult(
        q=q,
        success=status is Status.CONVERGED,
        status=status,
        iterations=k,
        position_error=float(np.linalg.norm(V[3:])),
        orientation_error=float(np.linalg.norm(V[:3])),
        residual_history=np.array(history),
        sigma_min=float(np.linalg.svd(J, compute_uv=False)[-1]),
        wall_time=time.perf_counter() - start,
        x=T_e,
        message="; ".join(parts),
        path=np.array(path) if path else None,
    )


def solve_jacobian(model: CC3D, target: ArrayLike, q0: ArrayLike | None = None, **kw) -> IKResult:
    """Seed 001 II-B: ``Δx = β J⁺ V_D``."""
    return solve(model, target, q0, method="jacobian", **kw)


def solve_dls(model: CC3D, target: ArrayLike, q0: ArrayLike | None = None, **kw) -> IKResult:
    """Seed 001 II-C: ``Δx = β Jᵀ (J Jᵀ + λ² I)⁻¹ V_D`` (λ = 0.01)."""
    return solve(model, target, q0, method="dls", **kw)


def solve_vvl(model: CC3D, target: ArrayLike, q0: ArrayLike | None = None, **kw) -> IKResult:
    """Seed 001 II-D: virtual lengths from ``L/3``, ``Δx' = β J_a⁺ [V_D; L − l]``."""
    return solve(model, target, q0, method="vvl", **kw)


def random_targets(model: CC3D, count: int, rng: np.random.Generator,
                   kappa_max: float = math.pi) -> tuple[NDArray, FloatArray]:
    """Targets sampled uniformly in joint space: ``κ_i ∈ [0, κ_max]`` (bending angle up to
    ``κ_max L``), ``φ_i ∈ [−π, π)``. Returns ``(q (count, 2N), T_D (count, 4, 4))``."""
    n = model.n_segments
    kappa = rng.uniform(0.0, kappa_max, (count, n))
    phi = rng.uniform(-math.pi, math.pi, (count, n))
    q = model.join(kappa, phi)
    return q, model.pose(q)
