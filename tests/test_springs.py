"""The plant's springs from where it rests (issue 35): the stiffness scale ``ŝ``
(:mod:`poise.motion.springs`), the held Jacobian and the correction of the scaled model, and
what they do for sampled re-targeting on the dancer whose pointe is 10 % stiffer."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import plant_with_springs
from poise.benchmarks.control import SEED, band, config_for, reachable_targets
from poise.controller.simulate import SimulatedLoop
from poise.ik.held_common import held_jacobian
from poise.ik.statics import solve_statics
from poise.models.actuation import blocks, join, split
from poise.models.registry import load_model
from poise.motion import springs
from poise.motion.retarget import THRESHOLD, End, Retargeting, bounded_correction
from poise.motion.springs import SpringScale
from poise.sim.named import write_named


def plant_model(robot: str, factors, folder):
    """``robot`` with its first joint springs multiplied by ``factors``, loaded."""
    return load_model(str(plant_with_springs(robot, factors, folder)))


def resting(plant, qa, qu0):
    """Where ``plant`` rests at the actuators ``qa`` (its held configuration)."""
    sol = solve_statics(plant, np.asarray(qa, float), np.asarray(qu0, float))
    assert sol.converged and sol.stable
    return join(plant, np.asarray(qa, float), sol.qu)


@pytest.mark.parametrize("robot", ["dancer", "double_pendulum", "soft_arm_stiff"])
def test_the_scale_of_springs_uniformly_stiffer_is_found_from_where_the_plant_rests(
        robot, tmp_path):
    """Every spring of the plant 10 % stiffer: at any resting configuration the model's
    passive force is ``−0.1 k_u``, so ``ŝ = 0.1`` to rounding and it explains all of it, from
    one configuration or several."""
    model = load_model(robot)
    plant = plant_model(robot, [1.1] * 16, tmp_path)
    rng = np.random.default_rng(3)
    scale = SpringScale(model)
    assert scale.scale == 0.0 and not scale.significant
    qa_min, qa_max = np.asarray(model.qa_min, float), np.asarray(model.qa_max, float)
    for _ in range(3):
        qa = qa_min + (qa_max - qa_min) * rng.uniform(0.35, 0.65, model.m)
        scale.add(resting(plant, qa, np.zeros(model.n - model.m)))
        assert scale.scale == pytest.approx(0.1, abs=1e-8)
        assert scale.explained == pytest.approx(1.0, abs=1e-8)
        assert scale.significant


def test_springs_off_in_different_ways_are_not_taken_for_one_scale(tmp_path):
    """The soft arm's springs off segment by segment in both directions (+15 %, −15 %): no
    single scale explains the residuals (less than :data:`~poise.motion.springs.EXPLAINED`),
    so the model's own Jacobian stays in use."""
    model = load_model("soft_arm_stiff")
    plant = plant_model("soft_arm_stiff", [1.15, 0.85], tmp_path)
    assert not np.allclose(plant.stiffness / model.stiffness, 1.15)
    scale = SpringScale(model)
    for qa in ([0.01, -0.01], [-0.012, 0.004], [0.006, 0.012]):
        scale.add(resting(plant, qa, np.zeros(model.n - model.m)))
    assert scale.samples == 3
    assert scale.explained < springs.EXPLAINED and not scale.significant


def test_the_scaled_held_jacobian_is_the_plants_and_matches_finite_differences(tmp_path):
    """With ``ŝ`` learnt, the held Jacobian of the scaled model at where the plant rests is
    the plant's own (its springs are exactly the scaled ones), and both match central
    differences of the plant's held map ``qa ↦ h(q̄(qa))``."""
    model = load_model("dancer")
    plant = plant_model("dancer", [1.1], tmp_path)
    qa = np.array([0.3, -0.4, 0.5])
    q = resting(plant, qa, [0.0])
    scale = SpringScale(model)
    scale.add(q)
    J = scale.held_jacobian(q)
    assert np.allclose(J, held_jacobian(blocks(plant, q)), rtol=1e-9, atol=1e-12)
    h = 1e-6
    qu = split(plant, q)[1]
    fd = np.column_stack([
        (plant.fk(resting(plant, qa + h * e, qu)) - plant.fk(resting(plant, qa - h * e, qu)))
        / (2 * h) for e in np.eye(3)])
    assert np.allclose(J, fd, atol=1e-6)
    # the model's own is 40 % off: gravity nearly cancels the pointe's spring
    J0 = held_jacobian(blocks(model, q))
    assert np.linalg.norm(J0 - J) > 0.2 * np.linalg.norm(J)


