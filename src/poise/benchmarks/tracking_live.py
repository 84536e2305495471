"""``poise bench tracking --live``: end to end through ``poise run`` and an MQTT broker.

``poise run --config ROBOT --mode fb --mqtt URL --robot-id ID --no-log --json-summary`` runs
as a subprocess (the bundled example: its virtual device, its target ``c``); this process is
the operator's client (paho, its own network thread). After the retained ``$state`` says
``running`` and the arm has had :data:`SETTLE_S` at ``c``:

* **command to motion** (:func:`command_to_motion`): :data:`COMMANDS` ``set/target``
  commands :data:`SPACING_S` apart, alternately ``c + δₖ`` (``|δₖ| =`` :data:`NEAR` of the
  reach, a random direction, seeded) and ``c``. For each, from the publish
  (``time.monotonic()`` here, just before ``publish``) to the first telemetry sample
  (``poise/ID/telemetry``, batches of cycle samples whose ``t`` is the service's
  ``time.monotonic()`` when the cycle's record was made, *after* its setpoint was written;
  one clock on one machine) whose ``target`` is the new target (``adopt_ms``, the goal's
  figure). That sample's ``qa_ref`` is the first setpoint of the move to the new goal: the
  target is planned and adopted between two cycles, and the cycle that records it wrote
  the move's first setpoint. It is the honest "first setpoint that moves toward it": a
  threshold on the setpoint's motion would either fire early on the setpoint's creep in fb
  (the IK follows the sensors' noise: seen as "motion" 150 ms before the loop had the
  target) or late on the move's soft start (from rest within the acceleration limit
  ``qa_rate / 0.1 s``, input shaped). That visible motion is reported too (``motion_ms``:
  from the adoption on, the first setpoint that moved toward where it is 1.5 s later by
  more than 4 σ of its cycle-to-cycle jitter before), and the command's response
  (``answered_ms``: publish → its ``response`` message here). Goal: adopt p99 ≤ 20 ms. A
  target the model cannot hold (answered ``unreachable: …`` or ``unstable: …``; about the
  dancer's demo target, 5 of 30) is planned in full as before and counted apart (``beyond``).
* **streamed** (:func:`streamed`): :data:`STREAMS`, the ``soft_arm_stiff`` circle (50 mm,
  5 s) and the ``double_pendulum`` sine (0.1 m, 4 s) about ``c`` after a 2 s lead-in
  (:class:`~poise.benchmarks.tracking_refs.Reference`), each sample ``set/target`` with
  ``"stream": true`` at 50 Hz for :data:`STREAM_S`, twice (:data:`STAMPINGS`): with its time
  ``"t"`` (this process's monotonic clock; the service maps it to its loop time by the first
  sample's offset) and without (the service stamps each on arrival), each in a run of its
  own. Measured on the telemetry's samples of the second half: the measured task value
  ``x`` (fb: from the measured q) against the reference at the sample's time, RMS; to tell
  the parts apart, the arm against what the loop followed (the records' ``target``: the
  filtered reference), that against the reference and its steady lag, and the loop's
  cycle rate (the records' ``seq`` over their ``t``: the loop's time is its cycle count, so
  a loop that runs fewer cycles than its rate follows sender-stamped samples later and
  later); the run's missed cycles from its JSON summary (``poise run --json-summary``,
  printed when it stops on SIGINT); and ``followed_after_ms``, the first sample's publish
  → the first record that carries the stream (its ``target`` no longer the planned one: a
  streamed target is not planned). Goals: RMS ≤ 8 mm and ≤ 15 mm, 0 missed cycles.

Every figure carries the load average (``os.getloadavg``) before and after it.
"""

from __future__ import annotations

import json
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np

from poise.api.topics import Topics, samples_from_batch
from poise.benchmarks.tracking_refs import Reference, steady_lag
from poise.telemetry.mqtt import MqttConfig
from poise.telemetry.stress import broker_url, percentiles

