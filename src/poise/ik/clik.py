"""Classic closed-loop inverse kinematics (CLIK): pseudo-inverse, DLS, transpose, LM.

One discrete CLIK step with step ``Δt`` (``step``) and gain ``K_P`` (seed 003, eq. 19;
seed 002) is

    q ← Π( q + Δt · J^#_W K_P e  +  Δt · (I − J⁺J) z )

* ``e = [x̃; ε_de]`` — position error ``x̃ = p_d − p_e`` [m] and, for pose targets, the vector
  part ``ε_de`` of the error quaternion ``Q_d * Q_e⁻¹`` (seed 003, eq. 19–20; see
  :mod:`poise.ik.orientation`). For vector tasks ``e = x_d − h(q)``.
* ``K_P = diag(k_Pp I₃, k_Po I₃)`` — ``gain`` (one number for both, or ``(k_Pp, k_Po)``;
  default :data:`DEFAULT_GAIN` = (1, 2): ``ε_de ≈ ϑ/2`` for small errors, so ``k_Po = 2`` makes
  ``Δt = 1`` a full Newton-like step for orientation too). With ``Δt k_P`` small the position
  error decays as ``(1 − Δt k_Pp)^k``: the discrete form of ``d x̃/dt = −k_Pp x̃`` (seed 003,
  eq. 16).
* ``W = diag(I₃, w_o I₃)`` — ``orientation_weight``: the metric of the least-squares problem,
  ``min ‖W^½ (K_P e − J Δq)‖² + λ²‖Δq‖²``; implemented by scaling the rows of ``J`` and ``e``
  by ``W^½``. (For a square, non-singular J it does not change the undamped step.)
* ``J^#_W`` — by ``method``:

  - ``"pinv"``: rank-truncated pseudo-inverse ``(W^½ J)⁺ W^½`` (SVD, ``rcond`` 1e-10);
  - ``"dls"``: damped least squares ``Jᵀ (J Jᵀ + λ² I)⁻¹`` (weighted rows), λ from the damping
    rule (default :class:`~poise.ik.damping.SingularityDamping`; a number means a fixed λ);
  - ``"transpose"``: ``α Jᵀ`` — with ``gain=None`` (``K_P`` = default) α is Buss & Kim's
    optimal step ``⟨e, JJᵀe⟩ / ‖JJᵀe‖²``; with an explicit gain α = 1 and
    ``Δq = Δt Jᵀ K_P e`` (the classic Jacobian-transpose law with gain);
  - ``"lm"``: Levenberg–Marquardt with Sugihara's damping ``μ = w_e·½‖e‖²_W + w_n``
    (:class:`~poise.ik.damping.ErrorDamping`): the fastest on the Panda benchmark.

* ``(I − J⁺J) z`` — the optional secondary objective projected into the null space of the
  primary task (seed 003, eq. 21), see :mod:`poise.ik.secondary`.
* ``Π`` — joint limits, enforced by *joint clamping* and projection: when the step would take
  joints outside ``[q_min, q_max]``, those joints move exactly to their limit and are frozen
  for this step, and the free joints solve (same method) for the remaining error
  ``e − J_b Δq_b``; every iterate is then clamped into the box, so no iterate ever leaves it.
  A joint pressed against a limit stays there while the error pushes it outward (a local
  minimum on the boundary is left by a random restart; the secondary objective
  :class:`~poise.ik.secondary.JointLimitAvoidance` keeps the arm away from the limits).
  A start outside the limits is clamped too.

Stopping rules, checked *before* each update (seed 002's loop: check the error, then update):

1. converged — ``task_error = √(‖x̃‖² + ϑ²) ≤ tol`` with ``ϑ`` the orientation error angle
   [rad] (pose targets) — and, with a secondary objective, ``‖(I − J⁺J) z‖ ≤ secondary_tol``;
2. iteration cap — ``max_iter`` updates done;
3. stalled — the residual improved by less than ``stall_rtol`` (relative) over the last
   ``stall_window`` iterations, or (``line_search``) no step along the current direction
   decreases it.

With a secondary objective, when rule 2 or 3 fires before rule 1 holds (the null-space steps'
second-order drift can keep ‖e‖ just above ``tol``), the secondary objective is dropped and up
to :data:`POLISH_ITER` primary-only iterations follow; an attempt whose task error met ``tol``
at some iterate is successful even if the secondary objective was still improving.

``line_search`` (default on) halves a step that increases the residual (up to 10 times): every
step of every method is a descent direction of ``½‖e‖²``, so this makes the iteration monotone
and lets it settle at the closest configuration of an unreachable target instead of
oscillating around it. When it never triggers (as in seed 002's example) the iterates are
exactly the classic ones.

A failed attempt is retried from random configurations within the limits (``restarts``,
seeded by ``seed``). The result is the best attempt: the first that converged, otherwise the
one with the smallest task error (its closest configuration), with ``success=False`` and status

* ``unreachable`` — the target position lies beyond the model's ``reach`` (when it has one), or
  every attempt ended at a *singular stationary point*: no joint at a limit and
  ``‖Jᵀ W e‖ ≤ 10⁻³ σ_max ‖W^½ e‖`` (the error is orthogonal, within 0.06°, to every motion
  the arm can make — e.g. a planar arm fully stretched toward a target beyond its reach);
* otherwise the last attempt's ``stalled`` / ``iteration_cap`` (``singular`` when a step was
  not finite).

**Compiled path.** ``method="lm"`` on a ``dh_chain`` model (the Panda) runs the whole solve,
restarts included, in compiled code (:mod:`poise.ik.clik_compiled`, :mod:`poise.kernels.dh_ik`):
the same residual, limits, statuses and result, a different iteration (no line search, cheap
restarts; the differences are listed there). This module stays the reference;
``compiled=False`` selects it. See ``docs/ik.md``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from poise.ik.clik_options import DEFAULT_GAIN, METHODS, SolveOptions, resolve
from poise.ik.damping import DampingRule
from poise.ik.orientation import _orientation_error_rows, quat_from_matrix
from poise.ik.result import FloatArray, IKResult, InvalidInputError, Status, as_vector
from poise.ik.secondary import SecondaryObjective, nullspace_projector
from poise.ik.targets import Target, parse_target
from poise.models.lapack import posv

PINV_RCOND = 1e-10
POLISH_ITER = 20
"""Primary-only iterations after the secondary phase ended (cap or stall) above tol."""
MAX_HALVINGS = 10
STATIONARY_RATIO = 1e-3
DEFAULT_STALL_WINDOW = 10
DEFAULT_STALL_RTOL = 1e-4
"""The stall rule's defaults (numpy path)."""

