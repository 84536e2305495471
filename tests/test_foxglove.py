"""Foxglove-native logs and the live view: Unix message times, the arm drawn with Foxglove's
well-known schemas (checked against Foxglove's own JSON schemas and the model's kinematics), old
monotonic logs still readable, and the WebSocket server spoken to by a real client."""

from __future__ import annotations

import itertools
import json
import struct
import sys
import threading
import time

import jsonschema
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcap.reader import make_reader
from mcap.writer import Writer

from conftest import PATIENT_WATCHDOG
from poise.api.bus import CycleSample, Event, SampleQueue
from poise.api.extras import MissingExtra
from poise.cli import main as cli_main
from poise.models.registry import load_model
from poise.telemetry import scene as fox
from poise.telemetry.clock import ClockAnchor, split_ns
from poise.telemetry.foxglove_live import FoxgloveLive, parse_address
from poise.telemetry.log import SCHEMAS, LogWriter, encode_metadata, sample_messages
from poise.telemetry.reader import read_log, summary

MINUTE_NS = 60 * 10**9


def _sample(model, seq: int, t: float, rng: np.random.Generator, state: str = "running"
            ) -> CycleSample:
    """A cycle of ``model`` at a random finite configuration."""
    q = tuple(float(v) for v in rng.uniform(-0.8, 0.8, model.n))
    q_bar = tuple(v + 0.05 for v in q)
    x = tuple(float(v) for v in np.ravel(model.fk(np.array(q)))[: model.task_dim])
    target = tuple(v + 0.01 for v in x)
    return CycleSample(t=t, seq=seq, state=state, q=q, q_bar=q_bar, qa_ref=(0.1,), tau_ff=(),
                       target=target, x=x, task_error=0.01, statics_residual=1e-9,
                       period_us=1000.0, lateness_us=5.0, compute_us=40.0, latency_us=60.0)


def _validator(schema_name: str) -> jsonschema.Draft202012Validator:
    schema = fox.schema_for(schema_name)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _points(line: dict) -> np.ndarray:
    return np.array([[p["x"], p["y"], p["z"]] for p in line["points"]])


def _entity(scene: dict, entity_id: str) -> dict:
    return next(e for e in scene["entities"] if e["id"] == entity_id)


def _meta(entity: dict) -> dict[str, str]:
    return {kv["key"]: kv["value"] for kv in entity["metadata"]}


@pytest.fixture(scope="module")
def planar_log(tmp_path_factory):
    """One second of a 1 kHz run of planar_2link, logged with its drawing."""
    model = load_model("planar_2link")
    path = tmp_path_factory.mktemp("fox") / "run.mcap"
    rng = np.random.default_rng(7)
    samples: SampleQueue[CycleSample] = SampleQueue(5000)
    events: SampleQueue[Event] = SampleQueue()
    t0 = time.monotonic()
    with LogWriter(path, samples, events, model=model, params={"gamma": 0.5}) as writer:
        events.put(Event(t0, "state", {"from": "ready", "to": "running", "cause": "start"}))
        for seq in range(1000):
            samples.put(_sample(model, seq, t0 + seq * 1e-3, rng))
    return model, path, writer


def test_log_message_times_are_unix_ns_near_now_and_payloads_keep_monotonic_t(planar_log):
    _, path, writer = planar_log
    now = time.time_ns()
    last: dict[str, int] = {}
    with open(path, "rb") as f:
        reader = make_reader(f)
        names = {s.name for s in reader.get_summary().schemas.values()}
        assert {fox.SCENE_SCHEMA, fox.TF_SCHEMA} <= names
        for schema, channel, message in reader.iter_messages(log_time_order=False):
            assert abs(message.log_time - now) < MINUTE_NS, channel.topic
            assert message.publish_time == message.log_time
            assert message.log_time >= last.get(channel.topic, 0), "times go backwards"
            last[channel.topic] = message.log_time
            if channel.topic == "/sensors":  # the anchor maps the payload's monotonic t
                t = json.loads(message.data)["t"]
                assert message.log_time == writer.anchor.unix_ns(t)
            if channel.topic in (fox.SCENE_TOPIC, fox.TF_TOPIC):
                assert schema.encoding == "jsonschema" and channel.message_encoding == "json"
                assert json.loads(schema.data)["title"] == schema.name
    run = read_log(path)
    assert run.time_base == "unix" and run.metadata["clock"]["log_time"] == "unix_ns"
    assert abs(summary(run)["start_unix"] - now / 1e9) < 60


