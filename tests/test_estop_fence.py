"""An e-stop that nothing sent before it can undo (issue 32): commands still on the MQTT
receive path, in the dispatcher's queue, in the real-time process's pipe or being applied when
the e-stop latches are void; ``$state`` says ``estop`` at once; a retained command published
live is refused with its own id. Real broker, real controller on the virtual device."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
import types
import uuid

import pytest

from poise.api.bus import ESTOP_CANCELLED, Command, Event, SampleQueue
from poise.api.state import State
from poise.api.topics import Topics, dumps, state_dict
from poise.cli.run_cmd import EXIT_CODES, exit_code
from poise.controller.config import load_config
from poise.controller.realtime import RealtimeController
from poise.controller.service import Controller
from poise.telemetry.client import Recorder, forget
from poise.telemetry.fence import RESEND, EstopFence
from poise.telemetry.mqtt import MqttBridge, MqttConfig
from poise.telemetry.mqtt_client import mqtt_client
from poise.telemetry.mqtt_publish import BridgeStats, Outbox, TelemetryPublisher
from poise.telemetry.reader import read_log
from test_mqtt import (  # noqa: F401 - the broker fixtures
    MOSQUITTO,
    MOSQUITTO_PASSWD,
    broker_url,
    private_broker,
)

#: Generous: a slow, busy machine.
WAIT = 60.0


def _config(**extra):
    keys = {"device.port": ("sim", "test"), "model.name": ("double_pendulum", "test"),
            "algorithm.target": ([0.5], "test"), "loop.rate": (500.0, "test"),
            "mqtt.enabled": (False, "test")}
    keys.update({k: (v, "test") for k, v in extra.items()})
    return load_config(None, keys)


def _answer(rec: Recorder, ident: str, start: int = 0) -> dict:
    got = rec.wait_for(lambda m: m.name == "response" and m.json()["id"] == ident, WAIT,
                       start=start)
    assert got is not None, f"no response to {ident}"
    return got.json()


# -- the fence on its own: what starts it, what ends it ------------------------------------

def test_a_fence_starts_when_an_estop_latches_and_ends_with_its_marker_or_a_new_session():
    count = [0]
    fence = EstopFence(lambda: count[0])
    assert fence.stamp() == (0, False) and fence.due() is None
    count[0] = 1  # an e-stop latched
    assert fence.poll() == 1 and fence.active
    first = fence.due(now=100.0)
    assert first == 1 and fence.due(now=100.0 + RESEND / 2) is None  # one marker out
    assert fence.stamp() == (1, True)  # taken before the marker: received before the e-stop
    fence.passed(b"0")  # an older marker ends nothing
    assert fence.active
    resent = fence.due(now=100.0 + RESEND)  # lost on the way: sent again
    assert resent == 2
    fence.passed(str(resent).encode())
    assert not fence.active and fence.stamp() == (1, False) and fence.voided == 1
    count[0] = 2
    fence.poll()
    assert fence.active
    fence.reset()  # a new connection: nothing from before it is in transit
    assert not fence.active and fence.stamp() == (2, False)


def test_a_fence_without_an_estop_count_stamps_nothing():
    fence = EstopFence(lambda: None)
    assert fence.stamp() == (None, False) and fence.due() is None


# -- the controller: a command received before an e-stop never takes effect after it -------

def test_commands_stamped_before_an_estop_are_refused_after_it_even_once_cleared():
    ctl = Controller(_config())
    try:
        assert ctl.connect().accepted
        before = ctl.estops
        assert ctl.submit(Command("estop", id="e1")).accepted
        assert ctl.estops == before + 1
        for name, value in (("clear", None), ("run", "start"), ("target", [0.45]),
                            ("gains", {"gamma": 1.0})):
            resp = ctl.submit(Command(name, value, id=f"old-{name}", estops=before))
            assert not resp.accepted and resp.reason == ESTOP_CANCELLED, resp
        assert ctl.state == State.ESTOP
        assert ctl.submit(Command("clear", id="c1", estops=ctl.estops)).accepted
        # cleared by a command sent after the e-stop: the old ones stay void
        resp = ctl.submit(Command("target", [0.45], id="old-t", estops=before))
        assert not resp.accepted and resp.reason == ESTOP_CANCELLED
        assert ctl.submit(Command("run", "start", id="old-s", estops=before)).reason == \
            ESTOP_CANCELLED
        assert ctl.state == State.READY
        assert ctl.submit(Command("run", "start", id="s1", estops=ctl.estops)).accepted
        assert ctl.wait_for(State.RUNNING, timeout=WAIT)
    finally:
        ctl.close()


def test_an_estop_that_latches_while_the_device_is_armed_wins_over_the_start():
    ctl = Controller(_config())
    try:
        assert ctl.connect().accepted
        device = ctl.device
        arm = device.arm
        sent: list[str] = []
        estop = device.estop

        def arm_then_estop(**kw):  # the operator's e-stop lands while the device arms
            arm(**kw)
            sent.append("arm")
            threading.Thread(target=ctl.estop, args=("operator",)).start()
            deadline = time.monotonic() + WAIT
            while ctl.state != State.ESTOP and time.monotonic() < deadline:
                time.sleep(0.001)

        def record_estop():
            sent.append("estop")
            estop()

        device.arm, device.estop = arm_then_estop, record_estop
        resp = ctl.start()
        assert not resp.accepted and resp.reason == ESTOP_CANCELLED, resp
        assert ctl.state == State.ESTOP
        deadline = time.monotonic() + WAIT
        while sent.count("estop") < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        # the e-stop's own EStop may have reached the device before the arm: sent again after
        assert sent[0] == "arm" and sent.count("estop") == 2, sent
    finally:
        ctl.close()


# -- end to end over a real broker ---------------------------------------------------------

def _hold_loop(bridge: MqttBridge) -> threading.Event:
    """Stall the bridge's event loop (the receive path) until the returned event is set:
    what a flood does, deterministically. Commands published meanwhile wait in the broker's
    queue and the socket, where no dispatcher can see them."""
    gate, held = threading.Event(), threading.Event()

    def hold() -> None:
        held.set()
        gate.wait(WAIT)

    assert bridge._loop is not None
    bridge._loop.call_soon_threadsafe(hold)
    assert held.wait(WAIT)
    return gate


@pytest.mark.parametrize("kind", ["in-process", "real-time process"])
def test_an_estop_voids_every_command_published_before_it_wherever_it_waits(
        broker_url, request, kind):  # noqa: F811 - the imported fixture
    config = _config()
    ctl = Controller(config) if kind == "in-process" else RealtimeController(config)
    mc = MqttConfig.from_settings(config.mqtt, url=broker_url,
                                  robot_id="fence-" + uuid.uuid4().hex[:8])
    request.addfinalizer(lambda: forget(mc))
    bridge = MqttBridge(ctl, ctl.subscribe(), ctl.events(), mc, device="sim:double_pendulum")
    try:
        with Recorder(mc) as rec:
            bridge.start()
            assert bridge.wait_connected(WAIT)
            assert ctl.start("test").accepted and ctl.wait_for(State.RUNNING, timeout=WAIT)
            gate = _hold_loop(bridge)
            n = len(rec.messages)
            for i in range(20):
                rec.command("target", [0.40 + 0.005 * i], id=f"t{i}")
            rec.command("clear", id="c0")
            rec.command("run", "start", id="s0")
            rec.command("estop", id="e0")  # from the same client, right behind them
            assert ctl.wait_for(State.ESTOP, timeout=WAIT)
            # $state says so while the bridge's own connection is still stalled
            latched = rec.wait_for(lambda m: m.name == "$state" and
                                   m.json()["state"] == "estop", WAIT, start=n)
            assert latched is not None
            assert latched.json()["device"] == "sim:double_pendulum"
            assert _answer(rec, "e0", n)["accepted"]
            gate.set()
            answers = {i: _answer(rec, i, n) for i in ("c0", "s0", *(f"t{k}" for k in
                                                                    range(20)))}
            assert ctl.state == State.ESTOP
            for ident, resp in answers.items():
                assert not resp["accepted"], (ident, resp)
            assert answers["c0"]["reason"] == ESTOP_CANCELLED
            assert answers["s0"]["reason"] == ESTOP_CANCELLED
            with Recorder(mc) as late:  # the retained $state a dashboard finds: estop
                seen = late.wait_for(lambda m: m.name == "$state", WAIT)
                assert seen is not None and seen.retain and seen.json()["state"] == "estop"
            # what is sent after the e-stop works as usual once the marker is back
            deadline = time.monotonic() + WAIT
            while bridge.intake.fence.active and time.monotonic() < deadline:
                time.sleep(0.01)
            m = len(rec.messages)
            rec.command("clear", id="c1")
            assert _answer(rec, "c1", m)["accepted"]
            assert ctl.wait_for(State.READY, timeout=WAIT)
            states = [ev.data["to"] for ev in ctl.history() if ev.kind == "state"]
            assert states[states.index("estop") + 1:] == ["ready"], states  # left by c1
    finally:
        bridge.stop()
        ctl.close()


def test_a_backlog_of_states_already_left_never_replaces_the_retained_estop(broker_url):  # noqa: F811
    """The e-stop's own connection publishes ``$state`` ``estop`` retained at once; the
    bridge's stalled connection then publishes its backlog of transitions (``ready``,
    ``running``: entered before the e-stop, already left). Those are news for whoever
    listens, but not retained: a dashboard that connects meanwhile finds ``estop``, not
    ``ready`` (the end-to-end test above once found ``ready`` on a busy machine)."""
    mc = MqttConfig.from_settings(_config().mqtt, url=broker_url,
                                  robot_id="fence-" + uuid.uuid4().hex[:8])
    topics = Topics(mc.robot_id)
    handler = types.SimpleNamespace(state="estop")
    publisher = TelemetryPublisher(handler, None, SampleQueue(), mc, topics, BridgeStats(),
                                   Outbox())
    backlog = [Event(1.0, "state", {"from": "inactive", "to": "ready", "cause": "connected"}),
               Event(2.0, "state", {"from": "ready", "to": "running", "cause": "test"})]

    def retained_state() -> dict:
        with Recorder(mc) as late:
            seen = late.wait_for(lambda m: m.name == "$state", WAIT)
            assert seen is not None and seen.retain
            return seen.json()

    async def publish(*events: Event) -> None:
        async with mqtt_client(mc) as client:
            for event in events:
                await publisher._publish_transition(client, event)

    try:
        with Recorder(mc) as live:
            asyncio.run(_publish_retained(mc, topics.state, dumps(state_dict(
                "estop", "operator", t=time.time()))))  # as the e-stop's connection does
            assert retained_state()["state"] == "estop"
            asyncio.run(publish(*backlog))
            assert live.wait_for(lambda m: m.name == "$state" and
                                 m.json()["state"] == "running", WAIT) is not None
            heard = [m.json()["state"] for m in live.named("$state")]
            assert heard[-2:] == ["ready", "running"], heard  # every state entered is heard
            assert retained_state()["state"] == "estop"
            # the state it is in is retained, as before
            handler.state = "ready"
            asyncio.run(publish(Event(3.0, "state", {"from": "estop", "to": "ready",
                                                     "cause": "clear"})))
            assert retained_state()["state"] == "ready"
    finally:
        forget(mc)


class _LatchesWhilePublished:
    """A controller that is ``running`` when the bridge reads its state and has latched an
    e-stop by the time the bridge reads its target status in the same ``$state`` (what a
    stall between the two, a flood holding the bridge's loop, lets happen): its ``estop``
    event queued, and the refusal of an older command owed (as the intake owes it)."""

    def __init__(self, events: SampleQueue, outbox: Outbox, topics: Topics) -> None:
        self.state, self._events, self._outbox, self._topics = "running", events, outbox, topics

    @property
    def target_status(self) -> str:
        if self.state == "running":
            self.state = "estop"
            self._events.put(Event(3.0, "state", {"from": "running", "to": "estop",
                                                   "cause": "mqtt e-stop"}))
            self._outbox.append(self._topics.response, dumps({
                "id": "t0", "command": "target", "accepted": False,
                "reason": ESTOP_CANCELLED}))
        return "reachable"


def test_an_answer_never_overtakes_the_estop_latched_while_a_state_was_published(
        broker_url):  # noqa: F811
    """The e-stop latches while the bridge is publishing ``running`` (retained: it was the
    state when read, and it replaces the e-stop connection's ``estop``). The refusal owed
    meanwhile leaves only after the bridge's ``$state`` ``estop``: whoever has the refusal
    and then connects finds ``estop`` (the end-to-end test above once found ``running``: the
    answers went first, the ``estop`` a call later)."""
    mc = MqttConfig.from_settings(_config().mqtt, url=broker_url,
                                  robot_id="fence-" + uuid.uuid4().hex[:8])
    topics, events, outbox = Topics(mc.robot_id), SampleQueue(), Outbox()
    handler = _LatchesWhilePublished(events, outbox, topics)
    publisher = TelemetryPublisher(handler, None, events, mc, topics, BridgeStats(), outbox)

    async def owed() -> None:
        outbox.bind()
        async with mqtt_client(mc) as client:
            await publisher.owed(client)

    try:
        with Recorder(mc) as live:
            asyncio.run(_publish_retained(mc, topics.state, dumps(state_dict(
                "estop", "mqtt e-stop", t=time.time()))))  # the e-stop's connection
            asyncio.run(owed())
            refusal = live.wait_for(lambda m: m.name == "response", WAIT)
            assert refusal is not None and refusal.json()["reason"] == ESTOP_CANCELLED
            states = [m.json()["state"] for m in live.named("$state")]
            # the stale "running" went out (it was the state when read), the estop after it
            after = states[states.index("running") + 1:]
            assert after and set(after) == {"estop"}, states
            assert live.messages.index(refusal) > max(
                i for i, m in enumerate(live.messages) if m.name == "$state")
        with Recorder(mc) as late:
            seen = late.wait_for(lambda m: m.name == "$state", WAIT)
            assert seen is not None and seen.retain and seen.json()["state"] == "estop"
    finally:
        forget(mc)


async def _publish_retained(mc: MqttConfig, topic: str, payload: bytes) -> None:
    async with mqtt_client(mc) as client:
        await client.publish(topic, payload, qos=1, retain=True, timeout=5)


def test_a_retained_command_published_live_is_refused_with_its_own_id(
        broker_url, request):  # noqa: F811 - the imported fixture
    config = _config()
    ctl = Controller(config)
    mc = MqttConfig.from_settings(config.mqtt, url=broker_url,
                                  robot_id="retain-" + uuid.uuid4().hex[:8])
    request.addfinalizer(lambda: forget(mc))
    topics = Topics(mc.robot_id)
    bridge = MqttBridge(ctl, ctl.subscribe(), ctl.events(), mc)
    try:
        with Recorder(mc) as rec:
            bridge.start()
            assert bridge.wait_connected(WAIT)
            rec.publish(topics.set("target"), json.dumps({"id": "r1", "value": [0.3]}),
                        retain=True)
            resp = _answer(rec, "r1")
            rec.publish(topics.set("target"), b"", retain=True)  # take it off the broker
            assert not resp["accepted"] and "retained" in resp["reason"], resp
            assert ctl.params.target.tolist() == [0.5]
            rec.command("target", [0.3], id="r2")  # the same, not retained: taken
            assert _answer(rec, "r2")["accepted"]
    finally:
        bridge.stop()
        ctl.close()


# -- no command channel, no motion ----------------------------------------------------------

@pytest.mark.skipif(not (MOSQUITTO and MOSQUITTO_PASSWD), reason="needs mosquitto_passwd")
def test_a_run_whose_mqtt_credentials_are_refused_is_never_armed(
        private_broker, tmp_path):  # noqa: F811 - the imported fixture
    passwd = tmp_path / "passwd"
    subprocess.run([MOSQUITTO_PASSWD, "-b", "-c", str(passwd), "robot", "pw"], check=True,
                   capture_output=True)
    broker = private_broker(f"allow_anonymous false\npassword_file {passwd}\n")
    run = subprocess.run(
        [sys.executable, "-m", "poise", "run", "--mqtt",
         f"mqtt://robot:wrong@127.0.0.1:{broker.port}", "--duration", "2", "--json-summary",
         "--log", str(tmp_path / "run.mcap")],
        capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert run.returncode == EXIT_CODES["fault"], run.stderr
    assert "refused" in run.stderr and "not armed" in run.stderr and "--no-mqtt" in \
        run.stderr, run.stderr
    summary = json.loads(run.stdout)
    assert summary["timing"]["cycles"] == 0 and not summary["reached"], summary
    states = [m["to"] for m in read_log(tmp_path / "run.mcap").topic("/state")]
    assert "running" not in states, states


def test_a_run_that_ended_latched_does_not_say_it_reached_its_target():
    # a tolerance of 10 m: "reached" from the first cycle, however slow the machine
    ctl = Controller(_config(**{"algorithm.tolerance": 10.0}))
    try:
        assert ctl.start().accepted and ctl.wait_for(State.RUNNING, timeout=WAIT)
        deadline = time.monotonic() + WAIT  # let the arm get there
        while not ctl.summary()["reached"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ctl.summary()["reached"]
        ctl.estop("test")
        summary = ctl.final_summary()
        assert summary["state"] == "estop" and not summary["reached"], summary
        assert exit_code(summary) == EXIT_CODES["estop"]
    finally:
        ctl.close()