Evaluate = Callable[[FloatArray], tuple[list[float], float, float, FloatArray]]


def solve(
    model: Any,
    target: ArrayLike,
    *,
    method: str = "dls",
    q0: ArrayLike | None = None,
    tol: float = 1e-6,
    max_iter: int | None = None,
    restarts: int = 0,
    seed: int | None = 0,
    damping: float | DampingRule | None = None,
    gain: float | tuple[float, float] | None = None,
    orientation_weight: float = 1.0,
    secondary: SecondaryObjective | None = None,
    secondary_tol: float = 1e-4,
    step: float = 1.0,
    line_search: bool = True,
    stall_window: int | None = None,
    stall_rtol: float | None = None,
    record_path: bool = False,
    compiled: bool | None = None,
) -> IKResult:
    """Closed-loop IK for ``model`` (a ``TaskModel``/``PoseModel``) toward ``target``.

    Args:
        model: ``n``, ``task_dim``, ``task_kind``, ``q_min``, ``q_max``, ``fk``,
            ``task_jacobian`` (and ``pose`` for pose tasks).
        target: task vector, or for pose models a 4 × 4 transform, ``(x, y, z, qw, qx, qy, qz)``
            or ``(x, y, z)`` (position only) — see :mod:`poise.ik.targets`.
        q0: start configuration (n,) [rad]; default the model's ``q_home`` or the middle of
            its limits (0 where unlimited).
        method, tol, …, compiled: the options, one field each of :class:`SolveOptions` (their
            meaning and units are documented there).

    Returns:
        An :class:`IKResult` (``x`` = position + quaternion ``(x, y, z, qw, qx, qy, qz)`` for
        full-pose targets, the position for position targets, ``h(q)`` for vector tasks).

    Raises:
        InvalidInputError: wrong target or ``q0`` size, non-finite values, unknown method,
            bad options, ``compiled=True`` where the compiled solver does not apply.
    """
    t_start = time.perf_counter()
    if method not in METHODS:
        raise InvalidInputError(f"method = {method!r}: must be one of {', '.join(METHODS)}")
    tgt = parse_target(model, target)
    start = _start(model, q0)
    beyond_reach = _beyond_reach(model, tgt)
    if compiled is not False:  # no options object on this path: it is timed per call
        from poise.ik import clik_compiled  # imports Numba: only when it may be used

        why_not = clik_compiled.unavailable_reason(
            model, method=method, damping=damping, gain=gain, secondary=secondary, step=step,
            line_search=line_search, record_path=record_path)
        if why_not is None:
            return clik_compiled.solve(  # it clamps the start into the limits itself
                model, tgt, start, tol=tol, max_iter=max_iter, restarts=restarts, seed=seed,
                damping=damping, orientation_weight=orientation_weight,
                stall_window=stall_window, stall_rtol=stall_rtol, beyond_reach=beyond_reach,
                t_start=t_start)
        if compiled:
            raise InvalidInputError(f"compiled=True: {why_not}")
    options = SolveOptions(
        method=method, tol=tol, max_iter=max_iter, restarts=restarts, seed=seed,
        damping=damping, gain=gain, orientation_weight=orientation_weight, secondary=secondary,
        secondary_tol=secondary_tol, step=step, line_search=line_search,
        stall_window=stall_window, stall_rtol=stall_rtol, record_path=record_path,
        compiled=compiled)
    return solve_numpy(model, tgt, start, options, beyond_reach=beyond_reach, t_start=t_start)


