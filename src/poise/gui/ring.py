"""Ring buffers for live telemetry (numpy only, no Qt).

:class:`RingBuffer` keeps the last ``capacity`` samples of ``width`` channels, channel-major, in
a ``(width, 2 · capacity)`` array: appending writes at the end and, once the end is reached,
moves the last ``capacity`` samples back to the front (one ``memmove`` per ``capacity``
samples, amortised O(1) per sample). The newest ``count`` samples are therefore always
contiguous, so :meth:`RingBuffer.view` returns them without a copy, ready for plotting.

:class:`TelemetryBuffer` names the channels of one robot's telemetry (seed 000 notation):
time ``t``, task value ``x`` and target ``x̄`` (task_dim each), task error ``‖x̄ − x‖``, statics
residual ``‖G_u(q̄)‖``, measured ``q`` and predicted ``q̄`` (n each), actuator setpoints
``q̄a`` (m), and the loop timing (latency, lateness, compute) [µs].
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from poise.models.base import FloatArray

#: Scalar telemetry fields (one number per sample).
SCALARS = ("task_error", "statics_residual", "latency_us", "lateness_us", "compute_us")
#: Vector telemetry fields (one vector per sample) and the dimension that sizes them.
VECTORS = (("x", "task_dim"), ("target", "task_dim"), ("q", "n"), ("q_bar", "n"),
           ("qa_ref", "m"))


class RingBuffer:
    """The last ``capacity`` samples of ``width`` float channels, newest contiguous.

    Args:
        capacity: samples kept per channel.
        width: number of channels.
    """

    def __init__(self, capacity: int, width: int) -> None:
        if capacity < 1 or width < 1:
            raise ValueError(f"capacity and width must be ≥ 1, got {capacity}, {width}")
        self.capacity = int(capacity)
        self.width = int(width)
        self._data = np.full((self.width, 2 * self.capacity), np.nan)
        self._end = 0  # one past the newest sample in _data
        self.count = 0  # valid samples (≤ capacity)
        self.total = 0  # samples ever appended

    def extend(self, block: FloatArray) -> None:
        """Append ``block`` of shape (k, width), oldest first (only the last capacity kept)."""
        block = np.asarray(block, dtype=float)
        if block.ndim != 2 or block.shape[1] != self.width:
            raise ValueError(f"block must be (k, {self.width}), got {block.shape}")
        k = block.shape[0]
        self.total += k
        if k >= self.capacity:
            self._data[:, : self.capacity] = block[-self.capacity :].T
            self._end = self.count = self.capacity
            return
        if self._end + k > 2 * self.capacity:
            keep = self.capacity - k  # old samples that survive this append
            self._data[:, :keep] = self._data[:, self._end - keep : self._end]
            self._end = keep
            self.count = min(self.count, keep)
        self._data[:, self._end : self._end + k] = block.T
        self._end += k
        self.count = min(self.count + k, self.capacity)

    def view(self, last: int | None = None) -> FloatArray:
        """The newest ``last`` (default all) samples, shape (width, count), oldest first; no copy.

        The view is valid until the next :meth:`extend`.
        """
        n = self.count if last is None else max(0, min(int(last), self.count))
        return self._data[:, self._end - n : self._end]

    def clear(self) -> None:
        """Forget every sample."""
        self._end = self.count = 0


@dataclass(frozen=True)
class Layout:
    """Sizes of one robot's telemetry vectors: configuration n, actuators m, task task_dim."""

    n: int
    m: int
    task_dim: int

    def columns(self) -> dict[str, slice]:
        """Channel name → row slice in the buffer (``t`` first)."""
        out: dict[str, slice] = {"t": slice(0, 1)}
        i = 1
        for name, dim in VECTORS:
            size = getattr(self, dim)
            out[name] = slice(i, i + size)
            i += size
        for name in SCALARS:
            out[name] = slice(i, i + 1)
            i += 1
        return out

    @property
    def width(self) -> int:
        """Total number of channels."""
        return 1 + len(SCALARS) + 2 * self.task_dim + 2 * self.n + self.m


def _column(batch: Mapping[str, Any], name: str, rows: int, size: int | None) -> FloatArray:
    """One field of a columnar batch as (rows, size) floats; NaN where missing or malformed."""
    raw = batch.get(name)
    width = 1 if size is None else size
    if raw is None:
        return np.full((rows, width), np.nan)
    try:
        a = np.asarray(raw, dtype=float)
    except (TypeError, ValueError):
        return np.full((rows, width), np.nan)
    if a.ndim == 1 and a.shape[0] == rows * width:
        a = a.reshape(rows, width)
    elif a.ndim == 2 and a.shape == (width, rows) and a.shape != (rows, width):
        a = a.T  # channel-major sender
    if a.shape != (rows, width):
        return np.full((rows, width), np.nan)
    return a


