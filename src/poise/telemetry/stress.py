"""``poise bench stress``: the service as a careless user and an unlucky lab meet it.

Four measurements (issue 17), each against the real parts — the controller with the virtual
device on a pty, a real MQTT broker (Mosquitto on 127.0.0.1:1883 when it listens, else the
embedded one), the MCAP log on, and ``poise run`` as a real subprocess:

* :func:`estop_under_flood` — rounds of 2,000 target commands published at once and an e-stop
  right behind them, from another client (the operator's button): time from publishing the
  e-stop to the device acknowledging it
  (``estop_acknowledged`` event, same monotonic clock), and whether every command got exactly
  one response.
* :func:`command_flood` — 2,000 mixed commands while running: responses (exactly one each) and
  missed cycles during the flood against a quiet window of the same length just before.
* :func:`signal_storm` — SIGINT/SIGTERM at random moments of ``poise run``'s start-up, run and
  shutdown: time to exit, exit status, tracebacks, processes and temporary files left behind.
* :func:`sigkill_orphans` — SIGKILL of ``poise run`` while its simulator child runs: processes
  and temporary files left behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pathlib
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from poise.api.topics import Topics
from poise.telemetry.broker import EmbeddedBroker, wait_listening
from poise.telemetry.mqtt import MqttConfig
from poise.telemetry.mqtt_client import mqtt_client
from poise.telemetry.stress_client import in_process_of_its_own

#: Mosquitto's address on the development machines.
MOSQUITTO = ("127.0.0.1", 1883)


@contextlib.contextmanager
def broker_url(url: str | None = None) -> Iterator[str]:
    """``url``, else Mosquitto on 127.0.0.1:1883 if it listens, else an embedded broker."""
    if url:
        yield url
        return
    if wait_listening(*MOSQUITTO, timeout=0.5):
        yield f"mqtt://{MOSQUITTO[0]}:{MOSQUITTO[1]}"
        return
    with EmbeddedBroker() as broker:
        yield broker.url


def percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"n": 0, "p50": None, "p99": None, "max": None}
    a = np.asarray(values)
    return {"n": len(values), "p50": round(float(np.percentile(a, 50)), 3),
            "p99": round(float(np.percentile(a, 99)), 3), "max": round(float(a.max()), 3)}


def _cycles(controller: Any) -> tuple[int, int]:
    """``(missed, cycles)`` so far."""
    t = controller.timing()
    return int(t["missed"]), int(t["cycles"])


class Service:
    """A controller on the virtual device (in its own process, as ``poise run`` runs it) with
    MQTT and the log attached."""

    def __init__(self, url: str, log_dir: str, model: str = "double_pendulum",
                 priority: int | None = None) -> None:
        from poise.controller.config import config_from_dict
        from poise.controller.realtime import make_controller
        from poise.telemetry.service import attach

        self.robot_id = f"stress-{uuid.uuid4().hex[:8]}"
        #: Faults found between rounds (their reasons), cleared by :meth:`ensure_running`.
        self.faults: list[str] = []
        config = config_from_dict({"model": {"name": model},
                                   "algorithm": {"target": [0.5]},
                                   "device": {"port": "sim"},
                                   **({} if priority is None else
                                      {"loop": {"priority": priority}})}, "stress")
        self.controller = make_controller(config)
        self.events = self.controller.events(maxlen=1_000_000, history=False)
        self.telemetry = attach(self.controller, mqtt=True, url=url, robot_id=self.robot_id,
                                log_path=f"{log_dir}/stress-{self.robot_id}.mcap", out=None)

    def ensure_running(self, timeout: float = 30.0, attempts: int = 3) -> None:
        """Running again for the next round: a latched e-stop or fault cleared first. A fault
        in between (a starved virtual device on a loaded machine: a sensor timeout) is
        counted in :attr:`faults` with its reason and cleared, up to ``attempts`` times,
        rather than ending the whole benchmark."""
        from poise.api.state import State

        c = self.controller
        for _ in range(attempts):
            if c.state in (State.FAULT, State.ESTOP):
                if c.state == State.FAULT:
                    self.faults.append(c.reason)
                c.clear("stress")
            resp = c.start("stress")
            if resp.accepted and c.wait_for(State.RUNNING, timeout=timeout) and \
                    c.state == State.RUNNING:
                return
        raise RuntimeError(f"cannot start: {resp.reason or 'accepted'}; state "
                           f"{c.state.value} ({c.reason}); faults between rounds: "
                           f"{self.faults}")

    def close(self) -> None:
        self.controller.close()
        self.telemetry.stop()


class _EstopButton:
    """The operator's e-stop: a client of its own (its own connection and network thread, as
    a button on another device would be), so the time measured from its publish is the
    service's and the broker's, not the flooding client's own backlog of responses."""

    def __init__(self, mqtt: MqttConfig) -> None:
        from poise.telemetry.mqtt_client import paho_client

        self.client = paho_client(mqtt, f"stress-estop-{uuid.uuid4().hex[:8]}")
        self.client.connect(mqtt.host, mqtt.port, keepalive=30)
        self.client.loop_start()

    def press(self, topic: str, estop_id: str) -> float:
        """Publish the e-stop (QoS 1); the monotonic time just before."""
        payload = json.dumps({"id": estop_id, "value": None})
        t = time.monotonic()
        self.client.publish(topic, payload, qos=1)
        return t

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


