"""Controller pieces without a device: configuration, state machine, safety, timing, params."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from poise.api.state import State, StateMachine
from poise.controller.config import ConfigError, build_model, load_config
from poise.controller.timing import TimingStats
from poise.models import load_model
from poise.motion.params import LiveParams, ParamError, parse_target, with_gains
from poise.motion.safety import SafetyLimits, all_finite, limit_setpoint
from poise.motion.stepper import Alg1Stepper, Alg2Stepper


def test_config_error_names_file_key_value_and_rule(tmp_path):
    f = tmp_path / "run.toml"
    f.write_text("[loop]\nrate = 5000\n")
    with pytest.raises(ConfigError) as exc:
        load_config(f)
    msg = str(exc.value)
    assert "run.toml" in msg and "loop.rate" in msg and "5000" in msg and "1000" in msg


def test_config_unknown_key_and_table_are_refused(tmp_path):
    f = tmp_path / "run.toml"
    f.write_text("[algorithm]\ngama = 1.0\n")
    with pytest.raises(ConfigError, match=r"algorithm\.gama: unknown key"):
        load_config(f)
    f.write_text("[loops]\nrate = 1\n")
    with pytest.raises(ConfigError, match=r"\[loops\]: unknown table"):
        load_config(f)


def test_command_line_override_wins_and_is_named_in_errors(tmp_path):
    f = tmp_path / "run.toml"
    f.write_text('[loop]\nrate = 200\nmode = "ff"\n')
    cfg = load_config(f, {"loop.rate": (1000.0, "--rate")})
    assert cfg.loop.rate == 1000.0 and cfg.loop.mode == "ff"
    with pytest.raises(ConfigError, match=r"--mode \(loop.mode\) = 'xx'"):
        load_config(f, {"loop.mode": ("xx", "--mode")})


def test_every_example_config_loads():
    from poise.examples import EXAMPLES_DIR as root

    names = {p.stem for p in root.glob("*.toml")}
    assert {"double_pendulum", "tendon_3link", "soft_arm_stiff", "soft_arm_soft", "dancer",
            "planar_2link"} <= names
    for name in names:
        cfg = load_config(root / f"{name}.toml")
        assert len(cfg.algorithm.target) == build_model(cfg.model).model.task_dim


def test_calibration_file_overrides_the_statics_model(tmp_path):
    import json

    data = load_model("double_pendulum").describe()
    data["gravity"] = 0.0
    data["calibration"] = {"method": "test", "poses": 12}
    f = tmp_path / "calib.json"
    f.write_text(json.dumps(data))
    cm = build_model(load_config(None, {"model.calibration": (str(f), "--calibration")}).model)
    assert cm.model.gravity == 0.0 and cm.calibration["poses"] == 12
    partial = tmp_path / "partial.toml"
    partial.write_text("gravity = 5.0\n[calibration]\nmethod = 'lsq'\n")
    cm = build_model(load_config(None, {"model.calibration": (str(partial), "x")}).model)
    assert cm.model.gravity == 5.0


def test_state_machine_records_transitions_and_latches_reason():
    events = []
    sm = StateMachine(events.append)
    assert sm.to(State.CONNECTING, "connect") and sm.to(State.READY, "ok")
    assert not sm.to(State.STOPPING, "nonsense")  # not allowed from ready
    assert sm.to(State.FAULT, "sensor timeout") and sm.reason == "sensor timeout"
    assert not sm.to(State.RUNNING, "start")  # latched
    assert sm.to(State.READY, "clear") and sm.reason == ""
    assert [e.data["to"] for e in events] == ["connecting", "ready", "fault", "ready"]
    assert events[2].data == {"from": "ready", "to": "fault", "cause": "sensor timeout"}


@given(st.lists(st.floats(-1, 1), min_size=2, max_size=2),
       st.lists(st.floats(-1, 1), min_size=2, max_size=2))
def test_safety_limits_bound_position_and_rate(prev, new):
    lim = SafetyLimits.build(2, np.array([-0.5, -0.5]), np.array([0.5, 0.5]), None,
                             [0.4, 0.4], [1.0])
    prev_a = np.clip(np.asarray(prev), -0.5, 0.4)
    out, _, _ = limit_setpoint(lim, prev_a, np.asarray(new), dt=0.01)
    assert np.all(out >= -0.5) and np.all(out <= 0.4)
    assert np.all(np.abs(out - prev_a) <= 0.01 + 1e-12)


def test_nan_guard():
    assert all_finite([1.0, 2.0], None)
    assert not all_finite([1.0, math.nan]) and not all_finite(np.array([math.inf]))


def test_timing_percentiles_and_counters():
    t = TimingStats(size=100)
    for i in range(150):
        t.record(1000.0, float(i), 10.0, float(i), overrun=i >= 140)
    t.missed = 3
    s = t.summary()
    assert s["cycles"] == 150 and s["overruns"] == 10 and s["window"] == 100
    assert s["latency_us"]["max"] == 149.0 and s["latency_us"]["p50"] == pytest.approx(99.5)
    assert s["missed_pct"] == pytest.approx(100 * 3 / 153, abs=1e-3)


def test_a_cycle_more_than_two_periods_after_the_last_is_a_sensor_gap():
    t = TimingStats(size=100, period_us=1000.0)
    for period in (1000.0, 1900.0, 2100.0, 1000.0, 250_000.0):
        t.record(period, 0.0, 10.0, 50.0, overrun=False)
    assert t.summary()["gaps"] == 2 and t.summary()["missed"] == 0
    t.reset()
    assert t.summary()["gaps"] == 0
    assert TimingStats(size=10).summary()["gaps"] == 0  # no nominal period: none counted


def test_gain_and_target_validation():
    p = LiveParams("alg1", "dls", 1.0, 1.0, 1.0, 0.01, np.zeros(1), "fb")
    assert with_gains(p, {"gamma": 3.0}, 0.002).gamma == 3.0
    for bad in ({"gamma": -1}, {"gamma": 1e6}, {"damping": math.nan}, {"nope": 1}, 5):
        with pytest.raises(ParamError):
            with_gains(p, bad, 0.002)
    assert parse_target(0.4, 1).tolist() == [0.4]
    with pytest.raises(ParamError, match=r"target\[1\] = inf: must be a finite number"):
        parse_target([0.1, math.inf], 2)
    with pytest.raises(ParamError, match="must have 2 components"):
        parse_target([0.1], 2)
    with pytest.raises(ParamError, match="must be a non-empty list"):
        parse_target({"x": [1.0]}, 1)  # an object is not a target, on every entry point
    with pytest.raises(ParamError, match=r"farther than 4 from the base .* reach of 2"):
        parse_target([1e300], 1, reach=2.0)
    assert parse_target([2.5], 1, reach=2.0).tolist() == [2.5]  # just out of reach: accepted


@pytest.mark.parametrize("stepper_cls", [Alg1Stepper, Alg2Stepper])
def test_steppers_reach_target_on_the_held_set_in_feedforward(stepper_cls):
    model = load_model("double_pendulum")
    lim = SafetyLimits.build(1, model.qa_min, model.qa_max, None, None, None)
    s = stepper_cls(model)
    s.reset(np.zeros(2), lim.qa_min, lim.qa_max)
    p = LiveParams(s.name, "dls", 20.0, 20.0, 50.0, 0.01, np.array([0.5]), "ff")
    for _ in range(600):
        qa, _, _ = limit_setpoint(lim, s.qa, s.propose(p, None, 0.01), 0.01)
        s.commit(qa)
    assert abs(s.x_bar[0] - 0.5) < 1e-6 and s.residual < 1e-6
