"""Streamed references (issue 33, part 2): the samples, the filter within the actuator
limits, the lead point of the closed-loop IK, and a moving target tracked in simulated time
and through the service."""

from __future__ import annotations

import math

import numpy as np
import pytest

from conftest import PATIENT_SETTINGS
from poise.api.bus import Command
from poise.api.rules import RuleError, check_reference
from poise.controller.config import load_config
from poise.controller.dispatch import _replaces
from poise.controller.simulate import SimulatedLoop
from poise.examples import EXAMPLES_DIR
from poise.motion.streaming import (
    EXTRAPOLATE_S,
    Following,
    ReferenceFilter,
    StreamedReference,
    bandwidth,
)
from poise.telemetry.commands import parse

# ------------------------------------------------------------------ the samples


def test_samples_are_interpolated_extrapolated_for_a_while_then_held():
    ref = StreamedReference(np.array([0.0, 0.0]), t0=0.0)
    assert ref.push(1.0, [1.0, 2.0])
    assert ref.push(2.0, [3.0, 2.0])
    x, v = ref.at(0.5)
    assert np.allclose(x, [0.5, 1.0]) and np.allclose(v, [1.0, 2.0])
    x, v = ref.at(1.5)
    assert np.allclose(x, [2.0, 2.0]) and np.allclose(v, [2.0, 0.0])
    # past the newest: along its slope for EXTRAPOLATE_S, then held
    x, v = ref.at(2.0 + EXTRAPOLATE_S / 2)
    assert np.allclose(x, [3.0 + EXTRAPOLATE_S, 2.0]) and np.allclose(v, [2.0, 0.0])
    x, v = ref.at(5.0)
    assert np.allclose(x, [3.0 + 2.0 * EXTRAPOLATE_S, 2.0]) and np.allclose(v, 0.0)
    # before the start: the start, at rest
    x, v = ref.at(-1.0)
    assert np.allclose(x, 0.0) and np.allclose(v, 0.0)


def test_an_older_sample_is_dropped_and_one_at_the_same_instant_replaces_the_newest():
    ref = StreamedReference(np.zeros(1))
    assert ref.push(1.0, [1.0])
    assert not ref.push(0.5, [9.0])
    assert ref.out_of_order == 1
    assert ref.push(1.0, [2.0])
    assert ref.newest[0] == 1.0 and np.allclose(ref.newest[1], [2.0])
    with pytest.raises(ValueError, match="finite"):
        ref.push(2.0, [math.nan])
    with pytest.raises(ValueError, match="1 finite numbers"):
        ref.push(2.0, [1.0, 2.0])


def test_samples_stamped_on_arrival_in_bursts_are_extrapolated_at_the_senders_speed():
    # a ramp at 1 m/s sent every 20 ms that arrives in pairs (38 ms, then 2 ms apart: a
    # network that holds one packet back): the last two are 2 ms and 20 mm apart
    sent = np.arange(1, 13) * 0.02
    arrived = sent + np.where(np.arange(12) % 2 == 0, 0.018, 0.0)
    for on_arrival, speed in ((True, 1.0), (False, 10.0)):
        ref = StreamedReference(np.zeros(1), t0=0.0)
        for t, x in zip(arrived, sent, strict=True):
            assert ref.push(float(t), [float(x)], on_arrival=on_arrival)
        x, v = ref.at(arrived[-1] + 0.02)
        # on arrival: the slope over SLOPE_SPAN_S (>= 2 intervals), the sender's speed;
        # sender-stamped: the last two samples' own slope, as the sender's times say
        assert v[0] == pytest.approx(speed, rel=0.2)
        assert x[0] == pytest.approx(sent[-1] + speed * 0.02, rel=0.05)
    # sent evenly and stamped on arrival evenly: the same slope as before (a ramp's)
    ref = StreamedReference(np.zeros(1), t0=0.0)
    for t in sent:
        ref.push(float(t), [2.0 * float(t)], on_arrival=True)
    assert ref.at(sent[-1] + 0.01)[1][0] == pytest.approx(2.0)