async def _publish_round(url: str, robot_id: str, commands: list[tuple[str, Any, str]],
                         estop_id: str | None, timeout: float) -> dict[str, Any]:
    """Publish ``commands`` all at once (QoS 1), then the e-stop (if any) from a client of its
    own; collect responses until every command is answered. Returns the monotonic time the
    e-stop was published and the number of responses per id."""
    mqtt, topics = MqttConfig.from_url(url, robot_id=robot_id), Topics(robot_id)
    expect = {c for _, _, c in commands} | ({estop_id} if estop_id else set())
    answers: dict[str, int] = {}
    sys.setswitchinterval(1e-4)  # the button's thread never waits long for the GIL
    button = _EstopButton(mqtt) if estop_id is not None else None
    async with mqtt_client(mqtt, identifier=f"stress-{uuid.uuid4().hex[:8]}") as client:
        client.pending_calls_threshold = len(commands) + 16
        await client.subscribe(topics.response, qos=1)
        await asyncio.gather(*(client.publish(topics.set(name), json.dumps(
            {"id": cid, "value": value}), qos=1) for name, value, cid in commands))
        t_estop = None
        if button is not None and estop_id is not None:
            t_estop = button.press(topics.set("estop"), estop_id)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                async for message in client.messages:
                    payload = message.payload
                    doc = json.loads(payload if isinstance(payload, bytes | str) else b"{}")
                    ident = str(doc.get("id", ""))
                    answers[ident] = answers.get(ident, 0) + 1
                    if expect <= set(answers):
                        break
        with contextlib.suppress(TimeoutError):  # a late duplicate would arrive now
            async with asyncio.timeout(0.3):
                async for message in client.messages:
                    ident = str(json.loads(message.payload).get("id", ""))  # type: ignore[arg-type]
                    answers[ident] = answers.get(ident, 0) + 1
    if button is not None:
        button.close()
    return {"t_estop": t_estop, "answers": answers}


def publish_round(url: str, robot_id: str, commands: list[tuple[str, Any, str]],
                  estop_id: str | None, timeout: float = 120) -> dict[str, Any]:
    """:func:`_publish_round` in a process of its own (:mod:`poise.telemetry.stress_client`)."""
    return in_process_of_its_own("round", timeout, url=url, robot_id=robot_id,
                                 commands=commands, estop_id=estop_id)


def _targets(n: int, rng: random.Random, tag: str) -> list[tuple[str, Any, str]]:
    return [("target", [round(rng.uniform(0.3, 0.7), 4)], f"{tag}-{i}") for i in range(n)]


def _count(answers: dict[str, int], ids: set[str]) -> dict[str, int]:
    return {"expected": len(ids), "answered": sum(1 for i in ids if i in answers),
            "duplicates": sum(answers[i] - 1 for i in ids if answers.get(i, 0) > 1)}


