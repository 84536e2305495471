"""MQTT bridge against a real broker: Mosquitto on 127.0.0.1:1883 where it runs, a private
``mosquitto`` started by the test where isolation is needed, and the embedded amqtt broker as the
fallback when neither exists (so the suite passes anywhere).

The producer is a real 1 kHz loop thread (:class:`SyntheticLoop`) with a real command handler;
nothing of MQTT is mocked.
"""

from __future__ import annotations

import getpass
import itertools
import json
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from poise.api.bus import Command, CommandResponse, CycleSample
from poise.api.topics import Topics, batch_dict, dumps, samples_from_batch
from poise.telemetry import commands
from poise.telemetry.broker import EmbeddedBroker, free_port, wait_listening
from poise.telemetry.client import Recorder, forget
from poise.telemetry.mqtt import URGENT_SWITCH_INTERVAL, MqttBridge, MqttConfig
from poise.telemetry.synthetic import SyntheticLoop

MOSQUITTO = shutil.which("mosquitto") or shutil.which("/usr/sbin/mosquitto")
MOSQUITTO_PASSWD = shutil.which("mosquitto_passwd")


class PrivateBroker:
    """A broker of our own on a free loopback port: ``mosquitto -c CONF`` when installed,
    else the embedded amqtt broker in a child process. ``kill()`` and ``start()`` again
    reuse the same port."""

    def __init__(self, tmp: pathlib.Path, extra_conf: str = "", force_embedded: bool = False):
        self.port = free_port()
        self.tmp = tmp
        self.kind = "mosquitto" if MOSQUITTO and not force_embedded else "amqtt"
        self.conf = tmp / f"mosquitto-{self.port}.conf"
        # as root, mosquitto would drop to user "mosquitto" and lose access to our files
        self.conf.write_text(f"user {getpass.getuser()}\nlistener {self.port} 127.0.0.1\n"
                             + (extra_conf or "allow_anonymous true\n"))
        self._proc: subprocess.Popen | None = None
        self._embedded: EmbeddedBroker | None = None

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"

    def start(self) -> PrivateBroker:
        if self.kind == "mosquitto":
            log = self.tmp / f"mosquitto-{self.port}.log"
            with log.open("ab") as out:
                self._proc = subprocess.Popen([MOSQUITTO, "-c", str(self.conf)],
                                              stdout=out, stderr=out)
            assert wait_listening("127.0.0.1", self.port, 10), log.read_text()
        else:
            self._embedded = EmbeddedBroker(self.port, mode="process").start()
        return self

    def kill(self) -> None:
        """SIGKILL: the broker vanishes without a goodbye."""
        if self._proc is not None:
            self._proc.send_signal(signal.SIGKILL)
            self._proc.wait(5)
            self._proc = None
        if self._embedded is not None:
            self._embedded.kill()
            self._embedded.stop()
            self._embedded = None

    stop = kill


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def broker_url(tmp_path_factory):
    """The machine's Mosquitto if it listens on 1883, else a private broker."""
    if _reachable("127.0.0.1", 1883):
        yield "mqtt://127.0.0.1:1883"
        return
    broker = PrivateBroker(tmp_path_factory.mktemp("broker")).start()
    yield broker.url
    broker.stop()


@pytest.fixture
def private_broker(tmp_path):
    brokers: list[PrivateBroker] = []

    def make(extra_conf: str = "", start: bool = True, embedded: bool = False) -> PrivateBroker:
        b = PrivateBroker(tmp_path, extra_conf, force_embedded=embedded)
        brokers.append(b)
        return b.start() if start else b

    yield make
    for b in brokers:
        b.stop()


def _robot_id() -> str:
    return "test-" + uuid.uuid4().hex[:10]


@pytest.fixture
def shared(broker_url):
    """A config for a fresh robot id on the shared broker; its retained topics are deleted
    afterwards so the machine's Mosquitto does not collect test robots."""
    cfg = MqttConfig.from_url(broker_url, robot_id=_robot_id())
    yield cfg
    forget(cfg)


