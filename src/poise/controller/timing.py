"""Per-cycle timing statistics of the control loop: fixed-size rings and numpy percentiles.

The loop thread writes one row per cycle (O(1), no allocation); percentiles are computed on
demand by whoever asks (a copy of the ring, then ``numpy.percentile``), so the statistics
never cost the loop more than four array stores.

Quantities, all in microseconds:

* ``period``: time between the sensor frames (device pacing) or wake-ups (host pacing) of two
  consecutive cycles;
* ``lateness``: device pacing: from the frame's arrival on the host to the start of the cycle;
  host pacing: from the deadline to the wake-up;
* ``compute``: from the start of the cycle to the setpoint written;
* ``latency``: from the arrival of the sensor frame used to the setpoint written.

Counters: ``cycles``; ``missed`` (device pacing: frames that arrived while the loop was still
busy with an earlier cycle and were skipped because a newer one was waiting — the host was too
slow; host pacing: deadlines slept through); ``coalesced`` (device pacing: frames that arrived
while the loop was idle but were superseded by a newer frame before it woke — the device sent
a burst, e.g. its own pacing jittered; not the host's fault, reported apart); ``overruns``
(cycles whose latency exceeded one period).
"""

from __future__ import annotations

import threading

import numpy as np

#: Percentiles reported (and their key names).
PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p99.9": 99.9, "max": 100.0}
QUANTITIES = ("period_us", "lateness_us", "compute_us", "latency_us")


class TimingStats:
    """Ring buffers of the last ``size`` cycles plus lifetime counters.

    Args:
        size: cycles kept for the percentiles (default 65 536: > 60 s at 1 kHz).
    """

    def __init__(self, size: int = 65_536) -> None:
        self.size = size
        self._ring = np.full((len(QUANTITIES), size), np.nan)
        self._i = 0
        self.cycles = 0
        self.missed = 0
        self.coalesced = 0
        self.overruns = 0
        self._lock = threading.Lock()

    def record(self, period_us: float, lateness_us: float, compute_us: float,
               latency_us: float, overrun: bool) -> None:
        """Store one cycle (loop thread)."""
        i = self._i
        ring = self._ring
        ring[0, i] = period_us
        ring[1, i] = lateness_us
        ring[2, i] = compute_us
        ring[3, i] = latency_us
        self._i = (i + 1) % self.size
        self.cycles += 1
        if overrun:
            self.overruns += 1

    def reset(self) -> None:
        with self._lock:
            self._ring.fill(np.nan)
            self._i = 0
            self.cycles = self.missed = self.coalesced = self.overruns = 0

    def summary(self) -> dict[str, object]:
        """``{quantity: {p50, p90, p99, p99.9, max}, cycles, missed, overruns, missed_pct}``."""
        ring = self._ring.copy()  # one C call: consistent enough under the GIL
        out: dict[str, object] = {}
        qs = list(PERCENTILES.values())
        for k, name in enumerate(QUANTITIES):
            row = ring[k][~np.isnan(ring[k])]
            if row.size:
                values = np.percentile(row, qs)
                out[name] = {key: round(float(v), 1)
                             for key, v in zip(PERCENTILES, values, strict=True)}
            else:
                out[name] = dict.fromkeys(PERCENTILES)
        total = self.cycles + self.missed
        out.update(cycles=self.cycles, missed=self.missed, coalesced=self.coalesced,
                   overruns=self.overruns,
                   missed_pct=round(100.0 * self.missed / total, 4) if total else 0.0,
                   window=min(self.cycles, self.size))
        return out