#: set/target commands per robot, and the time between them [s].
COMMANDS = 30
SPACING_S = 2.5
#: The commanded targets' distance from the example's target [fraction of the reach].
NEAR = 0.02
#: Time at the example's target after ``running`` [s].
SETTLE_S = 6.0
#: The streamed references: robot → (kind, amplitude [task units], period [s]).
STREAMS = {"soft_arm_stiff": ("circle", 0.05, 5.0), "double_pendulum": ("sine", 0.1, 4.0)}
#: Their goals: RMS [task units].
STREAM_GOALS = {"soft_arm_stiff": 8e-3, "double_pendulum": 15e-3}
#: The command-to-motion goal: p99 [ms].
COMMAND_GOAL_MS = 20.0
#: A stream's length [s] (measured over its second half), and its sample rate [Hz].
STREAM_S = 20.0
STREAM_HZ = 50.0
#: How the streamed samples are stamped: with the sender's time ``t`` (True: the service
#: maps it to loop time by the offset of the first sample), and without (False: the time they
#: arrive). Each runs: they fail differently.
STAMPINGS = (True, False)
#: How long after the spacing a command's response is waited for [s].
ANSWER_TIMEOUT_S = 30.0
#: How an accepted answer to a target the model cannot hold begins (the full plan's answers).
BEYOND = ("unreachable", "unstable")
#: Waiting for ``running`` (a first start compiles for about 90 s) [s].
START_TIMEOUT = 300.0


class LiveRun:
    """``poise run`` for ``robot`` in fb on ``url`` as a subprocess, and a client of its
    topics collecting its telemetry samples and ``$state`` messages."""

    def __init__(self, robot: str, url: str) -> None:
        from poise.telemetry.mqtt_client import paho_client

        self.robot, self.url = robot, url
        self.robot_id = f"track-{uuid.uuid4().hex[:8]}"
        self.topics = Topics(self.robot_id)
        self.samples: list[dict[str, Any]] = []
        self.states: list[dict[str, Any]] = []
        #: Command id → (this machine's monotonic time its response arrived, the response).
        self.responses: dict[str, tuple[float, dict[str, Any]]] = {}
        self._lock = threading.Lock()
        mqtt = MqttConfig.from_url(url, robot_id=self.robot_id)
        self.client = paho_client(mqtt, f"{self.robot_id}-bench")
        self.client.on_message = self._on_message
        self.client.connect(mqtt.host, mqtt.port, keepalive=30)  # before the run: no leak
        self.client.subscribe([(self.topics.telemetry, 0), (self.topics.state, 1),
                               (self.topics.response, 1)])
        self.client.loop_start()
        self._out = tempfile.TemporaryFile("w+")  # noqa: SIM115 - closed in stop()
        self._err = tempfile.TemporaryFile("w+")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "poise", "run", "--config", robot, "--mode", "fb",
             "--mqtt", url, "--robot-id", self.robot_id, "--duration", "3600", "--no-log",
             "--json-summary", "--quiet"],
            stdout=self._out, stderr=self._err)  # files: a full pipe would stall the run

    def _on_message(self, _client: Any, _userdata: Any, message: Any) -> None:
        doc = json.loads(message.payload)
        with self._lock:
            if message.topic == self.topics.state:
                self.states.append({**doc, "received": time.monotonic()})
            elif message.topic == self.topics.response:
                self.responses.setdefault(str(doc.get("id", "")), (time.monotonic(), doc))
            else:
                self.samples.extend(samples_from_batch(doc))

    def wait_running(self, timeout: float = START_TIMEOUT) -> None:
        """Until ``$state`` says ``running``.

        Raises:
            RuntimeError: the run ended or did not get there within ``timeout``.
        """
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self._lock:
                if self.states and self.states[-1].get("state") == "running":
                    return
            if self.proc.poll() is not None:
                self._err.seek(0)
                raise RuntimeError(f"poise run ({self.robot}) ended before running: "
                                   f"{self._err.read()[-2000:]}")
            time.sleep(0.05)
        raise RuntimeError(f"poise run ({self.robot}) not running within {timeout:g} s")

    def since(self, t: float) -> list[dict[str, Any]]:
        """The samples of cycles that wrote a setpoint (a record of a cycle that did not
        has empty ``qa_ref``, and may have empty ``target`` and ``x``) made at or after
        ``t`` (this machine's monotonic time) so far."""
        with self._lock:
            return [s for s in self.samples if s["t"] >= t and s["qa_ref"] and s["target"]
                    and s["x"]]

    def wait_response(self, ident: str, timeout: float) -> tuple[float, dict[str, Any]] | None:
        """The response to command ``ident`` (its arrival time here and the message), waiting
        for it up to ``timeout`` s (a target planned in full on a loaded machine takes
        seconds); None if none came."""
        end = time.monotonic() + timeout
        while True:
            with self._lock:
                got = self.responses.get(ident)
            if got is not None or time.monotonic() >= end or self.proc.poll() is not None:
                return got
            time.sleep(0.02)

    def publish(self, name: str, doc: dict[str, Any], qos: int = 1) -> float:
        """Publish ``set/<name>``; the monotonic time just before."""
        payload = json.dumps(doc)
        t = time.monotonic()
        self.client.publish(self.topics.set(name), payload, qos=qos)
        return t

    def stop(self, timeout: float = 60.0) -> dict[str, Any]:
        """SIGINT the run, wait for it and return its JSON summary ({} if none)."""
        self.client.loop_stop()
        self.client.disconnect()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._out.seek(0)
        out = self._out.read()
        self._out.close()
        self._err.close()
        start = out.find("{")
        try:
            return dict(json.loads(out[start:])) if start >= 0 else {}
        except ValueError:
            return {}