def estop_under_flood(url: str, rounds: int = 10, flood: int = 2000,
                      seed: int = 0, priority: int | None = None) -> dict[str, Any]:
    """E-stop latency with ``flood`` commands published right before it, over ``rounds``."""
    rng = random.Random(seed)
    latencies, latched, counts = [], [], []
    received = 0
    with tempfile.TemporaryDirectory() as logs:
        svc = Service(url, logs, priority=priority)
        stats = svc.telemetry.bridge.stats  # type: ignore[union-attr]
        try:
            svc.telemetry.bridge.wait_connected(10)  # type: ignore[union-attr]
            for r in range(rounds):
                svc.ensure_running()
                time.sleep(0.3)
                svc.events.drain()
                commands = _targets(flood, rng, f"e{r}")
                ids = {c for _, _, c in commands} | {f"e{r}-estop"}
                before = stats.commands
                got = publish_round(url, svc.robot_id, commands, f"e{r}-estop")
                received += stats.commands - before
                t0, answers = got["t_estop"], got["answers"]
                ack = state = None
                deadline = time.monotonic() + 10
                while (ack is None or state is None) and time.monotonic() < deadline:
                    svc.events.wait(0.5)
                    for ev in svc.events.drain():
                        if ev.kind == "info" and ev.data.get("code") == "estop_acknowledged":
                            ack = ack or ev.t
                        if ev.kind == "state" and ev.data.get("to") == "estop":
                            state = state or ev.t
                if ack is not None and t0 is not None:
                    latencies.append((ack - t0) * 1e3)
                if state is not None and t0 is not None:
                    latched.append((state - t0) * 1e3)
                counts.append(_count(answers, ids))
        finally:
            svc.close()
    return {"rounds": rounds, "flood": flood, "disarm_ms": percentiles(latencies),
            "latched_ms": percentiles(latched), "received_by_service": received,
            "responses": {k: sum(c[k] for c in counts) for k in
                          ("expected", "answered", "duplicates")}}


def command_flood(url: str, flood: int = 2000, seed: int = 1, priority: int | None = None
                  ) -> dict[str, Any]:
    """``flood`` mixed commands while running: responses and missed cycles vs a quiet window."""
    rng = random.Random(seed)
    kinds: list[tuple[str, Any]] = [("gains", {"gamma": 1.0}), ("gains", {"damping": 0.02}),
                                    ("mode", "fb"), ("algorithm", "alg1")]
    commands: list[tuple[str, Any, str]] = []
    for i in range(flood):
        if i % 2 == 0:
            commands.append(("target", [round(rng.uniform(0.3, 0.7), 4)], f"f-{i}"))
        else:
            name, value = kinds[rng.randrange(len(kinds))]
            commands.append((name, value, f"f-{i}"))
    with tempfile.TemporaryDirectory() as logs:
        svc = Service(url, logs, priority=priority)
        bridge = svc.telemetry.bridge
        try:
            bridge.wait_connected(10)  # type: ignore[union-attr]
            svc.ensure_running()
            time.sleep(1.0)
            received0 = bridge.stats.commands  # type: ignore[union-attr]
            ids = {c for _, _, c in commands}
            m0, c0, t0 = *_cycles(svc.controller), time.monotonic()
            answers = publish_round(url, svc.robot_id, commands, None)["answers"]
            m1, c1, t1 = *_cycles(svc.controller), time.monotonic()
            received = bridge.stats.commands - received0  # type: ignore[union-attr]
            time.sleep(t1 - t0)  # a quiet window of the same length after it
            m2, c2 = _cycles(svc.controller)
            dispatch = svc.controller.summary()["dispatch"]
        finally:
            svc.close()
    return {"flood": flood, "seconds": round(t1 - t0, 3), "received_by_service": received,
            "responses": _count(answers, ids),
            "missed_flood": m1 - m0, "cycles_flood": c1 - c0,
            "missed_quiet": m2 - m1, "cycles_quiet": c2 - c1,
            "superseded": dispatch["superseded"], "executed": dispatch["executed"],
            "busy": dispatch["busy"]}


# ------------------------------------------------------------------ poise run as a process


def _session_pids(sid: int) -> list[int]:
    """Processes of session ``sid`` still alive (Linux /proc)."""
    out = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[3]) == sid and fields[0] != "Z":
                out.append(int(entry.name))
    return out


def _children(pid: int) -> list[int]:
    with contextlib.suppress(OSError):
        text = pathlib.Path(f"/proc/{pid}/task/{pid}/children").read_text()
        return [int(x) for x in text.split()]
    return []


def _spawn(args: list[str], tmp: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "TMPDIR": tmp, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "poise", "run", *args], cwd=tmp, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)


def _leftovers(proc: subprocess.Popen[bytes], tmp: str, wait: float) -> tuple[int, int]:
    """(processes, temporary files) left by ``proc``'s session after up to ``wait`` s."""
    deadline = time.monotonic() + wait
    while True:
        pids = _session_pids(proc.pid)
        files = [p for p in pathlib.Path(tmp).glob("poise-*")]
        if (not pids and not files) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    for pid in pids:  # leave the machine clean for the next run
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return len(pids), len(files)


