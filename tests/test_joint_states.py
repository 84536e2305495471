"""One record per cycle for PlotJuggler and ROS 2 bridges: ``joint_states`` shaped like
``sensor_msgs/JointState`` and the ``task`` record, published by the MQTT bridge through a real
broker (Mosquitto on 127.0.0.1:1883 where it runs)."""

from __future__ import annotations

import itertools
import json
import math
import time
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import PATIENT_WATCHDOG
from poise.api.bus import CycleSample
from poise.api.topics import dumps
from poise.cli import main as cli_main
from poise.telemetry import records
from poise.telemetry.client import Recorder, forget
from poise.telemetry.mqtt import MqttBridge, MqttConfig
from poise.telemetry.synthetic import SyntheticLoop
from test_mqtt import broker_url  # noqa: F401 - the broker fixture

JOINT_STATE_KEYS = {"header", "name", "position", "velocity", "effort"}
TASK_KEYS = {"header", "timestamp", "seq", "t", "state", "target", "x", "error", "task_error",
             "statics_residual", "q_bar"}


def _wait_count(rec: Recorder, name: str, count: int, timeout: float) -> list:
    """The messages on ``name`` once there are ``count`` of them (or whatever came)."""
    deadline = time.monotonic() + timeout
    while len(rec.named(name)) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return rec.named(name)


def _stamp_ns(header: dict) -> int:
    return header["stamp"]["sec"] * 10**9 + header["stamp"]["nanosec"]


@pytest.fixture
def shared(broker_url):  # noqa: F811 - the imported fixture
    """A fresh robot id on the shared broker, forgotten afterwards."""
    cfg = MqttConfig.from_url(broker_url, robot_id="js-" + uuid.uuid4().hex[:10])
    yield cfg
    forget(cfg)


# -- the record shapes, without a broker ---------------------------------------------------------

values = st.floats(allow_nan=True, allow_infinity=True, width=32)


@given(st.integers(0, 2**62), st.lists(values, min_size=1, max_size=6), values, values)
@settings(max_examples=100, deadline=None)
def test_records_are_strict_json_of_the_documented_shape(stamp_ns, q, a, b):
    s = CycleSample(t=12.5, seq=7, state="running", q=tuple(q), q_bar=tuple(q), qa_ref=(),
                    tau_ff=(), target=(a, b), x=(b, a), task_error=abs(a), statics_residual=0.0,
                    period_us=1e3, lateness_us=0.0, compute_us=0.0, latency_us=0.0)
    names = records.joint_names(None, len(q))
    js = json.loads(dumps(records.joint_state(s, stamp_ns, names)))  # strict: NaN → null
    assert set(js) == JOINT_STATE_KEYS
    assert set(js["header"]) == {"stamp", "frame_id"} and _stamp_ns(js["header"]) == stamp_ns
    assert 0 <= js["header"]["stamp"]["nanosec"] < 10**9
    assert js["name"] == [f"q{i + 1}" for i in range(len(q))]
    assert len(js["position"]) == len(q) and js["velocity"] == [] and js["effort"] == []
    task = json.loads(dumps(records.task_record(s, stamp_ns)))
    assert set(task) == TASK_KEYS and task["header"] == js["header"]
    for e, x_target, x in zip(task["error"], (a, b), (b, a), strict=True):
        want = x_target - x
        assert e == (want if math.isfinite(want) else None)


def test_config_enables_the_records_from_the_mqtt_table_with_a_checked_rate():
    cfg = MqttConfig.from_settings({"url": "mqtt://h", "joint_states_hz": 20})
    assert cfg.joint_states_hz == 20 and MqttConfig().joint_states_hz == 0  # off by default
    with pytest.raises(ValueError, match="joint_states_hz"):
        MqttConfig(joint_states_hz=1000)


# -- through the broker ------------------------------------------------------------------------

def test_bridge_publishes_one_decimated_record_per_cycle_on_joint_states_and_task(shared):
    cfg = MqttConfig.from_url(shared.url, robot_id=shared.robot_id, joint_states_hz=50)
    with SyntheticLoop(1000) as loop, Recorder(cfg) as rec, \
            MqttBridge(loop, loop.subscribe(), loop.events(), cfg,
                       joint_names=["shoulder", "elbow", "wrist"]) as bridge:
        assert bridge.wait_connected(10)
        joint_states = _wait_count(rec, "joint_states", 25, 30)
        tasks = _wait_count(rec, "task", len(joint_states), 10)
        batches = rec.named("telemetry")
    assert len(joint_states) >= 25, f"only {len(joint_states)} joint_states messages"
    now = time.time_ns()
    for m in joint_states:
        js = m.json()
        assert set(js) == JOINT_STATE_KEYS  # nothing else: strict ROS bridges accept it
        assert js["name"] == ["shoulder", "elbow", "wrist"]
        assert len(js["position"]) == 3 and all(isinstance(v, float) for v in js["position"])
        assert js["velocity"] == [] and js["effort"] == []
        assert abs(_stamp_ns(js["header"]) - now) < 60 * 10**9
    task = [m.json() for m in tasks]
    assert all(set(r) == TASK_KEYS for r in task)
    # one task record per joint state, of the same cycle (same stamp)
    stamps = [_stamp_ns(m.json()["header"]) for m in joint_states]
    assert [_stamp_ns(r["header"]) for r in task[: len(stamps)]] == stamps
    # one cycle each, decimated by cycle time: ≥ 1/50 s apart, in order
    for a, b in itertools.pairwise(task):
        assert b["seq"] > a["seq"] and b["t"] - a["t"] >= 1 / 50 - 1e-9
    assert all(abs(r["timestamp"] - _stamp_ns(r["header"]) / 1e9) < 1e-6 for r in task)
    r = task[-1]
    assert r["error"] == pytest.approx([a - b for a, b in zip(r["target"], r["x"],
                                                              strict=True)])
    # the columnar batches go on as before, beside the records
    assert batches and all("seq0" in m.json() for m in batches)


def test_without_a_rate_no_records_are_published(shared):
    with SyntheticLoop(1000) as loop, Recorder(shared) as rec, \
            MqttBridge(loop, loop.subscribe(), loop.events(), shared) as bridge:
        assert bridge.wait_connected(10)
        assert len(_wait_count(rec, "telemetry", 10, 30)) >= 10
    assert rec.named("joint_states") == [] and rec.named("task") == []


def test_poise_run_joint_states_flag_publishes_the_models_joint_names(shared):
    with Recorder(shared) as rec:
        code = cli_main(["run", "--mqtt", shared.url, "--robot-id", shared.robot_id,
                         "--joint-states", "20", "--duration", "2", "--no-log", "--quiet",
                         "--json-summary", *PATIENT_WATCHDOG])
        assert code in (0, 1)
        joint_states = _wait_count(rec, "joint_states", 5, 10)
    assert len(joint_states) >= 5
    js = joint_states[-1].json()
    assert js["name"] == ["link1", "link2"] and len(js["position"]) == 2  # double pendulum
    task = [m.json() for m in rec.named("task")]
    assert all(b["t"] - a["t"] >= 1 / 20 - 1e-9 for a, b in itertools.pairwise(task))
    assert len(task[-1]["target"]) == 1  # tip_x