def _start(model: Any, q0: ArrayLike | None) -> FloatArray:
    """The first start: ``q0``, else the model's ``q_home``, else the middle of its limits (0
    where unlimited); not yet clamped into the limits."""
    if q0 is not None:
        return as_vector(q0, int(model.n), "q0")
    if getattr(model, "q_home", None) is not None:
        return np.asarray(model.q_home, dtype=float)
    q_min = np.asarray(model.q_min, dtype=float)
    q_max = np.asarray(model.q_max, dtype=float)
    bounded = np.isfinite(q_min) & np.isfinite(q_max)
    return 0.5 * (np.where(bounded, q_min, 0.0) + np.where(bounded, q_max, 0.0))


def solve_numpy(model: Any, tgt: Target, start: FloatArray, options: SolveOptions, *,
                beyond_reach: bool = False, t_start: float | None = None) -> IKResult:
    """The numpy reference solve (module docstring): attempts from ``start`` and random
    restarts, the best one's outcome.

    Args:
        tgt: the parsed target (:func:`~poise.ik.targets.parse_target`).
        start: the first start (n,) [rad] (clamped into the limits here).
        options: the solve's options (``compiled`` is not looked at).
        beyond_reach: the target lies beyond the model's reach (one attempt is enough).
        t_start: :func:`time.perf_counter` at the call (for ``wall_time``); default now.
    """
    t_start = time.perf_counter() if t_start is None else t_start
    o = options
    opts = resolve(o.method, o.damping, o.gain, o.orientation_weight, o.tol, o.max_iter,
                    o.restarts, o.step,
                    DEFAULT_STALL_WINDOW if o.stall_window is None else o.stall_window,
                    DEFAULT_STALL_RTOL if o.stall_rtol is None else o.stall_rtol,
                    o.secondary_tol, tgt)
    q_min = np.asarray(model.q_min, dtype=float)
    q_max = np.asarray(model.q_max, dtype=float)
    best, attempts, total_iterations = _attempts(
        _evaluator(model, tgt), model, np.minimum(np.maximum(start, q_min), q_max), q_min,
        q_max, opts, o, beyond_reach)
    status, message = outcome(
        best.status, best.iterations, best.residual, len(attempts), total_iterations,
        opts["max_iter"], beyond_reach,
        lambda: all(_singular_stationary(a, opts, q_min, q_max) for a in attempts))
    q = best.q
    sv = np.linalg.svd(best.J, compute_uv=False)
    return IKResult(
        q=q, success=status == Status.CONVERGED, status=status, iterations=best.iterations,
        restarts=len(attempts) - 1, position_error=best.position_error,
        orientation_error=best.orientation_error,
        residual_history=np.array(best.history), sigma_min=float(sv[-1]) if sv.size else 0.0,
        wall_time=time.perf_counter() - t_start, x=_task_value(model, tgt, q), message=message,
        path=np.array(best.path) if o.record_path else None,
    )


