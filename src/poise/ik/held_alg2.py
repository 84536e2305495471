"""Algorithm 2 of seed 000: IK with the statics solved online, within the actuator limits."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from poise.ik.dls import damped_pinv
from poise.ik.held_common import (
    Attempt,
    HeldOptions,
    at_actuator_limit,
    begin,
    compiled_solvers,
    finish,
    held_fields,
    limited_actuators,
    smallest_singular,
    stop_rule,
)
from poise.ik.held_limits import at_limits, bounded_least_squares, outward, restart_starts
from poise.ik.result import FloatArray, IKResult, Status
from poise.ik.statics import solve_statics
from poise.models.actuation import ActuationBlocks, blocks, join
from poise.models.base import MechanicalModel


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

    With a square ``Ja`` and ``damping = λ > 0``, the task part ``w = PE``'s
    ``(I − Ja⁻¹Ju Huu⁻¹Hua)⁻¹ Ja⁻¹ ΓZ ex``, which is ``J⁻¹ ΓZ ex`` with the held Jacobian
    ``J = Ja − Ju Huu⁻¹ Hua``, is its damped least-squares solution ``Jᵀ(J Jᵀ + λ² I)⁻¹ ΓZ ex``,
    as Algorithm 1's ``dls`` update: the task decay law then holds where ``J``'s singular
    values are well above ``λ`` (to ``λ²/σ²``), and near a fold of the held map the step along
    its weak direction stays bounded (``≤ ‖ΓZ ex‖ / 2λ``) instead of growing as ``1/σ_min``.
    The statics law is untouched. (``soft_arm_stiff`` on ``mixed15``, target 17, 1.6 % from its
    straight-arm singularity: ``σ_min`` 0.016 on the model, 0.062 on the plant, which answers
    the weak direction with the opposite sign; undamped, feedback rang there.)
    ``form="stacked"`` solves ``[[Ja, Ju], [Hua, Huu]] (q̇a, q̇u) = (ΓZ ex, ΓE eE)`` directly
    (least-norm solution when redundant).
    """
    gz, ge = _gained(gamma_z, ex), _gained(gamma_e, eE)
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
    if damping > 0.0 and b.Ja.shape[0] == m:  # w = J⁻¹ ΓZ ex, J held: damped as Alg. 1's
        w = damped_pinv(b.Ja - b.Ju @ huu_inv_hua, damping) @ gz
    else:
        w = np.linalg.solve(np.eye(m) - ja_inv_ju @ huu_inv_hua, ja_inv_gz)
    z = np.linalg.solve(np.eye(n_u) - huu_inv_hua @ ja_inv_ju, huu_inv_ge)
    return np.concatenate([w - ja_inv_ju @ z, z - huu_inv_hua @ w])


def _gained(gamma: float | FloatArray, e: FloatArray) -> FloatArray:
    """``Γ e`` for a scalar, diagonal (vector) or full (matrix) gain Γ."""
    return np.atleast_1d(gamma) * e if np.ndim(gamma) <= 1 else gamma @ e


def limited_rates(
    b: ActuationBlocks,
    ex: FloatArray,
    eE: FloatArray,
    gamma_z: float | FloatArray,
    gamma_e: float | FloatArray,
    qa_min: FloatArray,
    qa_max: FloatArray,
    *,
    form: Literal["projector", "stacked"] = "projector",
    damping: float = 0.0,
) -> FloatArray:
    """Algorithm 2's rates within the actuator limits ``[qa_min, qa_max]``.

    The rates of :func:`algorithm2_rates` when no actuator at a limit is pushed past it;
    otherwise the bounded least-squares rates of :mod:`poise.ik.held_limits`: the actuators
    pushed out held still, the task law ``J q̇a = r`` (``J = Ja − Ju Huu⁻¹Hua``,
    ``r = ΓZ ex − Ju Huu⁻¹ ΓE eE``) met in least squares by the free ones, and the statics law
    ``q̇u = Huu⁻¹(ΓE eE − Hua q̇a)`` exact.
    """
    rates = algorithm2_rates(b, ex, eE, gamma_z, gamma_e, form=form, damping=damping)
    m = b.Ja.shape[1]
    upper, lower = at_limits(b.qa, qa_min, qa_max)
    locked = outward(rates[:m], upper, lower)
    if not locked.any():
        return rates
    gz, ge = _gained(gamma_z, ex), _gained(gamma_e, eE)
    solved = np.linalg.solve(b.Huu, np.column_stack([b.Hua, ge]))
    s_a, s_e = solved[:, :m], solved[:, m]
    qa_dot = bounded_least_squares(b.Ja - b.Ju @ s_a, gz - b.Ju @ s_e, locked, upper, lower,
                                   damping)
    return np.concatenate([qa_dot, s_e - s_a @ qa_dot])


