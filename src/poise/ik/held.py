"""Inverse kinematics restricted to configurations the robot can hold (seed 000).

* :func:`algorithm1` — statics solved beforehand: closed-loop IK on the actuators-to-task map
  ``f(qa) = h(c⁻¹(qa, q̄u(qa)))`` with Jacobian ``J = Ja − Ju Huu⁻¹ Hua``. Every iterate lies on
  the held set E.
* :func:`algorithm2` — statics solved online: the task error and ``G_u`` are both asked to decay
  exponentially, ``ḟ = ΓZ ex`` and ``Ġu = ΓE eE`` with ``eE = −Gu``; one step solves that linear
  system, by the projectors ``PE``/``PZ`` of the pseudocode or by a direct (stacked) solve.
* :func:`plain` — classic IK that treats the robot as fully actuated (the baseline that sags).

Every function returns :class:`~poise.ik.result.IKResult` with the held-configuration fields
filled (``qa``, ``qu``, ``statics_residual``, ``min_eig_Huu``, ``stable``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from poise.ik.result import FloatArray, IKResult, InvalidInputError, Status, as_vector
from poise.ik.statics import StaticsSolution, classify, solve_statics
from poise.models.actuation import ActuationBlocks, blocks, join, split
from poise.models.base import MechanicalModel

Update = Literal["inverse", "pinv", "dls", "transpose"]


# ----------------------------------------------------------------------------- helpers


def damped_pinv(a: FloatArray, damping: float = 0.0) -> FloatArray:
    """Damped right pseudo-inverse ``aᵀ (a aᵀ + λ² I)⁻¹`` (the plain ``a⁺`` when λ = 0).

    Wide or square ``a`` of full row rank is inverted through the normal equations; anything
    else falls back to the SVD pseudo-inverse, damped the same way.
    """
    rows, cols = a.shape
    if damping == 0.0:
        return np.linalg.pinv(a)
    if rows <= cols:
        return a.T @ np.linalg.inv(a @ a.T + damping**2 * np.eye(rows))
    return np.linalg.inv(a.T @ a + damping**2 * np.eye(cols)) @ a.T


def held_jacobian(b: ActuationBlocks) -> FloatArray:
    """Jacobian of the actuators-to-task map on E: ``J = Ja − Ju Huu⁻¹ Hua`` (seed 000, Alg. 1).

    From ``G_u(qa, q̄u(qa)) = 0``: ``∂q̄u/∂qa = −Huu⁻¹ Hua``, and the chain rule.
    """
    if b.Huu.size == 0:
        return b.Ja
    return b.Ja - b.Ju @ np.linalg.solve(b.Huu, b.Hua)


def _smallest_singular(a: FloatArray) -> float:
    return float(np.linalg.svd(a, compute_uv=False).min()) if a.size else math.nan


def _min_eig(huu: FloatArray) -> float:
    return float(np.linalg.eigvalsh(0.5 * (huu + huu.T))[0]) if huu.size else math.inf


def _held_fields(model: MechanicalModel, q: FloatArray) -> dict[str, object]:
    b = blocks(model, q)
    eig = np.linalg.eigvalsh(0.5 * (b.Huu + b.Huu.T)) if b.Huu.size else np.zeros(0)
    return {
        "qa": b.qa, "qu": b.qu, "x": b.x,
        "statics_residual": float(np.linalg.norm(b.Gu)),
        "min_eig_Huu": float(eig[0]) if eig.size else math.inf,
        "stable": classify(eig) == "stable",
    }


def _check_target(model: MechanicalModel, target: ArrayLike) -> FloatArray:
    return as_vector(target, model.task_dim, "target")


def _start(model: MechanicalModel, q0: ArrayLike | None) -> FloatArray:
    if q0 is None:
        return np.zeros(model.n)
    return as_vector(q0, model.n, "start configuration q0")


def _begin(
    model: MechanicalModel, target: ArrayLike, q0: ArrayLike | None, record_path: bool,
) -> tuple[float, FloatArray, FloatArray, list[float], list[FloatArray] | None]:
    """Start a solve: clock, validated target and start, empty history, path (if recorded)."""
    t0 = time.perf_counter()
    checked = _check_target(model, target)
    q = _start(model, q0)
    return t0, checked, q, [], ([q] if record_path else None)


@dataclass(frozen=True)
class HeldOptions:
    """Stopping rules shared by the held-configuration solvers.

    Attributes:
        tol: task tolerance εx [task units, m].
        statics_tol: statics tolerance εE on ``‖G_u‖`` [N·m].
        max_iter: iteration cap.
        stall_window: iterations without a 1e-3 relative improvement of the residual that
            count as a stall.
        reject_unstable: a converged but unstable configuration gets status ``unstable`` and
            ``success = False``.
    """

    tol: float = 1e-6
    statics_tol: float = 1e-9
    max_iter: int = 500
    stall_window: int = 50
    reject_unstable: bool = False


def _finish(
    model: MechanicalModel,
    q: FloatArray,
    target: FloatArray,
    history: list[float],
    iterations: int,
    status: Status,
    options: HeldOptions,
    t0: float,
    sigma_min: float,
    path: list[FloatArray] | None,
    message: str = "",
) -> IKResult:
    fields = _held_fields(model, q)
    position_error = float(np.linalg.norm(target - fields["x"]))  # type: ignore[operator]
    success = status == Status.CONVERGED
    if success and options.reject_unstable and not fields["stable"]:
        status, success = Status.UNSTABLE, False
        message = message or (
            f"held configuration is unstable (min eig H_uu = {fields['min_eig_Huu']:.3g})")
    if not success and not message:
        message = f"{status.value}: task error {position_error:.3g} after {iterations} iterations"
    return IKResult(
        q=q, success=success, status=status, iterations=iterations,
        position_error=position_error, residual_history=np.asarray(history),
        sigma_min=sigma_min, wall_time=time.perf_counter() - t0, message=message,
        path=np.asarray(path) if path is not None else None, **fields,  # type: ignore[arg-type]
    )


def _stop(history: list[float], iterations: int, options: HeldOptions, converged: bool,
          may_stall: bool = True) -> Status | None:
    """The stopping rules after ``history`` got this iteration's residual: converged, the
    iteration cap (``ITERATION_CAP``), a stall, or ``None`` to go on."""
    if converged:
        return Status.CONVERGED
    if iterations == options.max_iter:
        return Status.ITERATION_CAP
    if may_stall and _stalled(history, options.stall_window):
        return Status.STALLED
    return None


def _stalled(history: list[float], window: int) -> bool:
    if len(history) <= window:
        return False
    return history[-1] > (1.0 - 1e-3) * min(history[:-window])


# ----------------------------------------------------------------------------- Algorithm 1


def algorithm1_step(
    model: MechanicalModel,
    statics: StaticsSolution,
    target: FloatArray,
    *,
    update: Update = "dls",
    damping: float = 1e-3,
    gain: float = 1.0,
    dt: float = 1.0,
    e: FloatArray | None = None,
) -> tuple[FloatArray, FloatArray, float]:
    """One Algorithm-1 update of the actuators, ``qa ← qa + Δt · q̇a``.

    Args:
        statics: the current held configuration (``q`` on E).
        target: ``x̄``.
        update: ``inverse`` (square J), ``pinv``, ``dls`` (damping λ) or ``transpose``
            (``q̇a = Jᵀ Γ e`` with Γ = gain · I, the variant of seed 000's soft-arm experiments).
        gain: Γ for the inverse updates too (``q̇a = Γ J⁻¹ e``).
        dt: integration step Δt.
        e: task error to use instead of ``x̄ − h(q)`` (feedback mode passes the measured one).

    Returns:
        ``(qa_new, J, σ_min(J))`` — the new actuator reference (before limits).
    """
    b = blocks(model, statics.q)
    err = target - b.x if e is None else e
    jac = held_jacobian(b)
    if update == "transpose":
        qa_dot = gain * (jac.T @ err)
    elif update == "inverse":
        if jac.shape[0] != jac.shape[1]:
            raise InvalidInputError(
                f"update 'inverse' needs a square Jacobian; task {jac.shape[0]} × "
                f"actuators {jac.shape[1]}: use 'pinv' or 'dls'")
        qa_dot = gain * np.linalg.solve(jac, err)
    elif update == "pinv":
        qa_dot = gain * (np.linalg.pinv(jac) @ err)
    elif update == "dls":
        qa_dot = gain * (damped_pinv(jac, damping) @ err)
    else:
        raise InvalidInputError(f"update: unknown '{update}' (inverse, pinv, dls, transpose)")
    return b.qa + dt * qa_dot, jac, _smallest_singular(jac)


def algorithm1(
    model: MechanicalModel,
    target: ArrayLike,
    q0: ArrayLike | None = None,
    *,
    update: Update = "dls",
    damping: float = 1e-3,
    gain: float = 1.0,
    dt: float = 1.0,
    options: HeldOptions | None = None,
    record_path: bool = False,
) -> IKResult:
    """Algorithm 1 of seed 000: closed-loop IK on the held set E (statics solved beforehand).

    Starts from ``q0`` (default zero), first settles it on E at its ``qa`` (stable branch),
    then iterates ``qa ← clip(qa + Δt · update(J, x̄ − f(qa)))`` with
    ``J = Ja − Ju Huu⁻¹ Hua`` and ``q̄u(qa)`` re-solved (warm-started) after every update.
    An update that increases the task error is halved (up to 10 times) so that a large step
    cannot jump to another branch. Every iterate satisfies ``‖G_u‖ ≤ statics_tol``.
    """
    options = options or HeldOptions()
    t0 = time.perf_counter()
    target = _check_target(model, target)
    q_start = _start(model, q0)
    qa, qu = split(model, q_start)
    statics = solve_statics(model, np.clip(qa, model.qa_min, model.qa_max), qu,
                            tol=options.statics_tol)
    history: list[float] = []
    path = [statics.q] if record_path else None
    sigma = math.nan
    status = Status.ITERATION_CAP
    iterations = 0
    err_norm = float(np.linalg.norm(target - model.fk(statics.q)))
    for iterations in range(options.max_iter + 1):
        history.append(err_norm)
        stop = _stop(history, iterations, options, err_norm < options.tol)
        if stop is not None:
            status = stop
            break
        qa_new, _, sigma = algorithm1_step(
            model, statics, target, update=update, damping=damping, gain=gain, dt=dt)
        accepted = _accept_step(model, statics, qa_new - statics.qa, target, err_norm,
                                options.statics_tol, monotone=update != "transpose")
        if accepted is None:
            status = Status.STALLED
            break
        statics, err_norm = accepted
        if path is not None:
            path.append(statics.q)
    if status != Status.CONVERGED and _at_actuator_limit(model, statics.qa):
        status = Status.UNREACHABLE
    return _finish(model, statics.q, target, history, iterations, status, options, t0, sigma,
                   path, _limit_message(model, statics.qa, status))


def _accept_step(
    model: MechanicalModel,
    statics: StaticsSolution,
    step: FloatArray,
    target: FloatArray,
    err_norm: float,
    statics_tol: float,
    *,
    monotone: bool,
    halvings: int = 10,
) -> tuple[StaticsSolution, float] | None:
    """Re-solve the statics after an actuator step, halving it until the statics converge
    (and, with ``monotone``, the task error does not grow). ``None`` when no step works."""
    for _ in range(halvings):
        qa = np.clip(statics.qa + step, model.qa_min, model.qa_max)
        trial = solve_statics(model, qa, statics.qu, tol=statics_tol)
        trial_err = float(np.linalg.norm(target - model.fk(trial.q)))
        if trial.converged and (not monotone or trial_err <= err_norm):
            return trial, trial_err
        step = 0.5 * step
    return None


def _at_actuator_limit(model: MechanicalModel, qa: FloatArray) -> bool:
    return bool(np.any(qa <= model.qa_min + 1e-12) or np.any(qa >= model.qa_max - 1e-12))


def _limit_message(model: MechanicalModel, qa: FloatArray, status: Status) -> str:
    if status != Status.UNREACHABLE:
        return ""
    idx = [i for i in range(model.m)
           if qa[i] <= model.qa_min[i] + 1e-12 or qa[i] >= model.qa_max[i] - 1e-12]
    return (f"target not reachable on E within the actuator limits: actuator(s) {idx} at "
            f"their limit; returning the closest held configuration found")


# ----------------------------------------------------------------------------- Algorithm 2


def algorithm2_rates(
    b: ActuationBlocks,
    ex: FloatArray,
    eE: FloatArray,
    gamma_z: float | FloatArray = 1.0,
    gamma_e: float | FloatArray = 1.0,
    *,
    form: Literal["projector", "stacked"] = "projector",
    damping: float = 0.0,
) -> FloatArray:
    """Rates ``(q̇a, q̇u)`` of Algorithm 2 that make ``ḟ = ΓZ ex`` and ``Ġu = ΓE eE``.

    ``form="projector"`` evaluates the pseudocode of seed 000 (the projectors applied to their
    vectors, ``PE v`` and ``PZ u``, rather than formed as matrices)::

        PE = [I; −Huu⁻¹Hua] (I − Ja⁻¹Ju Huu⁻¹Hua)⁻¹
        PZ = [−Ja⁻¹Ju; I] (I − Huu⁻¹Hua Ja⁻¹Ju)⁻¹
        (q̇a, q̇u) = PE Ja⁻¹ ΓZ ex + PZ Huu⁻¹ ΓE eE

    For a redundant task (fewer task rows than actuators, the dancer) ``Ja⁻¹`` becomes the right
    pseudo-inverse ``Ja⁺`` (damped with ``damping`` near singularities); with ``Ja`` of full row
    rank the decay laws still hold exactly (derivation in ``docs/held_ik.md``).
    ``form="stacked"`` solves ``[[Ja, Ju], [Hua, Huu]] (q̇a, q̇u) = (ΓZ ex, ΓE eE)`` directly
    (least-norm solution when redundant).
    """
    gz = np.atleast_1d(gamma_z) * ex if np.ndim(gamma_z) <= 1 else gamma_z @ ex
    ge = np.atleast_1d(gamma_e) * eE if np.ndim(gamma_e) <= 1 else gamma_e @ eE
    m = b.Ja.shape[1]
    if form == "stacked":
        stacked = np.block([[b.Ja, b.Ju], [b.Hua, b.Huu]])
        rhs = np.concatenate([gz, ge])
        if stacked.shape[0] == stacked.shape[1] and damping == 0.0:
            return np.linalg.solve(stacked, rhs)
        return damped_pinv(stacked, damping) @ rhs
    n_u = b.Huu.shape[0]
    # Ja⁻¹ [Ju | ΓZ ex] and Huu⁻¹ [Hua | ΓE eE], one factorisation each.
    if b.Ja.shape[0] == m and damping == 0.0:
        ja_solved = np.linalg.solve(b.Ja, np.column_stack([b.Ju, gz]))
    else:
        ja_solved = damped_pinv(b.Ja, damping) @ np.column_stack([b.Ju, gz])
    huu_solved = np.linalg.solve(b.Huu, np.column_stack([b.Hua, ge]))
    ja_inv_ju, ja_inv_gz = ja_solved[:, :n_u], ja_solved[:, n_u]
    huu_inv_hua, huu_inv_ge = huu_solved[:, :m], huu_solved[:, m]
    # PE v = [I; −Huu⁻¹Hua] w with (I − Ja⁻¹Ju Huu⁻¹Hua) w = v, v = Ja⁻¹ ΓZ ex;
    # PZ u = [−Ja⁻¹Ju; I] z with (I − Huu⁻¹Hua Ja⁻¹Ju) z = u, u = Huu⁻¹ ΓE eE.
    w = np.linalg.solve(np.eye(m) - ja_inv_ju @ huu_inv_hua, ja_inv_gz)
    z = np.linalg.solve(np.eye(n_u) - huu_inv_hua @ ja_inv_ju, huu_inv_ge)
    return np.concatenate([w - ja_inv_ju @ z, z - huu_inv_hua @ w])


def algorithm2(
    model: MechanicalModel,
    target: ArrayLike,
    q0: ArrayLike | None = None,
    *,
    gamma_z: float = 1.0,
    gamma_e: float = 1.0,
    dt: float = 0.5,
    form: Literal["projector", "stacked"] = "projector",
    damping: float = 0.0,
    max_step: float | None = 0.1,
    options: HeldOptions | None = None,
    record_path: bool = False,
) -> IKResult:
    """Algorithm 2 of seed 000: IK with the statics solved online.

    Iterates ``(qa, qu) ← (qa, qu) + Δt · rates`` (see :func:`algorithm2_rates`) until
    ``‖x̄ − f‖ < εx`` and ``‖G_u‖ < εE``. For small ``Δt`` both errors decay like
    ``(1 − Δt Γ)^k``. Starts anywhere the inverses exist, also off E; actuator limits clip
    ``qa``; the unactuated step is then recomputed from the statics law for the motion the
    actuators really make, so ``G_u`` keeps decaying, and a run that ends stuck at a limit
    is reported ``stalled`` with the limit named.

    ``max_step`` bounds the largest change of any configuration coordinate ``q`` in one
    step [rad] (a trust region that keeps the step's direction;
    ``None`` turns it off): far from the solution, where ``Δt``·rates would be large, the
    explicit step would otherwise leave the region where the linearisation holds.
    """
    options = options or HeldOptions()
    t0, target, q, history, path = _begin(model, target, q0, record_path)
    status = Status.ITERATION_CAP
    sigma = math.nan
    iterations = 0
    for iterations in range(options.max_iter + 1):
        b = blocks(model, q)
        ex = target - b.x
        e_norm, g_norm = float(np.linalg.norm(ex)), float(np.linalg.norm(b.Gu))
        history.append(e_norm)
        stop = _stop(history, iterations, options,
                     e_norm < options.tol and g_norm < options.statics_tol,
                     may_stall=g_norm < options.statics_tol)
        if stop is not None:
            status = stop
            break
        try:
            rates = algorithm2_rates(b, ex, -b.Gu, gamma_z, gamma_e, form=form, damping=damping)
        except np.linalg.LinAlgError:
            if damping > 0.0:
                raise
            rates = algorithm2_rates(b, ex, -b.Gu, gamma_z, gamma_e, form=form, damping=1e-6)
        sigma = _smallest_singular(b.Ja)
        delta = dt * rates
        longest = float(np.max(np.abs(model.C_inv @ delta)))  # largest joint change [rad]
        if max_step is not None and longest > max_step:
            delta *= max_step / longest  # trust region: keep the direction, bound the step
        qc = np.concatenate([b.qa, b.qu]) + delta
        qa = np.clip(qc[: model.m], model.qa_min, model.qa_max)
        qu = qc[model.m :]
        if not np.array_equal(qa, qc[: model.m]):
            # An actuator hit its limit: keep the statics law Ġu = ΓE eE for the motion the
            # actuators really make, q̇u = Huu⁻¹(ΓE eE − Hua q̇a).
            step_scale = float(np.max(np.abs(delta))) / max(dt * float(np.max(np.abs(rates))),
                                                             1e-300)
            h = dt * step_scale
            ge = (np.atleast_1d(gamma_e) * -b.Gu) if np.ndim(gamma_e) <= 1 else gamma_e @ -b.Gu
            qu = b.qu + h * np.linalg.solve(b.Huu, ge - b.Hua @ ((qa - b.qa) / h))
        q = join(model, qa, qu)
        if path is not None:
            path.append(q)
    message = ""
    qa_end = split(model, q)[0]
    if status != Status.CONVERGED and _at_actuator_limit(model, qa_end):
        # Algorithm 2's transient is not limit-aware: report where it stopped, not a verdict
        # on reachability (Algorithm 1 from the same start may still reach the target).
        status = Status.STALLED
        message = (f"stalled with actuator(s) at their limit (qa = {qa_end.tolist()}); "
                   "the target may need a path that stays within the limits")
    return _finish(model, q, target, history, iterations, status, options, t0, sigma, path,
                   message)


# ----------------------------------------------------------------------------- plain IK


def plain(
    model: MechanicalModel,
    target: ArrayLike,
    q0: ArrayLike | None = None,
    *,
    damping: float = 1e-3,
    options: HeldOptions | None = None,
    record_path: bool = False,
) -> IKResult:
    """Classic IK that ignores statics (treats every coordinate as actuated): the baseline.

    Damped-least-squares CLIK on ``h(q)`` over all of ``q``. The result reaches ``x̄`` but in
    general ``‖G_u‖ ≠ 0``: released (actuators locked, statics solved) the robot sags away.
    """
    options = options or HeldOptions()
    t0, target, q, history, path = _begin(model, target, q0, record_path)
    status = Status.ITERATION_CAP
    sigma = math.nan
    iterations = 0
    for iterations in range(options.max_iter + 1):
        err = target - model.fk(q)
        history.append(float(np.linalg.norm(err)))
        stop = _stop(history, iterations, options, history[-1] < options.tol)
        if stop is not None:
            status = stop
            break
        jac = model.task_jacobian(q)
        sigma = _smallest_singular(jac)
        q = q + damped_pinv(jac, damping) @ err
        if path is not None:
            path.append(q)
    # Plain IK ignores statics: its success is the task alone.
    result = _finish(model, q, target, history, iterations, status,
                     HeldOptions(reject_unstable=False), t0, sigma, path)
    return result


ALGORITHMS = {"plain": plain, "alg1": algorithm1, "alg2": algorithm2}


def solve_held(
    model: MechanicalModel, algorithm: str, target: ArrayLike, q0: ArrayLike | None = None,
    **kwargs: object,
) -> IKResult:
    """Dispatch to ``plain``, ``alg1`` or ``alg2`` by name."""
    try:
        fn = ALGORITHMS[algorithm]
    except KeyError:
        raise InvalidInputError(
            f"algorithm: unknown '{algorithm}' (allowed: {', '.join(ALGORITHMS)})") from None
    return fn(model, target, q0, **kwargs)  # type: ignore[operator]
