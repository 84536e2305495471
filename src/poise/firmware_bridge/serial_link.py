"""The threaded host transport: :class:`SerialLink` (blocking pyserial in a reader thread,
or in the caller's thread while a control loop keeps reading).

~10 µs p50 per pty round trip: the transport of the fixed-rate control loop at ≥ 500 Hz
(:mod:`poise.firmware_bridge.transport`). The loop runs in its own thread, blocks in
:meth:`SerialLink.next_sensors` (or :meth:`SerialLink.next_read`, the wire cycle's undecoded
read) and answers each frame with :meth:`SerialLink.send_setpoint`.
"""

from __future__ import annotations

import contextlib
import math
import os
import queue
import select
import threading
import time
from typing import Any, NamedTuple

import serial

from poise.firmware_bridge import messages as m
from poise.firmware_bridge.driver import IDLE_POLL, LinkDriver
from poise.firmware_bridge.link import (
    DeviceDescription,
    LinkError,
    LinkState,
    Pending,
    SensorSample,
)
from poise.firmware_bridge.samplequeue import SampleQueue

#: How long after its last call of ``next_sensors`` returned a caller still owns reading the
#: port (a control loop calls again well within it); then the reader thread reads again [s].
CALLER_READS = 0.02
#: What pyserial raises when the port goes away under a read or a write (TypeError and
#: AttributeError: another thread closed it, and pyserial then selects on a None descriptor).
_PORT_ERRORS = (serial.SerialException, OSError, TypeError, AttributeError)


class RawRead(NamedTuple):
    """What one read of the port returned, not yet decoded (:meth:`SerialLink.next_read`).

    Attributes:
        data: the bytes.
        host_time: ``time.perf_counter()`` right after the read [s] (the samples' clock).
    """

    data: bytes
    host_time: float


def _wait_readable(fd: int, timeout: float, busy: bool) -> bool:
    """Whether ``fd`` has bytes within ``timeout`` [s]: sleeping in ``select``, or with
    ``busy`` polling it (``select`` with a zero timeout) until then."""
    if not busy:
        return bool(select.select((fd,), (), (), timeout)[0])
    end = time.perf_counter() + timeout
    while not select.select((fd,), (), (), 0)[0]:
        if time.perf_counter() >= end:
            return False
    return True


