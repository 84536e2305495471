"""Targets answered at once (``loop.live_targets``): the quick plan is adopted and answered
before its background part (the gains at the new target, the predicted response) is made.

The service runs for real (in this process on the simulated robot, or in its own process on
the virtual device); only the planner's background step is held back by the test, through a
planner whose :meth:`~poise.motion.motion_planner.MotionPlanner.refine` waits for a gate.
Every wait is for a state, never a fixed time; nothing asserts wall time.
"""

from __future__ import annotations

import threading
from dataclasses import replace

import numpy as np
import pytest

from conftest import wait_until
from poise.api.bus import Command
from poise.api.state import State
from poise.controller.config import load_config
from poise.controller.realtime import RealtimeController
from poise.controller.service import Controller
from poise.examples import EXAMPLES_DIR
from poise.motion.bounds import AUTO_MAX, DEFAULT_FRACTION, fastest_decay
from poise.motion.motion_planner import MotionPlanner, MotionState, Move
from poise.motion.planner import TargetPlan
from poise.motion.stability import IKGains, LoopLinearisation

#: How long the service may take to come up, plan and settle on a busy machine [s].
SLOW = 120.0


class GatedPlanner(MotionPlanner):
    """The service's own planner, whose background step for a target waits until the test
    opens that target's gate (:attr:`gates`, keyed by the target's tuple; no gate: at once).
    :attr:`entered` lists the targets whose background step began, :attr:`finished` those
    whose ended."""

    def __init__(self, base: MotionPlanner) -> None:
        super().__init__(base.model, base.limits, base.options, base.stepper_factory)
        self.gates: dict[tuple[float, ...], threading.Event] = {}
        self.entered: list[tuple[float, ...]] = []
        self.finished: list[tuple[float, ...]] = []

    def gate(self, target: list[float]) -> threading.Event:
        gate = self.gates[tuple(target)] = threading.Event()
        return gate

    def refine(self, plan: TargetPlan, state: MotionState) -> Move:
        key = tuple(float(x) for x in plan.target)
        self.entered.append(key)
        gate = self.gates.get(key)
        if gate is not None:
            assert gate.wait(SLOW), f"the test never opened the gate of {key}"
        move = super().refine(plan, state)
        self.finished.append(key)
        return move


def shared(model: str = "double_pendulum", **keys: object) -> Controller:
    """The service of the bundled example ``model`` in this process, on the simulated robot
    in real time (``device.port = "inprocess"``), without MQTT."""
    over = {"device.port": ("inprocess", "test"), "mqtt.enabled": (False, "test"),
            "loop.process": ("shared", "test"), "loop.rate": (200.0, "test")}
    for k, v in keys.items():
        over[k.replace("__", ".")] = (v, "test")
    return Controller(load_config(EXAMPLES_DIR / f"{model}.toml", over))


def gated(ctl: Controller) -> GatedPlanner:
    planner = GatedPlanner(ctl.commands.planner)
    ctl.commands.planner = planner
    return planner


def auto_gain(p, model=None) -> float:
    """Γ as ``"auto"`` sets it from the parameters' own stability report (its loop
    linearised again at the report's q with ``model`` when the report crossed a process
    boundary without it)."""
    report = p.stability
    loop = report.loop or LoopLinearisation(model, np.asarray(report.q), report.period,
                                            delay=report.delay)
    cap = min(DEFAULT_FRACTION * report.gain_max_fb["gamma"], AUTO_MAX, 1.0 / report.period)
    return fastest_decay(loop, replace(IKGains.of(p), mode="fb"), "gamma", cap)


def refined_events(events) -> list[dict]:
    return [e.data for e in events if e.kind == "info" and e.data.get("code") == "plan_refined"]


def drained_until_refined(events) -> list:
    """The events drained from ``events`` until a ``plan_refined`` one is among them. It is
    announced just after the plan stops being unrefined, outside the lock: wait for the
    event itself, not for that state (on a busy machine the drain came in between)."""
    seen: list = []
    assert wait_until(lambda: refined_events(seen.extend(events.drain()) or seen), SLOW)
    return seen


@pytest.fixture(scope="module")
def running():
    """The double pendulum in feedback, running, its first target planned (in full, at
    start) and reached."""
    ctl = shared(algorithm__target=[0.5], loop__mode="fb")
    assert ctl.start().accepted
    assert wait_until(lambda: ctl.summary()["reached"], SLOW, 0.1), ctl.summary()
    yield ctl
    ctl.close()


