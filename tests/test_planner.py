"""The planner's offline solve (``poise.controller.planner``): a reachable target is found
even where descent from the current and rest configurations misses it."""

from __future__ import annotations

import numpy as np
import pytest

from poise.benchmarks.control import reachable_targets
from poise.controller import planner
from poise.controller.planner import plan_target
from poise.ik.statics import solve_statics
from poise.models import load_model
from poise.models.actuation import blocks, split

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
