"""Whether a straight move of the actuators keeps the robot on one branch of held configurations.

With the actuators at ``qa`` a robot may hold several stable configurations (the dancer on its
elastic pointe leans left or right with the same hips), and a branch ends at a *fold*, where
``H_uu`` becomes singular and the configuration held there vanishes: moved past it, the robot
falls to another branch. Two held configurations being stable says nothing about the way
between them: a straight move of the actuators from one to the other (:class:`~poise.motion.
shaping.ShapedMove`: every actuator arrives together, so the actuators stay on the segment)
can leave the start's branch at a fold and end on a different configuration than the goal.

:func:`follow_branch` follows the start's held configuration along the segment by natural
continuation: each step predicts ``Δqu = −H_uu⁻¹ H_ua Δqa`` (first order along the set of held
configurations E) and corrects it by Newton on ``G_u(qa, qu) = 0``; a step is kept when Newton
converges to a stable configuration (``H_uu ≻ 0``) within :data:`NEWTON_ITER` iterations and
otherwise halved. Where the step falls below :data:`MIN_STEP` of the segment the branch ends
there: a fold (or so sharp a turn of the branch that a move could not follow it either).

The dancer's target 16 of ``poise bench control`` on the ``real`` plant: a re-plan's goal
(pointe at +0.33 rad) is stable, but the straight move to it from where the model stood (+0.28
rad) meets the model's fold 27 % of the way; past it the model leans the other way (−0.59
rad at the goal), its held Jacobian there is not the plant's, and feedback through it tipped
the plant over.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from poise.ik.statics import solve_statics
from poise.models.actuation import ActuationBlocks, blocks, join, split
from poise.models.base import FloatArray, MechanicalModel

#: The largest actuator change of one continuation step [actuator units].
MAX_STEP = 0.05
#: The smallest step, as a fraction of the segment, before the branch is said to end.
MIN_STEP = 1e-3
#: Newton iterations of one step.
NEWTON_ITER = 6
#: ``‖G_u‖`` at which a step's Newton has converged [generalised force units].
STATICS_TOL = 1e-9
#: The folds :func:`slow_move_end` falls past before it gives up.
MAX_FALLS = 3
#: A slow move ends at the goal when its configuration is this close to the goal's
#: [actuator and unactuated units].
SAME_GOAL = 1e-4


@dataclass(frozen=True)
class BranchPath:
    """The start's held configuration followed along a straight move of the actuators.

    Attributes:
        q_end: the held configuration followed as far as the branch allows (n,).
        reached: the fraction of the segment followed, in [0, 1] (1: to its end).
        fold_qa: the actuators where the branch ended before the segment did (m,); None when
            it was followed to the end.
    """

    q_end: FloatArray
    reached: float
    fold_qa: FloatArray | None

    @property
    def whole(self) -> bool:
        """The branch was followed to the end of the segment."""
        return self.fold_qa is None


def follow_branch(model: MechanicalModel, q_from: FloatArray, qa_to: FloatArray
                  ) -> BranchPath:
    """The held configuration of ``q_from`` followed by continuation while the actuators move
    in a straight line from its ``qa`` to ``qa_to`` (see the module docstring).

    Args:
        model: the statics model.
        q_from: a held configuration (``G_u ≈ 0``, stable) (n,).
        qa_to: where the actuators go (m,) [actuator units].
    """
    q_from = np.asarray(q_from, dtype=float)
    qa0, qu = split(model, q_from)
    delta = np.asarray(qa_to, dtype=float) - qa0
    span = float(np.max(np.abs(delta))) if delta.size else 0.0
    if model.m == model.n or span == 0.0:
        return BranchPath(join(model, qa0 + delta, qu), 1.0, None)
    full = min(1.0, MAX_STEP / span)
    s, ds = 0.0, full
    b = blocks(model, join(model, qa0, qu))
    while s < 1.0:
        s_next = min(1.0, s + ds)
        step = (s_next - s) * delta
        nb = _step(model, b, qa0 + s_next * delta, step)
        if nb is None:
            ds *= 0.5
            if ds < MIN_STEP:
                return BranchPath(join(model, b.qa, b.qu), s, qa0 + s * delta)
            continue
        s, b, ds = s_next, nb, min(full, 2.0 * ds)
    return BranchPath(join(model, b.qa, b.qu), 1.0, None)


def slow_move_end(model: MechanicalModel, q_from: FloatArray, qa_to: FloatArray
                  ) -> tuple[FloatArray, int]:
    """Where the robot comes to rest when its actuators move slowly in a straight line from
    the held configuration ``q_from`` to ``qa_to``: the branch followed (:func:`follow_branch`)
    and, past each fold, the stable configuration it falls to (:func:`~poise.ik.statics.
    solve_statics` from where the branch ended, a minimisation of the potential: the basin it
    falls into), followed on from there; and how many folds it fell past (at most
    :data:`MAX_FALLS`, after which the end is the last fold's)."""
    qa_to = np.asarray(qa_to, dtype=float)
    q = np.asarray(q_from, dtype=float)
    for falls in range(MAX_FALLS + 1):
        path = follow_branch(model, q, qa_to)
        if path.whole:
            return path.q_end, falls
        qa_fold, qu_fold = split(model, path.q_end)
        # a step past the fold, where the branch no longer holds
        beyond = qa_fold + min(1.0, MAX_STEP / float(np.max(np.abs(qa_to - qa_fold)))) * (
            qa_to - qa_fold)
        fallen = solve_statics(model, beyond, qu_fold)
        if not (fallen.converged and fallen.stable):
            break
        q = fallen.q
    return path.q_end, MAX_FALLS


class OffBranch(ValueError):
    """A straight move of the actuators would not bring the robot to the goal: moved slowly
    along it, the robot comes to rest elsewhere (the message says where)."""


def check_lands(model: MechanicalModel, q_from: FloatArray, q_goal: FloatArray) -> None:
    """Check that a straight move of the actuators from the held configuration ``q_from`` to
    ``q_goal``'s, made slowly, brings the robot to ``q_goal`` itself (:func:`slow_move_end`:
    folds it snaps through on the way are allowed; where it comes to rest must be the goal).

    Raises:
        OffBranch: it comes to rest elsewhere (another branch held at the same actuators).
    """
    qa_goal, qu_goal = split(model, np.asarray(q_goal, dtype=float))
    end, falls = slow_move_end(model, q_from, qa_goal)
    qa_end, qu_end = split(model, end)
    if np.all(np.abs(qa_end - qa_goal) <= SAME_GOAL) and \
            np.all(np.abs(qu_end - qu_goal) <= SAME_GOAL):
        return
    raise OffBranch(
        f"the move to qa = {_rounded(qa_goal)} would not end at the goal's held configuration "
        f"qu = {_rounded(qu_goal)}: moved slowly, the model comes to rest at qa = "
        f"{_rounded(qa_end)}, qu = {_rounded(qu_end)} (past {falls} fold(s))")


def _rounded(a: FloatArray) -> list[float]:
    return [round(float(v), 4) for v in a]


def _step(model: MechanicalModel, b: ActuationBlocks, qa: FloatArray, dqa: FloatArray
          ) -> ActuationBlocks | None:
    """One continuation step from the held blocks ``b`` to the actuators ``qa`` (= b.qa +
    ``dqa``): the blocks there, or None where Newton does not converge to a stable
    configuration."""
    try:
        qu = b.qu - np.linalg.solve(b.Huu, b.Hua @ dqa)
    except np.linalg.LinAlgError:
        return None
    for _ in range(NEWTON_ITER):
        nb = blocks(model, join(model, qa, qu))
        if float(np.linalg.norm(nb.Gu)) <= STATICS_TOL:
            return nb if positive_definite(nb.Huu) else None
        try:
            qu = qu - np.linalg.solve(nb.Huu, nb.Gu)
        except np.linalg.LinAlgError:
            return None
    return None


def positive_definite(a: FloatArray) -> bool:
    """Whether the symmetric part of ``a`` is positive definite (an empty ``a`` is)."""
    if not a.size:
        return True
    try:
        np.linalg.cholesky(0.5 * (a + a.T))
    except np.linalg.LinAlgError:
        return False
    return True


__all__ = ["BranchPath", "OffBranch", "check_lands", "follow_branch", "positive_definite",
           "slow_move_end"]
