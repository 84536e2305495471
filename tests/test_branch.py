"""Following a held configuration along a straight move of the actuators (``poise.ik.branch``)
and the re-plan it refuses: the dancer's model, bistable on its pointe (leaning left or right
with the same hips), where ``poise bench control``'s target 16 on the ``real`` plant was
re-planned across a fold and the plant tipped over."""

from __future__ import annotations

import numpy as np
import pytest

from poise.benchmarks.control import config_for
from poise.controller.simulate import SimulatedLoop
from poise.ik.branch import OffBranch, check_lands, follow_branch, slow_move_end
from poise.ik.statics import solve_statics
from poise.models import load_model
from poise.models.actuation import blocks, split
from poise.motion.motion_planner import MotionState
from poise.motion.retarget import Retargeting

#: The model's q̄ when target 16 stalled (qa, qu), where the plant stood (q), the last plan's
#: goal and the re-plan's aim (rounded from the bench's run).
QA_FROM, QU_FROM = [0.3768, 1.5618, -2.9740], 0.278
Q_MEASURED = [0.4063, 0.3780, 1.5606, -2.9729]
QA_OLD_GOAL, QU_OLD_GOAL = [0.3499, 1.7622, -2.9940], 0.301
AIM = [-0.34481, 1.02943]
#: The re-plan's goal (qa, qu): stable, leaning right as the plant did.
QA_GOAL, QU_GOAL = [0.2519, 2.1264, -3.0], 0.3321


@pytest.fixture(scope="module")
def dancer():
    return load_model("dancer")


def held(model, qa, qu) -> np.ndarray:
    """The stable held configuration at the actuators ``qa`` nearest ``qu``."""
    sol = solve_statics(model, np.asarray(qa, float), np.atleast_1d(float(qu)), tol=1e-11)
    assert sol.converged and sol.stable
    return sol.q


def min_eig(model, q) -> float:
    return float(np.linalg.eigvalsh(blocks(model, q).Huu)[0])


def test_the_branch_is_followed_to_its_fold_where_the_held_configuration_vanishes(dancer):
    start, goal = held(dancer, QA_FROM, QU_FROM), held(dancer, QA_GOAL, QU_GOAL)
    path = follow_branch(dancer, start, split(dancer, goal)[0])
    assert not path.whole and 0.1 < path.reached < 0.5
    # every configuration followed is held and stable; at the end H_uu all but vanishes
    end = blocks(dancer, path.q_end)
    assert np.linalg.norm(end.Gu) < 1e-8
    assert 0 < min_eig(dancer, path.q_end) < 0.05 * min_eig(dancer, start)
    np.testing.assert_allclose(end.qa, path.fold_qa, atol=1e-12)
    # a little past the fold no held configuration is near: the robot falls a long way
    beyond = path.fold_qa + 0.01 * (split(dancer, goal)[0] - split(dancer, start)[0])
    fallen = solve_statics(dancer, beyond, end.qu, tol=1e-11)
    assert fallen.converged and fallen.stable
    assert float(np.max(np.abs(fallen.qu - end.qu))) > 0.2


def test_a_move_across_the_fold_comes_to_rest_on_the_other_branch_and_is_refused(dancer):
    start, goal = held(dancer, QA_FROM, QU_FROM), held(dancer, QA_GOAL, QU_GOAL)
    qa_goal, qu_goal = split(dancer, goal)
    end, falls = slow_move_end(dancer, start, qa_goal)
    qa_end, qu_end = split(dancer, end)
    assert falls == 1
    np.testing.assert_allclose(qa_end, qa_goal, atol=1e-12)
    # two stable held configurations at the same actuators: leaning left and right
    assert np.linalg.norm(blocks(dancer, end).Gu) < 1e-8 and min_eig(dancer, end) > 0
    assert qu_end[0] < -0.5 and qu_goal[0] > 0.3
    with pytest.raises(OffBranch, match=r"comes to rest at .*qu = \[-0\.58"):
        check_lands(dancer, start, goal)


def test_a_move_along_one_branch_and_a_snap_through_onto_the_goal_both_land(dancer):
    start = held(dancer, QA_FROM, QU_FROM)
    old = held(dancer, QA_OLD_GOAL, QU_OLD_GOAL)
    path = follow_branch(dancer, start, split(dancer, old)[0])
    assert path.whole and path.reached == 1.0
    np.testing.assert_allclose(path.q_end, old, atol=1e-8)
    check_lands(dancer, start, old)
    # the exact model's one snap-through in the bench: the dancer swings its weight over
    # the pointe, falls past a fold and comes to rest on the goal itself
    left = held(dancer, [-0.287, -1.898, 2.393], -0.331)
    right = held(dancer, [-0.007, -1.628, 2.367], 0.697)
    assert not follow_branch(dancer, left, split(dancer, right)[0]).whole
    assert slow_move_end(dancer, left, split(dancer, right)[0])[1] == 1
    check_lands(dancer, left, right)


