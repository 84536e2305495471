"""End to end: the real controller driving the virtual device (``poise device sim`` in its own
process), operated over MQTT through a real broker, with the experiment log recording it."""

from __future__ import annotations

import io
import time
import uuid

from conftest import PATIENT_SETTINGS
from poise.controller.config import load_config
from poise.controller.service import Controller
from poise.telemetry.client import Recorder, forget
from poise.telemetry.log import controller_log
from poise.telemetry.mqtt import MqttBridge, MqttConfig
from poise.telemetry.reader import read_log
from poise.telemetry.service import attach
from test_mqtt import broker_url  # noqa: F401 - the broker fixture


def test_controller_runs_and_is_tuned_over_mqtt_and_the_log_records_it(
        broker_url, tmp_path, request):  # noqa: F811 - the imported fixture
    config = load_config(None, {
        "device.port": ("sim", "test"), "model.name": ("double_pendulum", "test"),
        "algorithm.target": ([0.5], "test"), "loop.rate": (500.0, "test"),
        "mqtt.enabled": (False, "test")})
    ctl = Controller(config)
    mc = MqttConfig.from_settings(config.mqtt, url=broker_url,
                                  robot_id="e2e-" + uuid.uuid4().hex[:8])
    request.addfinalizer(lambda: forget(mc))
    log = controller_log(ctl, tmp_path / "run.mcap")
    bridge = MqttBridge(ctl, ctl.subscribe(), ctl.events(), mc,
                        params=lambda: ctl.params.as_dict(), model=ctl.model.describe(),
                        device="sim:double_pendulum")
    try:
        with Recorder(mc) as rec:
            bridge.start()
            assert bridge.wait_connected(5)
            state = rec.wait_for(lambda m: m.name == "$state", 3).json()
            assert state["state"] == "idle" and state["device"] == "sim:double_pendulum"
            params = rec.wait_for(lambda m: m.name == "params", 3).json()
            assert (params["model"], params["n"], params["task_dim"]) == ("double_pendulum",
                                                                          2, 1)
            assert rec.wait_for(lambda m: m.name == "model", 3).json()["name"] == \
                "double_pendulum"

            rec.command("run", "start", id="s1")
            resp = rec.wait_for(lambda m: m.name == "response", 15)
            assert resp is not None and resp.json()["accepted"], resp and resp.json()
            assert rec.wait_for(lambda m: m.name == "$state" and
                                m.json()["state"] == "running", 5) is not None
            batch = rec.wait_for(lambda m: m.name == "telemetry" and
                                 m.json()["state"] == "running" and m.json()["qa_ref"][-1], 5)
            assert batch is not None
            batch = batch.json()
            assert len(batch["q"][-1]) == 2 and len(batch["qa_ref"][-1]) == 1

            n = len(rec.messages)
            rec.command("target", [0.45], id="t1")
            rec.command("gains", {"gamma": 1e5}, id="g1")  # passes the edge, not the loop
            t1 = rec.wait_for(lambda m: m.name == "response" and m.json()["id"] == "t1", 5,
                              start=n).json()
            g1 = rec.wait_for(lambda m: m.name == "response" and m.json()["id"] == "g1", 5,
                              start=n).json()
            assert t1["accepted"], t1
            assert not g1["accepted"] and "gains.gamma" in g1["reason"]
            assert rec.wait_for(lambda m: m.name == "params" and
                                m.json()["target"] == [0.45], 3, start=n) is not None
            deadline = time.monotonic() + 60  # enough running cycles, however slow the machine
            while ctl.timing()["cycles"] < 100 and time.monotonic() < deadline:
                time.sleep(0.05)
            rec.command("run", "stop", id="s2")
            assert rec.wait_for(lambda m: m.name == "response" and m.json()["id"] == "s2",
                                5).json()["accepted"]
    finally:
        ctl.close()
        bridge.stop()
        log.stop()
    run = read_log(tmp_path / "run.mcap")
    assert run.finished and run.gaps() == [] and log.samples.dropped == 0
    assert "running" in [m["to"] for m in run.topic("/state")]
    assert run.metadata["firmware"]["id"]  # the handshake, from the controller's info event
    assert run.metadata["config"]["loop"]["rate"] == 500.0
    assert run.metadata["model"]["name"] == "double_pendulum"
    changes = [m["data"] for m in run.topic("/params") if m["kind"] == "change"]
    assert any(c.get("name") == "target" and c.get("value") == [0.45] for c in changes)
    commands = [m["data"] for m in run.topic("/events") if m["kind"] == "command"]
    # g1 was refused at the edge (the gain rule knows the rate), before the controller
    assert {c["id"] for c in commands} >= {"s1", "t1", "s2"}
    assert len(run.topic("/sensors")) > 50  # the running cycles, all of them (no gaps above)