def signal_storm(runs: int = 100, seed: int = 2, duration: float = 3.0,
                 window: float = 7.0) -> dict[str, Any]:
    """SIGINT or SIGTERM ``runs`` times, each at a uniform moment in ``[0, window)`` s after
    ``poise run --duration`` starts: start-up, running and shutdown are all hit."""
    rng = random.Random(seed)
    exits, bad = [], []
    delivered = early_exit = default_handler = in_interpreter = 0
    while delivered < runs:
        with tempfile.TemporaryDirectory() as tmp:
            proc = _spawn(["--duration", str(duration), "--no-log", "--quiet"], tmp)
            time.sleep(rng.uniform(0, window))
            sig = rng.choice((signal.SIGINT, signal.SIGTERM))
            if proc.poll() is not None:
                early_exit += 1
                proc.communicate()
                continue
            t_sig = time.monotonic()
            os.kill(proc.pid, sig)
            try:
                _, err = proc.communicate(timeout=30)
                took = time.monotonic() - t_sig
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
                took = float("inf")
            delivered += 1
            procs, files = _leftovers(proc, tmp, wait=2.0)
            text = err.decode(errors="replace")
            ok = took <= 2.0 and procs == 0 and files == 0 and "Traceback" not in text
            default_handler += proc.returncode < 0  # before poise installed its own
            exits.append(took)
            if not ok and interpreter_startup_interrupt(text) and procs == files == 0:
                in_interpreter += 1  # before poise's first line: no program can catch it
            elif not ok:
                bad.append({"signal": sig.name, "exit": proc.returncode, "seconds": took,
                            "processes": procs, "files": files, "stderr": text[-400:]})
    clean = runs - len(bad) - in_interpreter
    return {"runs": runs, "clean": clean, "exit_s": percentiles(exits), "exited_before_signal":
            early_exit, "ended_by_default_handler": default_handler,
            "interrupted_in_interpreter_startup": in_interpreter, "failures": bad[:5]}


def interpreter_startup_interrupt(stderr: str) -> bool:
    """A KeyboardInterrupt traceback none of whose frames is poise's: the SIGINT came while
    CPython itself was starting (``site``, the import system), before the first line of
    :mod:`poise._entry` could install its handler."""
    frames = [line for line in stderr.splitlines() if line.lstrip().startswith("File ")]
    return "KeyboardInterrupt" in stderr and not any(
        f"{os.sep}poise{os.sep}" in line for line in frames)


def sigkill_orphans(runs: int = 20) -> dict[str, Any]:
    """SIGKILL ``poise run`` ``runs`` times once its simulator child is up."""
    processes = files = never_started = 0
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            proc = _spawn(["--duration", "60", "--no-log", "--no-mqtt", "--quiet"], tmp)
            deadline = time.monotonic() + 60
            while not _children(proc.pid) and time.monotonic() < deadline \
                    and proc.poll() is None:
                time.sleep(0.05)
            if not _children(proc.pid):
                never_started += 1
            time.sleep(0.5)
            proc.kill()
            proc.communicate()
            p, f = _leftovers(proc, tmp, wait=5.0)
            processes += p
            files += f
    return {"runs": runs, "processes_left": processes, "temp_files_left": files,
            "child_not_seen": never_started}