def test_a_correction_on_the_scaled_model_lands_the_plant_on_the_target(tmp_path):
    """From where the plant rests 8 cm off the target, the Gauss–Newton correction on the
    scaled model's held map moves the plant onto it (its residual, what the scaled model says
    is left, below a micrometre); the linear step on the same Jacobian leaves 5 mm."""
    model = load_model("dancer")
    plant = plant_model("dancer", [1.1], tmp_path)
    qa = np.array([0.0, 0.3, 0.0])
    q = resting(plant, qa, [0.0])
    x_goal = np.asarray(plant.fk(resting(plant, [0.2, 0.5, 0.3], [0.0])), float)
    shift = x_goal - np.asarray(plant.fk(q), float)
    assert np.linalg.norm(shift) > 0.05
    scale = SpringScale(model)
    scale.add(q)
    lo, hi = np.asarray(model.qa_min, float), np.asarray(model.qa_max, float)

    def bounded(J, e, a):
        return bounded_correction(J, e, a, lo, hi)

    delta, residual, limited = scale.correction(q, qa, shift, bounded, np.inf)
    assert not limited and residual < 1e-6
    landed = plant.fk(resting(plant, qa + delta, split(plant, q)[1]))
    assert np.linalg.norm(landed - x_goal) < 1e-3
    linear = bounded(scale.held_jacobian(q), shift, qa)[0]
    after = plant.fk(resting(plant, qa + linear, split(plant, q)[1]))
    assert np.linalg.norm(after - x_goal) > 3e-3
    # cut to a trust region: no longer than it, toward 0
    short, _, _ = scale.correction(q, qa, shift, bounded, 0.1)
    assert np.linalg.norm(short) == pytest.approx(0.1)
    assert np.allclose(short / np.linalg.norm(short), delta / np.linalg.norm(delta))


def test_the_first_window_shows_the_stiffer_pointe_and_one_correction_removes_the_error(
        tmp_path):
    """The dancer on a pointe 10 % stiffer (``stiff10``), target 1 from rest: after the move
    its centre of mass rests 11 cm off. That window shows ``ŝ = 0.10`` and the correction on
    the scaled model leaves the true error within the band for good: one correction. (On the
    model's own Jacobian the same correction leaves more than the band:
    ``test_a_correction_on_the_scaled_model_lands_the_plant_on_the_target``.)"""
    plant = write_named("dancer", "stiff10", tmp_path)
    loop = SimulatedLoop(config_for("dancer", "fb", "alg1", plant), seed=SEED)
    target = reachable_targets(loop.plant.physical, loop.limits.qa_min, loop.limits.qa_max,
                               2, SEED)[1]
    r = loop.step.retarget
    loop.start()
    loop.set_target(target)
    while loop.time < 40.0 and not r.corrections:
        loop.cycle()
    assert r.springs.scale == pytest.approx(0.1, abs=0.01) and r.springs.samples == 1
    assert len(r.corrections) == 1 and np.linalg.norm(r.corrections[0].mismatch) > 0.08
    assert not r.corrections[0].limited and not loop.replans
    eps = band(loop.plant.physical)
    settled = None
    while loop.time < 40.0:  # inside the band for good, with no further correction
        loop.cycle()
        err = float(np.linalg.norm(target - loop.plant.physical.fk(loop.plant.q)))
        settled = (settled or loop.time) if err < eps else None
    assert settled is not None and loop.time - settled >= 2.0, (settled, loop.time)
    assert len(r.corrections) == 1


