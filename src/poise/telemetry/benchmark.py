"""Telemetry and logging benchmark (``bench/telemetry.py``, ``poise bench telemetry``).

Measures, on this machine:

1. **MQTT end-to-end latency**: a 1 kHz :class:`SyntheticLoop` → :class:`MqttBridge` (50 Hz
   batches) → broker → :class:`Recorder`; per batch, arrival minus the ``t`` of its newest
   sample (the wire path) and of its oldest (adds the batching wait); plus the share of
   produced samples delivered. Brokers: the machine's Mosquitto (if one listens on 1883), the
   embedded amqtt broker in a child process, and in a thread of this process.
2. **Broker relay rate**: one publisher sends telemetry-sized QoS-0 messages as fast as it can
   for a few seconds; messages per second arriving at one subscriber.
3. **Log throughput**: samples per second :class:`LogWriter` turns into MCAP (4 messages each),
   bytes per sample on disk.
4. **Loop disturbance**: one 1 kHz timing thread runs throughout while phases alternate —
   nothing, experiment log, MQTT (embedded broker in a child process), MQTT with the broker in
   this process, log + MQTT — and its wake-up lateness is reported per phase (same run, phases
   interleaved twice so slow drifts of the machine's load hit all of them), with this process's
   CPU time per second (the GIL-holding work the loop thread competes with). A subscriber
   process stands in for the dashboard during the MQTT phases.

Numbers depend on the machine's load; the JSON records the load average next to them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

import numpy as np

from poise.api.bus import Command, CycleSample, SampleQueue
from poise.api.topics import encode_batch
from poise.telemetry.broker import EmbeddedBroker, free_port, wait_listening
from poise.telemetry.client import Recorder, forget
from poise.telemetry.log import LogWriter
from poise.telemetry.mqtt import MqttBridge, MqttConfig
from poise.telemetry.mqtt_client import mqtt_client
from poise.telemetry.synthetic import SyntheticLoop


def _pct(values: Any) -> dict[str, float]:
    a = np.asarray(values, dtype=float)
    if a.size == 0:
        return {"n": 0}
    return {"n": int(a.size), "p50": float(np.percentile(a, 50)),
            "p99": float(np.percentile(a, 99)), "max": float(a.max())}


def _rid() -> str:
    return "bench-" + uuid.uuid4().hex[:8]


def mqtt_latency(url: str, seconds: float, rate_hz: float = 50.0) -> dict[str, Any]:
    """End-to-end latency producer → bridge → broker → subscriber, in ms."""
    cfg = MqttConfig.from_url(url, robot_id=_rid(), rate_hz=rate_hz)
    newest: list[float] = []
    oldest: list[float] = []
    seqs: list[tuple[int, int]] = []

    def on_message(m) -> None:
        if m.name == "telemetry":
            doc = m.json()
            newest.append((m.t - doc["t"][-1]) * 1e3)
            oldest.append((m.t - doc["t"][0]) * 1e3)
            seqs.append((doc["seq0"], doc["n"]))

    with SyntheticLoop(1000) as loop, Recorder(cfg, on_message=on_message):
        bridge = MqttBridge(loop, loop.subscribe(), loop.events(), cfg).start()
        bridge.wait_connected(5)
        time.sleep(0.5)
        newest.clear()
        oldest.clear()
        seqs.clear()
        time.sleep(seconds)
        bridge.stop()
    forget(cfg)
    delivered = sum(n for _, n in seqs)
    span = seqs[-1][0] + seqs[-1][1] - seqs[0][0] if seqs else 0
    return {"url": url, "batches_per_s": len(seqs) / seconds,
            "samples_per_s": delivered / seconds,
            "delivered_fraction": delivered / span if span else 0.0,
            "newest_ms": _pct(newest), "oldest_ms": _pct(oldest)}


def relay_rate(url: str, seconds: float, payload_bytes: int) -> dict[str, Any]:
    """Messages/s one subscriber receives while one publisher floods QoS 0 messages."""
    cfg = MqttConfig.from_url(url, robot_id=_rid())
    topic = f"poise/{cfg.robot_id}/telemetry"
    payload = b"x" * payload_bytes
    got = [0]

    def on_message(_m) -> None:
        got[0] += 1

    async def flood() -> int:
        sent = 0
        async with mqtt_client(cfg) as client:
            t_end = time.monotonic() + seconds
            while time.monotonic() < t_end:
                for _ in range(50):
                    await client.publish(topic, payload, qos=0)
                sent += 50
                await asyncio.sleep(0)  # let paho's socket drain
        return sent

    with Recorder(cfg, topic_filter=topic, on_message=on_message):
        t0 = time.monotonic()
        sent = asyncio.run(flood())
        time.sleep(1.0)
        elapsed = time.monotonic() - t0 - 1.0
    return {"url": url, "payload_bytes": payload_bytes, "sent_per_s": sent / elapsed,
            "received_per_s": got[0] / elapsed, "received_fraction": got[0] / max(sent, 1)}


def _samples(n: int, dof: int = 5) -> list[CycleSample]:
    q = tuple(0.1 * i for i in range(dof))
    return [CycleSample(t=1.0 + i * 1e-3, seq=i, state="running", q=q, q_bar=q, qa_ref=q[:3],
                        tau_ff=q[:3], target=(0.1, 0.2, 0.3), x=(0.1, 0.2, 0.3),
                        task_error=1e-3, statics_residual=1e-9, period_us=1000.0,
                        lateness_us=10.0, compute_us=50.0, latency_us=80.0) for i in range(n)]


def log_throughput(n: int = 20_000) -> dict[str, Any]:
    """Samples/s the log writer sustains flat out (4 MCAP messages each), bytes/sample."""
    samples = _samples(n)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.mcap")
        q: SampleQueue[CycleSample] = SampleQueue(n + 1)
        writer = LogWriter(path, q, None)
        t0 = time.perf_counter()
        for s in samples:
            q.put(s)
        writer.start()
        writer.stop(60)
        elapsed = time.perf_counter() - t0
        size = os.path.getsize(path)
    return {"samples": n, "samples_per_s": n / elapsed, "messages_per_s": 4 * n / elapsed,
            "bytes_per_sample": size / n}


def telemetry_encode_cost(batch: int = 20, repeat: int = 200) -> dict[str, Any]:
    """µs to JSON-encode one telemetry batch of ``batch`` samples."""
    samples = _samples(batch)
    t0 = time.perf_counter()
    for _ in range(repeat):
        encode_batch(samples, 0)
    return {"batch": batch, "us": (time.perf_counter() - t0) / repeat * 1e6,
            "bytes": len(encode_batch(samples, 0))}


def loop_disturbance(phase_s: float, rounds: int = 2,
                     switch_interval: float = 2e-4) -> dict[str, Any]:
    """Lateness of a 1 kHz timing thread while telemetry/logging phases alternate (µs)."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(switch_interval)
    results: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    broker_proc = EmbeddedBroker(free_port(), mode="process").start()
    broker_thread = EmbeddedBroker(free_port(), mode="thread").start()
    try:
        with SyntheticLoop(1000) as loop, tempfile.TemporaryDirectory() as tmp:
            loop.submit(Command("run", "start"))
            time.sleep(0.5)

            def phase(name: str, log: bool, broker: EmbeddedBroker | None) -> None:
                stack = contextlib.ExitStack()
                with stack:
                    if log:
                        stack.enter_context(LogWriter(os.path.join(tmp, f"{name}.mcap"),
                                                      loop.subscribe(), loop.events()))
                    if broker is not None:
                        cfg = MqttConfig.from_url(broker.url, robot_id=_rid())
                        bridge = MqttBridge(loop, loop.subscribe(), loop.events(), cfg)
                        stack.enter_context(bridge)
                        bridge.wait_connected(5)
                        # a dashboard listening, in its own process like the real one
                        sub = subprocess.Popen(
                            [sys.executable, "-m", "poise.telemetry.client", broker.url,
                             cfg.robot_id, "--quiet"], stdout=subprocess.DEVNULL)
                        stack.callback(sub.wait, 5)
                        stack.callback(sub.terminate)
                    time.sleep(0.5)  # settle
                    start = len(loop.lateness_us)
                    cpu0, wall0 = time.process_time(), time.monotonic()
                    time.sleep(phase_s)
                    cpu.setdefault(name, []).append(
                        (time.process_time() - cpu0) / (time.monotonic() - wall0))
                    results.setdefault(name, []).extend(list(loop.lateness_us)[start:])
                loop._subs.clear()
                loop._event_subs.clear()

            for _ in range(rounds):
                phase("baseline", False, None)
                phase("log", True, None)
                phase("mqtt (broker: child process)", False, broker_proc)
                phase("mqtt (broker: this process)", False, broker_thread)
                phase("log + mqtt (broker: child process)", True, broker_proc)
    finally:
        broker_thread.stop()
        broker_proc.stop()
        sys.setswitchinterval(old)
    return {"switch_interval_s": switch_interval, "phase_s": phase_s, "rounds": rounds,
            "phases": {k: {**_pct(v), "cpu_ms_per_s": 1e3 * float(np.mean(cpu[k]))}
                       for k, v in results.items()}}