def run(url: str | None = None, *, rounds: int = 10, flood: int = 2000, signals: int = 100,
        kills: int = 20, priority: int | None = None, behind: int = 100,
        retained: int = 20, disk_full: int = 3, truncate: int = 50,
        poise: Callable[[list[str]], int] | None = None) -> dict[str, Any]:
    """Every measurement (0 skips one); JSON-ready. ``priority``: the service's
    ``loop.priority`` (SCHED_FIFO where granted; 0: the normal scheduler; None: the
    configuration's default). ``behind``, ``retained``: see
    :mod:`poise.telemetry.stress_estop`; ``disk_full``, ``truncate``: see
    :mod:`poise.telemetry.stress_logs` (``poise``: how the truncated logs are read, e.g.
    ``poise.cli.main`` in this process; default: ``poise log info`` in a child process)."""
    from poise.telemetry import stress_estop, stress_logs

    out: dict[str, Any] = {"machine": {"cpus": os.cpu_count(),
                                       "load": list(os.getloadavg())}, "priority": priority}
    with broker_url(url) as u:
        out["broker"] = u
        if rounds:
            out["estop"] = estop_under_flood(u, rounds, flood, priority=priority)
        if behind:
            out["estop_behind"] = stress_estop.estop_behind_commands(
                u, behind, flood or 2000, priority=priority)
        if retained:
            out["retained"] = stress_estop.retained_live(u, retained, priority=priority)
        if flood:
            out["flood"] = command_flood(u, flood, priority=priority)
        if disk_full:
            out["disk_full"] = stress_logs.disk_full(disk_full, u)
    if truncate:
        out["truncated"] = stress_logs.truncated_logs(
            truncate, poise=poise or stress_logs.poise_process)
    if signals:
        out["signals"] = signal_storm(signals)
    if kills:
        from poise.telemetry import stress_procs

        out["sigkill"] = sigkill_orphans(kills)
        out["sigkill_embedded"] = stress_procs.sigkill_embedded_broker(kills)
        out["sigterm_startup"] = stress_procs.sigterm_during_startup(kills)
    out["machine"]["load_after"] = list(os.getloadavg())
    return out


def table(r: dict[str, Any]) -> str:
    """The human-readable report."""
    from poise.telemetry.stress_estop import table_lines

    load = ", ".join(f"{x:.2f}" for x in r["machine"]["load"])
    prio = r.get("priority")
    lines = [f"broker {r.get('broker')}  load {load}  loop.priority "
             f"{'default' if prio is None else prio}"]
    if "estop" in r:
        e = r["estop"]
        d, s, c = e["disarm_ms"], e["latched_ms"], e["responses"]
        lines.append(f"e-stop behind {e['flood']} commands ({e['rounds']} rounds): device "
                     f"acknowledged p50 {d['p50']} / p99 {d['p99']} / max {d['max']} ms "
                     f"(goal p99 <= 20 ms); latched p99 {s['p99']} ms; responses "
                     f"{c['answered']}/{c['expected']} (the service received "
                     f"{e['received_by_service']}), duplicates {c['duplicates']}")
    lines += table_lines(r)
    if "sigkill_embedded" in r:
        from poise.telemetry.stress_procs import table as procs_table

        lines.append("SIGKILL of poise run with its embedded broker: "
                     + procs_table(r["sigkill_embedded"]))
        lines.append("SIGTERM during start-up: " + procs_table(r["sigterm_startup"]))
    if "disk_full" in r:
        d = r["disk_full"]
        lines.append(f"log on a full file system: {d['as_expected']}/{d['runs']} runs went on, "
                     f"said so (event, summary, exit {d['exit_codes']}), tracebacks "
                     f"{d['tracebacks']}")
    if "truncated" in r:
        t = r["truncated"]
        lines.append(f"a log cut at {t['offsets']} offsets: {t['readable']} readable, "
                     f"{t['said_truncated']} said truncated, cycles monotone {t['monotone']}")
    if "flood" in r:
        f = r["flood"]
        c = f["responses"]
        lines.append(f"flood of {f['flood']} commands in {f['seconds']} s: responses "
                     f"{c['answered']}/{c['expected']} (received {f['received_by_service']}), "
                     f"duplicates {c['duplicates']}; missed "
                     f"cycles {f['missed_flood']} of {f['cycles_flood']} (quiet window: "
                     f"{f['missed_quiet']} of {f['cycles_quiet']}); superseded "
                     f"{f['superseded']}, busy {f['busy']}")
    if "signals" in r:
        g = r["signals"]
        early = g.get("interrupted_in_interpreter_startup", 0)
        lines.append(f"SIGINT/SIGTERM at random moments: {g['clean']}/{g['runs']} clean exits "
                     f"(<= 2 s, no traceback, nothing left)"
                     + (f", {early} interrupted in CPython's own start-up before poise's "
                        "first line (its KeyboardInterrupt traceback, nothing left)"
                        if early else "")
                     + f"; exit p50 {g['exit_s']['p50']} / max {g['exit_s']['max']} s")
    if "sigkill" in r:
        k = r["sigkill"]
        lines.append(f"SIGKILL with a simulator child: {k['runs']} runs, processes left "
                     f"{k['processes_left']}, temporary files left {k['temp_files_left']}")
    return "\n".join(lines)


__all__ = ["Service", "command_flood", "estop_under_flood", "interpreter_startup_interrupt",
           "percentiles", "run", "sigkill_orphans", "signal_storm", "table"]
