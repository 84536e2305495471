"""Control-loop benchmark: the controller against the virtual device (a separate process).

For each rate (default 500 Hz and 1 kHz): spawn ``poise device sim``, run the controller
(Algorithm 1, feedback mode, device pacing; with telemetry and the experiment log when the
caller passes ``attach``, e.g. :func:`poise.telemetry.service.bench_attach`) for ``seconds``,
and report lateness, compute time and sensor-frame-to-setpoint latency percentiles [µs] and
missed cycles (the goal at 1 kHz: :data:`GOAL`). With ``follow="stream"`` the loop follows a
moving reference over the measured window (:class:`StreamFeeder`: a ``reference`` stream of
50 Hz samples), so the cost of following it each cycle (reading the stream, the filter, the
lead point) is in the figures. The machine's load average is recorded with the results, and
on a virtual machine the CPU time the hypervisor took during the measured window (``steal``,
from ``/proc/stat``): no priority protects the loop from it, and it dominates the tail (on
the 2-core machine of 2026-12-02, two 30 s runs of the same code: 0.3 % steal, p99 141 µs;
2.4 % steal, p99 299 µs).
"""

from __future__ import annotations

import math
import os
import platform
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

#: ``attach(controller) -> object with stop()``: starts telemetry/logging for a run.
Attach = Callable[[Any], Any]

GOAL = {"rate_hz": 1000, "latency_p99_us": 200.0, "latency_p999_us": 500.0, "missed": 0}


def run_one(model: str, rate: float, seconds: float, target: list[float],
            pacing: str = "device", attach: Attach | None = None,
            compiled: bool = True, process: str = "own", priority: int | None = None,
            busy_poll: bool = False, cpu: int | None = None, wire: bool = True,
            follow: str = "none", settings: Mapping[str, Any] | None = None
            ) -> dict[str, Any]:
    """One run; returns the timing summary plus the run's outcome. ``compiled``: the cycle
    on the compiled kernels (else the numpy reference); ``process``: the controller in a
    process of its own (``own``, as ``poise run``) or in this one (``shared``);
    ``priority``: ``loop.priority`` (SCHED_FIFO where granted, 0: the normal scheduler;
    None: the configuration's default); ``busy_poll``: ``loop.busy_poll``; ``cpu``:
    ``loop.cpu`` (None: the configuration's default); ``wire``: ``loop.wire``; ``follow``:
    ``"stream"`` follows a moving reference over the window (:class:`StreamFeeder`), else
    ``"none"`` (the target held); ``settings``: more run-configuration keys and values, after
    the bench's own (``{"limits.sensor_fault": 5}``)."""
    from poise.controller.config import load_config
    from poise.controller.realtime import make_controller

    over = {"model.name": (model, "bench"), "loop.rate": (rate, "bench"),
            "algorithm.target": (target, "bench"), "mqtt.enabled": (False, "bench"),
            "loop.pacing": (pacing, "bench"), "limits.qa_rate": ([0.05], "bench"),
            "loop.compiled": (compiled, "bench"), "loop.process": (process, "bench"),
            "loop.busy_poll": (busy_poll, "bench"), "loop.wire": (wire, "bench")}
    if priority is not None:
        over["loop.priority"] = (priority, "bench")
    if cpu is not None:
        over["loop.cpu"] = (cpu, "bench")
    over.update({key: (value, "bench") for key, value in (settings or {}).items()})
    load0 = os.getloadavg()[0]
    extras = None
    try:
        with make_controller(load_config(None, over)) as ctl:
            extras = attach(ctl) if attach is not None else None
            resp = ctl.start("bench")
            if not resp.accepted:
                raise RuntimeError(f"controller did not start: {resp.reason}")
            time.sleep(1.0)  # settle the transient, then measure a clean window
            feeder = StreamFeeder(ctl, model, target) if follow == "stream" else None
            if feeder is not None:
                feeder.start()
                time.sleep(1.0)  # the stream's start and its filter's transient
            ctl.reset_timing()
            stolen = cpu_times()
            time.sleep(seconds)
            s = ctl.summary()
            steal = steal_pct(stolen, cpu_times())
            if feeder is not None:
                feeder.stop()
    finally:
        if extras is not None:
            extras.stop()
    t = s["timing"]
    return {
        "model": model, "rate_hz": rate, "pacing": pacing, "seconds": seconds,
        "cycle": "compiled" if compiled else "numpy", "process": process, "follow": follow,
        "stream": feeder.report() if feeder is not None else None,
        "priority": s.get("realtime", {}).get("priority", 0),
        "scheduler": s.get("realtime", {}).get("scheduler", ""),
        "busy_poll": bool(s.get("realtime", {}).get("busy_poll", False)),
        "cpu": s.get("realtime", {}).get("cpu"),
        "wire": s.get("wire", {}).get("answered", 0) > 0,
        "wire_cycles": s.get("wire", {}),
        "state": s["state"], "reason": s.get("reason", ""), "task_error": s["task_error"],
        "target_status": s.get("target_status", ""),
        "telemetry": attach is not None,
        "cycles": t["cycles"], "missed": t["missed"], "missed_pct": t["missed_pct"],
        "coalesced": t["coalesced"], "gaps": t.get("gaps", 0),
        "overruns": t["overruns"], "lateness_us": t["lateness_us"],
        "compute_us": t["compute_us"], "latency_us": t["latency_us"],
        "period_us": t["period_us"], "loadavg_before": round(load0, 2),
        "loadavg_after": round(os.getloadavg()[0], 2), "steal_pct": steal,
    }