def test_logged_scene_validates_and_draws_the_model_at_the_logged_q(planar_log):
    model, path, _ = planar_log
    run = read_log(path)
    q_of = {m["seq"]: m["q"] for m in run.topic("/sensors")}
    q_bar_of = {m["seq"]: m["q_bar"] for m in run.topic("/ik")}
    scene_check = _validator(fox.SCENE_SCHEMA)
    scenes = run.topic(fox.SCENE_TOPIC)
    assert scenes
    for msg in scenes:
        doc = {k: v for k, v in msg.items() if not k.startswith("_")}
        scene_check.validate(doc)
        arm = _entity(doc, "arm")
        seq = int(_meta(arm)["seq"])
        for line, part in zip(arm["lines"], model.body_points(np.array(q_of[seq])),
                              strict=True):
            assert np.abs(_points(line)[:, :2] - part).max() < 1e-12
            assert np.all(_points(line)[:, 2] == 0.0)
        ghost = _entity(doc, "arm_predicted")["lines"]
        assert np.abs(_points(ghost[-1])[-1, :2] -
                      model.body_points(np.array(q_bar_of[seq]))[-1][-1]).max() < 1e-12
        assert arm["frame_id"] == fox.BASE_FRAME
    tf = run.topic(fox.TF_TOPIC)
    _validator(fox.TF_SCHEMA).validate({"transforms": tf[0]["transforms"]})
    # the planar base frame stands upright in the z-up world: base y → world z
    rot = tf[0]["transforms"][0]["rotation"]
    w, x = rot["w"], rot["x"]
    assert abs(w * w - x * x) < 1e-12 and abs(2 * w * x - 1.0) < 1e-12  # +90° about x


def test_scene_is_decimated_to_at_most_30_per_second_of_cycle_time(planar_log):
    run = read_log(planar_log[1])
    t = [float(_meta(_entity(m, "arm"))["t"]) for m in run.topic(fox.SCENE_TOPIC)]
    assert all(b - a >= 1 / 30 - 1e-9 for a, b in itertools.pairwise(t))
    assert 25 <= len(t) <= 31  # one second of 1 kHz cycles
    assert len(run.topic(fox.TF_TOPIC)) == 1  # once a second
    assert len(run.topic("/sensors")) == 1000  # every cycle stays on the numeric channels


@pytest.mark.parametrize("name", ["double_pendulum", "planar_2link", "soft_arm_stiff",
                                  "cc3d_3", "panda"])
def test_scene_of_every_model_family_validates_and_matches_its_kinematics(name):
    model = load_model(name)
    s = _sample(model, 12, 100.0, np.random.default_rng(3))
    drawing = fox.ArmScene(model)
    doc = json.loads(json.dumps(drawing.scene(s, time.time_ns())))
    _validator(fox.SCENE_SCHEMA).validate(doc)
    _validator(fox.TF_SCHEMA).validate(drawing.transforms(time.time_ns()))
    arm = _entity(doc, "arm")
    assert _meta(arm) == {"seq": "12", "t": "100.0", "state": "running"}
    q = np.array(s.q)
    tip = _points(arm["lines"][-1])[-1]
    if hasattr(model, "body_points"):  # planar: every body point, in the base x–y plane
        parts = model.body_points(q)
        assert len(arm["lines"]) == len(parts)
        for line, part in zip(arm["lines"], parts, strict=True):
            assert np.abs(_points(line)[:, :2] - part).max() < 1e-12
    else:  # 3-D: from the base to the tip the forward kinematics puts it
        assert np.abs(_points(arm["lines"][0])[0]).max() < 1e-12
        assert np.abs(tip - model.fk(q)).max() < 1e-9
    target = _entity(doc, "target")
    if model.task_dim == 1:  # tip_x: the vertical line x = x̄ through the drawing
        (line,) = target["lines"]
        assert np.all(_points(line)[:, 0] == s.target[0])
    else:
        (sphere,) = target["spheres"]
        centre = [sphere["pose"]["position"][k] for k in "xyz"]
        want = [*s.target[:2], 0.0] if hasattr(model, "body_points") else list(s.target[:3])
        assert np.abs(np.array(centre) - want).max() < 1e-12


def test_a_configuration_that_is_not_finite_is_left_out_not_sent_as_null():
    model = load_model("planar_2link")
    s = _sample(model, 1, 1.0, np.random.default_rng(1))
    bad = CycleSample(**{**s.as_dict(), "q": (float("nan"), 0.0), "target": (float("inf"),
                                                                               0.0)})
    doc = fox.ArmScene(model).scene(bad, time.time_ns())
    _validator(fox.SCENE_SCHEMA).validate(doc)
    assert _entity(doc, "arm")["lines"] == [] and _entity(doc, "target")["spheres"] == []
    assert _entity(doc, "arm_predicted")["lines"]