def _attempts(evaluate: Evaluate, model: Any, start: FloatArray, q_min: FloatArray,
              q_max: FloatArray, opts: dict[str, Any], options: SolveOptions,
              beyond_reach: bool) -> tuple[_Attempt, list[_Attempt], int]:
    """``(best, attempts, total iterations)``: the first attempt from ``start``, then random
    restarts within the limits (seeded by ``options.seed``) until one converges. The best is
    the first that converged, else the one with the smallest task error."""
    rng = None  # created on the first restart (default_rng costs ~10 µs)
    best: _Attempt | None = None
    attempts: list[_Attempt] = []
    total_iterations = 0
    for attempt in range(opts["restarts"] + 1):
        if attempt == 0:
            q_init = start
        else:
            if rng is None:
                rng = np.random.default_rng(options.seed)
                lo = np.where(np.isfinite(q_min), q_min, -math.pi)
                hi = np.where(np.isfinite(q_max), q_max, math.pi)
            q_init = rng.uniform(lo, hi)
        att = _run(evaluate, model, q_init, q_min, q_max, opts, options.secondary,
                   options.line_search, options.record_path)
        attempts.append(att)
        total_iterations += att.iterations
        if best is None or att.status == Status.CONVERGED or att.residual < best.residual:
            best = att
        if att.status == Status.CONVERGED or beyond_reach:
            break
    assert best is not None
    return best, attempts, total_iterations


def outcome(status: Status, iterations: int, residual: float, attempts: int,
            total_iterations: int, max_iter: int, beyond_reach: bool,
            stationary: Callable[[], bool],
            stationary_subject: str = "every attempt") -> tuple[Status, str]:
    """The status and message of a solve from its best attempt (module docstring):
    ``unreachable`` beyond the reach or when ``stationary()`` (``stationary_subject`` ended at
    a singular stationary point), else the best attempt's own status."""
    message = f"converged in {iterations} iterations"
    if status != Status.CONVERGED:
        if beyond_reach:
            status = Status.UNREACHABLE
            message = "target position beyond the reach of the model; q is the closest found"
        elif stationary():
            status = Status.UNREACHABLE
            message = (f"{stationary_subject} ended at a singular stationary point (error "
                       "orthogonal to every feasible motion): target appears unreachable; q is "
                       "the closest configuration found")
        else:
            message = {Status.STALLED: "the residual stopped decreasing",
                       Status.ITERATION_CAP: f"no convergence within {max_iter} iterations",
                       Status.SINGULAR: "a step was not finite (singular Jacobian)"}[status]
            message += f"; q is the closest configuration found (task error {residual:.3g})"
    message += f" [{attempts} attempt(s), {total_iterations} iterations in total]"
    return status, message



# --------------------------------------------------------------------------- evaluation


def _evaluator(model: Any, tgt: Target) -> Evaluate:
    """``q ↦ (e, ‖x̃‖, ϑ, J)`` for this target (plain-float fast path for DH chains)."""
    pd = tgt.position.tolist()
    fast = getattr(model, "pose_jacobian_rows", None)
    if getattr(model, "task_kind", "") != "pose":
        x_d = tgt.position

        def vector_task(q: FloatArray) -> tuple[list[float], float, float, FloatArray]:
            e = x_d - np.asarray(model.fk(q), dtype=float)
            return e.tolist(), float(math.sqrt(e @ e)), 0.0, np.asarray(
                model.task_jacobian(q), dtype=float)

        return vector_task
    p0, p1, p2 = pd
    if tgt.rotation is None:
        def position_task(q: FloatArray) -> tuple[list[float], float, float, FloatArray]:
            if fast is not None:
                r, rows = fast(q.tolist())
                J = np.array(rows[:3])
                x, y, z = r[9], r[10], r[11]
            else:
                x, y, z = np.asarray(model.fk(q), dtype=float).tolist()
                J = np.asarray(model.task_jacobian(q), dtype=float)[:3]
            ex, ey, ez = p0 - x, p1 - y, p2 - z
            return [ex, ey, ez], math.sqrt(ex * ex + ey * ey + ez * ez), 0.0, J

        return position_task
    rd = tgt.rotation.ravel().tolist()

    def pose_task(q: FloatArray) -> tuple[list[float], float, float, FloatArray]:
        if fast is not None:
            r, rows = fast(q.tolist())
            J = np.array(rows)
        else:
            T = np.asarray(model.pose(q), dtype=float)
            r = T[:3, :3].ravel().tolist() + T[:3, 3].tolist()
            J = np.asarray(model.task_jacobian(q), dtype=float)
        ex, ey, ez = p0 - r[9], p1 - r[10], p2 - r[11]
        ox, oy, oz, angle = _orientation_error_rows(rd, r)
        return [ex, ey, ez, ox, oy, oz], math.sqrt(ex * ex + ey * ey + ez * ez), angle, J

    return pose_task


