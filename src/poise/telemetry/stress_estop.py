"""``poise bench stress``: what an e-stop must survive on the MQTT path (issue 32).

* :func:`estop_behind_commands` — the fault trial: ``flood`` targets, then ``clear`` and
  ``run: start``, then the e-stop, all published by one client on one connection while the
  service runs. Per round: commands accepted after the e-stop latched (goal: none), whether the
  service left ``estop`` by itself, and the time from the e-stop's publish to a ``$state`` of
  ``estop`` seen by another client (goal: p99 ≤ 50 ms).
* :func:`retained_live` — commands published *retained* while the service runs: none may be
  executed, and each refusal carries the command's own id.

The service is the one of :mod:`poise.telemetry.stress` (the controller in its real-time
process on the virtual device, MQTT and the log attached); the publishers run in a process of
their own (CLOCK_MONOTONIC is machine-wide).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from typing import Any

from poise.api.topics import Topics
from poise.telemetry.mqtt import MqttConfig
from poise.telemetry.mqtt_client import mqtt_client, paho_client
from poise.telemetry.stress import Service, percentiles
from poise.telemetry.stress_client import PublisherFailed, in_process_of_its_own

#: Goal of the ``$state`` latency after an e-stop (p99) [ms].
STATE_GOAL_MS = 50.0
#: Once the e-stop is answered, the answers still missing are given up after this long with
#: none arriving [s]: a broker drops what queues beyond its limit for a client (Mosquitto's
#: ``max_queued_messages``, 1,000 by default) and a command it dropped is never answered;
#: waiting the round's whole timeout for those made a round last 2-3 minutes.
QUIET_S = 3.0


class _StateWatch:
    """A client of its own (its own connection and thread, as a dashboard elsewhere) that
    notes the monotonic time of the first ``$state`` of ``estop`` after :meth:`arm`."""

    def __init__(self, mqtt: MqttConfig, topic: str) -> None:
        self.topic, self.seen = topic, threading.Event()
        self.t: float | None = None
        self._armed = False
        self.client = paho_client(mqtt, f"stress-watch-{uuid.uuid4().hex[:8]}")
        self.client.on_message = self._message
        self.client.connect(mqtt.host, mqtt.port, keepalive=30)
        self.client.subscribe(topic, qos=1)
        self.client.loop_start()

    def arm(self) -> None:
        self._armed = True

    def _message(self, _client: Any, _userdata: Any, message: Any) -> None:
        t = time.monotonic()
        with contextlib.suppress(ValueError, AttributeError):
            if self._armed and self.t is None and \
                    json.loads(message.payload).get("state") == "estop":
                self.t = t
                self.seen.set()

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


async def _one_connection(url: str, robot_id: str, commands: list[list[Any]], estop_id: str,
                          timeout: float) -> dict[str, Any]:
    """Publish ``commands`` then the e-stop on one connection; collect every answer."""
    mqtt, topics = MqttConfig.from_url(url, robot_id=robot_id), Topics(robot_id)
    sys.setswitchinterval(1e-4)  # the watcher's thread never waits long for the GIL
    watch = _StateWatch(mqtt, topics.state)
    expect = {c for _, _, c in commands} | {estop_id}
    answers: dict[str, list[Any]] = {}
    async with mqtt_client(mqtt, identifier=f"stress-{uuid.uuid4().hex[:8]}") as client:
        client.pending_calls_threshold = len(commands) + 16
        await client.subscribe(topics.response, qos=1)
        await asyncio.gather(*(client.publish(topics.set(name), json.dumps(
            {"id": cid, "value": value}), qos=1) for name, value, cid in commands))
        watch.arm()
        t_estop = time.monotonic()
        await client.publish(topics.set("estop"), json.dumps({"id": estop_id}), qos=1)
        deadline = time.monotonic() + timeout
        with contextlib.suppress(TimeoutError):
            while not expect <= set(answers):
                quiet = QUIET_S if estop_id in answers else timeout
                async with asyncio.timeout(min(quiet, deadline - time.monotonic())):
                    message = await anext(aiter(client.messages))
                doc = json.loads(message.payload)  # type: ignore[arg-type]
                answers.setdefault(str(doc.get("id", "")), [doc.get("accepted"),
                                                            doc.get("reason", "")])
    await asyncio.to_thread(watch.seen.wait, 5.0)
    watch.close()
    return {"t_estop": t_estop, "t_state": watch.t, "answers": answers}


async def _retained(url: str, robot_id: str, commands: list[list[Any]],
                    timeout: float) -> dict[str, Any]:
    """Publish ``commands`` retained, collect their answers, then take them off the broker."""
    mqtt, topics = MqttConfig.from_url(url, robot_id=robot_id), Topics(robot_id)
    answers: dict[str, list[Any]] = {}
    async with mqtt_client(mqtt, identifier=f"stress-{uuid.uuid4().hex[:8]}") as client:
        await client.subscribe(topics.response, qos=1)
        for name, value, cid in commands:
            await client.publish(topics.set(name), json.dumps({"id": cid, "value": value}),
                                 qos=1, retain=True)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                async for message in client.messages:
                    doc = json.loads(message.payload)  # type: ignore[arg-type]
                    answers[str(doc.get("id", ""))] = [doc.get("accepted"),
                                                       doc.get("reason", "")]
                    if {c for _, _, c in commands} <= set(answers):
                        break
        for name in {name for name, _, _ in commands}:
            await client.publish(topics.set(name), b"", qos=1, retain=True)
    return {"answers": answers}


def _latched_at(events: list[Any]) -> float | None:
    """The monotonic time of the first ``estop`` state event."""
    return next((ev.t for ev in events if ev.kind == "state" and
                 ev.data.get("to") == "estop"), None)


def _after_latch(events: list[Any], ids: set[str]) -> tuple[int, int]:
    """``(accepted, left)``: commands of ``ids`` that took effect after the first ``estop``
    state event, and state changes out of ``estop`` after it.

    A command takes effect under the lock that the latch takes too, and announces its change
    there (a ``param`` event with its id; ``clear`` and ``run start`` their state change), so
    these events and the latch's are stamped in the order they happened. Its ``command`` event
    (the answer's record) comes after the lock is released, so a target adopted before the
    latch can be recorded after it on a busy machine: the ``command`` events are not the
    measure."""
    latched = _latched_at(events)
    if latched is None:
        return 0, 0
    accepted = sum(1 for ev in events if ev.kind == "param" and ev.t >= latched and
                   ev.data.get("id") in ids)
    left = sum(1 for ev in events if ev.kind == "state" and ev.t >= latched and
               ev.data.get("from") == "estop")
    return accepted, left


#: Rounds in a row whose service does not run again before the e-stop case gives up (its
#: result then says so in ``rounds_failed``; the hour of rounds before is kept).
MAX_FAILED_IN_A_ROW = 5


def _progress(line: str) -> None:
    """One line per round on stderr (the bench runs for an hour; its table comes at the end)."""
    print(f"poise bench stress: {line}", file=sys.stderr, flush=True)


def estop_behind_commands(url: str, rounds: int = 100, flood: int = 2000, seed: int = 3,
                          priority: int | None = None) -> dict[str, Any]:
    """``rounds`` floods of ``flood`` targets + ``clear`` + ``run: start`` + e-stop on one
    connection (see the module docstring)."""
    rng = random.Random(seed)
    state_ms: list[float] = []
    latch_ms: list[float] = []
    accepted_after = left_estop = unanswered = no_state = received = 0
    failed: list[str] = []
    with tempfile.TemporaryDirectory() as logs:
        svc = Service(url, logs, priority=priority)
        try:
            svc.telemetry.bridge.wait_connected(10)  # type: ignore[union-attr]
            in_a_row = 0  # rounds in a row whose service would not run again
            for r in range(rounds):
                try:
                    svc.ensure_running()
                    in_a_row = 0
                except RuntimeError as exc:  # a starved machine: said, and the next round
                    failed.append(f"round {r}: {exc}")
                    in_a_row += 1
                    if in_a_row >= MAX_FAILED_IN_A_ROW:
                        break
                    time.sleep(2.0)
                    continue
                time.sleep(0.2)
                svc.events.drain()
                commands: list[list[Any]] = [
                    ["target", [round(rng.uniform(0.3, 0.7), 4)], f"u{r}-{i}"]
                    for i in range(flood)]
                commands += [["clear", None, f"u{r}-clear"], ["run", "start", f"u{r}-start"]]
                estop_id = f"u{r}-estop"
                bridge = svc.telemetry.bridge
                received0 = bridge.stats.commands  # type: ignore[union-attr]
                try:
                    got = in_process_of_its_own("estop", 120.0, url=url,
                                                robot_id=svc.robot_id, commands=commands,
                                                estop_id=estop_id)
                except (PublisherFailed, subprocess.TimeoutExpired) as exc:
                    # one round lost (said in the result), not the hour of rounds before it
                    failed.append(f"round {r}: {exc}")
                    continue
                time.sleep(0.5)  # anything still applied would show now
                ids = {c for _, _, c in commands}
                events = svc.events.drain()
                accepted, left = _after_latch(events, ids)
                latched = _latched_at(events)
                if latched is not None:
                    latch_ms.append((latched - got["t_estop"]) * 1e3)
                accepted_after += accepted
                left_estop += left
                unanswered += len(ids | {estop_id}) - len(set(got["answers"]))
                received += bridge.stats.commands - received0  # type: ignore[union-attr]
                if got["t_state"] is None:
                    no_state += 1
                else:
                    state_ms.append((got["t_state"] - got["t_estop"]) * 1e3)
                _progress(f"estop behind {flood} commands: round {r + 1}/{rounds}, accepted "
                          f"after e-stop {accepted_after}, $state estop after "
                          + (f"{state_ms[-1]:.1f} ms" if got["t_state"] is not None
                             else "never"))
        finally:
            svc.close()
    return {"rounds": rounds, "flood": flood, "accepted_after_estop": accepted_after,
            "left_estop": left_estop, "unanswered": unanswered,
            "received_by_service": received, "published": rounds * (flood + 3),
            "faults_between_rounds": svc.faults, "rounds_failed": failed,
            "latched_ms": percentiles(latch_ms),
            "state_estop_ms": percentiles(state_ms), "state_estop_missing": no_state,
            "state_goal_ms": STATE_GOAL_MS}


def retained_live(url: str, commands: int = 20, priority: int | None = None
                  ) -> dict[str, Any]:
    """``commands`` targets published retained while the service runs: how many were
    executed (goal: none) and how many refusals carried their own id (goal: all)."""
    cmds = [["target", [round(0.3 + 0.01 * i, 3)], f"r-{i}"] for i in range(commands)]
    with tempfile.TemporaryDirectory() as logs:
        svc = Service(url, logs, priority=priority)
        try:
            svc.telemetry.bridge.wait_connected(10)  # type: ignore[union-attr]
            svc.ensure_running()
            got = in_process_of_its_own("retained", 60.0, url=url, robot_id=svc.robot_id,
                                        commands=cmds)
        finally:
            svc.close()
    answers = got["answers"]
    return {"commands": commands,
            "executed": sum(1 for a in answers.values() if a[0]),
            "refused_with_own_id": sum(1 for _, _, c in cmds if c in answers and
                                       not answers[c][0] and "retained" in answers[c][1])}


def table_lines(r: dict[str, Any]) -> list[str]:
    """The report's lines for these measurements."""
    lines = []
    if "estop_behind" in r:
        e = r["estop_behind"]
        s = e["state_estop_ms"]
        lines.append(f"e-stop behind {e['flood']} targets + clear + start on one connection "
                     f"({e['rounds']} rounds): accepted after the e-stop "
                     f"{e['accepted_after_estop']} (goal 0), left estop by itself "
                     f"{e['left_estop']}, unanswered {e['unanswered']}; $state estop after "
                     f"p50 {s['p50']} / p99 {s['p99']} / max {s['max']} ms (goal p99 <= "
                     f"{e['state_goal_ms']:g} ms), never seen {e['state_estop_missing']}; "
                     f"latched after p99 {e['latched_ms']['p99']} ms")
        if e.get("rounds_failed") or e.get("faults_between_rounds"):
            lines.append(f"  rounds lost: {len(e.get('rounds_failed') or [])} "
                         f"{(e.get('rounds_failed') or [])[:2]}; faults between rounds: "
                         f"{len(e.get('faults_between_rounds') or [])} "
                         f"{(e.get('faults_between_rounds') or [])[:2]}")
    if "retained" in r:
        t = r["retained"]
        lines.append(f"retained commands published live: executed {t['executed']} of "
                     f"{t['commands']} (goal 0), refused with their own id "
                     f"{t['refused_with_own_id']}")
    return lines


__all__ = ["STATE_GOAL_MS", "estop_behind_commands", "retained_live", "table_lines"]