def _batches(rec: Recorder) -> list[dict]:
    return [m.json() for m in rec.named("telemetry")]


# -- the contract, without a broker ---------------------------------------------------------

sample_values = st.floats(allow_nan=True, allow_infinity=True, width=32)


@given(st.lists(st.tuples(sample_values, sample_values), min_size=1, max_size=20),
       st.integers(0, 10**6), st.integers(0, 1000))
@settings(max_examples=50, deadline=None)
def test_telemetry_batch_round_trips_as_strict_json(values, seq0, dropped):
    samples = [CycleSample(t=0.001 * i, seq=seq0 + i, state="active", q=(a, b), q_bar=(b, a),
                           qa_ref=(a,), tau_ff=(), target=(0.1,), x=(a,), task_error=abs(b),
                           statics_residual=0.0, period_us=1000.0, lateness_us=a,
                           compute_us=1.0, latency_us=2.0) for i, (a, b) in enumerate(values)]
    doc = json.loads(dumps(batch_dict(samples, dropped)))  # strict JSON: NaN/inf became null
    assert doc["seq0"] == seq0 and doc["n"] == len(samples) and doc["dropped"] == dropped
    rows = list(samples_from_batch(doc))
    assert [r["seq"] for r in rows] == [s.seq for s in samples]
    for row, s in zip(rows, samples, strict=True):
        assert row["q"] == [v if v == v and abs(v) != float("inf") else None for v in s.q]


@given(st.binary(max_size=200), st.sampled_from(["target", "gains", "mode", "nope", "estop"]))
@settings(max_examples=200, deadline=None)
def test_command_parser_never_raises_on_arbitrary_bytes(payload, name):
    out = commands.parse(name, payload, commands.Limits(task_dim=2))
    assert isinstance(out, Command | CommandResponse)
    if isinstance(out, CommandResponse):
        assert not out.accepted and out.reason


_JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-10**30, 10**30),
                      st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12))
_JSON = st.recursive(_JSON_LEAF, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12)


@given(st.sampled_from(["target", "gains", "algorithm", "mode", "run", "estop", "clear", "nope"]),
       _JSON, st.booleans())
@settings(max_examples=300, deadline=None)
def test_command_parser_never_raises_on_well_formed_json_of_any_shape(name, value, envelope):
    """Arbitrary bytes rarely get past the JSON decoder; well-formed documents of any shape
    (NaN, infinities, huge integers, nested lists and objects, in or out of the envelope) reach
    every rule of the edge check: each is a command or a refusal with a reason."""
    doc = {"id": "f", "value": value} if envelope else value
    out = commands.parse(name, json.dumps(doc).encode(), commands.Limits(task_dim=2, rate=500.0,
                                                                        reach=2.0))
    assert isinstance(out, Command | CommandResponse)
    if isinstance(out, CommandResponse):
        assert not out.accepted and out.reason


@pytest.mark.parametrize(("name", "payload", "reason"), [
    ("target", b'{"id": "a", "value": [0.1, oops]}', "malformed JSON"),
    ("target", b'{"id": "a", "value": [0.1]}', "must have 2 components"),
    ("target", b'{"id": "a", "value": {"x": [0.1, 0.2]}}', "must be a non-empty list"),
    ("target", b'[0.1, NaN]', "finite"),
    ("target", b'[0.1, 5000]', "farther than 1000 from the base"),
    ("gains", b'{"gamma": -0.5}', "must be in (0, 1000] 1/s"),
    ("gains", b'{"gain": 1}', "unknown gain"),
    ("mode", b'"sideways"', "mode = 'sideways': must be one of ff, fb"),
    ("run", b'{"value": true}', "run = True: must be one of start, stop"),
    ("algorithm", b'"nope"', "algorithm = 'nope': must be one of alg1, alg2"),
    ("teleport", b'1', "unknown command"),
])
def test_edge_check_refuses_bad_commands_with_a_reason(name, payload, reason):
    limits = commands.Limits(task_dim=2, algorithms=("alg1", "alg2"))
    out = commands.parse(name, payload, limits)
    assert isinstance(out, CommandResponse) and not out.accepted
    assert reason in out.reason