class StreamFeeder:
    """A moving reference streamed to a running controller, as an operator's program sends
    it: every :attr:`CHUNK_S` a ``reference`` command with the samples of the next two
    chunks (50 Hz, with velocities, stamped on the sender's monotonic clock), a sine of
    :attr:`AMPLITUDE` of the robot's reach about ``target`` at :attr:`FREQUENCY_HZ` on the
    first task coordinate, and the cosine on the second where there is one (a circle).

    Args:
        ctl: the running controller (``submit``).
        model: the robot's model name (its reach and task dimension).
        target: the centre (task units).
    """

    CHUNK_S = 0.5
    RATE_HZ = 50.0
    AMPLITUDE = 0.02
    FREQUENCY_HZ = 0.25

    def __init__(self, ctl: Any, model: str, target: list[float]) -> None:
        from poise.models.registry import load_model

        m = load_model(model)
        self._ctl = ctl
        self._centre = [float(v) for v in target]
        self._radius = self.AMPLITUDE * float(m.reach)
        self._t0 = time.monotonic()
        self._sent_to = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stream-feeder", daemon=True)
        self.sent = self.refused = 0
        self.reasons: list[str] = []

    def _sample(self, t: float) -> dict[str, Any]:
        w = 2.0 * math.pi * self.FREQUENCY_HZ
        x, v = list(self._centre), [0.0] * len(self._centre)
        x[0] += self._radius * math.sin(w * t)
        v[0] = self._radius * w * math.cos(w * t)
        if len(x) > 1:
            x[1] += self._radius * (math.cos(w * t) - 1.0)
            v[1] = -self._radius * w * math.sin(w * t)
        return {"t": round(self._t0 + t, 6), "x": x, "v": v}

    def _send(self) -> None:
        from poise.api.bus import Command

        now = time.monotonic() - self._t0
        dt = 1.0 / self.RATE_HZ
        upto = now + 2.0 * self.CHUNK_S
        ts = [k * dt for k in range(math.floor(self._sent_to / dt) + 1, math.floor(upto / dt))]
        if not ts:
            return
        resp = self._ctl.submit(Command("reference", [self._sample(t) for t in ts],
                                        id=f"feed{self.sent}", source="bench"))
        self.sent += 1
        self._sent_to = ts[-1]
        if not resp.accepted:
            self.refused += 1
            if len(self.reasons) < 3:
                self.reasons.append(str(resp.reason))

    def _run(self) -> None:
        while not self._stop.is_set():
            self._send()
            self._stop.wait(self.CHUNK_S)

    def start(self) -> None:
        """Send the first chunk (the stream begins where the arm is) and go on in a thread."""
        self._send()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5.0)

    def report(self) -> dict[str, Any]:
        """What was streamed: commands sent and refused (with the first reasons), the
        reference's radius [task units] and frequency [Hz]."""
        return {"commands": self.sent, "refused": self.refused, "reasons": self.reasons,
                "radius": self._radius, "freq_hz": self.FREQUENCY_HZ}


def cpu_times() -> tuple[int, int] | None:
    """``(steal, total)`` CPU time of the whole machine so far [clock ticks] from
    ``/proc/stat`` (Linux); None where it cannot be read."""
    try:
        with open("/proc/stat") as fh:
            fields = fh.readline().split()
    except OSError:
        return None
    if len(fields) < 9 or fields[0] != "cpu":
        return None
    ticks = [int(x) for x in fields[1:9]]  # user nice system idle iowait irq softirq steal
    return ticks[7], sum(ticks)


