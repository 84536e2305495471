"""Algorithm 1 of seed 000: closed-loop IK on the held set E, the statics solved beforehand."""

from __future__ import annotations

import time
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from poise.ik.dls import damped_pinv
from poise.ik.held_common import (
    Attempt,
    HeldOptions,
    at_actuator_limit,
    check_target,
    compiled_solvers,
    finish,
    held_fields,
    held_jacobian,
    limited_actuators,
    smallest_singular,
    start_configuration,
    stop_rule,
)
from poise.ik.result import FloatArray, IKResult, InvalidInputError, Status
from poise.ik.statics import StaticsSolution, solve_statics
from poise.models.actuation import blocks, split
from poise.models.base import MechanicalModel

Update = Literal["inverse", "pinv", "dls", "transpose"]
UPDATES = ("inverse", "pinv", "dls", "transpose")


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
    return b.qa + dt * qa_dot, jac, smallest_singular(jac)


def check_update(update: str, task_dim: int, m: int) -> None:
    """Refuse an unknown Algorithm-1 update law, or ``inverse`` for a non-square ``J``."""
    if update not in UPDATES:
        raise InvalidInputError(f"update: unknown '{update}' (inverse, pinv, dls, transpose)")
    if update == "inverse" and task_dim != m:
        raise InvalidInputError(
            f"update 'inverse' needs a square Jacobian; task {task_dim} × actuators {m}: "
            "use 'pinv' or 'dls'")


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
    compiled: bool = True,
) -> IKResult:
    """Algorithm 1 of seed 000: closed-loop IK on the held set E (statics solved beforehand).

    Starts from ``q0`` (default zero), first settles it on E at its ``qa`` (stable branch),
    then iterates ``qa ← clip(qa + Δt · update(J, x̄ − f(qa)))`` with
    ``J = Ja − Ju Huu⁻¹ Hua`` and ``q̄u(qa)`` re-solved (warm-started) after every update.
    An update that increases the task error is halved (up to 10 times) so that a large step
    cannot jump to another branch. Every iterate satisfies ``‖G_u‖ ≤ statics_tol``.

    ``compiled``: run the iteration on the compiled kernels when the model's family has them
    (the same arithmetic; ``False``: this module's numpy loop, the reference).
    """
    options = options or HeldOptions()
    t0 = time.perf_counter()
    target = check_target(model, target)
    q_start = start_configuration(model, q0)
    check_update(update, model.task_dim, model.m)
    kernels = compiled_solvers(model, compiled)
    if kernels is not None:
        attempt = kernels.algorithm1(target, q_start, update=update, damping=damping,
                                     gain=gain, dt=dt, options=options, record_path=record_path)
    else:
        attempt = _algorithm1_attempt(model, target, q_start, update, damping, gain, dt,
                                      options, record_path)
    status, message = attempt.status, ""
    qa_end = attempt.qa(model)
    if status != Status.CONVERGED and at_actuator_limit(model, qa_end):
        status = Status.UNREACHABLE
        message = (f"target not reachable on E within the actuator limits: actuator(s) "
                   f"{limited_actuators(model, qa_end)} at their limit; returning the closest "
                   f"held configuration found")
    return finish(model, attempt, target, options, t0, message, status=status)


def _algorithm1_attempt(
    model: MechanicalModel, target: FloatArray, q_start: FloatArray, update: Update,
    damping: float, gain: float, dt: float, options: HeldOptions, record_path: bool,
) -> Attempt:
    """Algorithm 1's iteration from ``q_start`` (numpy; see :func:`algorithm1`)."""
    qa, qu = split(model, q_start)
    statics = solve_statics(model, np.clip(qa, model.qa_min, model.qa_max), qu,
                            tol=options.statics_tol)
    history: list[float] = []
    path = [statics.q] if record_path else None
    status = Status.ITERATION_CAP
    iterations = 0
    err_norm = float(np.linalg.norm(target - model.fk(statics.q)))
    for iterations in range(options.max_iter + 1):
        history.append(err_norm)
        stop = stop_rule(history, iterations, options, err_norm < options.tol)
        if stop is not None:
            status = stop
            break
        qa_new, _, _ = algorithm1_step(
            model, statics, target, update=update, damping=damping, gain=gain, dt=dt)
        accepted = _accept_step(model, statics, qa_new - statics.qa, target, err_norm,
                                options.statics_tol, monotone=update != "transpose")
        if accepted is None:
            status = Status.STALLED
            break
        statics, err_norm = accepted
        if path is not None:
            path.append(statics.q)
    b = blocks(model, statics.q)
    return Attempt(statics.q, status, iterations, np.asarray(history),
                   smallest_singular(held_jacobian(b)),
                   None if path is None else np.asarray(path), held_fields(b))


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