def run(seconds: float = 3.0, quick: bool = False) -> dict[str, Any]:
    """Every measurement; ``quick`` shortens them (smoke test)."""
    s = 1.0 if quick else seconds
    out: dict[str, Any] = {"python": sys.version.split()[0], "cpus": os.cpu_count(),
                           "loadavg_before": os.getloadavg()}
    brokers: list[tuple[str, str, EmbeddedBroker | None]] = []
    if wait_listening("127.0.0.1", 1883, 0.3):
        brokers.append(("mosquitto (127.0.0.1:1883)", "mqtt://127.0.0.1:1883", None))
    for mode in ("process", "thread"):
        b = EmbeddedBroker(free_port(), mode=mode).start()
        brokers.append((f"amqtt ({'child process' if mode == 'process' else 'this process'})",
                        b.url, b))
    try:
        out["encode"] = telemetry_encode_cost()
        out["mqtt_latency"] = {}
        out["relay"] = {}
        for name, url, _ in brokers:
            out["mqtt_latency"][name] = mqtt_latency(url, s)
            out["relay"][name] = relay_rate(url, s, out["encode"]["bytes"])
    finally:
        for _, _, b in brokers:
            if b is not None:
                b.stop()
    out["log"] = log_throughput(5_000 if quick else 20_000)
    out["loop"] = loop_disturbance(0.5 if quick else seconds, rounds=1 if quick else 2)
    out["loadavg_after"] = os.getloadavg()
    return out