def _near_targets(centre: np.ndarray, reach: float, count: int, seed: int) -> list[np.ndarray]:
    """``count`` targets, alternately ``centre + δ`` (``|δ| = NEAR · reach``, a random
    direction) and ``centre``."""
    rng = random.Random(seed)
    out = []
    for k in range(count):
        if k % 2:
            out.append(centre.copy())
            continue
        d = np.array([rng.gauss(0.0, 1.0) for _ in centre])
        out.append(centre + NEAR * reach * d / np.linalg.norm(d))
    return out


def command_to_motion(run: LiveRun, centre: np.ndarray, reach: float, count: int = COMMANDS,
                      seed: int = 33) -> dict[str, Any]:
    """``count`` set/target commands (see the module docstring): latency percentiles of the
    adoption (``adopt_ms``, the goal's figure) and of the visible motion (``motion_ms``).
    A target the model cannot hold (answered ``unreachable: …`` or ``unstable: …``: an
    accepted answer that goes to the closest held configuration) keeps the full plan's answer
    (issue 33: "unreachable and unstable targets keep today's answers"): counted apart
    (``beyond``, with its answer times), not in the goal's figures."""
    load0 = list(os.getloadavg())
    adopt, motion, answered, missing, refused = [], [], [], 0, []
    beyond: list[float] = []  # answers of targets the model cannot hold (planned in full)
    for k, target in enumerate(_near_targets(centre, reach, count, seed)):
        t_pub = run.publish("target", {"id": f"c{k}", "value": target.tolist()})
        time.sleep(SPACING_S)
        response = run.wait_response(f"c{k}", ANSWER_TIMEOUT_S)
        if response is not None:
            answered.append(1e3 * (response[0] - t_pub))
            if not response[1].get("accepted", True):
                refused.append(str(response[1].get("reason", "")))
            elif str(response[1].get("reason", "")).startswith(BEYOND):
                beyond.append(answered[-1])
                continue
        after = run.since(t_pub - 0.5)
        k_hit = next((i for i, s in enumerate(after) if s["t"] >= t_pub
                      and np.allclose(s["target"], target, atol=1e-9)), None)
        if k_hit is None:
            missing += 1
            continue
        adopt.append(1e3 * (after[k_hit]["t"] - t_pub))
        moved = _first_motion(after, k_hit)
        if moved is not None:
            motion.append(1e3 * (moved - t_pub))
    return {"commands": count, "spacing_s": SPACING_S, "near_of_reach": NEAR,
            "adopt_ms": percentiles(adopt), "motion_ms": percentiles(motion),
            "answered_ms": percentiles(answered), "refused": refused,
            "beyond": len(beyond), "beyond_answered_ms": percentiles(beyond),
            "not_seen": missing, "load_avg_before": load0, "load_avg": list(os.getloadavg()),
            "goal": f"adopt p99 <= {COMMAND_GOAL_MS:g} ms",
            "met": bool(adopt) and missing == 0
            and percentiles(adopt)["p99"] <= COMMAND_GOAL_MS}  # type: ignore[operator]