def test_only_a_window_that_calls_for_a_correction_counts():
    """On the exact model the windows' mismatch is sensor noise, below the threshold: no
    window counts and ``ŝ`` stays 0 (nothing changes there)."""
    loop = SimulatedLoop(config_for("dancer", "fb", "alg1"), seed=SEED)
    model = loop.model
    target = reachable_targets(model, loop.limits.qa_min, loop.limits.qa_max, 1, SEED)[0]
    loop.start()
    loop.set_target(target)
    r = loop.step.retarget
    windows = 0
    observe = r.observe

    def counting(*args):
        nonlocal windows
        full = observe(*args)
        windows += full
        return full

    r.observe = counting
    while windows < 1 and loop.time < 120.0:
        loop.cycle()
    assert windows >= 1, "no window in 120 s"
    assert THRESHOLD > 0 and not r.corrections
    assert r.springs.samples == 0 and r.springs.scale == 0.0


def test_a_plan_for_the_measured_springs_lands_the_plant_on_the_target(tmp_path):
    """``plan_target(..., spring_scale=0.1)`` on the dancer whose pointe is 10 % stiffer:
    the model's own plan for ``poise bench control``'s target 1 leaves the plant 11 cm off
    (statics); the aimed plan's goal, held by the plant, lands within 0.5 mm. Target 1 is
    past the model's reach (its plan unreachable), the plant holds it: the aimed plan
    reaches its aim. The plan serves the target; its parameters aim at it."""
    from poise.motion.params import LiveParams, with_plan
    from poise.motion.planner import plan_target

    model = load_model("dancer")
    plant = plant_model("dancer", [1.1], tmp_path)
    lo, hi = np.asarray(model.qa_min, float), np.asarray(model.qa_max, float)
    target = np.asarray(reachable_targets(plant, lo, hi, 2, SEED)[1], float)
    start = [np.zeros(model.n)]
    plain = plan_target(model, target, start, 1e-3)
    aimed = plan_target(model, target, start, 1e-3, spring_scale=0.1)
    assert not plain.reachable and plain.serves is None
    assert aimed.reachable and np.array_equal(aimed.serves, target)
    assert np.array_equal(aimed.live_target, target)
    assert np.linalg.norm(aimed.target - target) > 0.05  # the model is aimed elsewhere

    def lands(plan):
        q = resting(plant, plan.qa_goal, split(plant, plan.q_goal)[1])
        return float(np.linalg.norm(plant.fk(q) - target))

    assert lands(plain) > 0.1 and lands(aimed) < 5e-4
    assert np.allclose(model.fk(aimed.q_goal), aimed.target)
    params = LiveParams("alg1", "dls", 0.1, 0.1, 10.0, 0.01, np.zeros(2), "fb")
    assert np.array_equal(with_plan(params, aimed).target, target)
    # no scale: the same plan as without
    again = plan_target(model, target, start, 1e-3, spring_scale=0.0)
    assert np.array_equal(again.qa_goal, plain.qa_goal) and again.serves is None


def test_a_stall_reports_the_models_offset_at_the_setpoint_now():
    """The mismatch a stall reports (its re-plan aims at ``target + stalled``) is the model's
    offset from the plant where the setpoint stands, ``x̄ − h(q)``, not the distance to the
    plan's end: after corrections moved the setpoint, the latter sent the dancer's re-plan
    back to where the corrections had started (16 cm off)."""
    model = load_model("soft_arm_stiff")
    plan = plan_target_for(model)
    r = Retargeting(model, 1 / 250, 2e-3)
    r.begin(plan, True)
    target = np.asarray(plan.target, float)
    x_meas = target + np.array([0.01, 0.0])  # 1 cm from the plan's end
    x_bar = target + np.array([0.03, -0.02])  # the model's value at the setpoint now
    lo, hi = np.asarray(model.qa_min, float), np.asarray(model.qa_max, float)
    for _ in range(r._window):
        r.watch_stall(target, x_meas, plan.qa_goal, lo, hi, True, x_bar)
    assert r.stalled is not None and r.end is End.STALLED and r.ended.startswith("stalled")
    assert np.allclose(r.stalled, x_bar - x_meas)