class SerialLink(LinkDriver[m.Ack]):
    """Threaded blocking serial link (pyserial): a reader thread decodes, polls the core and
    reconnects; the caller's thread writes. While a thread keeps calling :meth:`next_sensors`
    (a control loop) that thread reads and decodes the port itself, so a frame reaches it
    without a thread hand-over; the reader thread then only polls and reconnects. Lower
    latency than :class:`~poise.firmware_bridge.async_link.AsyncLink`; use it for the control
    loop.

    Same arguments (see :class:`~poise.firmware_bridge.driver.LinkDriver`) and semantics as
    :class:`~poise.firmware_bridge.async_link.AsyncLink`. Sensor frames: :meth:`next_sensors`
    (blocking, with timeout) or the ``on_sensors`` callback (called on the reader thread: keep
    it short). Thread-safe: ``send_*`` may be called from any thread.
    """

    _queue_type = SampleQueue
    _reader: threading.Thread | None = None
    _caller_until = 0.0  # perf_counter until which a caller of next_sensors reads the port
    #: A caller of :meth:`next_sensors` polls the port without sleeping (``loop.busy_poll``).
    busy_poll = False
    _wake = 0.0  # when the core is to be polled next [s, its clock]
    _rx_lock: threading.Lock  # one reader of the port at a time: bytes decoded in order

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._rx_lock = threading.Lock()

    @classmethod
    def open(cls, port: str, **kwargs) -> SerialLink:
        link = cls(port, **kwargs)
        link.connect()
        return link

    def __enter__(self) -> SerialLink:
        self.connect()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def connect(self) -> DeviceDescription:
        """Open the port and do the handshake. Raises a :class:`LinkError` subclass."""
        pending = self._open_port()
        if self._reader is None:
            self._reader = threading.Thread(target=self._read_loop, name="poise-serial-rx",
                                            daemon=True)
            self._reader.start()
        try:
            return self._await(pending)
        except BaseException:
            self._close_port()
            raise

    def close(self) -> None:
        with self._lock:
            self.core.close()
        self._close_port()
        if self._reader is not None and self._reader is not threading.current_thread():
            self._reader.join(timeout=2)

    def next_sensors(self, timeout: float | None = None) -> SensorSample:
        """Block until the next sensor frame; :class:`DeviceTimeoutError` after ``timeout``.

        The calling thread reads the port itself (``select`` and ``read`` on its descriptor,
        then the decode) while it keeps calling: a frame reaches it without a hand-over from
        the reader thread (~85 µs on the reference machine: a wake-up and the GIL), which
        meanwhile only polls the core (heartbeats, retries, reconnects). When nobody has
        called for :data:`CALLER_READS` seconds the reader thread reads again (acknowledgements
        during a handshake or while no loop runs)."""
        got = self._next(timeout, keep=False)
        assert type(got) is SensorSample
        return got

    def next_read(self, timeout: float | None = None) -> SensorSample | RawRead:
        """:meth:`next_sensors` for a caller that answers a read itself (the control loop's
        wire cycle): a sample already decoded (the reader thread's) if there is one, else the
        bytes of the next read of the port, not yet decoded, with their time (:meth:`feed`
        them unless :meth:`answered`)."""
        return self._next(timeout, keep=True)

    def _next(self, timeout: float | None, keep: bool) -> SensorSample | RawRead:
        t = self.timeout if timeout is None else timeout
        try:
            sample = self.sensors_nowait()
            if sample is not None:
                return sample
            if t <= 0:  # no system call: the GIL is not given up (another thread might keep
                raise self._no_sample(t)  # it for a whole switch interval)
            deadline = time.perf_counter() + t
            while True:
                now = self.core.clock()
                if now >= self._wake:  # the core's duties, which the reader thread leaves
                    self._wake = min(self._poll(), now + IDLE_POLL)
                left = max(deadline - time.perf_counter(), 0.0)
                self._caller_until = math.inf  # reading here until this call returns
                read = self._read_here(min(left, max(self._wake - now, 0.0)), keep)
                if not read:  # no port
                    try:
                        return self._queue.get(timeout=left)
                    except queue.Empty:
                        raise self._no_sample(t) from None
                if type(read) is RawRead:
                    return read
                sample = self.sensors_nowait()
                if sample is not None:
                    return sample
                if left <= 0:
                    raise self._no_sample(t)
        finally:
            self._caller_until = time.perf_counter() + CALLER_READS

    def feed(self, read: RawRead) -> None:
        """Decode a read :meth:`next_read` returned, as if this link had read it (its samples
        go to :meth:`sensors_nowait`)."""
        with self._lock:
            self.core.feed(read.data, read.host_time)

    def answered(self, read: RawRead, seq: int, timestamp_us: int, msg: m.Sensors,
                 start: int = 0) -> tuple[SensorSample, int]:
        """Account for a read of :meth:`next_read` whose last frame, ``read.data[start:]``,
        the caller decoded (one whole Sensors frame ``msg``) and answered
        (:meth:`LinkCore.answered`); the whole frames before it (a burst) are decoded and
        counted first, in order, and delivered to nobody. Returns the sample and how many
        sensor frames came before it (skipped)."""
        with self._lock:
            core = self.core
            skipped = 0
            if start:
                before = core.stats.sensor_frames
                core.feed(read.data[:start], read.host_time, deliver=False)
                skipped = core.stats.sensor_frames - before
            return core.answered(read.data[start:], seq, timestamp_us, msg,
                                 read.host_time), skipped

    def reserve_setpoint(self) -> tuple[int, int] | None:
        """:meth:`LinkCore.reserve_setpoint`: the next setpoint's sequence number and
        timestamp, for a caller that frames it (None while not connected)."""
        with self._lock:
            return self.core.reserve_setpoint()

    @property
    def pending(self) -> bool:
        """Whether part of a frame waits in the decoder for the rest (the start of the next
        read then belongs to it)."""
        return self.core.decoder.pending

    def send_reserved(self, seq: int, frame: bytes | memoryview) -> bool:
        """Write a setpoint frame the caller made with :meth:`reserve_setpoint`'s ``seq``;
        False, nothing written, when that number went to another frame meanwhile (make it
        again) or the link went down."""
        with self._lock:
            if not self.core.sent_setpoint(seq, self.core.clock()):
                return False
        if not self._put(self._handle, frame):
            self.core.stats.tx_dropped += 1
        return True

    def sensors_nowait(self) -> SensorSample | None:
        """The next sensor frame already decoded, or None (no system call, no exception: a
        control loop's drain of newer frames)."""
        q = self._queue
        return q.get_nowait() if q.qsize() else None

    def _read_here(self, timeout: float, keep: bool = False) -> bool | RawRead:
        """Wait up to ``timeout`` s for bytes on the port and feed them (with ``keep``
        return them undecoded, when there were any), in the calling thread; False when the
        port has no descriptor to wait on (closed, reconnecting, or not a POSIX port)."""
        with self._rx_lock:  # the reader thread may be finishing a read of its own
            ser = self._handle
            fd = getattr(ser, "fd", None)
            if ser is None or not isinstance(fd, int):
                return False
            try:
                ready = _wait_readable(fd, timeout, self.busy_poll)
                data = os.read(fd, 4096) if ready else b""
            except (BlockingIOError, InterruptedError):
                return True
            except OSError:
                data = None
            if data:
                if keep:
                    return RawRead(data, self.core.clock())
                self._feed(data)
                return True
        if data is None or ready:  # an error, or ready with nothing: unplugged
            self._close_port(ser)
            return False
        return True

    # ------------------------------------------------------------------ I/O

    def _open_port(self) -> Pending:
        try:
            ser = serial.Serial(self.port, **self._port_options(), timeout=IDLE_POLL,
                                write_timeout=0.5)
        except (serial.SerialException, OSError) as exc:
            raise self._open_failed(exc) from None
        return self._attach(ser, ser)

    def _put(self, ser: serial.Serial | None, frame: bytes) -> bool:
        """One ``write`` system call where the port takes the whole frame (the usual case:
        pyserial's own ``write`` adds a ``select`` and tens of µs of Python per cycle); the
        rest, if any, through pyserial (which waits for room up to its write timeout)."""
        if ser is None:
            return False
        try:
            fd = getattr(ser, "fd", None)  # POSIX ports: opened non-blocking by pyserial
            done = 0
            if fd is not None:
                # not contextlib.suppress: its context manager costs ~0.5 µs a cycle
                try:  # noqa: SIM105
                    done = os.write(fd, frame)
                except BlockingIOError:
                    pass
            if done < len(frame):
                ser.write(frame[done:])
        except _PORT_ERRORS:
            return False  # lost like on an unplugged wire; the reader reconnects
        return True

    def _release(self, ser: serial.Serial) -> None:
        with contextlib.suppress(Exception):
            ser.close()

    def _await(self, pending: Pending) -> Any:
        while not pending.done():
            with contextlib.suppress(TimeoutError):  # a LinkError is not one
                pending.result(self._idle(self._poll()))
        return pending.result()

    def _read_loop(self) -> None:
        while self.core.state is not LinkState.CLOSED:
            if self._handle is not None and time.perf_counter() < self._caller_until:
                time.sleep(IDLE_POLL)  # a caller reads and polls (next_sensors): stay out
                continue                # of its way (no wake-ups competing for the GIL)
            now = self.core.clock()
            if now >= self._wake:  # not per read: polls when due, and at least every IDLE_POLL
                self._wake = min(self._poll(), now + IDLE_POLL)
            wake = self._wake
            ser = self._handle
            if ser is None:
                if self._reconnect_due():
                    with contextlib.suppress(LinkError):
                        self._open_port()  # the handshake goes on through _feed and _poll
                    self._wake = 0.0
                else:
                    time.sleep(self._idle(wake))
                continue
            with self._rx_lock:
                if time.perf_counter() < self._caller_until:  # a caller took over meanwhile:
                    continue  # its reads (next_read's undecoded ones too) go first
                try:
                    data = ser.read(max(1, ser.in_waiting))
                except _PORT_ERRORS:
                    data = None
                if data:
                    self._feed(data)
            if data is None:
                self._close_port(ser)


__all__ = ["CALLER_READS", "RawRead", "SerialLink"]