def _first_motion(samples: list[dict[str, Any]], adopted: int) -> float | None:
    """The time of the first sample from ``adopted`` on (the loop cannot move toward a goal
    it does not have) whose setpoint has moved from the one before it toward where it is
    1.5 s later by more than 4 σ of its cycle-to-cycle jitter over the samples before it
    (in fb the setpoint creeps with the sensors' noise); None: it did not."""
    if adopted < 3:
        return None
    base = np.array([s["qa_ref"] for s in samples[:adopted]], dtype=float)
    jitter = float(np.linalg.norm(np.diff(base, axis=0).std(axis=0)))
    ref0, t_adopt = base[-1], samples[adopted]["t"]
    later = next((s for s in samples[adopted:] if s["t"] >= t_adopt + 1.5), None)
    if later is None:
        return None
    d = np.asarray(later["qa_ref"], dtype=float) - ref0
    if np.linalg.norm(d) <= 4 * jitter:
        return None
    d /= np.linalg.norm(d)
    for s in samples[adopted:]:
        if float((np.asarray(s["qa_ref"], dtype=float) - ref0) @ d) > max(4 * jitter, 1e-12):
            return float(s["t"])
    return None


def streamed(run: LiveRun, centre: np.ndarray, kind: str, amplitude: float, period: float,
             seconds: float = STREAM_S, stamped: bool = True) -> dict[str, Any]:
    """Stream the reference (see the module docstring), each sample with its time ``t``
    (``stamped``) or without (the service stamps it on arrival); the RMS over its second
    half, the steady lag of what the loop followed, and the loop's cycle rate then."""
    recent = run.since(time.monotonic() - 0.5)
    if not recent:
        return {"error": "no telemetry before the stream"}
    x0 = np.asarray(recent[-1]["x"], dtype=float)
    held = recent[-1]["target"]  # the planned target the records carry before the stream
    ref = Reference(kind, x0, centre, amplitude, 1.0 / period)
    load0 = list(os.getloadavg())
    t0 = time.monotonic()
    end, k, late = t0 + ref.lead_in + seconds, 0, 0
    while True:
        due = t0 + k / STREAM_HZ
        if due > end:
            break
        wait = due - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        else:
            late += wait < -0.5 / STREAM_HZ
        now = time.monotonic()
        doc = {"id": f"s{k}", "value": ref.at(now - t0).tolist(), "stream": True}
        run.publish("target", {**doc, "t": now} if stamped else doc, qos=0)
        k += 1
    time.sleep(0.5)
    first = next((s for s in run.since(t0) if s["target"] != held), None)
    start = t0 + ref.lead_in + seconds / 2
    window = [s for s in run.since(start) if s["t"] <= end]
    if not window:
        return {"error": "no telemetry in the window"}
    t = np.array([s["t"] for s in window]) - t0
    x = np.array([s["x"] for s in window], dtype=float)
    err = np.linalg.norm(x - ref.values(t), axis=1)
    followed = np.array([s["target"] for s in window], dtype=float)  # the filtered x_d
    lead = np.linalg.norm(followed - ref.values(t), axis=1)
    lag, _, _ = steady_lag(t, followed, ref.values)
    span = window[-1]["t"] - window[0]["t"]
    cycle_hz = (window[-1]["seq"] - window[0]["seq"]) / span if span > 0 else math.nan
    with run._lock:
        clamped = sum(1 for s in run.states if s.get("target") == "clamped"
                      and t0 <= s["received"] <= end)
    return {"kind": kind, "amplitude": amplitude, "period_s": period, "centre": centre.tolist(),
            "stamped": stamped, "lag_followed_s": lag, "cycle_hz": cycle_hz,
            "samples_sent": k, "sent_late": late, "telemetry_samples": len(window),
            "followed_after_ms": None if first is None else 1e3 * (first["t"] - t0),
            "rms": math.sqrt(float(np.mean(err**2))), "max": float(err.max()),
            "rms_to_followed": math.sqrt(float(np.mean(np.linalg.norm(x - followed, axis=1)
                                                       ** 2))),
            "rms_followed_to_reference": math.sqrt(float(np.mean(lead**2))),
            "clamped_states": clamped, "load_avg_before": load0,
            "load_avg": list(os.getloadavg())}