def test_the_stall_replan_across_the_fold_is_refused_with_the_reason(dancer):
    """The re-plan that tipped the plant over (``MotionPlanner.replan``): its goal reaches
    the aim, stable, but the move there leaves the model on the other branch."""
    loop = SimulatedLoop(config_for("dancer", "fb", "alg1"), seed=1)
    start = held(loop.model, QA_FROM, QU_FROM)
    state = MotionState(loop.params, q_bar=start, q=np.array(Q_MEASURED),
                        goal=held(loop.model, QA_OLD_GOAL, QU_OLD_GOAL), move_from=start)
    with pytest.raises(OffBranch, match="would not end at the goal"):
        loop.planner.replan(np.array(AIM), state)
    plan = loop.planner.target_plan(np.array(AIM), state)
    assert plan.reachable and split(loop.model, plan.q_goal)[1][0] > 0.3


def test_the_loop_records_the_refused_replan_as_reachable_with_the_reason(dancer,
                                                                         monkeypatch):
    """``SimulatedLoop.replan_stall`` at that stall: the goal reaches the aim (the record
    says so) and the re-plan is refused for where the move would leave the model."""
    loop = SimulatedLoop(config_for("dancer", "fb", "alg1"), seed=1)
    loop.start()
    loop.set_target(np.array(AIM))
    start = held(loop.model, QA_FROM, QU_FROM)
    state = MotionState(loop.params, q_bar=start, q=np.array(Q_MEASURED),
                        goal=held(loop.model, QA_OLD_GOAL, QU_OLD_GOAL), move_from=start)
    monkeypatch.setattr(loop.step, "motion_state", lambda *args: state)
    plan = loop.step.plan
    loop.step.retarget.stalled = np.array(AIM) - np.asarray(plan.live_target)
    assert not loop.replan_stall()
    record = loop.replans[-1]
    assert record["reachable"] and not record["moved"]
    assert "would not end at the goal" in record["refused"]
    np.testing.assert_allclose(record["aim"], AIM, atol=1e-12)
    assert loop.step.plan is plan  # nothing adopted


def test_a_correction_across_the_fold_is_not_taken(dancer):
    """Sampled re-targeting takes a corrected setpoint only where the model moves to it on
    its branch: the minimisation from q̄ finds a stable configuration there too (leaning the
    other way), which the check before took."""
    start = held(dancer, QA_FROM, QU_FROM)
    retarget = Retargeting(dancer, 1e-3, 2e-3)
    across = np.array(QA_GOAL)
    fallen = solve_statics(dancer, across, np.atleast_1d(QU_FROM))
    assert fallen.converged and fallen.stable  # what the check before accepted
    assert not retarget._holds_stably(start, across)
    assert retarget._holds_stably(start, np.array(QA_OLD_GOAL))



@pytest.mark.parametrize("compiled", [False, True])
def test_the_ik_holds_at_the_models_fold_and_a_planned_move_snaps_through(dancer, compiled):
    """Algorithm 1's commit past the fold of the branch q̄ is on: while the IK integrates
    the setpoint stays at the fold's edge (the model would lean the other way, the plant,
    which differs from it, may not); during a planned move q̄ snaps through to the other
    branch, as the model says the robot does. The compiled stepper does as the reference."""
    from poise.motion.compiled_steppers import make_compiled_stepper
    from poise.motion.stepper import FOLD_JUMP, make_stepper

    start, goal = held(dancer, QA_FROM, QU_FROM), held(dancer, QA_GOAL, QU_GOAL)
    qa_start, qa_goal = split(dancer, start)[0], split(dancer, goal)[0]
    path = follow_branch(dancer, start, qa_goal)
    edge = path.q_end  # the last held configuration before the fold
    beyond = path.fold_qa + 0.01 * (qa_goal - qa_start)
    params = SimulatedLoop(config_for("dancer", "fb", "alg1"), seed=1).params
    for moving in (False, True):
        stepper = make_compiled_stepper("alg1", dancer) if compiled else \
            make_stepper("alg1", dancer)
        stepper.reset(edge, dancer.qa_min, dancer.qa_max)
        stepper.propose(params, None, 1e-3)
        stepper.moving = moving
        stepper.commit(beyond)
        qa, qu = split(dancer, np.asarray(stepper.q_bar))
        if moving:  # snapped through: leaning the other way at the new actuators
            np.testing.assert_allclose(qa, beyond, atol=1e-12)
            assert qu[0] < split(dancer, edge)[1][0] - FOLD_JUMP
            assert stepper.fold_holds == 0
        else:  # held: q̄ and the setpoint q̄a where the branch still holds
            np.testing.assert_allclose(stepper.q_bar, edge, atol=1e-9)
            np.testing.assert_allclose(stepper.qa, split(dancer, edge)[0], atol=1e-12)
            assert stepper.fold_holds == 1 and stepper.fallbacks == 1
            # the integrator pushes on into the fold: held again (without a full solve)
            stepper.propose(params, None, 1e-3)
            stepper.commit(beyond + 1e-4)
            np.testing.assert_allclose(stepper.q_bar, edge, atol=1e-9)
            assert stepper.fold_holds == 2 and stepper.fallbacks == 2