def plan_target_for(model):
    from poise.motion.planner import plan_target

    return plan_target(model, np.array([0.25, -0.85]), [np.zeros(model.n)], 2e-3,
                       period=1 / 250)


def test_the_real_time_parent_takes_the_spring_scale_from_its_child_s_event():
    """The child's ``spring_scale`` event (``info``) reaches the parent's mirror, whose
    plans (``poise.controller.realtime.planning``) are aimed with it."""
    from poise.api.bus import Event
    from poise.controller.realtime.messages import EventBatch
    from poise.controller.realtime.mirror import ChildMirror

    mirror = ChildMirror()
    assert mirror.spring_scale == 0.0
    mirror._on_events(EventBatch([Event(1.0, "info", {"code": "static_correction"}),
                                  Event(2.0, "info", {"code": "spring_scale",
                                                      "spring_scale": 0.1, "samples": 2,
                                                      "explained": 1.0})]))
    assert mirror.spring_scale == 0.1


def test_a_target_planned_for_the_measured_springs_needs_no_correction(tmp_path):
    """The dancer on ``stiff10`` with its spring scale measured (0.1, as target 0's windows
    leave it): target 1 is planned for it, the move lands the centre of mass within the band
    and it stays there, with no correction, within three periods of the slowest mode after
    the move (the bench's goal); planned on the model alone, the same move left it 11 cm
    off. Feedback aims at the live target after the move, not at the model's transient to
    the aim."""
    from poise.benchmarks.control import GOAL_PERIODS
    from poise.motion.springs import SpringScale

    plant = write_named("dancer", "stiff10", tmp_path)
    loop = SimulatedLoop(config_for("dancer", "fb", "alg1", plant), seed=SEED)
    target = reachable_targets(loop.plant.physical, loop.limits.qa_min, loop.limits.qa_max,
                               2, SEED)[1]
    r = loop.step.retarget
    r.springs = SpringScale.fixed(loop.model, 0.1)
    loop.start()
    loop.set_target(target)
    plan = loop.step.plan
    assert np.array_equal(plan.serves, target) and np.array_equal(loop.params.target, target)
    assert plan.reference is not None and len(plan.reference) == 1
    eps = band(loop.plant.physical)
    goal = GOAL_PERIODS * plan.loop.slowest_mode().period
    while loop.step.goal is not None:  # the move
        loop.cycle()
    moved, inside = loop.time, None
    while loop.time < moved + goal + 2.0:
        loop.cycle()
        err = float(np.linalg.norm(target - loop.plant.physical.fk(loop.plant.q)))
        inside = (inside or loop.time) if err < eps else None
    assert inside is not None and inside - moved <= goal, (inside, moved, goal)
    assert not r.corrections and not loop.replans


def test_the_background_step_of_an_aimed_plan_keeps_only_the_models_held_value(monkeypatch):
    """``MotionPlanner.refine`` of a quick plan aimed for the measured springs gives it the
    one reference row its feedback uses, the model's held value at its goal, without
    simulating the model (the model's transient to the aim is not the plant's); a plan not
    aimed still gets the model's predicted response to its move."""
    from dataclasses import replace

    from poise.motion import reference

    loop = SimulatedLoop(config_for("dancer", "fb", "alg1"), seed=SEED)
    loop.start()
    loop.cycle()
    target = reachable_targets(loop.model, loop.limits.qa_min, loop.limits.qa_max, 1, SEED)[0]
    q_bar = loop.step.stepper.q_bar
    state = replace(loop.step.motion_state(loop.params, loop.measured()), move_from=q_bar)
    predictions = []
    predict = reference.predicted_response
    monkeypatch.setattr(reference, "predicted_response",
                        lambda *a, **k: predictions.append(k) or predict(*a, **k))
    aimed = loop.planner.quick_plan(target, replace(state, spring_scale=0.1))
    assert aimed is not None and np.array_equal(aimed.serves, target)
    move = loop.planner.refine(aimed, state)
    assert predictions == [] and move.plan.reference.shape == (1, loop.model.task_dim)
    assert np.array_equal(move.plan.reference[0], aimed.target)
    plain = loop.planner.quick_plan(target, state)
    assert plain is not None and plain.serves is None
    move = loop.planner.refine(plain, state)
    assert len(predictions) == 1 and len(move.plan.reference) > 1