def _task_value(model: Any, tgt: Target, q: FloatArray) -> FloatArray:
    if getattr(model, "task_kind", "") != "pose":
        return np.asarray(model.fk(q), dtype=float)
    if tgt.rotation is None:
        return np.asarray(model.fk(q), dtype=float)
    T = np.asarray(model.pose(q), dtype=float)
    return np.concatenate([T[:3, 3], quat_from_matrix(T[:3, :3])])


def _beyond_reach(model: Any, tgt: Target) -> bool:
    reach = getattr(model, "reach", None)
    is_pose = getattr(model, "task_kind", "") == "pose"
    if reach is None or (not is_pose and tgt.position.size not in (2, 3)):
        return False
    return math.hypot(*tgt.position[:3].tolist()) > float(reach) * (1 + 1e-9)


# --------------------------------------------------------------------------- one attempt


class _Attempt:
    __slots__ = ("J", "e", "history", "iterations", "orientation_error", "path",
                 "position_error", "q", "residual", "status")

    def __init__(self) -> None:
        self.history: list[float] = []
        self.path: list[FloatArray] = []


def _step(opts: dict[str, Any], J: FloatArray, ew: FloatArray) -> FloatArray:
    """``J^#_W K_P e`` (weighted rows ``J``, ``ew = W^½ K_P e``) for the chosen method."""
    method = opts["method"]
    if method == "pinv":
        return np.linalg.pinv(J, rcond=PINV_RCOND) @ ew
    if method == "transpose":
        g = J.T @ ew
        if not opts["adaptive_alpha"]:
            return g
        jg = J @ g
        denom = float(jg @ jg)
        return g * (float(ew @ jg) / denom) if denom > 0.0 else g
    rule: DampingRule = opts["rule"]
    sigma = np.linalg.svd(J, compute_uv=False)[-1] if rule.needs_sigma else 0.0
    A = np.dot(J, J.T)
    mu = rule.mu(float(sigma), float(np.dot(ew, ew)))
    if mu > 0.0:
        A.flat[:: A.shape[0] + 1] += mu
        # LAPACK's Cholesky solver directly: ~1 µs instead of ~4 µs for np.linalg.solve
        y, info = posv(A, ew)
        if info == 0:
            return np.dot(J.T, y)
    try:
        return np.dot(J.T, np.linalg.solve(A, ew))
    except np.linalg.LinAlgError:
        return np.linalg.pinv(J, rcond=PINV_RCOND) @ ew


def _clamped_step(opts: dict[str, Any], Jw: FloatArray, ew: FloatArray, dq: FloatArray,
                  q: FloatArray, q_min: FloatArray, q_max: FloatArray, blocked: FloatArray,
                  dt: float) -> FloatArray:
    """Joint clamping: joints whose step leaves the box move to their limit and are frozen;
    the others solve for the rest of the error, ``e − J_b Δq_b`` (one round)."""
    out = np.zeros_like(dq)
    out[blocked] = np.clip(q[blocked] + dq[blocked], q_min[blocked], q_max[blocked]) - q[blocked]
    free = ~blocked
    if free.any():
        rest = ew - Jw[:, blocked] @ (out[blocked] / dt)
        out[free] = dt * _step(opts, Jw[:, free], rest)
    return out


