"""The ``robust`` continuum method: IK for ``cc3d_N`` that returns only arms you can build.

Beyond seed 001. The paper's three methods (:mod:`poise.ik.continuum`) take unbounded
pseudo-inverse steps from one start and often end coiled (``|κ_i L_i| > 2π``). This method
solves the same problem, ``T_e(q) = T_D`` with the seed-001 metric
``e = ‖log(T_D T_e⁻¹)‖²`` (eq. 21), **subject to** ``|κ_i L_i| ≤ θ_max,i`` (2π, or the model's
``max_bending``), with what works (measured in docs/continuum.md §8):

1. **Coordinates that are smooth at the straight arm**: the curvature vector
   ``b_i = κ_i (cos φ_i, sin φ_i)`` [1/m] (:mod:`poise.ik.continuum_kernels`); the bending
   limit is the disc ``|b_i| ≤ θ_max,i / L_i``.
2. **Bounded, projected Levenberg–Marquardt** (:func:`~poise.ik.continuum_kernels.lm_attempt`):
   ``δ = (JᵀJ + μI)⁻¹ JᵀV_D``, scaled so that no segment's bending angle changes by more than
   ``max_step`` per iteration, projected onto the discs, accepted only if it lowers ``e``
   (Nielsen's damping rule). As μ shrinks near a solution the step becomes Gauss–Newton's,
   which is the final polish to ``tol``. An attempt stops at ``e < tol``, or when ``e`` fell
   by less than ``stall_ratio`` over ``stall_window`` iterations (a local minimum).
3. **Restarts from good starts**: the user's ``q0`` (e.g. the previous solution when
   tracking), then the straight arm, then "best of ``candidates``" random arms per restart
   (``|κ_i L_i| ~ U[0, min(start_bending, θ_max,i)]``, ``φ_i ~ U[−π, π)``, seeded by
   ``seed``: the same target gives the same answer), the attempt starting from the candidate
   with the smallest ``e``.

**Counting.** Every evaluation of the arm is one iteration — each candidate of a restart and
each trial step, accepted or not — except the first start, which is iterate 0, and all of
them count toward ``max_iter``. ``IKResult.iterations`` is that total (not the last attempt's),
``restarts`` the attempts after the first, ``residual_history[k]`` the error of the current
iterate after iteration k (it jumps up where a restart begins).

**Status** (never a silent failure; the returned ``q`` is always within the limits):
``converged`` — ``e < tol`` and every ``|κ_i L_i| ≤ θ_max,i``, re-evaluated at the returned
``q`` (the kernels match the numpy reference to 1e-12; the tests and ``bench/vvl.py`` re-check
with the reference itself); ``unreachable`` — the target position is farther from the base than
the arm's length (the closest configuration found is returned); ``deadlock`` — no solution
found and the best configuration presses some segment against its bending limit (the target
may need more bending than the limits allow); ``iteration_cap`` — no solution within
``max_iter`` iterations from any start (a local minimum each time, or a target not reachable
with these limits); ``stalled`` — an internal check failed (never observed).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from poise.ik import continuum_kernels as kernels
from poise.ik.result import FloatArray, IKResult, InvalidInputError, Status, as_vector
from poise.models.cc3d import CC3D

ROUNDING = 8.0 * np.finfo(float).eps
"""The discs are ``|b_i| ≤ (1 − ROUNDING) θ_max,i / L_i``: after the rounding of the projection,
of ``|b_i|`` and of ``κ_i L_i`` the returned arm still has ``|κ_i L_i| ≤ θ_max,i`` exactly."""
AT_LIMIT = 1e-6
"""A segment within this relative distance of its limit counts as held at the limit."""
CHUNK = 4
"""Restart groups generated per kernel call."""
OUTCOMES = {kernels.CONVERGED: "converged", kernels.STALLED: "stalled",
            kernels.NO_DESCENT: "no descent", kernels.BUDGET: "budget"}


@dataclass(frozen=True)
class RobustOptions:
    """Settings of the ``robust`` method (defaults measured in docs/continuum.md §8).

    Attributes:
        tol: stop when ``e = ‖log(T_D T_e⁻¹)‖² < tol`` [rad² + m²] (seed 001, eq. 21).
        max_iter: cap on the total iterations of all attempts (see the module docstring).
        max_step: largest change of any segment's bending angle per iteration,
            ``max_i |Δb_i| L_i`` [rad].
        damping: initial Levenberg–Marquardt damping μ₀ [same units as ``JᵀJ``].
        stall_window: iterations over which an attempt must make progress …
        stall_ratio: … by at least this factor (``e_k ≤ ratio · e_{k−window}``), else restart.
        candidates: random arms evaluated per restart (the attempt starts from the best).
        start_bending: random candidates bend each segment by ``U[0, min(this, θ_max,i)]`` [rad].
        seed: seed of the random candidates.
    """

    tol: float = 1e-6
    max_iter: int = 500
    max_step: float = 1.0
    damping: float = 1e-2
    stall_window: int = 6
    stall_ratio: float = 0.5
    candidates: int = 8
    start_bending: float = math.pi
    seed: int = 0

    def __post_init__(self) -> None:
        checks = {
            "tol": self.tol > 0.0,
            "max_iter": self.max_iter >= 0,
            "max_step": self.max_step > 0.0,
            "damping": self.damping > 0.0,
            "stall_window": self.stall_window >= 1,
            "stall_ratio": 0.0 < self.stall_ratio < 1.0,
            "candidates": self.candidates >= 1,
            "start_bending": self.start_bending > 0.0,
        }
        for name, ok in checks.items():
            value = getattr(self, name)
            if not ok or not math.isfinite(value):
                raise InvalidInputError(f"{name}: out of range ({value!r})")
        if not isinstance(self.seed, int | np.integer):
            raise InvalidInputError(f"seed: expected an integer, got {self.seed!r}")


def to_curvature_vectors(q: FloatArray) -> FloatArray:
    """``b = κ (cos φ, sin φ)`` per segment from ``q = (κ_1, φ_1, …)`` (same layout)."""
    b = np.empty_like(q)
    b[0::2] = q[0::2] * np.cos(q[1::2])
    b[1::2] = q[0::2] * np.sin(q[1::2])
    return b


def from_curvature_vectors(b: FloatArray) -> FloatArray:
    """``q = (κ_i, φ_i)`` with ``κ_i = |b_i| ≥ 0``, ``φ_i = atan2(b_y, b_x) ∈ (−π, π]``."""
    q = np.empty_like(b)
    q[0::2] = np.hypot(b[0::2], b[1::2])
    q[1::2] = np.arctan2(b[1::2], b[0::2])
    return q


def _random_groups(rng: np.random.Generator, count: int, size: int, L: FloatArray,
                   bend: FloatArray) -> FloatArray:
    """``count`` restart groups of ``size`` random arms ``(count, size, 2N)`` in ``b``."""
    n = L.size
    kappa = rng.uniform(0.0, 1.0, (count, size, n)) * (bend / L)
    phi = rng.uniform(-math.pi, math.pi, (count, size, n))
    groups = np.empty((count, size, 2 * n))
    groups[..., 0::2] = kappa * np.cos(phi)
    groups[..., 1::2] = kappa * np.sin(phi)
    return groups


def solve_robust(model: CC3D, target: ArrayLike, q0: ArrayLike | None = None,
                 options: RobustOptions | None = None, **overrides) -> IKResult:
    """Solve ``T_e(q) = T_D`` within the bending limits (module docstring).

    Args:
        model: a :class:`~poise.models.cc3d.CC3D` arm (its ``max_bending``, if any, applies).
        target: desired tip pose ``T_D`` (4, 4) in the base frame.
        q0: optional first start ``(κ_1, φ_1, …)`` (projected onto the limits); the straight
            arm is tried next.
        options: :class:`RobustOptions`; keyword ``overrides`` replace single fields.

    Returns:
        :class:`IKResult`: ``q`` = (κ_i ≥ 0, φ_i) within the limits, ``x`` the tip pose,
        ``iterations`` the total over all attempts, ``restarts``, ``residual_history``,
        ``message`` (attempts, and the reason of a failure).
    """
    from poise.ik.continuum import check_target

    start = time.perf_counter()
    opts = options or RobustOptions()
    if overrides:
        unknown = sorted(set(overrides) - set(opts.__dict__))
        if unknown:
            raise InvalidInputError(f"{unknown}: not options of the robust method (its options: "
                                    f"{', '.join(opts.__dict__)})")
        opts = RobustOptions(**{**opts.__dict__, **overrides})
    T_D = check_target(target)
    L = model.L
    theta_max = model.bending_limits()
    b_max = theta_max / L * (1.0 - ROUNDING)
    n2 = model.n
    groups = np.zeros((1 if q0 is None else 2, 1, n2))  # [q0,] straight
    if q0 is not None:
        groups[0, 0] = to_curvature_vectors(as_vector(q0, n2, "q0"))
    sizes = np.ones(len(groups), dtype=np.int64)
    history = np.full(opts.max_iter + 1, np.nan)
    b_best = np.zeros(n2)
    best_e = math.inf
    attempts = np.zeros((CHUNK, 5))
    log: list[FloatArray] = []
    done = 0
    offset = 0  # group number of the first group of this call (for the message)
    rng = None
    while True:
        done, best_e, count, converged = kernels.run_starts(
            T_D, L, b_max, groups, sizes, opts.tol, opts.max_iter, done, opts.max_step,
            opts.stall_window, opts.stall_ratio, opts.damping, history, b_best, best_e,
            attempts)
        run = attempts[:count].copy()
        run[:, 0] += offset
        log.append(run)
        offset += len(groups)
        if converged or done >= opts.max_iter:
            break
        if rng is None:
            rng = np.random.default_rng(opts.seed)
            bend = np.minimum(opts.start_bending, theta_max)
        groups = _random_groups(rng, CHUNK, opts.candidates, L, bend)
        sizes = np.full(CHUNK, opts.candidates, dtype=np.int64)
    names = (["q0"] if q0 is not None else []) + ["straight"]
    return _result(model, T_D, b_best, theta_max, opts, done, converged,
                   np.concatenate(log), history[:done + 1], names, start)


def _describe_attempts(attempts: FloatArray, names: list[str]) -> str:
    """``straight: 6 it, stalled; 3 random restarts (…): 2 stalled, 1 converged``."""
    parts = [f"{names[int(g)]}: {int(it)} it, {OUTCOMES[int(code)]}"
             for g, _, it, _, code in attempts if int(g) < len(names)]
    rand = attempts[attempts[:, 0] >= len(names)]
    if rand.size:
        outcomes = [OUTCOMES[int(c)] for c in rand[:, 4]]
        counts = ", ".join(f"{outcomes.count(o)} {o}" for o in OUTCOMES.values()
                           if o in outcomes)
        parts.append(f"{len(rand)} random restart(s) ({int(rand[:, 2].sum())} it + "
                     f"candidates): {counts}")
    return "; ".join(parts)


def _result(model: CC3D, T_D: FloatArray, b: FloatArray, theta_max: FloatArray,
            opts: RobustOptions, iterations: int, converged: bool, attempts: FloatArray,
            history: FloatArray, names: list[str], start: float) -> IKResult:
    """Check the answer (limits, error) and say what happened."""
    q = from_curvature_vectors(b)
    T_e = np.empty((4, 4))
    V = np.empty(6)
    e, sigma_min = kernels.evaluate(b, model.L, T_D, T_e, V)
    angles = q[0::2] * model.L
    within = bool((angles <= theta_max).all())
    detail = (f"e = {e:.3e} after {iterations} iterations in {len(attempts)} attempt(s) "
              f"(robust; {_describe_attempts(attempts, names)})")
    if converged and e < opts.tol and within:
        return _ik_result(q, Status.CONVERGED, iterations, attempts, V, history, sigma_min,
                          T_e, detail, start)
    reach = math.sqrt(T_D[:3, 3] @ T_D[:3, 3])
    held = np.flatnonzero(angles >= theta_max * (1.0 - AT_LIMIT))
    if not within or not math.isfinite(e):
        status = Status.STALLED
        reason = "internal check failed: the returned q is outside the limits or not finite"
    elif reach > model.reach:
        status = Status.UNREACHABLE
        reason = (f"unreachable: the target is {reach:.4g} m from the base, the arm is "
                  f"{model.reach:.4g} m long; q is the closest configuration found")
    elif held.size:
        status = Status.DEADLOCK
        reason = (f"deadlock: no solution within the bending limits after {iterations} "
                  f"iterations; the best configuration found presses segment(s) "
                  f"{[int(i) + 1 for i in held]} against the limit |κL| = θ_max (the target "
                  "may need more bending than the limits allow)")
    else:
        status = Status.ITERATION_CAP
        reason = (f"iteration cap {opts.max_iter} reached before tol {opts.tol:g}: every "
                  "attempt stopped in a local minimum or ran out of iterations (the target "
                  "may be unreachable with these limits); q is the best configuration found")
    return _ik_result(q, status, iterations, attempts, V, history, sigma_min, T_e,
                      f"{reason}; {detail}", start)


def _ik_result(q: FloatArray, status: Status, iterations: int, attempts: FloatArray,
               V: FloatArray, history: FloatArray, sigma_min: float, T_e: FloatArray,
               message: str, start: float) -> IKResult:
    return IKResult(
        q=q,
        success=status is Status.CONVERGED,
        status=status,
        iterations=iterations,
        restarts=len(attempts) - 1,
        position_error=math.sqrt(V[3:] @ V[3:]),
        orientation_error=math.sqrt(V[:3] @ V[:3]),
        residual_history=history,
        sigma_min=sigma_min,
        wall_time=time.perf_counter() - start,
        x=T_e,
        message=message,
    )