def test_edge_check_accepts_envelope_and_bare_values():
    c = commands.parse("target", b'{"id": "x1", "value": [0.1, 0.2]}', commands.Limits(2))
    assert c == Command("target", [0.1, 0.2], "x1", "mqtt")
    assert commands.parse("gains", b'{"gamma": 0.2}') == Command("gains", {"gamma": 0.2}, "",
                                                                   "mqtt")
    assert commands.parse("estop", b"") == Command("estop", None, "", "mqtt")


@pytest.mark.parametrize("name", ["estop", "clear"])
def test_a_valueless_command_with_only_an_id_is_answered_with_that_id(name):
    """``{"id": "e1"}`` on ``set/estop`` was taken as a bare value with an empty id, so the
    sender could not match the answer to its e-stop."""
    assert commands.parse(name, b'{"id": "e1"}') == Command(name, None, "e1", "mqtt")


def test_an_id_without_a_value_is_refused_with_that_id():
    out = commands.parse("target", b'{"id": "t7"}', commands.Limits(2))
    assert isinstance(out, CommandResponse) and not out.accepted
    assert out.id == "t7" and 'missing "value"' in out.reason
    out = commands.parse("gains", b'{"id": "g1", "gamma": 0.2}')
    assert isinstance(out, CommandResponse) and out.id == "g1" and 'missing "value"' in out.reason


def test_config_parses_urls_and_the_controller_table():
    cfg = MqttConfig.from_url("mqtts://ann:s%40cret@broker.lab:8884", robot_id="arm1")
    assert (cfg.host, cfg.port, cfg.tls, cfg.username, cfg.password) == (
        "broker.lab", 8884, True, "ann", "s@cret")
    assert "s@cret" not in repr(cfg)
    cfg = MqttConfig.from_settings({"url": "mqtt://h", "robot_id": "r", "rate_hz": 20},
                                   robot_id="cli")
    assert (cfg.port, cfg.robot_id, cfg.rate_hz) == (1883, "cli", 20)
    with pytest.raises(ValueError, match="unknown key"):
        MqttConfig.from_settings({"urll": "x"})
    with pytest.raises(ValueError, match="robot id"):
        MqttConfig(robot_id="a/b")
    with pytest.raises(ValueError, match="rate_hz"):
        MqttConfig(rate_hz=500)


# -- against the broker ---------------------------------------------------------------------

def test_subscriber_sees_state_decimated_telemetry_and_command_responses(shared):
    cfg = shared
    with SyntheticLoop(1000) as loop, \
            MqttBridge(loop, loop.subscribe(), loop.events(), cfg,
                       model={"name": "synthetic", "n": 3}, device="sim:synthetic") as bridge:
        assert bridge.wait_connected(5)
        with Recorder(cfg) as rec:
            state = rec.wait_for(lambda m: m.name == "$state", 3)
            assert state is not None and state.retain
            assert state.json()["state"] == "inactive"
            assert state.json()["device"] == "sim:synthetic"
            assert rec.wait_for(lambda m: m.name == "model" and m.retain, 3).json()["n"] == 3
            params = rec.wait_for(lambda m: m.name == "params", 3).json()
            assert params["task_dim"] == 2

            rec.command("run", "start", id="c1")
            resp = rec.wait_for(lambda m: m.name == "response", 3)
            assert resp.json() == {"id": "c1", "command": "run", "accepted": True, "reason": ""}
            assert rec.wait_for(lambda m: m.name == "$state" and
                                m.json()["state"] == "active", 3) is not None
            ev = rec.wait_for(lambda m: m.name == "events" and m.json()["kind"] == "state", 3)
            assert ev.json()["data"] == {"from": "inactive", "to": "active", "cause": "run start"}

            rec.command("target", [0.1, 0.2], id="c2")
            assert rec.wait_for(lambda m: m.name == "response" and m.json()["id"] == "c2",
                                3).json()["accepted"]
            assert rec.wait_for(lambda m: m.name == "params" and
                                m.json()["target"] == [0.1, 0.2], 3) is not None

            first = len(rec.named("telemetry"))
            time.sleep(1.0)
            batches = _batches(rec)[first:]
    # ≤ 100 messages/s, each carrying every sample since the previous one
    assert 10 <= len(batches) <= 100, len(batches)
    for a, b in itertools.pairwise(batches):
        assert b["seq0"] == a["seq0"] + a["n"], "samples missing between two batches"
    assert sum(b["n"] for b in batches) > 10 * len(batches)  # batched, not one per message
    assert all(len(b["q"]) == b["n"] and len(b["q"][0]) == 3 for b in batches)
    assert batches[-1]["state"] == "active"


