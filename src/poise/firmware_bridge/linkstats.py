"""What a host link counts: :class:`LinkStats` (frames, errors by cause, sequence gaps,
round-trip times), the setpoint round trips' ring (:class:`RoundTrip`), and the decoded
:class:`SensorSample` each sensor frame becomes.
"""

from __future__ import annotations

import math
from array import array
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from poise.firmware_bridge import messages as m


class SensorSample(NamedTuple):
    """A decoded sensor frame and when the host received it (immutable; a NamedTuple, built
    for every frame).

    Attributes:
        host_time: ``time.perf_counter()`` when the bytes that completed the frame were read [s].
        seq: device sequence number of the frame.
        device_time_us: the device's timestamp [µs, wraps at 2³²].
        sensors: the decoded :class:`~messages.Sensors`.
    """

    host_time: float
    seq: int
    device_time_us: int
    sensors: m.Sensors


def _percentile(samples: Iterable[float], p: float) -> float:
    """Percentile ``p`` (0–100) of ``samples`` (nearest rank); NaN without samples."""
    xs = sorted(samples)
    return xs[min(len(xs) - 1, max(0, round(p / 100 * (len(xs) - 1))))] if xs else math.nan


class RoundTrip:
    """Setpoint round-trip times: a fixed ring of the last :attr:`WINDOW` samples [s], and the
    count and maximum of all of them. Recording allocates nothing beyond the sample.

    Percentiles are over the window (the recent past), ``max`` and ``count`` over every
    sample since the link was created.
    """

    WINDOW = 4096

    def __init__(self) -> None:
        self._ring = array("d", bytes(8 * self.WINDOW))
        self.count = 0
        self.max = 0.0

    def record(self, rtt: float) -> None:
        """Add one round-trip time [s]."""
        self._ring[self.count % self.WINDOW] = rtt
        self.count += 1
        if rtt > self.max:
            self.max = rtt

    def percentile(self, p: float) -> float:
        """Percentile ``p`` (0–100) of the window [s]; NaN without samples."""
        return _percentile(self._ring[:min(self.count, self.WINDOW)], p)

    def as_dict(self) -> dict[str, float | int | None]:
        """``{"count", "p50", "p99", "max"}`` in µs (``None`` without samples)."""
        if self.count == 0:
            return {"count": 0, "p50": None, "p99": None, "max": None}
        return {"count": self.count, "p50": round(self.percentile(50) * 1e6, 1),
                "p99": round(self.percentile(99) * 1e6, 1), "max": round(self.max * 1e6, 1)}


@dataclass
class LinkStats:
    """Link statistics (host side).

    ``rtt`` samples: time from sending a host frame to receiving the first sensor frame that echoes
    its sequence number in ``last_rx_seq`` (any host frame; heartbeats while idle). It includes
    up to one sensor period of waiting for the next frame.

    ``setpoint_rtt`` (``rtt_us`` in :meth:`as_dict`): time from writing the setpoint with
    sequence number *s* to receiving the first sensor frame whose ``last_setpoint_seq`` is *s*:
    the whole loop through the wire and the device, as the controller experiences it (it also
    includes up to one sensor period). Setpoints the device replaced before it reported them
    (two arriving within one sensor period) give no sample.
    """

    rx_frames: int = 0
    tx_frames: int = 0
    tx_dropped: int = 0
    sensor_frames: int = 0
    seq_gaps: int = 0
    lost_frames: int = 0
    duplicates: int = 0
    reconnects: int = 0
    sample_overruns: int = 0
    #: The decoder's counters (:class:`~poise.firmware_bridge.codec.DecodeCounters`), read
    #: when asked for (:attr:`decode`), not copied per received chunk.
    counters: Any = field(default=None, repr=False)
    rtt: deque[float] = field(default_factory=lambda: deque(maxlen=4096))
    setpoint_rtt: RoundTrip = field(default_factory=RoundTrip)
    first_sensor_time: float | None = None
    last_sensor_time: float | None = None
    _rate_frames: int = 0

    @property
    def decode(self) -> dict[str, int]:
        """Frames dropped by cause, and the frames and bytes decoded (now)."""
        return {} if self.counters is None else self.counters.as_dict()

    @property
    def crc_errors(self) -> int:
        return self.decode.get("crc", 0)

    @property
    def frame_rate_hz(self) -> float:
        """Measured sensor frame rate since the first sensor frame (or the last reset)."""
        if self.first_sensor_time is None or self.last_sensor_time is None or \
                self._rate_frames < 2 or self.last_sensor_time <= self.first_sensor_time:
            return 0.0
        return (self._rate_frames - 1) / (self.last_sensor_time - self.first_sensor_time)

    def rtt_percentile(self, p: float) -> float:
        """Round-trip time percentile ``p`` (0–100) [s]; NaN without samples."""
        return _percentile(self.rtt, p)

    def reset_rate(self) -> None:
        self.first_sensor_time = self.last_sensor_time = None
        self._rate_frames = 0

    def as_dict(self) -> dict:
        ms = 1e3
        return {
            "rx_frames": self.rx_frames, "tx_frames": self.tx_frames,
            "tx_dropped": self.tx_dropped, "sensor_frames": self.sensor_frames,
            "frame_rate_hz": round(self.frame_rate_hz, 2),
            "crc_errors": self.crc_errors, "decode_errors": dict(self.decode),
            "seq_gaps": self.seq_gaps, "lost_frames": self.lost_frames,
            "duplicates": self.duplicates, "reconnects": self.reconnects,
            "sample_overruns": self.sample_overruns, "rtt_samples": len(self.rtt),
            "rtt_ms": {"p50": self.rtt_percentile(50) * ms, "p95": self.rtt_percentile(95) * ms,
                       "max": self.rtt_percentile(100) * ms},
            "rtt_us": self.setpoint_rtt.as_dict(),
        }


__all__ = ["LinkStats", "RoundTrip", "SensorSample"]
