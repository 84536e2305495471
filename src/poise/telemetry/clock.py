"""Time for the outside world: host monotonic seconds → Unix nanoseconds, and decimation.

Every :class:`~poise.api.bus.CycleSample` and :class:`~poise.api.bus.Event` is
stamped with the host *monotonic* clock (``time.monotonic``, immune to NTP steps). Tools outside
poise (Foxglove, PlotJuggler, ROS 2) want Unix time. A :class:`ClockAnchor` reads both clocks
once, at the start of a log or a bridge, and maps monotonic time ``t`` [s] to

    unix_ns(t) = wall_ns + round(t · 10⁹) − monotonic_ns,

so converted times keep the monotonic clock's order and spacing (a later NTP step does not move
them) and sit within the wall clock's error of the true Unix time at the anchor.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

#: Value of the ``log_time`` key of a log's ``clock`` record when MCAP times are Unix ns.
UNIX_NS = "unix_ns"


@dataclass(frozen=True, slots=True)
class ClockAnchor:
    """One instant read on both clocks.

    Attributes:
        monotonic_ns: ``time.monotonic_ns()`` at the instant [ns].
        wall_ns: ``time.time_ns()`` at the same instant (Unix) [ns].
    """

    monotonic_ns: int
    wall_ns: int

    @classmethod
    def now(cls) -> ClockAnchor:
        """Read both clocks (the wall clock between two monotonic reads, midpoint taken)."""
        mono1 = time.monotonic_ns()
        wall = time.time_ns()
        mono2 = time.monotonic_ns()
        return cls((mono1 + mono2) // 2, wall)

    def unix_ns(self, t: float) -> int:
        """Unix time [ns] of host monotonic time ``t`` [s]."""
        return self.wall_ns + round(t * 1e9) - self.monotonic_ns

    def as_dict(self) -> dict[str, Any]:
        """The log's ``clock`` metadata record (``log_time`` says MCAP times are Unix ns)."""
        return {"monotonic_ns": self.monotonic_ns, "wall_ns": self.wall_ns,
                "wall_iso": time.strftime("%Y-%m-%dT%H:%M:%S%z",
                                          time.localtime(self.wall_ns / 1e9)),
                "log_time": UNIX_NS}


def split_ns(ns: int) -> tuple[int, int]:
    """``(seconds, nanoseconds)`` of a non-negative time in ns (ROS / Foxglove ``Time``)."""
    sec, nsec = divmod(int(ns), 1_000_000_000)
    return sec, nsec


class Decimator:
    """Pass at most ``rate_hz`` items per second of *their own* time stamps.

    ``due(t)`` is true for the first item and then for the first item at least ``1/rate_hz``
    after the last one passed, so consecutive passed items are ≥ ``1/rate_hz`` apart whatever
    the producer's rate (the output rate is ≤ ``rate_hz``; with a 1 kHz producer and 30 Hz,
    one cycle in 34). Not thread-safe: one consumer owns it.
    """

    def __init__(self, rate_hz: float) -> None:
        if not rate_hz > 0:
            raise ValueError(f"rate {rate_hz} Hz must be > 0")
        self.period = 1.0 / rate_hz
        self._next: float | None = None

    def due(self, t: float) -> bool:
        """True if the item stamped ``t`` [s] passes."""
        if self._next is not None and t < self._next:
            return False
        self._next = t + self.period
        return True