def test_an_answer_goes_out_at_once_after_the_state_it_brought_not_at_the_next_tick(shared):
    # telemetry every 20 s: an answer that waited for the pump's next tick would come after
    # a second batch; it goes out as soon as it is owed, right after the $state it caused
    from dataclasses import replace

    cfg = replace(shared, rate_hz=0.05)
    with SyntheticLoop(200) as loop, \
            MqttBridge(loop, loop.subscribe(), loop.events(), cfg) as bridge:
        thread = bridge._thread
        assert bridge.wait_connected(10)
        with Recorder(cfg) as rec:
            assert rec.wait_for(lambda m: m.name == "$state", 10) is not None
            batches = bridge.stats.batches
            rec.command("run", "start", id="c1")
            resp = rec.wait_for(lambda m: m.name == "response" and m.json()["id"] == "c1", 15)
            assert resp is not None and resp.json()["accepted"]
            assert bridge.stats.batches == batches  # no tick in between
            names = [(m.name, m.json().get("state")) for m in rec.messages]
            assert names.index(("$state", "active")) < names.index(("response", None))
    assert thread is not None and not thread.is_alive()  # a stop does not wait for a tick


def test_malformed_and_out_of_range_commands_are_refused_and_the_loop_keeps_running(shared):
    cfg = shared
    topics = Topics(cfg.robot_id)
    with Recorder(cfg) as rec, SyntheticLoop(1000) as loop:
        # a stale retained command waiting on the broker must not move the arm at connect
        rec.publish(topics.set("run"), json.dumps({"id": "m5", "value": "start"}), retain=True)
        bridge = MqttBridge(loop, loop.subscribe(), loop.events(), cfg).start()
        assert bridge.wait_connected(5)
        retained = rec.wait_for(lambda m: m.name == "response" and "retained" in
                                m.json()["reason"], 10)
        rec.publish(topics.set("run"), b"", retain=True)  # clear the retained command
        assert loop.state == "inactive"
        rec.publish(topics.set("target"), b'{"id": "m1", "value": [0.1, ')
        rec.publish(topics.set("gains"), json.dumps({"id": "m2", "value": {"gamma": -3}}))
        rec.publish(topics.set("target"), json.dumps({"id": "m3", "value": [1, 2, 3]}))
        rec.publish(topics.set("warp"), json.dumps({"id": "m4", "value": 9}))
        # the e-stop takes its own path (the urgent listener), the others one queue in order:
        # a run published right after it may be handled first, so the e-stop is answered first
        rec.command("estop", id="m6")
        estopped = rec.wait_for(lambda m: m.name == "response" and m.json()["id"] == "m6", 10)
        assert estopped is not None, "no response to m6"
        rec.command("run", "start", id="m7")  # refused by the handler: e-stop latched
        rec.command("clear", id="m8")
        rec.command("run", "start", id="m9")
        malformed = rec.wait_for(lambda m: m.name == "response" and
                                 m.json()["reason"].startswith("malformed JSON"), 10)
        got: dict[str, dict] = {"m1": malformed.json(), "m6": estopped.json()}  # m1's id
        for ident in ("m2", "m3", "m4", "m7", "m8", "m9"):  # was unreadable: answered as ""
            m = rec.wait_for(lambda m, i=ident: m.name == "response" and m.json()["id"] == i, 10)
            assert m is not None, f"no response to {ident}"
            got[ident] = m.json()
        cycles_before = loop.cycles
        time.sleep(0.2)
        cycles_after = loop.cycles
        bridge.stop()
    assert got["m1"]["command"] == "target" and got["m1"]["id"] == ""
    assert "must be in (0, " in got["m2"]["reason"]
    assert "must have 2 components" in got["m3"]["reason"]
    assert "unknown command" in got["m4"]["reason"] and got["m4"]["command"] == "warp"
    assert retained is not None and not retained.json()["accepted"]
    assert [got[i]["accepted"] for i in ("m6", "m7", "m8", "m9")] == [True, False, True, True]
    assert "clear first" in got["m7"]["reason"]
    assert loop.state == "active"
    assert cycles_after - cycles_before > 100  # the loop never noticed
    # refused: m1-m4, m5 (retained), m7, plus whatever the broker makes of the empty message
    # that cleared m5 (Mosquitto forwards it once; amqtt differs): never an acceptance
    assert bridge.stats.accepted == 3 and bridge.stats.refused >= 6, bridge.stats