def follow_statics(b: ActuationBlocks, qa_proposed: FloatArray, qu_proposed: FloatArray,
                   qa: FloatArray) -> FloatArray:
    """``q̄u`` for the actuator motion really made when ``qa`` (clipped, rate-limited) differs
    from the proposed ``qa_proposed``: the statics law of the step,
    ``Hua Δqa + Huu Δqu = Δt ΓE eE``, kept by ``qu_proposed − Huu⁻¹ Hua (qa − qa_proposed)``.
    ``qu_proposed`` unchanged when ``qa`` is the proposal or ``Huu`` is singular."""
    if np.array_equal(qa, qa_proposed) or b.Huu.size == 0:
        return qu_proposed
    try:
        return qu_proposed - np.linalg.solve(b.Huu, b.Hua @ (qa - qa_proposed))
    except np.linalg.LinAlgError:
        return qu_proposed


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
    compiled: bool = True,
) -> IKResult:
    """Algorithm 2 of seed 000: IK with the statics solved online, within the actuator limits.

    Iterates ``(qa, qu) ← (qa, qu) + Δt · rates`` (see :func:`limited_rates`) until
    ``‖x̄ − f‖ < εx`` and ``‖G_u‖ < εE``. For small ``Δt`` both errors decay like
    ``(1 − Δt Γ)^k``. Starts anywhere the inverses exist, also off E. An actuator at its limit
    that the rates push further is held still while the others go on (bounded least squares);
    a step that would cross a limit is clipped there, and the unactuated step follows the
    statics law for the motion the actuators really make (:func:`follow_statics`), so
    ``G_u`` keeps decaying. An attempt that does not converge (a local minimum of the task
    error at the limits) is followed by up to ``options.restarts`` attempts from held
    configurations spread over the actuator range (nearest the target first); the result is
    the converged attempt or the one that came closest, ``restarts`` says how many ran.

    ``max_step`` bounds the largest change of any configuration coordinate ``q`` in one
    step [rad] (a trust region that keeps the step's direction; ``None`` turns it off): far
    from the solution, where ``Δt``·rates would be large, the explicit step would otherwise
    leave the region where the linearisation holds.

    ``compiled``: run the iteration on the compiled kernels when the model's family has them
    and the gains are scalars with ``form="projector"`` (the same arithmetic; ``False``: this
    module's numpy loop, the reference).
    """
    options = options or HeldOptions()
    t0, target, q, _, _ = begin(model, target, q0, False)
    scalar_gains = isinstance(gamma_z, int | float) and isinstance(gamma_e, int | float)
    kernels = compiled_solvers(model, compiled and form == "projector" and scalar_gains)

    def attempt_from(start: FloatArray) -> Attempt:
        if kernels is not None:
            return kernels.algorithm2(target, start, gamma_z=gamma_z, gamma_e=gamma_e, dt=dt,
                                      damping=damping, max_step=max_step, options=options,
                                      record_path=record_path)
        return _algorithm2_attempt(model, target, start, gamma_z, gamma_e, dt, form, damping,
                                   max_step, options, record_path)

    best = attempt_from(q)
    restarts = 0
    if best.status != Status.CONVERGED and options.restarts > 0:
        statics = (kernels.statics_at(options.statics_tol) if kernels is not None
                   else _statics_at(model, options))
        for start in restart_starts(model, target, statics):
            restarts += 1
            trial = attempt_from(start)
            if trial.status == Status.CONVERGED or trial.error < best.error:
                best = trial
            if trial.status == Status.CONVERGED or restarts == options.restarts:
                break
    message = ""
    status = best.status
    qa_end = best.qa(model)
    if status != Status.CONVERGED and at_actuator_limit(model, qa_end):
        status = Status.STALLED
        message = (f"stalled with actuator(s) {limited_actuators(model, qa_end)} at their "
                   f"limit (qa = {qa_end.tolist()}) after {restarts} restart(s); the target may "
                   "be out of reach within the limits")
    return finish(model, best, target, options, t0, message, status=status,
                   restarts=restarts)


def _statics_at(model: MechanicalModel, options: HeldOptions
                ) -> Callable[[FloatArray, FloatArray], tuple[FloatArray, FloatArray, bool]]:
    """``(qa, qu0) -> (q, h(q), converged)`` by the numpy statics solver (stable branch)."""

    def statics(qa: FloatArray, qu0: FloatArray) -> tuple[FloatArray, FloatArray, bool]:
        sol = solve_statics(model, qa, qu0, tol=options.statics_tol)
        return sol.q, model.fk(sol.q), sol.converged

    return statics


def _algorithm2_attempt(
    model: MechanicalModel, target: FloatArray, q: FloatArray,
    gamma_z: float | FloatArray, gamma_e: float | FloatArray, dt: float,
    form: Literal["projector", "stacked"], damping: float, max_step: float | None,
    options: HeldOptions, record_path: bool,
) -> Attempt:
    """Algorithm 2's iteration from ``q`` (numpy; see :func:`algorithm2`)."""
    history: list[float] = []
    path = [q] if record_path else None
    status = Status.ITERATION_CAP
    iterations = 0
    b = blocks(model, q)
    for iterations in range(options.max_iter + 1):
        ex = target - b.x
        e_norm, g_norm = float(np.linalg.norm(ex)), float(np.linalg.norm(b.Gu))
        history.append(e_norm)
        stop = stop_rule(history, iterations, options,
                         e_norm < options.tol and g_norm < options.statics_tol,
                         may_stall=g_norm < options.statics_tol)
        if stop is not None:
            status = stop
            break
        try:
            rates = limited_rates(b, ex, -b.Gu, gamma_z, gamma_e, model.qa_min, model.qa_max,
                                  form=form, damping=damping)
        except np.linalg.LinAlgError:
            if damping > 0.0:
                raise
            rates = limited_rates(b, ex, -b.Gu, gamma_z, gamma_e, model.qa_min, model.qa_max,
                                  form=form, damping=1e-6)
        delta = dt * rates
        longest = float(np.max(np.abs(model.C_inv @ delta)))  # largest joint change [rad]
        if max_step is not None and longest > max_step:
            delta = delta * (max_step / longest)  # trust region: keep the direction
        qa_proposed, qu_proposed = b.qa + delta[: model.m], b.qu + delta[model.m :]
        qa = np.clip(qa_proposed, model.qa_min, model.qa_max)
        q = join(model, qa, follow_statics(b, qa_proposed, qu_proposed, qa))
        b = blocks(model, q)
        if path is not None:
            path.append(q)
    return Attempt(q, status, iterations, np.asarray(history), smallest_singular(b.Ja),
                   None if path is None else np.asarray(path), held_fields(b))