def test_samples_with_velocities_are_joined_by_hermite_cubics_whose_slope_is_the_velocity():
    ref = StreamedReference(np.zeros(1))
    ts = np.linspace(0.1, 2.0, 12)
    for t in ts:
        ref.push(t, [math.sin(3 * t)], [3 * math.cos(3 * t)])
    grid = np.linspace(0.2, 1.9, 50)
    x = np.array([ref.at(t)[0][0] for t in grid])
    v = np.array([ref.at(t)[1][0] for t in grid])
    assert np.max(np.abs(x - np.sin(3 * grid))) < 2e-3  # a cubic through exact samples
    h = 1e-6  # the velocity it reports is its own derivative
    fd = np.array([(ref.at(t + h)[0][0] - ref.at(t - h)[0][0]) / (2 * h) for t in grid])
    assert np.max(np.abs(fd - v)) < 1e-5


# ------------------------------------------------------------------ the filter


def _run_filter(filt: ReferenceFilter, ref, dt: float, seconds: float):
    xs, vs = [], []
    for k in range(round(seconds / dt)):
        x_d, v_d = ref(k * dt)
        x, v = filt.step(np.asarray(x_d, float), np.asarray(v_d, float), dt)
        xs.append(x.copy())
        vs.append(v.copy())
    return np.array(xs), np.array(vs)


def test_the_filter_keeps_every_actuator_within_its_rate_and_acceleration_limits():
    """A 0.5 m step of the reference: through J⁺ the actuators' speed and acceleration stay
    within the limits (×0.95), and the filter still arrives."""
    dt = 1e-3
    rate, accel = np.array([0.05, 0.2]), np.array([0.5, 1.0])
    jmap = np.array([[0.8, -0.3], [0.2, 1.5]])  # J⁺: actuator units per task unit
    filt = ReferenceFilter(np.zeros(2), omega=30.0, rate=rate, accel=accel)
    filt.set_actuator_map(jmap)
    goal = np.array([0.5, -0.2])
    xs, vs = _run_filter(filt, lambda t: (goal, np.zeros(2)), dt, 30.0)
    qa_speed = np.abs(vs @ jmap.T)
    qa_accel = np.abs(np.diff(vs, axis=0) @ jmap.T) / dt
    assert np.all(qa_speed <= 0.95 * rate + 1e-12)
    assert np.all(qa_accel <= 0.95 * accel + 1e-9)
    assert filt.limited > 0  # the limits did act
    assert np.linalg.norm(xs[-1] - goal) < 1e-4


def test_without_limits_a_ramp_is_followed_without_lag_and_a_sine_within_its_curvature():
    """Velocity fed forward: a ramp leaves no steady lag; a sine of amplitude A at ω lags
    by about A ω² / ω_f² (the unfed acceleration), not by its velocity over ω_f."""
    dt, wf = 1e-3, 20.0
    filt = ReferenceFilter(np.zeros(1), omega=wf, rate=np.full(1, np.inf),
                           accel=np.full(1, np.inf))
    xs, _ = _run_filter(filt, lambda t: ([0.3 * t], [0.3]), dt, 3.0)
    assert abs(xs[-1, 0] - 0.3 * 3.0) < 1e-6  # x after the step from t = 2.999 s: at 3 s
    a, w = 0.1, 2 * math.pi * 0.25
    filt.reset(np.zeros(1))
    xs, _ = _run_filter(filt, lambda t: ([a * math.sin(w * t)], [a * w * math.cos(w * t)]),
                        dt, 8.0)
    t = np.arange(xs.shape[0]) * dt + dt
    err = np.abs(xs[4000:, 0] - a * np.sin(w * t[4000:]))
    assert err.max() < 1.5 * a * w * w / wf**2
    assert err.max() > 0.5 * a * w * w / wf**2  # the physics, not a zero filter


def test_the_bandwidth_follows_the_slowest_mode_within_its_bounds():
    assert bandwidth(None) == pytest.approx(2 * math.pi * 5)
    assert bandwidth(7.77) == pytest.approx(2 * 7.77)
    assert bandwidth(0.1) == pytest.approx(2 * math.pi * 0.5)