def _robot_run(robot: str, url: str, commands: int, stream_seconds: float,
               say: Callable[[str], Any]) -> dict[str, Any]:
    """One robot: a run for the commands and, for the robots of :data:`STREAMS`, a run of
    its own for each way of streaming (:data:`STAMPINGS`): their missed cycles are the
    stream's."""
    from poise.controller.config import load_config
    from poise.examples import resolve_config
    from poise.models.registry import load_model

    config = load_config(resolve_config(robot), {})
    centre = np.asarray(config.algorithm.target, dtype=float)
    reach = float(load_model(robot).reach)
    out: dict[str, Any] = {"robot": robot, "rate_hz": config.loop.rate, "streams": []}
    parts: list[tuple[str, bool]] = [("commands", False)]
    if robot in STREAMS:
        parts += [("stream", stamped) for stamped in STAMPINGS]
    for part, stamped in parts:
        say(f"{robot}: {part}")
        run = LiveRun(robot, url)
        got: dict[str, Any] = {}
        try:
            run.wait_running()
            time.sleep(SETTLE_S)
            if part == "commands":
                got = out["commands"] = command_to_motion(run, centre, reach, commands)
            else:
                kind, amplitude, period = STREAMS[robot]
                got = streamed(run, centre, kind, amplitude, period, stream_seconds, stamped)
                out["streams"].append(got)
        finally:
            summary = run.stop()
        timing = summary.get("timing") or {}
        got["run"] = {"missed": timing.get("missed"), "cycles": timing.get("cycles"),
                      "state": summary.get("state"), "reason": summary.get("reason"),
                      "exit": run.proc.returncode}
        if part == "stream":
            goal = STREAM_GOALS[robot]
            got.update(goal_rms=goal, met=got.get("rms", math.inf) <= goal
                       and timing.get("missed") == 0)
    return out


def run(robots: list[str], *, url: str | None = None, commands: int = COMMANDS,
        stream_seconds: float = STREAM_S, progress: Callable[[str], Any] | None = None
        ) -> dict[str, Any]:
    """The live measurements for ``robots`` (see the module docstring); JSON-ready."""
    say = progress or (lambda _text: None)
    t0 = time.perf_counter()
    with broker_url(url) as broker:
        results = []
        for robot in robots:
            try:
                results.append(_robot_run(robot, broker, commands, stream_seconds, say))
            except (RuntimeError, ValueError, OSError) as exc:  # the next robot still runs
                results.append({"robot": robot, "error": f"{type(exc).__name__}: {exc}",
                                "streams": []})
    return {"benchmark": "tracking-live", "schema": 1, "broker": broker, "robots": results,
            "goals": {"command_to_motion_p99_ms": COMMAND_GOAL_MS,
                      "stream_rms": STREAM_GOALS, "missed": 0},
            "wall_s": time.perf_counter() - t0, "load_avg": list(os.getloadavg())}