def test_an_aimed_plan_is_shaped_on_the_modes_of_the_plant_where_it_will_rest(tmp_path):
    """A plan aimed for the measured springs (``ŝ = 0.1``, the dancer's pointe 10 % stiffer)
    ends where the plant rests at its actuators, not where the model does: its structural
    modes are the plant's there (computed on the plant itself, to 1e-9) and its move's end
    shaper is made for them. At ``poise bench control``'s target 3 the model's slowest mode
    at its own goal is 0.82 rad/s and the plant's 1.16 rad/s (29 % slower), beyond what even
    the robust ZVDD shaper (±25 %) allows. Both aims lie more than AIM_NEAR tolerances from
    their targets. A plan not aimed keeps the model's modes."""
    from poise.motion.planner import plan_target
    from poise.motion.shaping import shaper_for
    from poise.motion.stability import structural_modes

    model = load_model("dancer")
    plant = plant_model("dancer", [1.1], tmp_path)
    lo, hi = np.asarray(model.qa_min, float), np.asarray(model.qa_max, float)
    targets = reachable_targets(plant, lo, hi, 4, SEED)
    apart = {}
    for index in (0, 3):
        aimed = plan_target(model, np.asarray(targets[index], float), [np.zeros(model.n)],
                            1e-3, spring_scale=0.1, period=0.004)
        assert aimed.serves is not None
        rests = resting(plant, aimed.qa_goal, split(plant, aimed.q_goal)[1])
        assert np.allclose(aimed.plant_rest, rests, atol=1e-9)
        own = structural_modes(plant, rests)
        got = aimed.structural_modes()
        assert len(got) == len(own) > 0
        for a, b in zip(got, own, strict=True):
            assert a.omega == pytest.approx(b.omega, rel=1e-9)
            assert a.zeta == pytest.approx(b.zeta, rel=1e-9)
        assert aimed.slowest_mode() == got[0]
        expected = shaper_for(own, "auto")
        assert np.allclose(aimed.shaper.times, expected.times, rtol=1e-9)
        assert np.allclose(aimed.shaper.amplitudes, expected.amplitudes, rtol=1e-9)
        apart[index] = abs(aimed.loop.slowest_mode().omega / own[0].omega - 1.0)
    assert apart[0] < 0.02 and apart[3] > 0.25
    plain = plan_target(model, np.asarray(targets[3], float), [np.zeros(model.n)], 1e-3,
                        period=0.004)
    assert plain.plant_modes is None
    assert plain.structural_modes() == plain.loop.structural_modes()


def test_an_aim_near_its_target_keeps_the_models_modes_and_move():
    """The soft arm with its springs 10 % stiffer: the aim lies millimetres from the target
    (within AIM_NEAR tolerances), the model's path to it is the plant's to the target, and
    the plan keeps the model's modes (and, in MotionPlanner.move, the move chosen on the
    model); the dancer's aims lie 4–25 cm off (the test above)."""
    from poise.motion.planner import AIM_NEAR, plan_target

    model = load_model("soft_arm_stiff")
    tol = 2e-3
    lo, hi = np.asarray(model.qa_min, float), np.asarray(model.qa_max, float)
    aimed = [plan_target(model, np.asarray(x, float), [np.zeros(model.n)], tol,
                         spring_scale=0.1, period=0.004)
             for x in reachable_targets(model, lo, hi, 3, SEED)]
    aimed = [a for a in aimed if a.serves is not None]
    assert aimed
    for plan in aimed:
        assert 0.0 < float(np.linalg.norm(plan.serves - plan.target)) <= AIM_NEAR * tol
        assert plan.plant_rest is None and plan.plant_modes is None
        assert plan.structural_modes() == plan.loop.structural_modes()


