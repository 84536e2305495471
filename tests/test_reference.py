"""Feedback that follows the model's predicted response after a move (poise.motion.reference).

Everything in simulated time against the in-process plant (:class:`SimulatedLoop`):
deterministic, no clock.
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from poise.benchmarks.control import _one_target, band, config_for, reachable_targets
from poise.benchmarks.control_protocol import SEED
from poise.controller.config import Config, load_config
from poise.controller.simulate import SimulatedLoop
from poise.examples import resolve_config
from poise.models import load_model
from poise.motion.params import with_plan
from poise.motion.reference import SETTLED_FRACTION, predicted_response, wants_reference

#: Targets where the arm sways after its move (the soft arm: issue 14's; the dancer: the
#: crossing that fb did not settle in time).
TARGETS = {"soft_arm_soft": (0.2, -0.95), "dancer": (0.816, 0.488)}


def example(name: str, mode: str, follow: bool = True, **over: object) -> Config:
    """The bundled example of ``name`` in ``mode`` at its sway target, automatic gains."""
    keys = {"loop.mode": (mode, "test"), "loop.follow_model": (follow, "test"),
            "algorithm.target": (list(TARGETS.get(name, (0.45,))), "test"),
            "algorithm.gamma": ("auto", "test"), "mqtt.enabled": (False, "test")}
    keys.update({k: (v, "test") for k, v in over.items()})
    return load_config(resolve_config(name), keys)


@pytest.mark.parametrize(("name", "sways"), [("soft_arm_soft", True), ("dancer", True),
                                            ("double_pendulum", False)])
def test_the_reference_is_the_models_own_response_cycle_by_cycle(name, sways):
    """Row i is h(q) of the model driven by the same control step in ff, at the sample of
    the move's cycle i: the ff loop against a noiseless plant of the controller's own
    model measures exactly these values. It starts where the arm is, ends at the target
    and carries the sway after the move (the plan's own shaped move: a chosen one may leave
    none, :mod:`poise.motion.dwell`)."""
    loop = SimulatedLoop(example(name, "ff", **{"loop.choose_move": False}), noise=False)
    loop.start()
    plan, cfg = loop.step.plan, loop.config
    assert wants_reference(loop.model, plan)
    x0 = loop.model.fk(loop.step.stepper.q_bar)
    rows = predicted_response(loop.model, plan, loop.step.stepper.q_bar,
                              replace(loop.params, mode="fb"),
                              tolerance=cfg.algorithm.tolerance, period=loop.period,
                              limits=loop.limits, effort_feedforward=cfg.loop.effort_feedforward,
                              shaper=cfg.loop.shaper, stepper_factory=loop.step.stepper_factory)
    assert rows is not None and rows.shape[1] == loop.model.task_dim
    measured = []
    for _ in range(rows.shape[0]):
        loop.cycle()
        measured.append(loop.model.fk(loop.plant.q))
    assert np.max(np.abs(np.array(measured) - rows)) < 1e-9
    assert np.linalg.norm(rows[0] - x0) < 0.01                               # from here
    assert np.linalg.norm(rows[-1] - plan.target) < cfg.algorithm.tolerance  # to there
    move = loop.step.move
    assert move is not None and rows.shape[0] * loop.period > move.duration
    after = rows[int(np.ceil(move.duration / loop.period)):]
    if sways:  # still swaying when the actuators arrive: what feedback must not integrate
        moving = np.max(np.linalg.norm(after - rows[-1], axis=1))
        assert moving > 10 * SETTLED_FRACTION * cfg.algorithm.tolerance  # 1 mm; ends < 0.1


def test_nothing_to_predict_for_a_fully_actuated_arm_or_without_a_move():
    loop = SimulatedLoop(example("planar_2link", "fb"))
    loop.start()
    assert loop.step.reference is None  # no passive coordinates: nothing sways
    soft = SimulatedLoop(example("soft_arm_soft", "fb", follow=False))
    soft.start()
    assert soft.step.reference is None  # loop.follow_model = false
    assert soft.step.reference_seconds is None
    ff = SimulatedLoop(example("soft_arm_soft", "ff"))
    ff.start()
    assert ff.step.reference is None  # ff: the IK never measures the arm


@pytest.mark.parametrize(("name", "before", "index", "fixed_misses"),
                         [("dancer", 13, 14, True), ("soft_arm_soft", 14, 15, False)])
def test_feedback_following_the_model_settles_when_feedforward_does(name, before, index,
                                                                     fixed_misses):
    """Targets of ``poise bench control`` (commanded in its order) where fb against the
    fixed target settled last: the dancer's crossing to target 14, which it did not settle
    within the time limit (the integrated sway), and soft_arm_soft's target 15 (5.07 s
    against ff's 4.45 s). With an exact model, following the model's predicted response
    leaves the integrator nothing to integrate: fb settles when ff does. (The configured
    moves, ``loop.choose_move = false``: the same moves in every run.)"""
    times = {}
    for mode, follow in (("ff", True), ("fb", True), ("fb", False)):
        cfg = config_for(name, mode, "alg1")
        loop = SimulatedLoop(replace(cfg, loop=replace(cfg.loop, follow_model=follow,
                                                       choose_move=False)), seed=SEED)
        targets = reachable_targets(loop.model, loop.limits.qa_min, loop.limits.qa_max)
        loop.start()
        eps = band(loop.model)
        first, second = (_one_target(loop, i, targets[i], eps) for i in (before, index))
        assert first.success
        times[(mode, follow)] = second.settle_s
    ff, fb, fixed = times[("ff", True)], times[("fb", True)], times[("fb", False)]
    assert ff is not None and fb is not None, times
    assert abs(fb - ff) < 0.1, times
    if fixed_misses:
        assert fixed is None, times
    else:
        assert fixed is not None and fixed > fb + 0.3, times


def test_feedback_still_removes_what_the_model_does_not_know(tmp_path):
    """The robot is 20 % less stiff than the controller's model: ff holds the wrong place
    (the model's equilibrium), fb following the model's response still ends on the target
    (the reference ends there, the integrator removes the rest)."""
    data = load_model("soft_arm_soft").describe()
    for segment in data["segments"]:
        segment["stiffness"] *= 0.8
    path = tmp_path / "softer.json"
    path.write_text(json.dumps(data))
    tol = 2e-3
    ends = {}
    for mode in ("ff", "fb"):
        loop = SimulatedLoop(example("soft_arm_soft", mode, **{"device.sim_params": str(path)}),
                             seed=4)
        loop.start()
        if mode == "fb":
            assert loop.step.reference is not None
        loop.run(25.0)
        ends[mode] = float(np.linalg.norm(loop.params.target - loop.model.fk(loop.plant.q)))
    assert ends["ff"] > 2 * tol, ends  # the model is wrong: ff alone misses
    assert ends["fb"] < tol, ends      # feedback corrects it


def test_the_step_follows_only_its_plans_reference_only_after_the_move_and_only_in_fb():
    loop = SimulatedLoop(example("soft_arm_soft", "fb"), seed=5)
    loop.start()
    step, plan = loop.step, loop.step.plan
    rows = step.reference
    assert rows is not None and step.reference_seconds == rows.shape[0] * loop.period
    with pytest.raises(ValueError, match="shape"):
        step.follow(plan, rows[:, :1])
    other = replace(plan)
    assert not step.follow(other, rows)  # not the current plan: ignored
    assert step.reference is rows
    p = loop.params
    loop.cycle()  # the move's first cycle: the move, not the reference
    assert step._aimed(p, True, True) is p
    moving_done = step._aimed(p, True, False)
    assert np.array_equal(moving_done.target, rows[step._move_cycle])  # after it: the row
    assert step._aimed(p, False, False) is p  # ff: the IK predicts, nothing to follow
    moved = replace(p, target=p.target + 0.01)  # a target the plan was not made for
    assert step._aimed(moved, True, False) is moved
    step._move_cycle = rows.shape[0]  # past its end: the target
    assert step._aimed(p, True, False) is p


@pytest.mark.parametrize("compiled", [True, False])
def test_the_wire_path_and_the_numpy_step_follow_the_reference_as_the_cycle_does(compiled):
    """The same plan and reference in two steps fed the same sensor frames: the wire path
    (the frame's bytes to the setpoint's in one compiled call) commits what the ordinary
    compiled cycle commits, cycle by cycle, through the move and while following; the numpy
    reference step (``loop.compiled = false``) commands the same to 1e-9."""
    from poise.firmware_bridge import messages as m
    from poise.motion.step import ControlStep, stepper_factory

    loop = SimulatedLoop(example("soft_arm_soft", "fb"), noise=False)
    loop.start()
    plan, model, p = loop.step.plan, loop.model, loop.params
    assert plan.reference is not None
    q0 = loop.measured()
    factory = stepper_factory(model, True)[0]
    other = factory if compiled else stepper_factory(model, False)[0]
    wired, ordinary = (ControlStep(model, loop.limits, loop.period, stepper_factory=f, delay=0)
                       for f in (factory, other))
    for step in (wired, ordinary):
        step.reset(q0, "alg1")
        step.adopt(plan)
    buffers = wired.stepper.wire_buffers(
        version=m.PROTOCOL_VERSION, sensors_type=m.MsgType.SENSORS,
        setpoint_type=m.MsgType.SETPOINT, feedforward=True, armed_bit=int(m.Status.ARMED),
        saturated_bit=int(m.Status.SATURATED))
    followed = 0
    for cycle in range(plan.reference.shape[0] + 50):
        q = np.asarray(loop.device.read().q, dtype=float)
        frame = m.encode(m.Sensors(int(m.Status.ARMED), 0, 0, tuple(q),
                                   tuple(model.C[:model.m] @ q), (0.0,) * model.m), cycle, 0)
        q32 = np.array(m.MessageDecoder().feed(frame)[0].message.q)
        assert wired.wire_cycle(p, buffers, frame) == wired.stepper.WIRE_OK
        out = ordinary.update(q32, p)
        followed += ordinary._aimed(p, True, ordinary.goal is not None) is not p
        if compiled:
            np.testing.assert_array_equal(wired.stepper.qa, out.qa, err_msg=f"cycle {cycle}")
        else:
            np.testing.assert_allclose(wired.stepper.qa, out.qa, rtol=0, atol=1e-9,
                                       err_msg=f"cycle {cycle}")
        loop.device.write(out.qa, out.tau)
        wired.look_ahead()
        ordinary.look_ahead()
    assert followed > 100  # the cycles after the move aimed at the reference


def test_the_move_chosen_on_the_model_settles_within_three_periods_where_the_shaper_did_not():
    """soft_arm_stiff's largest crossing in ``poise bench control`` (target 15 after 14):
    the configured ZVDD move at full speed leaves a sway that settles after 3 T; of the
    shapers and speeds tried on the model (``loop.choose_move``) one settles within 3 T,
    overshooting no more than 5 % of the move; the plant (the same model, with noisy
    sensors) does what the model predicted."""
    from poise.motion.reference import (
        OVERSHOOT,
        move_candidates,
        overshoot,
        settle_time,
    )

    result = {}
    for choose in (False, True):
        cfg = config_for("soft_arm_stiff", "ff", "alg1")
        loop = SimulatedLoop(replace(cfg, loop=replace(cfg.loop, choose_move=choose)),
                             seed=SEED)
        targets = reachable_targets(loop.model, loop.limits.qa_min, loop.limits.qa_max)
        loop.start()
        eps = band(loop.model)
        assert _one_target(loop, 14, targets[14], eps).success
        q_bar = loop.step.stepper.q_bar
        r = _one_target(loop, 15, targets[15], eps)
        plan = loop.step.plan
        result[choose] = (r.settle_s, r.goal_s, plan, q_bar)
    (off, goal, own, _), (on, _, chosen, q_bar) = result[False], result[True]
    assert off is not None and off > goal, result  # the configured move: later than 3 T
    assert on is not None and on <= goal, result   # the chosen one: within
    assert (chosen.speed, chosen.shaper) != (own.speed, own.shaper)
    tried = move_candidates(load_model("soft_arm_stiff"), own, q_bar)
    assert tried[0] is own and {c.speed for c in tried} == {1.0, 0.7, 0.5}
    # what the model predicted for the chosen move, and its overshoot
    loop = SimulatedLoop(config_for("soft_arm_stiff", "fb", "alg1"), seed=SEED)
    cfg = loop.config
    rows = predicted_response(loop.model, chosen, q_bar, with_plan(loop.params, chosen),
                              tolerance=cfg.algorithm.tolerance, period=loop.period,
                              limits=loop.limits, effort_feedforward=True, shaper="auto",
                              stepper_factory=loop.step.stepper_factory)
    assert overshoot(rows, chosen.target) <= OVERSHOOT
    assert abs(settle_time(rows, chosen.target, band(loop.model), loop.period) - on) < 0.3


def test_a_well_damped_move_whose_mode_changes_is_chosen_on_the_model():
    """The dancer from its rest pose to a leaning target: the ankle's mode is well damped at
    both ends (ζ ≥ 0.15) but 1.6 times faster at the goal than at the start, beyond the 25 %
    a ZVDD shaper tolerates, so the move is chosen on the model: the configured ZVDD move
    settles after 3 T on the model, the chosen one well within. A move whose mode changes
    less (the next target's) keeps its configured move, with no prediction made."""
    from poise.ik.statics import solve_statics
    from poise.models.actuation import split
    from poise.motion.reference import (
        MODE_CHANGE,
        Prediction,
        choose_move,
        settle_time,
        shapers_fall_short,
    )
    from poise.motion.shaping import ZETA_SHAPED
    from poise.motion.stability import structural_modes

    loop = SimulatedLoop(config_for("dancer", "ff", "alg1"), seed=SEED)
    model, tol = loop.model, loop.config.algorithm.tolerance
    rest = solve_statics(model, np.zeros(model.m), split(model, np.zeros(model.n))[1]).q
    targets = reachable_targets(model, model.qa_min, model.qa_max, 40, seed=7)

    def planned(q_bar, target):
        loop.step.reset(q_bar, loop.params.algorithm)
        plan = loop.step.make_plan(target, q_bar, tol, loop.params)
        start = structural_modes(model, q_bar, plan.loop.actuators)[0]
        return plan, with_plan(loop.params, plan), start, plan.loop.slowest_mode()

    plan, params, start, goal = planned(rest, targets[1])
    assert min(start.zeta, goal.zeta) >= ZETA_SHAPED  # not lightly damped: once not chosen
    assert goal.omega / start.omega > 1 + MODE_CHANGE
    assert shapers_fall_short(model, plan, rest)
    own = Prediction(model, plan, rest, params, period=loop.period, limits=loop.limits,
                     effort_feedforward=True, shaper=loop.config.loop.shaper,
                     stepper_factory=loop.step.stepper_factory)
    own.run(tol)
    three_periods = 3 * goal.period
    assert settle_time(own.rows, plan.target, tol, loop.period) > three_periods
    chosen = choose_move(plan, rest, params, loop.config, model, loop.limits,
                         loop.step.stepper_factory)
    assert chosen.settle_s is not None and chosen.settle_s < 0.5 * three_periods

    q_bar = plan.q_goal
    plan, params, start, goal = planned(q_bar, targets[4])
    assert min(start.zeta, goal.zeta) >= ZETA_SHAPED
    assert 1 / (1 + MODE_CHANGE) < goal.omega / start.omega < 1 + MODE_CHANGE
    assert not shapers_fall_short(model, plan, q_bar)
    kept = choose_move(plan, q_bar, params, loop.config, model, loop.limits,
                       loop.step.stepper_factory)
    assert kept == plan and kept.settle_s is None


def test_no_search_for_a_well_damped_robot_or_when_switched_off():
    """The double pendulum (slowest mode ζ 0.22, its frequency changing little along the
    move) keeps its configured move; so does the
    soft arm with ``loop.choose_move = false``; both still follow the model in fb."""
    for name, choose in (("double_pendulum", True), ("soft_arm_soft", False)):
        loop = SimulatedLoop(example(name, "fb", **{"loop.choose_move": choose}), seed=6)
        loop.start()
        plan = loop.step.plan
        assert plan.speed == 1.0
        assert plan.reference is not None