@pytest.mark.parametrize("embedded", [False, True], ids=["mosquitto", "amqtt"])
def test_killing_and_restarting_the_broker_loses_no_control_cycles(private_broker, embedded):
    broker = private_broker(embedded=embedded)
    cfg = MqttConfig.from_url(broker.url, robot_id=_robot_id(), keepalive=2)
    gate = threading.Event()

    class SlowStart(SyntheticLoop):
        """Answers ``run`` only when the test opens the gate (the broker is down by then)."""

        def submit(self, command):
            if command.id == "during-outage":
                gate.wait(10)
            return super().submit(command)

    with SlowStart(1000) as loop:
        log_queue = loop.subscribe(maxlen=100_000)  # stands in for the experiment log
        with MqttBridge(loop, loop.subscribe(), loop.events(), cfg) as bridge, \
                Recorder(cfg) as rec:
            assert bridge.wait_connected(5)
            assert rec.wait_for(lambda m: m.name == "telemetry", 3) is not None
            rec.command("run", "start", id="during-outage")
            time.sleep(0.2)  # the bridge has it and is inside submit
            broker.kill()
            t_kill = time.monotonic()
            deadline = time.monotonic() + 5
            while bridge.connected.is_set() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not bridge.connected.is_set()
            time.sleep(0.5)  # a few failed reconnects
            t_restart = time.monotonic()
            broker.start()
            assert rec.connected.wait(5)  # the subscriber is back first ...
            n_before = len(rec.messages)
            gate.set()  # ... then the answer is produced while the bridge may still be away
            resp = rec.wait_for(lambda m: m.name == "response", 10, start=n_before)
            resumed = rec.wait_for(lambda m: m.name == "telemetry" and
                                   m.json()["state"] == "active", 10, start=n_before)
            assert bridge.connected.is_set()
        samples = log_queue.drain()
    assert resp is not None and resp.json()["id"] == "during-outage" and resp.json()["accepted"]
    assert resumed is not None  # telemetry is back, and shows the command took effect
    assert bridge.stats.connects >= 2
    # the loop ran through the outage: every cycle reached the other consumer, in order
    seqs = [s.seq for s in samples]
    assert log_queue.dropped == 0
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    during_outage = [s for s in samples if t_kill < s.t < t_restart]
    assert len(during_outage) > 100  # the loop kept cycling while the broker was gone


