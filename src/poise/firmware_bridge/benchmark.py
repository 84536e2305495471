"""Codec benchmark: encode/decode cost per message type, against a trivial baseline.

Used by ``bench/protocol.py`` and ``poise bench protocol``. The baseline is ``struct.pack`` of the
8-byte header alone (the least any framing must do), measured in the same run, so the ratio is
comparable across machines.
"""

from __future__ import annotations

import platform
import timeit

from poise.firmware_bridge import messages as m
from poise.firmware_bridge.codec import HEADER


def _messages() -> list[tuple[str, m.Message]]:
    return [
        ("HelloRequest", m.HelloRequest()),
        ("Hello", m.Hello(1, 2, 2, 1000, 100, 0x12345678, "poise-ref-0.1")),
        ("Channel", m.Channel(2, m.ChannelKind.ACTUATOR, "tendon1", "m", -0.03, 0.03, "N", 40)),
        ("Sensors (2q, 2a)", m.Sensors(1, 41, 42, (0.1, 0.2), (0.01, 0.02), (3.0, 4.0))),
        ("Sensors (8q, 8a)", m.Sensors(1, 41, 42, (0.1,) * 8, (0.01,) * 8, (3.0,) * 8)),
        ("Setpoint (2a)", m.Setpoint((0.01, 0.02))),
        ("Setpoint (2a, ff)", m.Setpoint((0.01, 0.02), (1.0, 2.0))),
        ("Heartbeat", m.Heartbeat()),
        ("Arm", m.Arm()),
        ("ConfigWrite", m.ConfigWrite(m.ConfigKey.WATCHDOG_MS, 50.0)),
        ("Ack", m.Ack(m.MsgType.CONFIG_WRITE, 0, 12, 1)),
        ("Fault", m.Fault(m.FaultCode.WATCHDOG, text="watchdog")),
    ]


def _best_us(fn, number: int, repeat: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def run(number: int = 2000, repeat: int = 5) -> dict:
    """Time encode and decode of each message type; returns a JSON-ready dict (µs per frame)."""
    baseline = _best_us(lambda: HEADER.pack(1, 2, 3, 4), number * 5, repeat)
    rows = []
    for name, msg in _messages():
        frame = m.encode(msg, 7, 1000)
        dec = m.MessageDecoder()
        enc_us = _best_us(lambda msg=msg: m.encode(msg, 7, 1000), number, repeat)
        dec_us = _best_us(lambda dec=dec, frame=frame: dec.feed(frame), number, repeat)
        assert dec.counters.errors == 0
        rows.append({"message": name, "wire_bytes": len(frame), "encode_us": enc_us,
                     "decode_us": dec_us, "encode_ratio": enc_us / baseline,
                     "decode_ratio": dec_us / baseline})
    return {"benchmark": "protocol codec", "unit": "µs per frame (best of repeats)",
            "baseline": "struct.pack of the 8-byte header", "baseline_us": baseline,
            "number": number, "repeat": repeat, "python": platform.python_version(),
            "machine": platform.machine(), "rows": rows}


def table(result: dict) -> str:
    """The result as a fixed-width text table."""
    lines = [f"{'message':<20} {'bytes':>5} {'encode µs':>10} {'decode µs':>10} "
             f"{'enc/base':>9} {'dec/base':>9}"]
    for r in result["rows"]:
        lines.append(f"{r['message']:<20} {r['wire_bytes']:>5} {r['encode_us']:>10.2f} "
                     f"{r['decode_us']:>10.2f} {r['encode_ratio']:>9.1f} "
                     f"{r['decode_ratio']:>9.1f}")
    lines.append(f"baseline ({result['baseline']}): {result['baseline_us']:.3f} µs")
    return "\n".join(lines)
