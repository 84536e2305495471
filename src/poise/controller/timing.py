"""Per-cycle timing statistics of the control loop: fixed-size rings and numpy percentiles.

The loop thread writes one row per cycle (O(1), no allocation); percentiles are computed on
demand by whoever asks, in a compiled kernel that releases the GIL (Numba ``nogil``): sorting
four rings of 65,536 values takes milliseconds, and ``numpy.percentile`` would hold the GIL
for all of it, stalling the loop thread of the same process (a missed cycle a second at
1 kHz while ``poise run`` prints its status). So the statistics never cost the loop more than
four array stores.

Quantities, all in microseconds:

* ``period``: time between the sensor frames (device pacing) or wake-ups (host pacing) of two
  consecutive cycles;
* ``lateness``: device pacing: from the frame's arrival on the host to the start of the cycle;
  host pacing: from the deadline to the wake-up;
* ``compute``: from the start of the cycle to the setpoint written;
* ``latency``: from the arrival of the sensor frame used to the setpoint written.

Counters, like the percentiles, cover the cycles that run the controller (state
``running``): ``cycles``; ``missed`` (device pacing: frames that arrived while the loop was still
busy with an earlier cycle and were skipped because a newer one was waiting — the host was too
slow; host pacing: deadlines slept through); ``coalesced`` (device pacing: frames that arrived
while the loop was idle but were superseded by a newer frame before it woke — the device sent
a burst, e.g. its own pacing jittered; not the host's fault, reported apart); ``overruns``
(cycles whose latency exceeded one period).
"""

from __future__ import annotations

import math
import threading

import numba
import numpy as np

#: Percentiles reported (and their key names).
PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p99.9": 99.9, "max": 100.0}
QUANTITIES = ("period_us", "lateness_us", "compute_us", "latency_us")
_QS = np.array(list(PERCENTILES.values()))


@numba.njit(nogil=True, cache=True)
def ring_percentiles(ring: np.ndarray, qs: np.ndarray) -> np.ndarray:
    """Percentiles ``qs`` [%, ascending] of the non-NaN values of each row of ``ring``
    (rows, size), linearly interpolated between order statistics as ``numpy.percentile``
    does; a row with no values gives NaN.

    Compiled (or loaded from Numba's cache) at its first call, which the controller makes in
    its kernels' warm-up (:meth:`~poise.controller.service.Controller.prepare_kernels`, with
    :meth:`TimingStats.summary`), not on import: a first start reports that compile as it
    goes (a third of a minute on the 2-core machine).

    Runs without the GIL: the loop thread may write the ring meanwhile (a value being
    replaced is read as its old or new value: x86-64 and aarch64 store aligned float64
    atomically). One partition at the lowest order statistic of the upper tail (p ≥ 85),
    then a sort of that tail (10 % of the values) and a partition of the head per lower
    percentile: a few milliseconds for 65,536 values, where a full sort takes ten.
    """
    rows, size = ring.shape
    out = np.full((rows, qs.size), np.nan)
    buf = np.empty(size)
    for r in range(rows):
        n = 0
        for i in range(size):
            v = ring[r, i]
            if not np.isnan(v):
                buf[n] = v
                n += 1
        if n == 0:
            continue
        vals = buf[:n]
        tail = n
        for j in range(qs.size):
            if qs[j] >= 85.0:
                tail = min(tail, int(np.floor(qs[j] / 100.0 * (n - 1))))
        if tail < n:
            vals = np.partition(vals, tail)
            vals[tail:] = np.sort(vals[tail:])
        for j in range(qs.size):
            pos = qs[j] / 100.0 * (n - 1)
            lo = int(np.floor(pos))
            hi = min(lo + 1, n - 1)
            if lo >= tail:
                a, b = vals[lo], vals[hi]
            else:  # below the tail: select within the head (every value < the tail's)
                head = np.partition(vals[:tail], lo)
                a = head[lo]
                if hi == lo:
                    b = a
                elif hi < tail:
                    b = head[hi:].min()
                else:
                    b = vals[tail]
            t = pos - lo
            out[r, j] = a + (b - a) * t if t < 0.5 else b - (b - a) * (1.0 - t)
    return out


#: A cycle that came more than this many nominal periods after the one before is a gap: the
#: sensor stream stalled (a device-paced loop has nothing to miss then, and counts 0 missed).
GAP_PERIODS = 2.0


class TimingStats:
    """Ring buffers of the last ``size`` cycles plus lifetime counters.

    Args:
        size: cycles kept for the percentiles (default 65 536: > 60 s at 1 kHz).
        period_us: the nominal period [µs]: cycles more than :data:`GAP_PERIODS` of it after
            the one before are counted as ``gaps`` (None: not counted).
    """

    def __init__(self, size: int = 65_536, period_us: float | None = None) -> None:
        self.size = size
        self._ring = np.full((len(QUANTITIES), size), np.nan)
        self._i = 0
        self._gap_us = math.inf if period_us is None else GAP_PERIODS * float(period_us)
        self.cycles = 0
        self.missed = 0
        self.coalesced = 0
        self.overruns = 0
        self.gaps = 0
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
        if period_us > self._gap_us:
            self.gaps += 1

    def reset(self) -> None:
        with self._lock:
            self._ring.fill(np.nan)
            self._i = 0
            self.cycles = self.missed = self.coalesced = self.overruns = self.gaps = 0

    def summary(self) -> dict[str, object]:
        """``{quantity: {p50, p90, p99, p99.9, max}, cycles, missed, overruns, gaps,
        missed_pct}``."""
        table = ring_percentiles(self._ring, _QS)  # without the GIL (the loop goes on)
        out: dict[str, object] = {}
        for k, name in enumerate(QUANTITIES):
            if np.isnan(table[k, 0]):
                out[name] = dict.fromkeys(PERCENTILES)
            else:
                out[name] = {key: round(float(v), 1)
                             for key, v in zip(PERCENTILES, table[k], strict=True)}
        total = self.cycles + self.missed
        out.update(cycles=self.cycles, missed=self.missed, coalesced=self.coalesced,
                   overruns=self.overruns, gaps=self.gaps,
                   missed_pct=round(100.0 * self.missed / total, 4) if total else 0.0,
                   window=min(self.cycles, self.size))
        return out