def table(r: dict[str, Any]) -> str:
    """The results as a plain-text table."""
    lines = [f"Python {r['python']}, {r['cpus']} CPUs, load average before "
             f"{r['loadavg_before'][0]:.2f}, after {r['loadavg_after'][0]:.2f}", ""]
    e = r["encode"]
    lines.append(f"telemetry batch of {e['batch']} samples: {e['bytes']} B JSON, "
                 f"encoded in {e['us']:.0f} µs")
    lines += ["", "MQTT end to end (1 kHz loop → 50 Hz batches → broker → subscriber)",
              f"{'broker':<30} {'msg/s':>6} {'samples/s':>9} {'deliv.':>7} "
              f"{'newest p50':>10} {'p99':>7} {'oldest p50':>10} {'p99':>7}  [ms]"]
    for name, m in r["mqtt_latency"].items():
        lines.append(f"{name:<30} {m['batches_per_s']:6.1f} {m['samples_per_s']:9.0f} "
                     f"{m['delivered_fraction']:7.1%} {m['newest_ms']['p50']:10.2f} "
                     f"{m['newest_ms']['p99']:7.2f} {m['oldest_ms']['p50']:10.2f} "
                     f"{m['oldest_ms']['p99']:7.2f}")
    lines += ["", f"broker relay, one publisher flooding {e['bytes']} B QoS-0 messages",
              f"{'broker':<30} {'sent/s':>8} {'received/s':>10} {'received':>9}"]
    for name, m in r["relay"].items():
        lines.append(f"{name:<30} {m['sent_per_s']:8.0f} {m['received_per_s']:10.0f} "
                     f"{m['received_fraction']:9.1%}")
    g = r["log"]
    lines += ["", f"experiment log: {g['samples_per_s']:.0f} samples/s flat out "
              f"({g['messages_per_s']:.0f} MCAP messages/s), {g['bytes_per_sample']:.0f} B "
              "per sample on disk (zstd)", "",
              f"1 kHz timing thread lateness [µs] by phase (switch interval "
              f"{r['loop']['switch_interval_s'] * 1e3:g} ms, {r['loop']['rounds']}×"
              f"{r['loop']['phase_s']:g} s each)",
              f"{'phase':<38} {'cycles':>7} {'p50':>7} {'p99':>8} {'max':>8} "
             f"{'CPU ms/s':>9}"]
    for name, p in r["loop"]["phases"].items():
        lines.append(f"{name:<38} {p['n']:7d} {p['p50']:7.1f} {p['p99']:8.1f} {p['max']:8.0f} "
                     f"{p['cpu_ms_per_s']:9.0f}")
    lines.append("(CPU ms/s: this process's CPU time per second of the phase, loop included)")
    return "\n".join(lines)


__all__ = ["log_throughput", "loop_disturbance", "mqtt_latency", "relay_rate", "run", "table"]
