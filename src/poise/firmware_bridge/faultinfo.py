"""What a device's watchdog fault means, in words that say which side went quiet.

The device's watchdog trips when no Setpoint or Heartbeat reached it for ``watchdog_ms``
(its Fault frame carries that silence [s] as ``value``). Two sides can cause it:

* the **host** wrote nothing for that long (its process was not scheduled, or stalled);
* the host kept writing, but its frames were held up **between host and device** (the
  serial link, the pseudo-terminal, or a virtual device's own process not reading them).

The host tells them apart by its own longest silence between writes in the last second
before the fault arrived (``host_silence`` [s], kept by :class:`HostWrites`): if it is shorter
than half the limit, the host was not the quiet side. The longest gap, not the time since the
last write: a host that wakes from a stall may write (hold) before it reads the Fault frame.
"""

from __future__ import annotations

import math

#: the device's Fault text for a watchdog trip (≤ 16 bytes on the wire)
HOST_SILENT = "host silent"


class HostWrites:
    """The host's recent write gaps: O(1) per write, for the watchdog's diagnosis.

    ``window`` [s]: how far back a long gap still counts (longer than any watchdog limit)."""

    __slots__ = ("_gap", "_gap_end", "last", "window")

    def __init__(self, window: float = 1.0) -> None:
        self.window = window
        self.last = -math.inf   #: the last write [s, perf_counter]
        self._gap = 0.0         #: the longest gap that ended within ``window`` [s]
        self._gap_end = -math.inf

    def wrote(self, now: float) -> None:
        """A setpoint went out at ``now`` [s]."""
        if self.last > -math.inf:
            gap = now - self.last
            if gap >= self._gap or now - self._gap_end > self.window:
                self._gap, self._gap_end = gap, now
        self.last = now

    def silence(self, now: float) -> float:
        """The host's longest silence [s] in the ``window`` before ``now``: the open gap since
        the last write, or a longer one that ended within the window (``inf``: never wrote)."""
        open_gap = now - self.last
        recent = self._gap if now - self._gap_end <= self.window else 0.0
        return max(open_gap, recent)


def quiet_side(host_silence: float, watchdog_ms: float) -> str:
    """``"host"`` when the host itself wrote nothing for at least half the watchdog's limit
    before the fault arrived (``host_silence`` [s], ``watchdog_ms`` [ms]), else ``"link"``."""
    if not math.isfinite(host_silence):
        return "host"
    return "host" if host_silence * 1e3 >= 0.5 * watchdog_ms else "link"


def watchdog_cause(device_silence: float | None, host_silence: float,
                   watchdog_ms: float | None) -> tuple[str, str]:
    """The fault's cause in one sentence, and the quiet side (``"host"`` or ``"link"``).

    Args:
        device_silence: how long the device got nothing [s] (the Fault frame's value), or
            None when only the status word said the watchdog tripped.
        host_silence: the host's longest silence before the fault arrived [s]
            (:meth:`HostWrites.silence`; ``inf``: the host never wrote).
        watchdog_ms: the device's limit [ms] (None: unknown; taken as 100 ms)."""
    limit = float(watchdog_ms) if watchdog_ms else 100.0
    side = quiet_side(host_silence, limit)
    got = (f"no setpoint reached the device for {device_silence * 1e3:.0f} ms"
           if device_silence is not None and math.isfinite(device_silence) and device_silence > 0
           else "no setpoint reached the device in time")
    head = f"device watchdog: {got} (limit {limit:.0f} ms)"
    if not math.isfinite(host_silence):
        return f"{head}; the host never wrote one", side
    ago = f"{host_silence * 1e3:.0f} ms"
    if side == "host":
        return f"{head}; the host went quiet: it wrote nothing for {ago}", side
    return (f"{head}; the host was writing (its longest pause {ago}): its setpoints were "
            "held up between host and device (link or device side)"), side