def steal_pct(before: tuple[int, int] | None, after: tuple[int, int] | None
              ) -> float | None:
    """The share of the machine's CPU time between two :func:`cpu_times` that the
    hypervisor gave to someone else (\"steal\") [%]: on a virtual machine, time in which
    neither the loop nor the virtual device could run whatever their priority, which shows
    as latency outliers and device bursts; None where unknown."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    return round(100.0 * (after[0] - before[0]) / (after[1] - before[1]), 2)


#: A reachable target of each model the benchmark knows (task units).
TARGETS: dict[str, tuple[float, ...]] = {
    "double_pendulum": (0.5,), "tendon_3link": (0.5, 1.5), "soft_arm_stiff": (0.2, -0.9),
    "soft_arm_soft": (0.2, -0.9), "dancer": (0.1, 0.95)}


def run(seconds: float = 60.0, rates: tuple[float, ...] = (500.0, 1000.0),
        model: str = "double_pendulum", target: tuple[float, ...] | None = None,
        pacing: str = "device", attach: Attach | None = None,
        reference: bool = False, processes: tuple[str, ...] = ("own",),
        priorities: tuple[int | None, ...] = (None,),
        busy_polls: tuple[bool, ...] = (False,),
        cpus: tuple[int | None, ...] = (None,),
        wires: tuple[bool, ...] = (True,), follows: tuple[str, ...] = ("none",),
        settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """All rates on the compiled cycle in each of ``processes`` at each of ``priorities``
    with each of ``busy_polls`` (``loop.busy_poll``), ``cpus`` (``loop.cpu``) and ``wires``
    (``loop.wire``) and ``follows`` (:func:`run_one`'s ``follow``), and with ``reference``
    each rate again
    on the numpy reference in one process at the normal scheduler (the before/after in one
    run); a priority None is the configuration's default; ``settings``: :func:`run_one`'s,
    for every run; JSON-ready."""
    goal = list(target if target is not None else TARGETS.get(model, (0.5,)))
    variants = [(True, p, prio, busy, cpu, wire, follow) for p in processes
                for prio in priorities for busy in busy_polls for cpu in cpus for wire in wires
                for follow in follows] + \
        ([(False, "shared", 0, False, None, False, "none")] if reference else [])
    runs = [run_one(model, r, seconds, goal, pacing, attach, compiled, process, prio, busy,
                    cpu, wire, follow, settings)
            for r in rates for compiled, process, prio, busy, cpu, wire, follow in variants]
    return {"benchmark": "loop", "goal": GOAL, "runs": runs,
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                        "platform": platform.platform()}}


def _cell(value: float | None, width: int) -> str:
    return f"{'-' if value is None else format(value, '.0f'):>{width}}"


def _following(stream: dict[str, Any] | None) -> str:
    if stream is None:
        return ""
    refused = f", {stream['refused']} refused: {stream['reasons'][:1]}" if stream["refused"] \
        else ""
    return (f"  following a stream (radius {stream['radius']:.3g} at {stream['freq_hz']:g} Hz, "
            f"{stream['commands']} reference commands{refused})")


def _steal(value: float | None) -> str:
    return f"{'-' if value is None else format(value, '.1f') + '%':>5}"


def table(result: dict[str, Any]) -> str:
    """Human-readable table."""
    head = (f"{'cycle':>8} {'process':>7} {'prio':>4} {'poll':>5} {'cpu':>3} {'wire':>4} "
            f"{'rate':>6} "
            f"{'cycles':>7} "
            f"{'missed':>7} "
            f"{'%':>7} {'coal.':>6} "
            f"{'lat p50':>8} {'p99':>7} {'p99.9':>7} "
            f"{'late p50':>9} {'p99':>7} {'p99.9':>7} {'comp p50':>9} {'load':>5} "
            f"{'steal':>5}")
    tele = "with MQTT telemetry and MCAP logging" if result["runs"] and \
        result["runs"][0]["telemetry"] else "without telemetry or logging"
    model = result["runs"][0]["model"] if result["runs"] else ""
    lines = [f"control loop of {model} vs virtual device, {tele} (µs; latency = sensor frame"
             " → setpoint; coal. = device bursts, not missed)", head]
    for r in result["runs"]:
        lat, late, comp = r["latency_us"], r["lateness_us"], r["compute_us"]
        lines.append(
            f"{r.get('cycle', 'numpy'):>8} {r.get('process', 'shared'):>7} "
            f"{r.get('priority', 0):>4} {'busy' if r.get('busy_poll') else 'sleep':>5} "
            f"{'-' if r.get('cpu') is None else r['cpu']:>3} "
            f"{'on' if r.get('wire') else 'off':>4} "
            f"{r['rate_hz']:>6.0f} {r['cycles']:>7} {r['missed']:>7} "
            f"{r['missed_pct']:>6.3f}% {r['coalesced']:>6} "
            + " ".join(_cell(row.get(p), w) for row, p, w in (
                (lat, "p50", 8), (lat, "p99", 7), (lat, "p99.9", 7), (late, "p50", 9),
                (late, "p99", 7), (late, "p99.9", 7), (comp, "p50", 9)))
            + f" {r['loadavg_before']:>5.1f} {_steal(r.get('steal_pct'))}  {r['state']}"
            + _following(r.get("stream")))
    g = result["goal"]
    lines.append(f"goal at {g['rate_hz']} Hz: {g['missed']} missed, latency p99 ≤ "
                 f"{g['latency_p99_us']:.0f} µs, p99.9 ≤ {g['latency_p999_us']:.0f} µs "
                 "(prio: SCHED_FIFO priority, 0 = normal scheduler; poll: loop.busy_poll; "
                 "cpu: the loop's CPU, loop.cpu, - = not pinned; wire: cycles answered on "
                 "the wire path, loop.wire; steal: % of the machine's CPU time the "
                 "hypervisor took during the window, - = unknown)")
    return "\n".join(lines)