def _old_log(path, t0: float) -> None:
    """A log as written before Unix message times: monotonic ns, clock record without
    ``log_time``, no drawing channels."""
    mono, wall = time.monotonic_ns(), time.time_ns()
    with open(path, "wb") as f:
        w = Writer(f)
        w.start()
        ids = {}
        for topic, (name, schema) in SCHEMAS.items():
            sid = w.register_schema(name, "jsonschema", json.dumps(schema).encode())
            ids[topic] = w.register_channel(topic, "json", sid)
        w.add_metadata("clock", encode_metadata({"monotonic_ns": mono, "wall_ns": wall}))
        model = load_model("planar_2link")
        rng = np.random.default_rng(0)
        for seq in range(200):
            s = _sample(model, seq, t0 + seq * 1e-3, rng)
            ns = int(s.t * 1e9)
            for topic, data in zip(("/sensors", "/setpoints", "/ik", "/timing"),
                                   sample_messages(s), strict=True):
                w.add_message(ids[topic], log_time=ns, publish_time=ns, data=data, sequence=seq)
        w.finish()


def test_an_old_log_with_monotonic_times_still_reads_summarises_exports_and_converts(
        tmp_path, capsys, planar_log):
    path = tmp_path / "old.mcap"
    _old_log(path, time.monotonic())
    run = read_log(path)
    assert run.finished and run.time_base == "monotonic"
    first = run.topic("/sensors")[0]
    assert abs(run.unix_ns(first["_log_time"]) - time.time_ns()) < MINUTE_NS
    info = summary(run)
    assert info["cycles"] == 200 and abs(info["start_unix"] - time.time()) < 60
    assert cli_main(["log", "info", str(path)]) == 0
    assert "message times: host monotonic" in capsys.readouterr().out
    assert cli_main(["log", "export", str(path), "--out", str(tmp_path / "csv")]) == 0
    assert (tmp_path / "csv" / "old_sensors.csv").exists()
    # a new log: Unix times, and the drawing channels are not exported as tables
    new = read_log(planar_log[1])
    assert new.unix_ns(new.topic("/sensors")[0]["_log_time"]) == \
        new.topic("/sensors")[0]["_log_time"]
    assert cli_main(["log", "info", str(planar_log[1])]) == 0
    assert "message times: Unix" in capsys.readouterr().out
    out = tmp_path / "new"
    assert cli_main(["log", "export", str(planar_log[1]), "--out", str(out)]) == 0
    exported = sorted(p.name for p in out.iterdir())
    assert "run_sensors.csv" in exported and not any("scene" in n or "tf" in n
                                                    for n in exported)


def test_without_the_sdk_the_live_view_says_which_extra_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "foxglove", None)  # as if foxglove-sdk were missing
    with pytest.raises(MissingExtra, match=r"pip install 'poise\[foxglove\]'"):
        FoxgloveLive(SampleQueue(), SampleQueue()).start()


def test_foxglove_address_is_a_port_or_host_and_port():
    assert parse_address(None) == ("127.0.0.1", 8765)
    assert parse_address("9000") == ("127.0.0.1", 9000)
    assert parse_address("0.0.0.0:8766") == ("0.0.0.0", 8766)
    with pytest.raises(ValueError, match="PORT"):
        parse_address("here")


# -- the live server, spoken to by a real WebSocket client -----------------------------------

def _feed(model, samples: SampleQueue, stop: threading.Event) -> None:
    """A ~1 kHz producer of cycles stamped with the host monotonic clock."""
    rng = np.random.default_rng(11)
    seq = 0
    while not stop.is_set():
        samples.put(_sample(model, seq, time.monotonic(), rng))
        seq += 1
        time.sleep(0.001)