def test_without_a_configured_broker_an_embedded_one_serves_on_loopback(tmp_path):
    config = load_config(None, {"algorithm.target": ([0.5], "test"),
                                "mqtt.robot_id": ("embedded-" + uuid.uuid4().hex[:6], "test")})
    ctl = Controller(config)
    out = io.StringIO()
    telemetry = attach(ctl, log_path=str(tmp_path / "run.mcap"), out=out)
    try:
        assert telemetry.broker is not None and telemetry.bridge.wait_connected(10)
        url = telemetry.broker.url
        assert url.startswith("mqtt://127.0.0.1:") and f"embedded MQTT broker on {url}" in \
            out.getvalue()
        with Recorder(MqttConfig.from_url(url, robot_id=config.mqtt.robot_id)) as rec:
            state = rec.wait_for(lambda m: m.name == "$state", 5)
    finally:
        ctl.close()
        telemetry.stop()
    assert state is not None and state.retain and state.json()["state"] == "idle"
    assert read_log(tmp_path / "run.mcap").finished


def test_streamed_targets_over_mqtt_are_each_answered_and_followed_never_superseded(
        broker_url, request):  # noqa: F811 - the imported fixture
    """``set/target`` with ``"stream": true`` at 50 per second through a real broker and the
    bridge's dispatcher: every one accepted (none "superseded", none "busy"), and the
    controller follows them as one stream (the cycle records carry the moving reference)."""
    import json
    import math

    config = load_config(None, {
        "device.port": ("sim", "test"), "model.name": ("double_pendulum", "test"),
        "algorithm.target": ([0.5], "test"), "mqtt.enabled": (False, "test"),
        **{k: (v, "test") for k, v in PATIENT_SETTINGS.items()}})  # a busy host: no fault
    ctl = Controller(config)
    mc = MqttConfig.from_settings(config.mqtt, url=broker_url,
                                  robot_id="stream-" + uuid.uuid4().hex[:8])
    request.addfinalizer(lambda: forget(mc))
    bridge = MqttBridge(ctl, ctl.subscribe(), ctl.events(), mc,
                        params=lambda: ctl.params.as_dict(), model=ctl.model.describe())
    samples = ctl.subscribe()
    try:
        with Recorder(mc) as rec:
            bridge.start()
            assert bridge.wait_connected(5)
            rec.command("run", "start", id="s1")
            assert rec.wait_for(lambda m: m.name == "$state" and
                                m.json()["state"] == "running", 60) is not None
            deadline = time.monotonic() + 60
            while ctl.step.goal is not None and time.monotonic() < deadline:
                time.sleep(0.05)  # the start's move has arrived
            n = len(rec.messages)
            ids = [f"d{k}" for k in range(100)]
            for k, cid in enumerate(ids):
                x = 0.5 + 0.03 * math.sin(2 * math.pi * k / 100)
                rec.publish(rec.topics.set("target"),
                            json.dumps({"id": cid, "value": [x], "stream": True}))
                time.sleep(0.02)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                answers = {m.json()["id"]: m.json() for m in rec.named("response")[0:]
                           if m.json()["id"] in ids}
                if len(answers) == len(ids):
                    break
                time.sleep(0.05)
            assert len(answers) == len(ids), f"{len(answers)} of {len(ids)} answered"
            refused = [a for a in answers.values() if not a["accepted"]]
            assert refused == [], refused[:3]
            assert ctl.target_status == "stream"
            assert rec.wait_for(lambda m: m.name == "$state" and
                                m.json().get("target") == "stream", 60, start=n) is not None
    finally:
        ctl.close()
        bridge.stop()
    targets = [s.target[0] for s in samples.drain() if s.state == "running"]
    assert max(targets) > 0.5 + 0.02 and min(targets) < 0.5 - 0.02  # the reference moved