def table(result: dict[str, Any]) -> str:
    """The live results as text."""
    lines = [f"{'robot':16} {'Hz':>4} {'adopt p50':>9} {'p99':>7} {'max':>7} "
             f"{'motion p50':>10} {'p99':>7} {'answer p50':>10} {'missed':>7} {'load':>9}"]
    lines.append("-" * len(lines[0]))
    for r in result["robots"]:
        if "error" in r:
            lines.append(f"{r['robot']:16} {r['error']}")
            continue
        c = r.get("commands") or {}
        run_ = c.get("run") or {}
        a, m, ans = c.get("adopt_ms") or {}, c.get("motion_ms") or {}, c.get("answered_ms") or {}
        load = f"{c['load_avg_before'][0]:.1f}-{c['load_avg'][0]:.1f}" if c else "-"

        def ms(v: Any) -> str:
            return "-" if v is None else f"{v:.1f}"

        lines.append(f"{r['robot']:16} {r['rate_hz']:4.0f} {ms(a.get('p50')):>9} "
                     f"{ms(a.get('p99')):>7} {ms(a.get('max')):>7} {ms(m.get('p50')):>10} "
                     f"{ms(m.get('p99')):>7} {ms(ans.get('p50')):>10} "
                     f"{run_.get('missed')!s:>7} {load:>9}")
    lines.append(f"command to motion [ms], publish → first telemetry sample with the new "
                 f"target (adopt) / with the setpoint visibly moving toward it (motion), → "
                 f"its response (answer); goal adopt p99 <= {COMMAND_GOAL_MS:g} ms; missed "
                 "cycles of the whole run")
    for r in result["robots"]:
        c = r.get("commands") or {}
        if c.get("not_seen") or c.get("refused"):
            lines.append(f"{r['robot']}: {c.get('not_seen')} targets never adopted, refused: "
                         f"{'; '.join(c.get('refused') or []) or 'none'}")
        if c.get("beyond"):
            b = c.get("beyond_answered_ms") or {}
            lines.append(f"{r['robot']}: {c['beyond']} targets beyond what the model holds "
                         f"(answered unreachable or unstable after p50 {b.get('p50')} / max "
                         f"{b.get('max')} ms: planned in full, not in the goal's figures)")
        run_ = c.get("run") or {}
        if run_.get("state") == "fault":
            lines.append(f"{r['robot']}: the run ended in a fault: {run_.get('reason')}")
    for r in result["robots"]:
        for s in r.get("streams", []):
            how = "with t" if s.get("stamped") else "stamped on arrival"
            if "rms" not in s:
                lines.append(f"{r['robot']}: stream ({how}): {s.get('error')}")
                continue
            after = "-" if s["followed_after_ms"] is None else f"{s['followed_after_ms']:.1f}"
            lines.append(
                f"{r['robot']}: streamed {s['kind']} {s['amplitude'] * 1e3:g} mm / "
                f"{s['period_s']:g} s at 50 Hz, {how}, fb: RMS {s['rms'] * 1e3:.2f} mm, max "
                f"{s['max'] * 1e3:.2f} mm (goal {s['goal_rms'] * 1e3:g} mm; arm → followed "
                f"{s['rms_to_followed'] * 1e3:.2f}, followed → reference "
                f"{s['rms_followed_to_reference'] * 1e3:.2f} mm, lag "
                f"{s['lag_followed_s']:+.3f} s; loop {s['cycle_hz']:.1f} Hz of "
                f"{r['rate_hz']:g}), missed cycles {s['run']['missed']} of "
                f"{s['run']['cycles']}, clamped states {s['clamped_states']}, first sample "
                f"followed after {after} ms, load {s['load_avg_before'][0]:.1f}-"
                f"{s['load_avg'][0]:.1f}: {'met' if s['met'] else 'MISSED'}")
    lines.append(f"broker {result['broker']}; wall {result['wall_s']:.0f} s")
    return "\n".join(lines)


__all__ = ["COMMANDS", "STREAMS", "LiveRun", "command_to_motion", "run", "streamed", "table"]
