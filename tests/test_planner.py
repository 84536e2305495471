"""The planner's offline solve (``poise.motion.planner``): a reachable target is found
even where descent from the current and rest configurations misses it."""

from __future__ import annotations

import numpy as np
import pytest

from poise.benchmarks.control import reachable_targets
from poise.ik.held_common import held_jacobian
from poise.ik.statics import solve_statics
from poise.models import load_model
from poise.models.actuation import blocks, split
from poise.motion import planner
from poise.motion.planner import plan_target

TOL = 2e-3  # the dancer example's algorithm.tolerance [m]


@pytest.fixture(scope="module")
def dancer():
    model = load_model("dancer")
    rest = solve_statics(model, np.zeros(model.m), split(model, np.zeros(model.n))[1]).q
    # held targets as poise bench control draws them (stable, actuators in the inner 80 %)
    targets = reachable_targets(model, model.qa_min, model.qa_max, 40, seed=7)
    return model, rest, targets


def test_reachable_dancer_targets_missed_from_the_rest_pose_are_found_from_more_starts(
        dancer, monkeypatch):
    model, rest, targets = dancer
    with monkeypatch.context() as m:  # the planner as it was: the given starts only
        m.setattr(planner, "EXTRA_STARTS", 0)
        missed = [x for x in targets if not plan_target(model, x, [rest], TOL).reachable]
    assert missed, "every target was found from the rest pose: this test checks nothing"
    for x in missed:
        plan = plan_target(model, x, [rest], TOL)
        assert plan.reachable, (x.tolist(), plan.error)
        assert plan.error <= TOL / 10 + 1e-12
        assert np.linalg.norm(np.asarray(model.fk(plan.q_goal)) - x) == pytest.approx(
            plan.error, abs=1e-12)
        b = blocks(model, plan.q_goal)  # held and stable, within the actuator limits
        assert np.linalg.norm(b.Gu) < 1e-6
        assert np.linalg.eigvalsh(b.Huu).min() > 0
        assert np.all(plan.qa_goal >= model.qa_min) and np.all(plan.qa_goal <= model.qa_max)
        again = plan_target(model, x, [rest], TOL)  # seeded by the target: the same plan
        np.testing.assert_array_equal(again.q_goal, plan.q_goal)


def test_an_unreachable_target_is_still_reported_unreachable(dancer):
    model, rest, _ = dancer
    plan = plan_target(model, np.array([2.0, 0.5]), [rest], TOL)  # 2 m out: beyond the body
    assert not plan.reachable and plan.error > 0.5
    assert plan.note().startswith("unreachable")


def test_a_redundant_robot_is_sent_to_the_nearest_held_configuration(dancer, monkeypatch):
    """The dancer has three actuated joints for the centre of mass's two coordinates: the
    held configurations that reach a target form a family. From its q̄ at ``poise bench
    control``'s target 9 (ff, Algorithm 1), the solve for target 10 drifts along that family
    and swings a joint by 3.7 rad (a 3.9 s move). The plan's goal reaches the same target,
    held and stable within the limits, swings no joint by more than 1.8 rad, and is the
    nearest of its neighbours: the distance to the current actuators has no component
    left along the family (the held Jacobian's null space)."""
    model = dancer[0]
    q_bar = np.array([0.8423087152747754, 1.0594192758017025, -1.982866626655501,
                      -1.4221119397276536])
    target = np.array([-0.5657226331272998, 0.7178152318327029])
    qa_now = split(model, q_bar)[0]
    with monkeypatch.context() as m:  # the solve as it was
        m.setattr(planner, "_nearest", lambda model, target, found, *args: found)
        drifted = plan_target(model, target, [q_bar], TOL)
    assert drifted.reachable and np.max(np.abs(drifted.qa_goal - qa_now)) > 3.5
    plan = plan_target(model, target, [q_bar], TOL)
    assert plan.reachable and plan.error <= TOL / 10 + 1e-12
    assert np.max(np.abs(plan.qa_goal - qa_now)) < 1.85
    b = blocks(model, plan.q_goal)
    assert np.linalg.norm(b.Gu) < 1e-6
    assert np.linalg.eigvalsh(b.Huu).min() > 0
    assert np.all(plan.qa_goal >= model.qa_min) and np.all(plan.qa_goal <= model.qa_max)
    jac = held_jacobian(b)
    away = plan.qa_goal - qa_now
    along_family = away - np.linalg.pinv(jac) @ (jac @ away)
    assert np.linalg.norm(along_family) < 1e-3 * np.linalg.norm(away)


def test_a_target_only_the_stiffer_plant_holds_is_planned_for_it(dancer, tmp_path):
    """``poise bench control``'s target 16 on ``stiff10``: the dancer upright with its centre
    of mass 1.057 m high, above what its model's pointe holds (k0 / (m g) ≈ 1.04 m). The
    model refuses it; with the springs as measured (10 % stiffer) the plan goes to a stable
    held configuration of the model at whose actuators the plant holds the target."""
    from poise.benchmarks.control import SEED, config_for
    from poise.controller.simulate import SimulatedLoop
    from poise.sim.named import write_named

    model, rest, _ = dancer
    loop = SimulatedLoop(config_for("dancer", "fb", "alg1",
                                    write_named("dancer", "stiff10", tmp_path)), seed=SEED)
    plant = loop.plant.physical
    target = reachable_targets(plant, loop.limits.qa_min, loop.limits.qa_max, 17, SEED)[16]
    with pytest.raises(planner.UnstableTarget, match="unstable"):
        plan_target(model, target, [rest], TOL)
    plan = plan_target(model, target, [rest], TOL, spring_scale=0.1)
    assert plan.reachable and np.array_equal(plan.serves, target)
    b = blocks(model, plan.q_goal)  # the model holds the goal, stably, within the limits
    assert np.linalg.norm(b.Gu) < 1e-6 and np.linalg.eigvalsh(b.Huu).min() > 0
    assert np.all(plan.qa_goal >= model.qa_min) and np.all(plan.qa_goal <= model.qa_max)
    held = solve_statics(plant, plan.qa_goal, split(model, plan.q_goal)[1])
    assert held.converged and held.stable  # and the plant holds the target there
    assert np.linalg.norm(np.asarray(plant.fk(held.q)) - target) < TOL
    # springs 10 % softer than the model's hold it no better: refused as before
    with pytest.raises(planner.UnstableTarget):
        plan_target(model, target, [rest], TOL, spring_scale=-0.1)