def _run(evaluate: Evaluate, model: Any, q: FloatArray, q_min: FloatArray, q_max: FloatArray,
         opts: dict[str, Any], secondary: SecondaryObjective | None, line_search: bool,
         record_path: bool) -> _Attempt:
    att = _Attempt()
    tol, max_iter, dt = opts["tol"], opts["max_iter"], opts["step"]
    window, rtol = opts["stall_window"], opts["stall_rtol"]
    sw, kw, weighted = opts["sw"], opts["kw"], opts["weighted"]
    e, pe, oe, J = evaluate(q)
    r = math.sqrt(pe * pe + oe * oe)
    hist = att.history
    hist.append(r)
    if record_path:
        att.path.append(q.copy())
    status = Status.ITERATION_CAP
    ok: tuple[Any, ...] | None = None  # last iterate within tol
    it = 0
    mark = 0  # start of the current phase in hist (the stall rule looks within a phase)
    while True:
        null = None
        if secondary is not None:
            null = dt * (nullspace_projector(J) @ (-secondary.gain * secondary.gradient(model, q)))
        stalled = False
        if r <= tol:
            if null is None or math.sqrt(null @ null) <= opts["secondary_tol"]:
                status = Status.CONVERGED
                break
            ok = (q, r, pe, oe, J, e)
        elif len(hist) - mark > window and hist[-1] > (1.0 - rtol) * hist[-1 - window]:
            stalled = True
        if stalled or it >= max_iter:
            if secondary is None:
                status = Status.STALLED if stalled else Status.ITERATION_CAP
                break
            # the secondary objective's second-order drift can keep ‖e‖ just above tol:
            # finish with a few primary-only iterations
            secondary, null, mark = None, None, len(hist)
            max_iter = it + POLISH_ITER
        ew = np.array(e) * kw
        Jw = J * sw[:, None] if weighted else J
        dq = dt * _step(opts, Jw, ew)
        q_try = q + dq
        blocked = (q_try < q_min) | (q_try > q_max)
        if blocked.any():
            dq = _clamped_step(opts, Jw, ew, dq, q, q_min, q_max, blocked, dt)
            q_try = None
        if null is not None:
            dq = dq + null
            q_try = None
        if not math.isfinite(float(np.dot(dq, dq))):
            status = Status.SINGULAR
            break
        alpha = 1.0
        accept_below = max(r, tol)
        for _ in range(MAX_HALVINGS + 1):
            if q_try is not None and alpha == 1.0:
                q_new = q_try  # inside the limits already
            else:
                q_new = np.minimum(np.maximum(q + alpha * dq, q_min), q_max)
            e_n, pe_n, oe_n, J_n = evaluate(q_new)
            r_n = math.sqrt(pe_n * pe_n + oe_n * oe_n)
            if not line_search or r_n <= accept_below:
                break
            alpha *= 0.5
        else:
            status = Status.STALLED  # no decrease along a descent direction: stationary
            break
        q, e, pe, oe, J, r = q_new, e_n, pe_n, oe_n, J_n, r_n
        it += 1
        hist.append(r)
        if record_path:
            att.path.append(q.copy())
    if status != Status.CONVERGED and ok is not None:
        # the primary task was met; the secondary objective was still improving
        q, r, pe, oe, J, e = ok
        status = Status.CONVERGED
    att.q, att.residual, att.position_error, att.orientation_error = q, r, pe, oe
    att.status, att.iterations, att.J, att.e = status, it, J, e
    return att


def _singular_stationary(att: _Attempt, opts: dict[str, Any], q_min: FloatArray,
                         q_max: FloatArray) -> bool:
    """No joint at a limit and ``‖Jᵀ W e‖ ≤ 10⁻³ σ_max ‖W^½ e‖`` at the attempt's end (a
    stationary point of the error that is not a solution: the Jacobian is singular along
    ``e``)."""
    q = att.q
    if np.any(q <= q_min + 1e-9) or np.any(q >= q_max - 1e-9):
        return False
    J, ew = att.J, np.array(att.e) * opts["kw"]
    Jw = J * opts["sw"][:, None] if opts["weighted"] else J
    norm_e = float(np.linalg.norm(ew))
    if norm_e == 0.0:
        return False
    s_max = float(np.linalg.svd(Jw, compute_uv=False)[0])
    return float(np.linalg.norm(Jw.T @ ew)) <= STATIONARY_RATIO * s_max * norm_e


__all__ = ["DEFAULT_GAIN", "METHODS", "SolveOptions", "outcome", "solve", "solve_numpy"]
