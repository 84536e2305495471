"""Where a new target leads: the held configuration the arm should go to, found offline.

The per-cycle IK (:mod:`poise.controller.stepper`) is a local method: from an arm parked at an
actuator limit, or folded past the top of ``h`` along E, its descent direction can point away
from a target it could reach (the double pendulum sent to x̄ = 2.5 m folds to qa = 0.12 m and
then drives *further* into the limit for x̄ = 0.45 m). So before a target reaches the loop,
:func:`plan_target` solves Algorithm 1 offline from several starts — the current q̄, the
measured q, the rest pose (actuators at zero) and the last plan's goal — and keeps the best
held configuration:

* a stable solution that meets the tolerance, the one nearest the current actuators; else
* the stable configuration closest to the target (the target is then ``unreachable`` and the
  arm goes as close as it can, within its limits).

The loop then first moves the actuators towards the plan's ``qa_goal`` (first order at the IK's
gain, so no faster than the IK itself would; rate-limited; every intermediate q̄ stays on E) and
hands over to the per-cycle IK close to it, so a reachable target is reached from wherever the
arm was parked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from poise.ik.held import HeldOptions, algorithm1, algorithm2
from poise.ik.result import IKResult
from poise.ik.statics import solve_statics
from poise.models.actuation import split
from poise.models.base import FloatArray, MechanicalModel

#: Iteration cap of each offline solve.
MAX_ITER = 300
#: Top speed of the move to a plan's goal, as a fraction of each actuator's range per second
#: (the safety layer's rate limit applies on top of it).
APPROACH_SPEED = 0.5
#: The per-cycle IK takes over within this fraction of each actuator's range of the goal.
HANDOVER = 2e-3


class UnstableTarget(ValueError):
    """The only held configuration reaching the target is unstable; the message says so."""


@dataclass(frozen=True)
class TargetPlan:
    """What a target leads to.

    Attributes:
        target: x̄ (task_dim,) [task units].
        reachable: a stable held configuration meets the tolerance.
        q_goal: that configuration, or the closest stable one (n,); None if not planned
            (fully actuated robots: the per-cycle IK is the whole story).
        qa_goal: its actuator positions (m,) [actuator units].
        error: ‖x̄ − h(q_goal)‖ [task units] (0 when not planned).
        approach: the loop first moves the actuators towards ``qa_goal`` (always, when a goal
            was planned: whether the per-cycle IK alone would get there is not known from one
            offline solve, whose large steps may cross a fold the IK would not).
    """

    target: FloatArray
    reachable: bool = True
    q_goal: FloatArray | None = None
    qa_goal: FloatArray | None = None
    error: float = 0.0
    approach: bool = False

    @property
    def status(self) -> str:
        """``reachable`` or ``unreachable``."""
        return "reachable" if self.reachable else "unreachable"

    def note(self) -> str:
        """The sentence for the command's answer and the state's reason ('' if reachable)."""
        if self.reachable:
            return ""
        return (f"unreachable: target {self.target.tolist()} is out of reach within the "
                f"actuator limits; going to the closest held configuration (task error "
                f"{self.error:.3g})")


def _solve(model: MechanicalModel, target: FloatArray, q0: FloatArray,
           options: HeldOptions) -> IKResult:
    return algorithm1(model, target, q0, options=options)


def plan_target(model: MechanicalModel, target: FloatArray, starts: Sequence[FloatArray],
                tol: float) -> TargetPlan:
    """The held configuration to go to for ``target`` (see the module docstring).

    Args:
        model: the controller's statics model.
        target: x̄ [task units].
        starts: configurations to start the offline solves from (n,) each; the first is the
            current q̄ (the "nearest" solution is measured from its actuators).
        tol: task tolerance [task units].

    Raises:
        UnstableTarget: the only held configuration found that reaches ``target`` is unstable.
    """
    target = np.asarray(target, dtype=float)
    if model.m == model.n:
        return TargetPlan(target)
    options = HeldOptions(tol=tol / 10, max_iter=MAX_ITER)
    rest = solve_statics(model, np.zeros(model.m), split(model, np.zeros(model.n))[1]).q
    candidates = [np.asarray(q, dtype=float) for q in starts if q is not None] + [rest]
    qa_now = split(model, candidates[0])[0]
    results: list[IKResult] = []
    for q0 in candidates:
        r = _solve(model, target, q0, options)
        results.append(r)
        if r.success and r.stable:
            break  # the first start is the current q̄: its solution is the nearest
    good = [r for r in results if r.success and r.stable]
    if good:
        best = min(good, key=lambda r: float(np.linalg.norm(split(model, r.q)[0] - qa_now)))
        return _plan(model, target, best, True)
    r2 = algorithm2(model, target, candidates[0], options=options)
    if r2.success and r2.stable is False:
        closest = min(results, key=lambda r: r.position_error)
        raise UnstableTarget(
            f"target {target.tolist()}: the held configuration that reaches it is unstable "
            f"(min eig H_uu = {r2.min_eig_Huu:.3g} < 0); a collocated controller cannot hold "
            f"it (closest stable: task error {closest.position_error:.3g})")
    stable = [r for r in results if r.stable is not False] or results
    best = min(stable, key=lambda r: r.position_error)
    return _plan(model, target, best, best.position_error <= tol)


def _plan(model: MechanicalModel, target: FloatArray, r: IKResult,
          reachable: bool) -> TargetPlan:
    q = np.asarray(r.q, dtype=float)
    return TargetPlan(target, reachable, q, split(model, q)[0], float(r.position_error), True)


def approach_step(qa: FloatArray, goal: FloatArray, qa_min: FloatArray, qa_max: FloatArray,
                  gain: float, dt: float) -> tuple[FloatArray, bool]:
    """One cycle of the move of the actuators from ``qa`` towards ``goal`` (clipped to the
    limits): first order at the IK's own rate, ``Δqa = min(1, Γ·Δt) (goal − qa)``, so it
    excites the structure no more than the IK would, and at most :data:`APPROACH_SPEED` ×
    range per second per actuator.

    Returns:
        ``(qa_next, near)``: ``near`` once within :data:`HANDOVER` × range of the goal (in
        its basin), where the per-cycle IK takes over.
    """
    goal = np.clip(goal, qa_min, qa_max)
    span = qa_max - qa_min
    span = np.where(np.isfinite(span), span, 1.0)
    step = min(1.0, gain * dt) * (goal - qa)
    bound = APPROACH_SPEED * span * dt
    ratio = float(np.max(np.abs(step) / bound)) if step.size else 0.0
    if ratio > 1.0:
        step = step / ratio
    near = bool(np.all(np.abs(goal - qa) <= HANDOVER * span))
    return qa + step, near


__all__ = ["APPROACH_SPEED", "HANDOVER", "TargetPlan", "UnstableTarget", "approach_step",
           "plan_target"]
