"""Cycle records in shared memory: one writer process, any number of reader processes.

:class:`CycleRing` is a fixed-size ring of :class:`~poise.api.bus.CycleSample` records
in a :class:`multiprocessing.shared_memory.SharedMemory` segment. The real-time process writes
one record per cycle; telemetry, logs and the dashboard read them in other processes, each at
its own pace, and never slow the writer down (the writer never waits for a reader, a slow
reader loses the oldest records and is told how many).

Layout (all little-endian, native alignment)::

    header  int64[8]  magic, version, n, m, k, capacity, width, count
    rows    float64[capacity, width], one record per row:
        stamp_begin, t, seq, state, len(qa_ref), len(tau_ff),
        q[n], q_bar[n], qa_ref[m], tau_ff[m], target[k], x[k],
        task_error, statics_residual, period_us, lateness_us, compute_us, latency_us,
        stamp_end

``count`` is the number of records ever written; record ``i`` (0-based) lives in row
``i % capacity`` and carries the stamps ``i + 1``. ``qa_ref`` and ``tau_ff`` are NaN-padded
to ``m`` with their true length stored, so an empty one (a cycle that sent no setpoint) and
NaN values both round-trip exactly.

Consistency without locks (a per-slot "seqlock"): the writer stores ``stamp_begin``, then the
record, then ``stamp_end``, then increments ``count``. A reader reads ``stamp_end``, copies the
row, then re-reads ``stamp_begin``; the copy is whole iff both equal ``i + 1``. A row that a
lapping writer overwrote meanwhile fails the check and is counted as lost, never returned
torn. This relies on stores and loads staying in program order, which x86-64 guarantees; on
weakly ordered CPUs (aarch64) numpy issues no fences, so a torn record is unlikely but not
excluded there (the records are telemetry, never control inputs).
"""

from __future__ import annotations

import contextlib
import math
import os
import secrets
from multiprocessing import shared_memory
from typing import Any

import numpy as np

from poise.api.bus import CycleSample
from poise.api.state import State

MAGIC = 0x706F697365524E47  # "poiseRNG"
VERSION = 1
HEADER_WORDS = 8
_H_MAGIC, _H_VERSION, _H_N, _H_M, _H_K, _H_CAP, _H_WIDTH, _H_COUNT = range(HEADER_WORDS)

#: State names by code (the ``state`` column); unknown names are stored as -1.
STATES: tuple[str, ...] = tuple(s.value for s in State)
_STATE_CODE = {name: float(i) for i, name in enumerate(STATES)}

#: Records kept by default: 8 s at 1 kHz.
DEFAULT_CAPACITY = 8192

_SCALARS = ("task_error", "statics_residual", "period_us", "lateness_us", "compute_us",
            "latency_us")


class RingError(RuntimeError):
    """A segment that is not a cycle ring, or a record that does not fit the layout."""


class Layout:
    """Column offsets of one record for a model of (n, m, k) = (n, m, task_dim)."""

    def __init__(self, n: int, m: int, k: int) -> None:
        self.n, self.m, self.k = n, m, k
        o = 6  # stamp_begin, t, seq, state, len_qa, len_tau
        self.q = slice(o, o + n)
        self.q_bar = slice(o + n, o + 2 * n)
        o += 2 * n
        self.qa_ref = slice(o, o + m)
        self.tau_ff = slice(o + m, o + 2 * m)
        o += 2 * m
        self.target = slice(o, o + k)
        self.x = slice(o + k, o + 2 * k)
        o += 2 * k
        self.scalars = o
        self.width = o + len(_SCALARS) + 1  # + stamp_end

    @property
    def nbytes(self) -> int:
        return self.width * 8


def _size(layout: Layout, capacity: int) -> int:
    return HEADER_WORDS * 8 + capacity * layout.nbytes