def test_a_target_is_adopted_and_answered_while_its_background_plan_is_still_blocked(
        running):
    ctl = running
    planner = gated(ctl)
    gate = planner.gate([0.45])
    events = ctl.events(history=False)
    before = ctl.params
    try:
        resp = ctl.submit(Command("target", [0.45], id="t"))
        assert resp.accepted and resp.reason == "", resp
        plan = ctl.step.plan
        # adopted: the step approaches the new goal, the parameters aim at the target ...
        assert plan is not None and plan.target.tolist() == [0.45] and plan.approach
        assert ctl.params.target.tolist() == [0.45]
        # ... its move made at the next cycle (the first setpoint towards it) ...
        assert wait_until(lambda: (ctl.step.move_summary or {}).get("duration_s"), SLOW)
        # ... while the background part has begun and is still blocked
        assert wait_until(lambda: planner.entered == [(0.45,)], SLOW)
        assert not gate.is_set() and planner.finished == []
        assert ctl.commands.unrefined is not None and ctl.commands.unrefined.plan is plan
        assert ctl.params.stability is before.stability  # the previous target's bound
        assert ctl.step.reference_seconds is None
    finally:
        gate.set()
    assert wait_until(lambda: ctl.commands.unrefined is None, SLOW)
    p = ctl.params
    # the bound is now the new target's, the automatic gain made from it
    np.testing.assert_allclose(p.stability.q, plan.q_goal, atol=1e-12)
    assert p.gamma == pytest.approx(auto_gain(p), rel=1e-9)
    assert ctl.step.plan is plan and ctl.step.reference_seconds  # fb: the reference attached
    got = refined_events(drained_until_refined(events))
    assert len(got) == 1 and got[0]["target"] == [0.45] and got[0]["reference"]
    assert not got[0]["late"] and got[0]["seconds"] > 0


def test_a_newer_target_replaces_an_older_one_whose_background_plan_is_blocked(running):
    ctl = running
    planner = gated(ctl)
    older = planner.gate([0.47])
    events = ctl.events(history=False)
    try:
        assert ctl.submit(Command("target", [0.47])).accepted
        assert wait_until(lambda: planner.entered == [(0.47,)], SLOW)
        first = ctl.step.plan
        resp = ctl.submit(Command("target", [0.5]))  # answered without waiting for 0.47's
        assert resp.accepted, resp
        newer = ctl.step.plan
        assert newer is not first and newer.target.tolist() == [0.5]
        assert ctl.commands.unrefined.plan is newer
        assert planner.finished == []  # 0.47's background part is still blocked
    finally:
        older.set()
    assert wait_until(lambda: ctl.commands.unrefined is None, SLOW)
    assert wait_until(lambda: planner.finished == [(0.47,), (0.5,)], SLOW)
    p = ctl.params
    np.testing.assert_allclose(p.stability.q, newer.q_goal, atol=1e-12)  # not 0.47's
    assert p.target.tolist() == [0.5] and ctl.step.plan is newer
    drained = drained_until_refined(events)
    assert [e["target"] for e in refined_events(drained)] == [[0.5]]
    refines = [e for e in drained if e.kind == "param" and e.data["name"] == "refine"]
    assert [e.data["params"]["target"] for e in refines] == [[0.5]]
    assert ctl.commands.refiner.dropped >= 1


def test_a_gain_sent_before_the_background_plan_is_checked_at_the_new_target(running):
    """Until the background part comes, the parameters keep the previous target's bound; a
    gains command meanwhile is checked against the new target's (computed then)."""
    ctl = running
    planner = gated(ctl)
    gate = planner.gate([0.46])
    try:
        assert ctl.submit(Command("target", [0.46])).accepted
        plan = ctl.step.plan
        assert wait_until(lambda: planner.entered == [(0.46,)], SLOW)
        assert ctl.submit(Command("gains", {"gamma": "auto"})).accepted
        np.testing.assert_allclose(ctl.params.stability.q, plan.q_goal, atol=1e-12)
    finally:
        gate.set()
    assert wait_until(lambda: ctl.commands.unrefined is None, SLOW)
    np.testing.assert_allclose(ctl.params.stability.q, plan.q_goal, atol=1e-12)


def test_a_background_plan_over_its_budget_brings_the_gains_but_not_the_reference():
    """``loop.plan_budget`` = 0.1 ms, less than any bound computation: the predicted response
    is dropped; the gains at the new target come all the same (past the move, the previous
    target's would act at the new one)."""
    with shared(algorithm__target=[0.5], loop__mode="fb", loop__plan_budget=1e-4) as ctl:
        assert ctl.start().accepted
        assert wait_until(lambda: ctl.summary()["reached"], SLOW, 0.1), ctl.summary()
        events = ctl.events(history=False)
        assert ctl.submit(Command("target", [0.45])).accepted
        plan = ctl.step.plan
        # answered at once, the background part came late
        (got,) = refined_events(drained_until_refined(events))
        assert got["late"] and not got["reference"] and "plan_budget" in got["text"]
        np.testing.assert_allclose(ctl.params.stability.q, plan.q_goal, atol=1e-12)
        assert ctl.step.plan is plan and ctl.step.reference_seconds is None