def test_bridge_started_before_its_broker_connects_once_the_broker_appears(private_broker):
    broker = private_broker(start=False)
    cfg = MqttConfig.from_url(broker.url, robot_id=_robot_id())
    with SyntheticLoop(1000) as loop, MqttBridge(loop, loop.subscribe(), None, cfg) as bridge:
        time.sleep(0.8)
        assert bridge.stats.connect_failures >= 2  # retried with backoff, loop untouched
        broker.start()
        assert bridge.wait_connected(10)
        with Recorder(cfg) as rec:
            batch = rec.wait_for(lambda m: m.name == "telemetry", 3)
    assert batch is not None
    assert batch.json()["dropped"] > 0  # what piled up while away was dropped, and said so


def test_while_a_bridge_runs_no_thread_holds_the_gil_long_before_the_estop_thread(shared):
    """The e-stop thread takes several turns of the GIL on its way to the device; Python's
    default switch interval (5 ms) would let a busy command thread delay each of them."""
    sys.setswitchinterval(0.005)  # Python's default (an earlier test may have left less)
    old = sys.getswitchinterval()
    cfg = shared
    with SyntheticLoop(200) as loop, MqttBridge(loop, loop.subscribe(), None, cfg) as bridge:
        assert sys.getswitchinterval() <= URGENT_SWITCH_INTERVAL < old
        assert bridge.wait_connected(10)
    assert sys.getswitchinterval() == old  # given back when the bridge stops


@pytest.mark.skipif(not (MOSQUITTO and MOSQUITTO_PASSWD), reason="needs mosquitto_passwd")
def test_with_authentication_strangers_can_neither_read_nor_command(private_broker, tmp_path):
    passwd = tmp_path / "passwd"
    users = {"robot": "r-secret", "dash": "d-secret", "guest": "g-secret"}
    for i, (user, password) in enumerate(users.items()):
        subprocess.run([MOSQUITTO_PASSWD, "-b", *([] if i else ["-c"]), str(passwd), user,
                        password], check=True, capture_output=True)
    acl = tmp_path / "acl"
    acl.write_text("user robot\ntopic readwrite poise/#\n\n"
                   "user dash\ntopic read poise/#\ntopic write poise/+/set/#\n\n"
                   "user guest\n")  # authenticated, but may touch nothing
    broker = private_broker(f"allow_anonymous false\npassword_file {passwd}\nacl_file {acl}\n")
    rid = _robot_id()
    robot = MqttConfig.from_url(broker.url, robot_id=rid, username="robot", password="r-secret")
    with SyntheticLoop(1000) as loop, \
            MqttBridge(loop, loop.subscribe(), loop.events(), robot) as bridge:
        assert bridge.wait_connected(5)
        anonymous = Recorder(MqttConfig.from_url(broker.url, robot_id=rid)).start(timeout=1)
        wrong = Recorder(MqttConfig.from_url(broker.url, robot_id=rid, username="dash",
                                             password="nope")).start(timeout=1)
        guest = Recorder(MqttConfig.from_url(broker.url, robot_id=rid, username="guest",
                                             password="g-secret")).start()
        dash = Recorder(MqttConfig.from_url(broker.url, robot_id=rid, username="dash",
                                            password="d-secret")).start()
        try:
            assert not anonymous.connected.is_set() and "authori" in str(anonymous.error).lower()
            assert not wrong.connected.is_set()
            assert guest.connected.is_set() and dash.connected.is_set()
            guest.command("run", "start", id="g1")
            guest.command("estop", id="g2")
            assert dash.wait_for(lambda m: m.name == "telemetry", 3) is not None
            time.sleep(0.5)
            assert loop.state == "inactive"  # the stranger's commands never arrived
            dash.command("run", "start", id="d1")
            resp = dash.wait_for(lambda m: m.name == "response", 3)
        finally:
            for r in (anonymous, wrong, guest, dash):
                r.stop()
    assert guest.messages == []  # read nothing: no $state, no telemetry, no responses
    assert resp is not None and resp.json()["id"] == "d1" and resp.json()["accepted"]
    assert bridge.stats.commands == 1