class CycleRing:
    """A ring of cycle records in shared memory; use :meth:`create` or :meth:`attach`.

    One process writes (:meth:`write`), others read (:meth:`read_new`). Close with
    :meth:`close` in every process; the creator also calls :meth:`unlink`.

    Attributes:
        name: the segment's name (``/dev/shm/<name>`` on Linux); pass it to :meth:`attach`.
        layout: the record's columns.
        capacity: records kept.
    """

    def __init__(self, shm: shared_memory.SharedMemory, layout: Layout, capacity: int,
                 *, owner: bool) -> None:
        self._shm: shared_memory.SharedMemory | None = shm
        self.name = shm.name
        self.layout = layout
        self.capacity = capacity
        self.owner = owner
        self._hdr: np.ndarray | None = np.ndarray((HEADER_WORDS,), np.int64, shm.buf, 0)
        self._rows: np.ndarray | None = np.ndarray((capacity, layout.width), np.float64,
                                                   shm.buf, HEADER_WORDS * 8)
        # the writer's staging row and its field views, made once
        self._stage = np.full(layout.width, math.nan)
        st = self._stage
        self._st_q, self._st_qbar = st[layout.q], st[layout.q_bar]
        self._st_qa, self._st_tau = st[layout.qa_ref], st[layout.tau_ff]
        self._st_target, self._st_x = st[layout.target], st[layout.x]
        self._st_body = st[1:-1]
        self._count = int(self._hdr[_H_COUNT])

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    def create(cls, n: int, m: int, k: int, *, name: str | None = None,
               capacity: int = DEFAULT_CAPACITY) -> CycleRing:
        """A new, empty ring for records of a model with ``n`` coordinates, ``m`` actuators
        and a ``k``-dimensional task (``name``: default ``poise_ring_<pid>_<random>``).

        Raises:
            RingError: the shared memory could not be created (the message says why).
        """
        if min(n, m, k) < 0 or capacity < 1:
            raise ValueError(f"bad ring shape n={n} m={m} k={k} capacity={capacity}")
        layout = Layout(n, m, k)
        name = name or f"poise_ring_{os.getpid()}_{secrets.token_hex(4)}"
        try:
            shm = shared_memory.SharedMemory(name=name, create=True,
                                             size=_size(layout, capacity))
        except OSError as exc:  # /dev/shm missing, full or not writable
            raise RingError(f"cannot create the cycle ring '{name}' "
                            f"({_size(layout, capacity)} bytes) in shared memory (/dev/shm): "
                            f"{exc.strerror or exc}") from None
        hdr = np.ndarray((HEADER_WORDS,), np.int64, shm.buf, 0)
        hdr[:] = (MAGIC, VERSION, n, m, k, capacity, layout.width, 0)
        del hdr
        ring = cls(shm, layout, capacity, owner=True)
        assert ring._rows is not None
        ring._rows[:, 0] = 0.0  # no stamps: nothing written
        ring._rows[:, -1] = 0.0
        return ring

    @classmethod
    def attach(cls, name: str) -> CycleRing:
        """The existing ring ``name`` (its shape is read from the header)."""
        shm = shared_memory.SharedMemory(name=name, create=False)
        hdr = np.ndarray((HEADER_WORDS,), np.int64, shm.buf, 0).copy()
        if hdr[_H_MAGIC] != MAGIC or hdr[_H_VERSION] != VERSION:
            shm.close()
            raise RingError(f"shared memory '{name}' is not a poise cycle ring (version "
                            f"{VERSION})")
        layout = Layout(int(hdr[_H_N]), int(hdr[_H_M]), int(hdr[_H_K]))
        capacity = int(hdr[_H_CAP])
        if layout.width != hdr[_H_WIDTH] or shm.size < _size(layout, capacity):
            shm.close()
            raise RingError(f"shared memory '{name}': header and size do not agree")
        return cls(shm, layout, capacity, owner=False)

    def close(self) -> None:
        """Release this process's mapping (idempotent; the segment stays)."""
        self._hdr = self._rows = None
        shm, self._shm = self._shm, None
        if shm is not None:
            shm.close()

    def unlink(self) -> None:
        """Remove the segment (the creator, once every process is done; idempotent)."""
        with contextlib.suppress(FileNotFoundError):
            shared_memory.SharedMemory(name=self.name, create=False).unlink()

    def __enter__(self) -> CycleRing:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ writer

    @property
    def count(self) -> int:
        """Records written so far (the writer's counter, as published)."""
        hdr = self._hdr
        return self._count if hdr is None else int(hdr[_H_COUNT])

    def write(self, s: CycleSample) -> None:
        """Append one record (the single writer only; never waits).

        Raises:
            RingError: a field longer than the layout allows.
        """
        rows, hdr, lay = self._rows, self._hdr, self.layout
        if rows is None or hdr is None:
            raise RingError("ring is closed")
        st = self._stage
        st[1] = s.t
        st[2] = s.seq
        st[3] = _STATE_CODE.get(s.state, -1.0)
        try:
            _put(self._st_qa, s.qa_ref)
            _put(self._st_tau, s.tau_ff)
            self._st_q[:] = s.q
            self._st_qbar[:] = s.q_bar
            self._st_target[:] = s.target
            self._st_x[:] = s.x
        except ValueError as exc:
            raise RingError(f"cycle {s.seq} does not fit the ring's layout (n={lay.n}, "
                            f"m={lay.m}, k={lay.k}): {exc}") from None
        st[4] = len(s.qa_ref)
        st[5] = len(s.tau_ff)
        o = lay.scalars
        st[o] = s.task_error
        st[o + 1] = s.statics_residual
        st[o + 2] = s.period_us
        st[o + 3] = s.lateness_us
        st[o + 4] = s.compute_us
        st[o + 5] = s.latency_us
        i = self._count
        row = rows[i % self.capacity]
        stamp = float(i + 1)
        row[0] = stamp          # 1. begin stamp: readers of the old record now fail
        row[1:-1] = self._st_body  # 2. the record
        row[-1] = stamp         # 3. end stamp: the record is whole
        self._count = i + 1
        hdr[_H_COUNT] = i + 1   # 4. publish

    # ------------------------------------------------------------------ reader

    def read_new(self, since: int, max_records: int | None = None
                 ) -> tuple[list[CycleSample], int, int]:
        """Every complete record written after the first ``since`` ones.

        Args:
            since: records already consumed (0 at first; then the returned ``next_since``).
            max_records: read at most this many (the oldest first); None: all.

        Returns:
            ``(samples, next_since, lost)``: the records in order, the value to pass next
            time, and how many records after ``since`` were overwritten before they could be
            read (the reader fell more than ``capacity`` behind, or the writer lapped a row
            while it was being copied).
        """
        rows, hdr = self._rows, self._hdr
        if rows is None or hdr is None:
            raise RingError("ring is closed")
        count = int(hdr[_H_COUNT])
        if max_records is not None:
            count = min(count, since + max_records)
        if count <= since:
            return [], since, 0
        start = max(since, count - self.capacity)
        lost = start - since
        idx = np.arange(start, count)
        slots = idx % self.capacity
        stamps = (idx + 1).astype(np.float64)
        ends = rows[slots, -1]       # 1. end stamps
        block = rows[slots]          # 2. the records (a copy)
        begins = rows[slots, 0]      # 3. begin stamps again
        ok = (ends == stamps) & (begins == stamps) & (block[:, 0] == stamps) & \
            (block[:, -1] == stamps)
        good = block[ok]
        lost += len(block) - len(good)
        return [self._decode(r) for r in good.tolist()], count, lost

    def _decode(self, r: list[float]) -> CycleSample:
        lay = self.layout
        code = int(r[3]) if r[3] == r[3] else -1
        o = lay.scalars
        return CycleSample(
            t=r[1], seq=int(r[2]), state=STATES[code] if 0 <= code < len(STATES) else "unknown",
            q=tuple(r[lay.q]), q_bar=tuple(r[lay.q_bar]),
            qa_ref=tuple(r[lay.qa_ref][:int(r[4])]), tau_ff=tuple(r[lay.tau_ff][:int(r[5])]),
            target=tuple(r[lay.target]), x=tuple(r[lay.x]),
            task_error=r[o], statics_residual=r[o + 1], period_us=r[o + 2],
            lateness_us=r[o + 3], compute_us=r[o + 4], latency_us=r[o + 5])

    def describe(self) -> dict[str, Any]:
        """Name, shape and counter, JSON-ready."""
        lay = self.layout
        return {"name": self.name, "n": lay.n, "m": lay.m, "k": lay.k,
                "capacity": self.capacity, "width": lay.width, "count": self.count}


def _put(view: np.ndarray, values: tuple[float, ...]) -> None:
    """``values`` into the front of ``view``, NaN after them."""
    n = len(values)
    if n == len(view):
        view[:] = values
        return
    if n > len(view):
        raise ValueError(f"{n} values for {len(view)} columns")
    view.fill(math.nan)
    if n:
        view[:n] = values


__all__ = ["DEFAULT_CAPACITY", "STATES", "CycleRing", "Layout", "RingError"]