def test_live_view_serves_the_channels_to_a_foxglove_websocket_client():
    pytest.importorskip("foxglove")
    ws_client = pytest.importorskip("websockets.sync.client")
    model = load_model("planar_2link")
    samples: SampleQueue[CycleSample] = SampleQueue(10_000)
    events: SampleQueue[Event] = SampleQueue()
    stop = threading.Event()
    feeder = threading.Thread(target=_feed, args=(model, samples, stop), daemon=True)
    live = FoxgloveLive(samples, events, model=model, port=0,
                        params=lambda: {"gamma": 0.5}).start()
    feeder.start()
    try:
        # the SDK's server speaks foxglove.sdk.v1, the successor of foxglove.websocket.v1
        with ws_client.connect(live.url, subprotocols=["foxglove.sdk.v1",
                                                       "foxglove.websocket.v1"],
                               open_timeout=10) as ws:
            assert ws.subprotocol in ("foxglove.sdk.v1", "foxglove.websocket.v1")
            info = json.loads(ws.recv(timeout=10))
            assert info["op"] == "serverInfo" and info["name"] == "poise"
            channels: dict[str, dict] = {}
            deadline = time.monotonic() + 20
            while not {"/scene", "/sensors", "/state", "/tf"} <= set(channels):
                assert time.monotonic() < deadline, f"advertised only {sorted(channels)}"
                msg = ws.recv(timeout=20)
                if isinstance(msg, str) and json.loads(msg)["op"] == "advertise":
                    channels.update({c["topic"]: c for c in json.loads(msg)["channels"]})
            assert channels["/scene"]["schemaName"] == fox.SCENE_SCHEMA
            assert channels["/tf"]["schemaName"] == fox.TF_SCHEMA
            assert {c["encoding"] for c in channels.values()} == {"json"}
            assert all(c["schemaEncoding"] == "jsonschema" for c in channels.values())
            subs = {1: "/scene", 2: "/sensors", 3: "/state", 4: "/tf"}
            ws.send(json.dumps({"op": "subscribe", "subscriptions": [
                {"id": sid, "channelId": channels[topic]["id"]} for sid, topic in subs.items()]}))
            got: dict[str, list[tuple[int, dict]]] = {}
            deadline = time.monotonic() + 30
            while set(got) != set(subs.values()):
                assert time.monotonic() < deadline, f"received only {sorted(got)}"
                if "/state" not in got:  # an event for the /state subscription
                    events.put(Event(time.monotonic(), "state",
                                     {"from": "ready", "to": "running", "cause": "test"}))
                msg = ws.recv(timeout=30)
                if isinstance(msg, bytes):
                    op, sid, log_time = struct.unpack_from("<BIQ", msg)
                    assert op == 1  # message data
                    got.setdefault(subs[sid], []).append((log_time, json.loads(msg[13:])))
    finally:
        stop.set()
        feeder.join(5)
        live.stop()
    now = time.time_ns()
    for topic, received in got.items():
        for log_time, _ in received:
            assert abs(log_time - now) < MINUTE_NS, topic
    schema = json.loads(channels["/scene"]["schema"])  # the advertised schema is Foxglove's
    assert schema == fox.schema_for(fox.SCENE_SCHEMA)
    for _, doc in got["/scene"]:
        jsonschema.Draft202012Validator(schema).validate(doc)
        arm = _entity(doc, "arm")
        assert len(arm["lines"]) == model.n
    sensors = got["/sensors"][0][1]
    assert set(sensors) == {"seq", "t", "state", "q"} and len(sensors["q"]) == model.n
    assert got["/state"][0][1]["to"] == "running"
    assert got["/tf"][0][1]["transforms"][0]["child_frame_id"] == fox.BASE_FRAME


def test_poise_run_writes_a_log_foxglove_places_now_with_the_arm_drawn(tmp_path):
    path = tmp_path / "run.mcap"
    code = cli_main(["run", "--duration", "2", "--no-mqtt", "--log", str(path), "--quiet",
                     "--json-summary", *PATIENT_WATCHDOG])
    assert code in (0, 1)  # reached or not within 2 s: the log is what this test is about
    now = time.time_ns()
    with open(path, "rb") as f:
        reader = make_reader(f)
        topics = {c.topic: reader.get_summary().schemas[c.schema_id].name
                  for c in reader.get_summary().channels.values()}
        assert topics[fox.SCENE_TOPIC] == fox.SCENE_SCHEMA
        assert topics[fox.TF_TOPIC] == fox.TF_SCHEMA
        times = [m.log_time for _, _, m in reader.iter_messages()]
    assert times and all(abs(t - now) < MINUTE_NS for t in times)


def test_poise_run_foxglove_without_the_sdk_exits_2_naming_the_extra(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "foxglove", None)
    assert cli_main(["run", "--foxglove", "--no-mqtt", "--no-log", "--duration", "1",
                     "--quiet"]) == 2
    assert "pip install 'poise[foxglove]'" in capsys.readouterr().err


@given(st.integers(0, 10**15), st.integers(10**18, 2 * 10**18),
       st.floats(0, 1e6), st.floats(0, 1e6))
@settings(max_examples=200, deadline=None)
def test_clock_anchor_keeps_order_and_splits_into_sec_and_nsec(mono, wall, t1, t2):
    anchor = ClockAnchor(mono, wall)
    a, b = sorted((t1, t2))
    assert anchor.unix_ns(a) <= anchor.unix_ns(b)  # monotonic time order survives
    assert anchor.unix_ns(mono / 1e9) == wall  # the anchor instant maps onto itself
    sec, nsec = split_ns(anchor.unix_ns(b))
    assert 0 <= nsec < 10**9 and sec * 10**9 + nsec == anchor.unix_ns(b)