OPENSSL = shutil.which("openssl")


@pytest.mark.skipif(not (MOSQUITTO and OPENSSL), reason="needs mosquitto and openssl")
def test_tls_with_credentials_carries_telemetry_and_commands(private_broker, tmp_path):
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run([OPENSSL, "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj",
                    "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    passwd = tmp_path / "passwd"
    subprocess.run([MOSQUITTO_PASSWD, "-b", "-c", str(passwd), "robot", "pw"], check=True,
                   capture_output=True)
    broker = private_broker(f"cafile {cert}\ncertfile {cert}\nkeyfile {key}\n"
                            f"allow_anonymous false\npassword_file {passwd}\n")
    url = f"mqtts://robot:pw@127.0.0.1:{broker.port}"
    cfg = MqttConfig.from_url(url, robot_id=_robot_id(), ca_certs=str(cert))
    plain = MqttConfig.from_url(f"mqtt://robot:pw@127.0.0.1:{broker.port}",
                                robot_id=cfg.robot_id)
    with SyntheticLoop(1000) as loop, \
            MqttBridge(loop, loop.subscribe(), loop.events(), cfg) as bridge, \
            Recorder(cfg) as rec:
        assert bridge.wait_connected(5), bridge.stats.last_error
        rec.command("run", "start", id="tls1")
        resp = rec.wait_for(lambda m: m.name == "response", 3)
        batch = rec.wait_for(lambda m: m.name == "telemetry", 3)
        cleartext = Recorder(plain).start(timeout=1)  # no TLS: the broker will not talk
        cleartext.stop()
    assert resp is not None and resp.json()["accepted"] and batch is not None
    assert not cleartext.connected.is_set() and cleartext.connects == 0


def test_embedded_broker_serves_the_bridge_and_a_subscriber():
    with EmbeddedBroker(free_port(), mode="process") as broker:
        cfg = MqttConfig.from_url(broker.url, robot_id=_robot_id())
        with SyntheticLoop(1000) as loop, \
                MqttBridge(loop, loop.subscribe(), loop.events(), cfg) as bridge, \
                Recorder(cfg) as rec:
            assert bridge.wait_connected(5)
            rec.command("run", "start", id="e1")
            resp = rec.wait_for(lambda m: m.name == "response", 5)
            active = rec.wait_for(lambda m: m.name == "$state" and
                                  m.json()["state"] == "active", 5)
            batch = rec.wait_for(lambda m: m.name == "telemetry", 5)
    assert resp is not None and resp.json()["accepted"]
    assert active is not None and batch is not None and batch.json()["n"] >= 1


def test_the_service_sends_its_small_packets_at_once_without_nagle(broker_url):
    """TCP_NODELAY on the bridge's and the e-stop listener's connections: with Nagle's
    algorithm a small packet waited for the broker's delayed acknowledgement of the one before
    (40 ms on Linux): a target's ``$state``, and its answer behind it, 36 ms; the e-stop's
    ``$state`` 40-80 ms. Other clients (the command line's) keep the default."""
    import asyncio

    from poise.telemetry.mqtt_client import mqtt_client
    from poise.telemetry.urgent import UrgentListener

    cfg = MqttConfig.from_url(broker_url, robot_id=_robot_id())
    listener = UrgentListener(cfg, lambda command, reply: None).start()
    try:
        assert listener.connected.wait(10)
        sock = listener._client._client.socket()  # type: ignore[union-attr]
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        listener.stop()
    try:
        with SyntheticLoop(200) as loop, MqttBridge(loop, loop.subscribe(), None, cfg) as bridge:
            assert bridge.wait_connected(10)
            sock = bridge.intake._client._client.socket()  # type: ignore[union-attr]
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        forget(cfg)

    async def default_option() -> int:
        async with mqtt_client(cfg, identifier=f"nodelay-{uuid.uuid4().hex[:8]}") as c:
            return c._client.socket().getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)

    assert asyncio.run(default_option()) == 0