def layout_of(batch: Mapping[str, Any]) -> Layout | None:
    """Infer (n, m, task_dim) from a telemetry batch (None if it has no samples)."""
    t = batch.get("t") or []
    if not t:
        return None

    def dim(name: str) -> int:
        a = batch.get(name)
        if not a:
            return 0
        first = a[0]
        return len(first) if isinstance(first, list | tuple) else 1

    return Layout(n=dim("q"), m=dim("qa_ref"), task_dim=max(dim("target"), dim("x")))


class TelemetryBuffer:
    """Named ring buffers of one robot's telemetry, fed by columnar MQTT batches.

    Args:
        layout: the vector sizes (see :class:`Layout`).
        capacity: samples kept per channel (60,000 = 60 s at 1 kHz).

    Attributes:
        t0: time of the first sample ever ingested [s] (plots use ``t − t0``).
        batches, samples, dropped: counters (``dropped`` sums the senders' ``dropped`` field).
        late: samples left out because they were no newer than the newest one kept (a batch
            that arrived late: the times stay increasing, which :meth:`window` relies on).
        last_seq: ``seq0 + n − 1`` of the newest batch; ``gaps`` counts missing sequence numbers.
    """

    def __init__(self, layout: Layout, capacity: int = 60_000) -> None:
        self.layout = layout
        self.ring = RingBuffer(capacity, layout.width)
        self.cols = layout.columns()
        self.t0: float | None = None
        self.batches = self.samples = self.dropped = self.gaps = self.late = 0
        self.last_seq: int | None = None
        self.state = ""

    def ingest(self, batch: Mapping[str, Any]) -> int:
        """Append a columnar batch ``{"t": [...], "q": [[...], ...], ...}``; returns samples added.

        Fields that are missing or of the wrong shape become NaN; a clock that jumps back by
        more than a second (a restarted service) clears the buffer first; samples no newer
        than the newest kept are left out (:attr:`late`).
        """
        t = np.asarray(batch.get("t") or [], dtype=float).ravel()
        k = t.shape[0]
        if k == 0:
            return 0
        if self.t0 is None:
            self.t0 = float(t[0])
        elif self.ring.count and t[0] < self.ring.view(1)[0, 0] + self.t0 - 1.0:
            self.clear()
            self.t0 = float(t[0])
        block = np.empty((k, self.layout.width))
        block[:, 0] = t - self.t0
        for name, dim in VECTORS:
            size = getattr(self.layout, dim)
            if size:
                block[:, self.cols[name]] = _column(batch, name, k, size)
        for name in SCALARS:
            block[:, self.cols[name]] = _column(batch, name, k, None)
        if self.ring.count:  # samples older than the newest would unsort the times
            newer = block[:, 0] > self.ring.view(1)[0, 0]
            if not newer.all():
                self.late += int(k - np.count_nonzero(newer))
                block = block[newer]
                k = block.shape[0]
        self.ring.extend(block)
        self.batches += 1
        self.samples += k
        self.dropped += int(batch.get("dropped") or 0)
        seq0 = batch.get("seq0")
        if isinstance(seq0, int):
            if self.last_seq is not None and seq0 > self.last_seq + 1:
                self.gaps += seq0 - self.last_seq - 1
            self.last_seq = seq0 + k - 1
        if isinstance(batch.get("state"), str):
            self.state = batch["state"]
        return k

    def clear(self) -> None:
        """Forget all samples and the time origin."""
        self.ring.clear()
        self.t0 = None
        self.last_seq = None

    def __len__(self) -> int:
        return self.ring.count

    def channel(self, name: str, last: int | None = None) -> FloatArray:
        """Samples of one field, shape (size, count) (``t`` is (1, count)); no copy."""
        return self.ring.view(last)[self.cols[name]]

    def window(self, seconds: float) -> tuple[int, float]:
        """How many newest samples fall in the last ``seconds``, and the newest time [s]."""
        if not self.ring.count:
            return 0, 0.0
        t = self.ring.view()[0]
        t_end = float(t[-1])
        start = int(np.searchsorted(t, t_end - seconds, side="left"))
        return t.shape[0] - start, t_end

    def latest(self, name: str) -> FloatArray | None:
        """Newest value of a field (size,), or None before any sample."""
        if not self.ring.count:
            return None
        return self.ring.view(1)[self.cols[name], 0].copy()