def test_the_lead_point_is_the_reference_plus_its_velocity_over_the_gain():
    ref = StreamedReference(np.zeros(1), t0=-0.01)
    ref.push(0.0, [0.0])
    ref.push(1.0, [0.5])
    f = Following(ref, "stream", 0.01)
    out = np.zeros(1)
    f.aim(11, 2.0, out)  # cycle 11 of a following begun at cycle 0: t = 0.1 s
    assert f.x_d[0] == pytest.approx(0.05) and out[0] == pytest.approx(0.05 + 0.5 / 2.0)
    f.aim(11, 4.0, out)  # the same cycle again: the same reference
    assert out[0] == pytest.approx(0.05 + 0.5 / 4.0)




class _Clock:
    """A wall clock the test moves by hand [s]."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_on_a_wall_clock_a_loop_slower_than_nominal_reads_the_stream_on_time():
    """A device that delivers every other sample (the loop at half its rate): on the wall
    clock, the reference is read at the time the cycle runs, not at cycles × Δt, so a stream
    stamped on arrival is neither lagged nor drifting; the filter is advanced by the time
    that passed (in sub-steps of one period), landing where one stepped every period does."""
    period = 0.01
    clock = _Clock(100.0)
    ref = StreamedReference(np.zeros(1), t0=0.0)
    for k in range(1, 401):  # a ramp of 0.1 /s, stamped every 10 ms for 4 s
        ref.push(k * period, [0.1 * k * period])
    wall = Following(ref, "stream", period)
    wall.begin(0, clock)
    cycles = Following(ref, "stream", period)
    cycles.begin(0)
    out = np.zeros(1)
    for cycle in range(1, 101):  # 100 cycles, 20 ms of wall time apart
        clock.now = 100.0 + cycle * 2 * period
        wall.aim(cycle, 1.0, out)
        cycles.aim(cycle, 1.0, out)
    assert wall.time(100) == pytest.approx(199 * period)
    assert wall.x_d[0] == pytest.approx(0.1 * 199 * period)
    assert cycles.x_d[0] == pytest.approx(0.1 * 99 * period)  # simulated time: cycles × Δt
    # the filter, read every other period on the clock, equals one stepped every period
    filt = ReferenceFilter(np.zeros(1), omega=10.0, rate=np.full(1, np.inf),
                           accel=np.full(1, np.inf))
    each = ReferenceFilter(np.zeros(1), omega=10.0, rate=np.full(1, np.inf),
                           accel=np.full(1, np.inf))
    clock.now = 0.0
    f = Following(ref, "stream", period, filter=filt)
    f.begin(0, clock)
    for cycle in range(1, 151):
        clock.now = period + (cycle - 1) * 2 * period
        f.aim(cycle, 1.0, out)
    for k in range(299):  # t = 0 … 2.98 s, each step towards the ramp at its end
        each.step(ref.at(k * period)[0], ref.at(k * period)[1], period)
    assert f.time(150) == pytest.approx(298 * period)
    assert abs(filt.x[0] - each.x[0]) < 1e-12
    assert abs(filt.x[0] - 0.1 * 298 * period) < 1e-3  # a ramp followed without lag
# ------------------------------------------------------------------ commands


def test_reference_samples_are_checked_at_the_edge_with_where_and_what():
    got = check_reference({"samples": [{"t": 0, "x": [0.1, 0.2]}, [0.5, 0.2, 0.3]]}, 2, 1.0)
    assert got == [(0.0, [0.1, 0.2], None), (0.5, [0.2, 0.3], None)]
    with pytest.raises(RuleError, match=r"reference\[1\]\.t.*later"):
        check_reference([[1.0, 0.1], [0.5, 0.2]], 1)
    with pytest.raises(RuleError, match=r"reference\[0\]\.x"):
        check_reference([{"t": 0, "x": [0.1, 0.2, 0.3]}], 2)
    with pytest.raises(RuleError, match=r"reference\[0\]\.v"):
        check_reference([{"t": 0, "x": [0.1], "v": [1, 2]}], 1)
    refused = parse("reference", b'{"id": "r", "value": [[0, "a"]]}')
    assert not refused.accepted and refused.id == "r" and "reference[0]" in refused.reason
    cmd = parse("target", b'{"id": "s", "value": [0.4], "stream": true, "t": 3.5}')
    assert cmd.stream is True and cmd.t == 3.5
    bad = parse("target", b'{"id": "s", "value": [0.4], "stream": "yes"}')
    assert not bad.accepted and "stream" in bad.reason


def test_streamed_targets_are_never_superseded_in_the_queue():
    a, b = Command("target", [0.1], stream=True), Command("target", [0.2], stream=True)
    assert not _replaces(b, a)
    assert _replaces(Command("target", [0.2]), Command("target", [0.1]))
    assert not _replaces(Command("target", [0.2]), Command("target", [0.1]),
                         stream_targets=True)


# ------------------------------------------------------------------ tracking, simulated time


def _track(model: str, mode: str, amplitude: float, freq: float, *, rate_hz: float = 50.0,
           center_offset: float = 0.0):
    """Stream a sine (1-D task) or a circle (2-D) of ``amplitude`` at ``freq`` [Hz] to the
    simulated loop at ``rate_hz`` samples per second, from where the arm settled; the measured
    task error against the reference over the second of two periods."""
    cfg = load_config(EXAMPLES_DIR / f"{model}.toml", {"loop.mode": (mode, "test")})
    loop = SimulatedLoop(cfg, noise=False)
    loop.start()
    loop.run(6.0)
    x0 = np.asarray(loop.model.fk(loop.measured()), dtype=float)
    w = 2 * math.pi * freq

    def ref(t: float) -> np.ndarray:
        if x0.size == 1:
            return x0 + amplitude * np.array([math.sin(w * t)])
        return x0 + amplitude * np.array([math.cos(w * t) - 1.0, math.sin(w * t)])

    period, t0, due, errors = 1.0 / freq, loop.time, loop.time, []
    while loop.time < t0 + 2 * period:
        if loop.time >= due - 1e-9:
            loop.stream(ref(loop.time - t0), t=loop.time)
            due += 1.0 / rate_hz
        out = loop.cycle()
        if loop.time - t0 > period:
            errors.append(float(np.linalg.norm(np.asarray(out.x_meas) - ref(loop.time - t0))))
    return np.array(errors), loop


@pytest.mark.parametrize("model, amplitude", [("double_pendulum", 0.1),
                                              ("soft_arm_stiff", 0.03)])
def test_a_streamed_reference_is_tracked_in_feedback_within_the_goal(model, amplitude):
    """Issue 33's goal: RMS ≤ 10 % of the amplitude at 0.1 Hz in fb, one robot per family
    (planar_tree, planar_pcc), streamed at 50 Hz; and not standing still (which would give
    ~71 % of the amplitude)."""
    errors, loop = _track(model, "fb", amplitude, 0.1)
    rms = math.sqrt(float(np.mean(errors**2)))
    assert rms <= 0.10 * amplitude, (model, rms)
    following = loop.step.following
    assert following is not None and following.kind == "stream"
    assert following.source.received > 0 and following.source.out_of_order == 0


def test_a_streamed_reference_leaves_the_plan_and_a_target_ends_the_stream():
    errors, loop = _track("double_pendulum", "ff", 0.05, 0.25)
    assert math.sqrt(float(np.mean(errors**2))) <= 0.15 * 0.05
    assert loop.step.goal is None  # no move to a planned goal while streaming
    target = np.asarray(loop.model.fk(loop.measured()), dtype=float)
    loop.set_target(target)
    assert loop.step.following is None


# ------------------------------------------------------------------ through the service


def _service(dev_path: str, **keys):
    from poise.controller.service import Controller

    over = {"device.port": (dev_path, "test"), "mqtt.enabled": (False, "test"),
            "device.watchdog_ms": (400, "test"), "limits.sensor_hold": (0.1, "test"),
            "limits.sensor_fault": (1.0, "test"), "loop.mode": ("fb", "test")}
    over.update({k.replace("__", "."): (v, "test") for k, v in keys.items()})
    return Controller(load_config(EXAMPLES_DIR / "double_pendulum.toml", over))


def _wait(predicate, timeout: float = 60.0, what: str = "") -> None:
    import time

    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_the_service_follows_a_reference_of_time_stamped_samples(sim_device):
    """A ``reference`` command of samples ahead of time (the sender's clock), through the
    virtual device on a pty: every cycle record's ``target`` is the reference, the arm
    follows it in fb, each sample is answered at once and nothing is superseded."""
    from poise.api.state import State

    dev = sim_device("double_pendulum", rate=500)
    with _service(dev.path, algorithm__target=[0.5]) as ctl:
        assert ctl.start().accepted
        _wait(lambda: ctl.state == State.RUNNING and ctl.step.goal is None, what="arrival")
        queue = ctl.subscribe()
        amplitude, w, t_sender = 0.05, 2 * math.pi * 0.25, 1000.0
        samples = [[t_sender + k * 0.02, 0.5 + amplitude * math.sin(w * k * 0.02)]
                   for k in range(300)]  # 6 s, 50 per second
        for chunk in range(0, 300, 50):
            resp = ctl.submit(Command("reference", samples[chunk:chunk + 50], id=f"c{chunk}"))
            assert resp.accepted, resp
        assert ctl.target_status == "stream"
        # the stream's time runs with the loop's cycles: wait for 6 s of them
        _wait(lambda: (ctl.step.source_time or 0) > 6.2, timeout=120, what="the stream")
        records = [s for s in queue.drain() if s.state == "running"]
        ctl.unsubscribe(queue)
        assert ctl.commands.clamp_note == ""
    targets = np.array([r.target[0] for r in records])
    tips = np.array([ctl.model.fk(np.asarray(r.q))[0] for r in records])
    moving = np.abs(targets - 0.5) > 1e-4
    # the records carry the moving reference: nearly all of them (3,094 of 3,104 at 500 Hz
    # alone; a loop that misses cycles on a busy machine runs the stream's time with fewer,
    # 812 moving in one run beside two test suites on 2 cores)
    assert len(records) > 300 and moving.mean() > 0.9, (len(records), int(moving.sum()))
    assert targets.min() == pytest.approx(0.5 - amplitude, abs=2e-3)
    assert targets.max() == pytest.approx(0.5 + amplitude, abs=2e-3)
    late = np.arange(len(records)) > len(records) // 3
    rms = math.sqrt(float(np.mean((tips - targets)[late & moving] ** 2)))
    # the goal at 0.25 Hz in fb (issue 33): 15 % of A; in real time through a pty (12 % with
    # two test suites on the 2-core machine, 3.8 % in simulated time)
    assert rms < 0.15 * amplitude, rms
    events = [e for e in ctl.history() if e.kind == "command" and e.data["name"] == "reference"]
    assert len(events) == 1  # the first sample's, not one per sample


def test_a_reference_beyond_reach_is_clamped_and_the_state_says_so_and_estop_ends_it(
        sim_device):
    from poise.api.state import State

    dev = sim_device("double_pendulum", rate=500)
    with _service(dev.path, algorithm__target=[0.5]) as ctl:
        assert ctl.start().accepted
        _wait(lambda: ctl.state == State.RUNNING and ctl.step.goal is None, what="arrival")

        def push_far() -> bool:
            resp = ctl.submit(Command("target", [1.9], stream=True))
            assert resp.accepted, resp
            return ctl.target_status == "clamped"

        _wait(push_far, timeout=120, what="clamped")
        assert "reference clamped" in ctl.target_note
        assert any(e.kind == "info" and e.data.get("code") == "reference_clamped"
                   for e in ctl.history())
        assert ctl.estop("test").accepted
        resp = ctl.submit(Command("target", [0.5], stream=True))
        assert not resp.accepted and "e-stop" in resp.reason


def test_the_loop_benchmark_measures_the_cycle_while_it_follows_a_stream():
    """``poise bench loop --follow none stream``: the same rate held and following a moving
    reference streamed as ``reference`` commands; the following run follows it (the state
    says stream, no command refused, the arm within the stream's radius of it)."""
    from poise.controller import benchmark

    result = benchmark.run(2.0, (200.0,), follows=("none", "stream"),
                           settings=PATIENT_SETTINGS)
    held, following = result["runs"]
    assert held["follow"] == "none" and held["stream"] is None
    assert held["target_status"] != "stream"
    stream = following["stream"]
    assert following["state"] == "running", (following["state"], following["reason"])
    assert following["target_status"] == "stream"
    assert stream["commands"] >= 4 and stream["refused"] == 0
    assert following["task_error"] < 0.5 * stream["radius"]
    assert following["cycles"] > 0 and following["compute_us"]["p50"] is not None
    assert "following a stream" in benchmark.table(result).splitlines()[3]