def test_an_aimed_move_shaped_for_the_plant_settles_sooner(tmp_path, monkeypatch):
    """The dancer on ``stiff10`` with its spring scale known (0.1), from rest to ``poise
    bench control``'s target 4 (where the model's slowest mode at its own goal is 31 %
    slower than the plant's where it rests): the move shaped on the plant's modes settles
    at least 2 s sooner than the same move shaped on the model's, with no correction; the
    move of such a plan is chosen by simulating the plant the scale describes (the model
    with every spring 10 % stiffer, :func:`~poise.motion.springs.scaled_plant`), not the
    model (whose transient to the aim is not the plant's)."""
    from dataclasses import replace

    from poise.motion import motion_planner, planner
    from poise.motion.springs import SpringScale

    plant = write_named("dancer", "stiff10", tmp_path)

    def settle(index: int) -> float | None:
        loop = SimulatedLoop(config_for("dancer", "fb", "alg1", plant), seed=SEED)
        target = reachable_targets(loop.plant.physical, loop.limits.qa_min,
                                   loop.limits.qa_max, index + 1, SEED)[index]
        loop.step.retarget.springs = SpringScale.fixed(loop.model, 0.1)
        loop.start()
        loop.set_target(target)
        assert np.array_equal(loop.step.plan.serves, target)
        eps = band(loop.plant.physical)
        inside = None
        while loop.time < 30.0:
            loop.cycle()
            err = float(np.linalg.norm(target - loop.plant.physical.fk(loop.plant.q)))
            inside = (inside or loop.time) if err < eps else None
        assert not loop.step.retarget.corrections
        return inside

    chosen = []
    choose = motion_planner.choose_move
    monkeypatch.setattr(motion_planner, "choose_move",
                        lambda *a, **k: chosen.append(k.get("plant")) or choose(*a, **k))
    for_plant = settle(4)
    model = load_model("dancer")
    # the rest pose's plan at the start on the model; the target's on the scaled plant
    assert len(chosen) == 2 and chosen[0] is None
    simulated = chosen[1]
    assert simulated is not None and simulated is not model
    assert np.allclose(simulated.stiffness, 1.1 * np.asarray(model.stiffness), rtol=1e-12)
    assert np.allclose(simulated.masses, model.masses, rtol=0.0)
    linearised = planner._linearised
    monkeypatch.setattr(planner, "_linearised", lambda model, plan, *a, **k: linearised(
        model, replace(plan, plant_rest=None), *a, **k))
    for_model = settle(4)
    assert for_plant is not None and for_model is not None
    assert for_plant <= for_model - 2.0, (for_plant, for_model)


def test_the_scaled_plant_is_the_model_with_its_springs_scaled(tmp_path):
    """:func:`~poise.motion.springs.scaled_plant`: the dancer with ``ŝ = 0.1`` is the named
    plant ``stiff10`` (every spring +10 %, written from the model file's text): the same
    springs, masses, passive forces and mass matrix at random configurations; None for a
    scale of 0 and for a model that cannot be rebuilt with other springs (the soft arm)."""
    from poise.motion.springs import scaled_plant

    model = load_model("dancer")
    scaled = scaled_plant(model, 0.1)
    named = load_model(write_named("dancer", "stiff10", tmp_path))
    assert scaled is not None
    assert np.allclose(scaled.stiffness, named.stiffness, rtol=1e-12)
    assert np.allclose(scaled.masses, named.masses, rtol=1e-12)
    rng = np.random.default_rng(3)
    for _ in range(5):
        q = rng.uniform(-1.0, 1.0, model.n)
        assert np.allclose(scaled.G(q), named.G(q), rtol=1e-10, atol=1e-9)
        assert np.allclose(scaled.mass_matrix(q), named.mass_matrix(q), rtol=1e-10, atol=1e-12)
        assert not np.allclose(scaled.G(q), model.G(q))
    assert scaled_plant(model, 0.0) is None
    assert scaled_plant(load_model("soft_arm_stiff"), 0.1) is None