@pytest.mark.parametrize("why", ["explicit gain", "live_targets off"])
def test_targets_with_an_explicit_gain_or_without_live_targets_are_planned_before_the_answer(
        why):
    keys = {"loop__live_targets": False} if why == "live_targets off" else \
        {"algorithm__gamma": 2.0}
    with shared(algorithm__target=[0.5], loop__mode="fb", **keys) as ctl:
        assert ctl.start().accepted
        assert wait_until(lambda: ctl.summary()["reached"], SLOW, 0.1), ctl.summary()
        assert ctl.submit(Command("target", [0.45])).accepted
        # answered with the parameters at the new target: its bound, the reference
        plan = ctl.step.plan
        assert ctl.commands.unrefined is None
        np.testing.assert_allclose(ctl.params.stability.q, plan.q_goal, atol=1e-12)
        assert plan.reference is not None


def test_unreachable_targets_keep_their_answer(running):
    ctl = running
    events = ctl.events(history=False)
    resp = ctl.submit(Command("target", [2.5]))  # reach 2 m
    assert resp.accepted and resp.reason.startswith("unreachable"), resp
    assert "closest held configuration" in resp.reason
    assert ctl.target_status == "unreachable" and ctl.commands.unrefined is None
    np.testing.assert_allclose(ctl.params.stability.q, ctl.step.plan.q_goal, atol=1e-12)
    assert any(e.kind == "info" and e.data.get("code") == "target_unreachable"
               for e in events.drain())
    assert ctl.submit(Command("target", [0.5])).accepted  # back for the other tests
    assert wait_until(lambda: ctl.commands.unrefined is None, SLOW)


def test_an_unstable_target_is_still_refused_and_the_arm_keeps_its_target():
    with shared("dancer", algorithm__target=[0.1, 0.95]) as ctl:
        assert ctl.start().accepted
        assert wait_until(lambda: ctl.step.stepper is not None, SLOW)  # q̄ to plan from
        resp = ctl.submit(Command("target", [0.1, 1.05]))
        assert not resp.accepted and "unstable" in resp.reason, resp
        assert ctl.state == State.RUNNING
        assert ctl.params.target.tolist() == [0.1, 0.95]
        assert ctl.commands.unrefined is None


def rt_config(**keys: object):
    over = {"device.port": ("sim", "test"), "mqtt.enabled": (False, "test"),
            "loop.rate": (200.0, "test"), "algorithm.target": ([0.5], "test"),
            "device.watchdog_ms": (400, "test"), "limits.sensor_hold": (0.1, "test"),
            "limits.sensor_fault": (1.0, "test")}
    for k, v in keys.items():
        over[k.replace("__", ".")] = (v, "test")
    return load_config(EXAMPLES_DIR / "double_pendulum.toml", over)


def test_through_the_realtime_process_the_child_adopts_at_once_and_applies_the_refinement():
    with RealtimeController(rt_config()) as rt:
        assert rt.start().accepted
        assert wait_until(lambda: rt._last_sample is not None and rt.summary()["reached"],
                          SLOW, 0.1)
        parent = rt._planner
        planner = GatedPlanner(parent._motion())
        parent._planner = planner  # the parent's planner, its background step gated
        gate = planner.gate([0.45])
        events = rt.events(history=False)
        before = rt.params
        try:
            resp = rt.set_target([0.45])
            assert resp.accepted and resp.reason == "", resp
            assert rt.params.target.tolist() == [0.45]  # the child adopted it ...
            assert wait_until(lambda: planner.entered == [(0.45,)], SLOW)
            assert not gate.is_set()  # ... while its background part is blocked here
            assert rt.params.stability.q == before.stability.q
            assert wait_until(lambda: rt.summary()["move"]["duration_s"] is not None, SLOW)
            assert rt.summary().get("reference_s") is None
        finally:
            gate.set()
        # the refinement went to the child (PlanRefined) and was applied there
        got = refined_events(drained_until_refined(events))
        assert [e["target"] for e in got] == [[0.45]] and got[0]["reference"], got
        assert wait_until(lambda: rt.params.stability.q != before.stability.q, SLOW)
        q = np.asarray(rt.params.stability.q)
        assert abs(rt.model.fk(q)[0] - 0.45) <= rt.config.algorithm.tolerance
        assert rt.params.gamma == pytest.approx(auto_gain(rt.params, rt.model), rel=1e-6)
        assert wait_until(lambda: (rt.summary().get("reference_s") or 0) > 0, SLOW)
        assert parent.refiner.done == 1
