"""Host transports: asyncio (pyserial-asyncio-fast) and a threaded blocking one (pyserial).

Both are thin I/O drivers around a :class:`~poise.firmware_bridge.link.LinkCore`, which holds
the protocol logic (handshake, requests and Acks, heartbeats, reconnect policy, statistics): they
open and close the port, write what the core returns, feed it what they read, and wait. Sensor
frames carry host receive timestamps, so a controller can pace its loop by the device's stream;
``send_setpoint`` never blocks. Both open the port exclusively (pyserial ``exclusive=True``, an
``flock``): a second poise process that tries the same port gets
:class:`~poise.firmware_bridge.link.PortBusyError` and the first one's stream goes on.

Which one to use (measured in this environment, see ARCHITECTURE.md): a pty round trip costs
~10 µs p50 with blocking pyserial in a thread and ~100 µs p50 (~250 µs p99) through the asyncio
event loop. Use :class:`SerialLink` (threaded) for the fixed-rate control loop at ≥ 500 Hz — the
loop runs in its own thread, blocks in :meth:`SerialLink.next_sensors` and answers each frame with
:meth:`SerialLink.send_setpoint`. Use :class:`AsyncLink` where the link is one of many asyncio
tasks (probing, the service's slower paths, tools) and ~0.1–0.3 ms extra latency is harmless.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import queue
import select
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import Any, ClassVar, Generic, NamedTuple, TypeVar

import serial
import serial_asyncio_fast

from poise.firmware_bridge import messages as m
from poise.firmware_bridge.link import (
    DeviceDescription,
    DeviceTimeoutError,
    LinkCore,
    LinkError,
    LinkState,
    LinkStats,
    NotConnectedError,
    Pending,
    PortBusyError,
    PortNotFoundError,
    SchemaMismatchError,
    SensorSample,
    VersionMismatchError,
)
from poise.firmware_bridge.samplequeue import SampleQueue

__all__ = [
    "AsyncLink",
    "DeviceDescription",
    "DeviceTimeoutError",
    "LinkError",
    "LinkStats",
    "NotConnectedError",
    "PortBusyError",
    "PortNotFoundError",
    "RawRead",
    "SchemaMismatchError",
    "SensorSample",
    "SerialLink",
    "VersionMismatchError",
]

DEFAULT_BAUD = 1_000_000
#: Longest a driver's loop goes without polling the core: the reader thread's read timeout,
#: the asyncio ticker's period when nothing is due sooner [s].
IDLE_POLL = 0.05
#: How long after its last call of ``next_sensors`` returned a caller still owns reading the
#: port (a control loop calls again well within it); then the reader thread reads again [s].
CALLER_READS = 0.02
#: What pyserial raises when the port goes away under a read or a write (TypeError and
#: AttributeError: another thread closed it, and pyserial then selects on a None descriptor).
_PORT_ERRORS = (serial.SerialException, OSError, TypeError, AttributeError)

#: What a request returns: the Ack itself (threaded) or an awaitable of it (asyncio).
AckT = TypeVar("AckT")


class _Link(ABC, Generic[AckT]):
    """What both transports share: the configuration, the :class:`LinkCore`, the sample queue
    and the glue between the core and the open port (``_handle``, guarded by ``_lock`` with the
    core). A driver moves the bytes (:meth:`_put`, :meth:`_release`), waits for a
    :class:`~poise.firmware_bridge.link.Pending` (:meth:`_await`) and runs a loop that reads or
    polls.

    Args:
        port: serial device path (``/dev/ttyACM0``, a pty, a ``/dev/serial/by-id`` link).
        baudrate: ignored by USB-CDC and ptys, used by real UARTs [bit/s].
        queue_size: sensor samples buffered for ``next_sensors`` (oldest dropped, counted in
            ``stats.sample_overruns``).
        timeout, expected_schema, reconnect, heartbeat, on_sensors, on_fault: see
            :class:`~poise.firmware_bridge.link.LinkCore`.
    """

    _queue_type: ClassVar[Callable[..., Any]]  # SampleQueue or asyncio.Queue

    def __init__(self, port: str, *, baudrate: int = DEFAULT_BAUD, timeout: float = 2.0,
                 expected_schema: int | None = None, reconnect: bool = True,
                 heartbeat: float | None = None, queue_size: int = 64,
                 on_sensors: Callable[[SensorSample], None] | None = None,
                 on_fault: Callable[[m.Fault], None] | None = None) -> None:
        self.port = port
        self.baudrate = baudrate
        self.timeout = timeout
        self.user_on_sensors = on_sensors
        self.core = LinkCore(port, timeout=timeout, expected_schema=expected_schema,
                             reconnect=reconnect, heartbeat=heartbeat,
                             on_sensors=self._on_sample, on_fault=on_fault)
        self.stats: LinkStats = self.core.stats
        self._queue = self._queue_type(maxsize=queue_size)
        self._lock = threading.Lock()  # the core and _handle
        self._handle: Any = None  # the open port: a pyserial Serial or an asyncio transport

    # ------------------------------------------------------------------ public API

    @property
    def connected(self) -> bool:
        """Whether the link is up (False while it reconnects after an unplug)."""
        return self.core.connected

    @property
    def description(self) -> DeviceDescription | None:
        """What the last handshake learned (``None`` before the first one)."""
        return self.core.description

    def send_setpoint(self, qa_ref: Sequence[float], tau_ff: Sequence[float] | None = None
                      ) -> int:
        """Write a setpoint now (never waits for the device); returns its sequence number, or
        -1 while disconnected (dropped, counted in ``stats.tx_dropped``)."""
        with self._lock:
            seq, frame = self.core.setpoint(qa_ref, tau_ff)
        if frame is not None:
            self._write((frame,))
        return seq

    def send_heartbeat(self) -> int:
        return self._send(m.Heartbeat())

    def arm(self, clear_estop: bool = False) -> AckT:
        """Arm (with ``clear_estop`` also clear a latched e-stop); the Ack or nack (awaitable
        on :class:`AsyncLink`, as are the other requests)."""
        return self._request(m.Arm(clear_estop))

    def disarm(self) -> AckT:
        return self._request(m.Disarm())

    def estop(self) -> AckT:
        return self._request(m.EStop())

    def configure(self, key: int, value: float, channel: int = m.NO_CHANNEL) -> AckT:
        """Write a configuration value; the Ack (``ack.ok``) or nack (``ack.code``)."""
        return self._request(m.ConfigWrite(int(key), float(value), int(channel)))

    # ------------------------------------------------------------------ the driver's part

    @abstractmethod
    def _put(self, handle: Any, frame: bytes) -> bool:
        """Write one frame to the port ``handle`` (``None``: closed); False if it was lost."""

    @abstractmethod
    def _release(self, handle: Any) -> None:
        """Close the port ``handle``."""

    @abstractmethod
    def _await(self, pending: Pending) -> Any:
        """Wait for ``pending``, polling the core meanwhile; its result (asyncio: awaitable)."""

    # ------------------------------------------------------------------ glue

    def _port_options(self) -> dict[str, Any]:
        """pyserial options both transports open the port with: the baud rate and an exclusive
        lock (``flock``), so that a second process cannot share the port and interleave its
        frames with ours; it gets :class:`PortBusyError` instead."""
        return {"baudrate": self.baudrate, "exclusive": True}

    def _open_failed(self, exc: BaseException) -> LinkError:
        with self._lock:
            return self.core.open_failed(exc, self.core.clock())

    def _attach(self, handle: Any, ser: serial.Serial) -> Pending:
        """The port is open as ``handle`` (its pyserial object ``ser``): start the handshake."""
        with contextlib.suppress(Exception):
            ser.reset_input_buffer()
        with self._lock:
            self._handle = handle
            pending, frame = self.core.opened(self.core.clock())
        self._write((frame,))
        return pending

    def _close_port(self, handle: Any = None, release: bool = True) -> None:
        """Forget the open port (only if it still is ``handle``, when given) and tell the core;
        ``release``: close it too (not when it closed itself)."""
        with self._lock:
            h = self._handle
            if h is None or (handle is not None and h is not handle):
                return
            self._handle = None
            self.core.lost(self.core.clock())
        if release:
            self._release(h)

    def _reconnect_due(self) -> bool:
        at = self.core.reconnect_at
        return self._handle is None and at is not None and self.core.clock() >= at

    def _idle(self, wake: float) -> float:
        """How long a loop may sleep until ``wake`` [s], at most :data:`IDLE_POLL`."""
        return min(IDLE_POLL, max(0.0, wake - self.core.clock()))

    def _poll(self) -> float:
        """Write what the core says is due, close the port if the core gave it up (a failed
        handshake); returns when to poll next [s, the core's clock]."""
        with self._lock:
            frames = self.core.poll(self.core.clock())
            wake = self.core.next_poll()
            given_up = None if self.core.wants_port else self._handle
        self._write(frames)
        if given_up is not None:
            self._close_port(given_up)
        return wake

    def _feed(self, data: bytes) -> None:
        now = self.core.clock()
        with self._lock:
            self.core.feed(data, now)  # a failed handshake: _poll closes the port

    def _write(self, frames: Iterable[bytes]) -> None:
        handle = self._handle
        for frame in frames:
            if not self._put(handle, frame):
                self.core.stats.tx_dropped += 1

    def _send(self, msg: m.Message) -> int:
        with self._lock:
            seq, frame = self.core.send(msg)
        if frame is not None:
            self._write((frame,))
        return seq

    def _request(self, msg: m.Message) -> AckT:
        """Send ``msg``; its Ack (asyncio: awaitable)."""
        with self._lock:
            pending, frame = self.core.request(msg, self.core.clock())
        self._write((frame,))
        return self._await(pending)

    def _on_sample(self, sample: SensorSample) -> None:
        if self.user_on_sensors:
            self.user_on_sensors(sample)
        if self._queue.full():  # the consumer lags: drop the oldest
            with contextlib.suppress(queue.Empty, asyncio.QueueEmpty):
                self._queue.get_nowait()
            self.core.stats.sample_overruns += 1
        self._queue.put_nowait(sample)

    def _no_sample(self, seconds: float) -> DeviceTimeoutError:
        return DeviceTimeoutError(f"{self.port}: no sensor frame within {seconds:g} s")


class _Protocol(asyncio.Protocol):
    """Feeds an :class:`AsyncLink` from one transport."""

    def __init__(self, link: AsyncLink) -> None:
        self.link = link
        self.transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.link._feed(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.transport is not None:
            self.link._close_port(self.transport, release=False)


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


class AsyncLink(_Link[Awaitable[m.Ack]]):
    """Asyncio serial link to a poise device (arguments: see :class:`_Link`).

    ``on_sensors`` is called on the event loop. A ticker task polls the core (heartbeats,
    reconnects). Use as ``async with AsyncLink(port) as link:`` (connects and handshakes) or
    ``link = await AsyncLink.open(port)``; ``await link.arm()`` and the other requests.
    """

    _queue_type = asyncio.Queue
    _ticker: asyncio.Task | None = None

    @classmethod
    async def open(cls, port: str, **kwargs) -> AsyncLink:
        link = cls(port, **kwargs)
        await link.connect()
        return link

    async def __aenter__(self) -> AsyncLink:
        await self.connect()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def connect(self) -> DeviceDescription:
        """Open the port and do the handshake. Raises a :class:`LinkError` subclass."""
        pending = await self._open_port()
        try:
            desc = await self._await(pending)
        except BaseException:
            self._close_port()
            raise
        if self._ticker is None:
            self._ticker = asyncio.get_running_loop().create_task(self._tick_loop(),
                                                                  name="poise-tick")
        return desc

    async def close(self) -> None:
        with self._lock:
            self.core.close()
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._ticker
        self._close_port()

    async def sensors(self) -> AsyncIterator[SensorSample]:
        """Decoded sensor frames as they arrive (survives reconnects)."""
        while self.core.state is not LinkState.CLOSED:
            yield await self._queue.get()

    async def next_sensors(self, timeout: float | None = None) -> SensorSample:
        """The next sensor frame; :class:`DeviceTimeoutError` after ``timeout`` seconds."""
        t = self.timeout if timeout is None else timeout
        try:
            return await asyncio.wait_for(self._queue.get(), t)
        except TimeoutError:
            raise self._no_sample(t) from None

    # ------------------------------------------------------------------ I/O

    async def _open_port(self) -> Pending:
        try:
            transport, _ = await serial_asyncio_fast.create_serial_connection(
                asyncio.get_running_loop(), lambda: _Protocol(self), self.port,
                **self._port_options())
        except (serial.SerialException, OSError) as exc:
            raise self._open_failed(exc) from None
        return self._attach(transport, transport.serial)

    def _put(self, transport: asyncio.Transport | None, frame: bytes) -> bool:
        if transport is None or transport.is_closing():
            return False
        transport.write(frame)
        return True

    def _release(self, transport: Any) -> None:
        with contextlib.suppress(Exception):
            transport.abort()
        # abort() closes the port in a background task that may never run (the event loop
        # ends); close it now so that its exclusive lock is released at once.
        with contextlib.suppress(Exception):
            transport.serial.close()

    async def _await(self, pending: Pending) -> Any:
        ready = asyncio.Event()
        pending.add_done_callback(lambda _: ready.set())  # on the loop: in _feed or _poll
        while not pending.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ready.wait(), self._idle(self._poll()))
        return pending.result()

    async def _tick_loop(self) -> None:
        while self.core.state is not LinkState.CLOSED:
            wake = self._poll()
            if self._reconnect_due():
                with contextlib.suppress(LinkError):
                    await self._open_port()  # the handshake goes on through _feed and _poll
                continue
            await asyncio.sleep(self._idle(wake))


class SerialLink(_Link[m.Ack]):
    """Threaded blocking serial link (pyserial): a reader thread decodes, polls the core and
    reconnects; the caller's thread writes. While a thread keeps calling :meth:`next_sensors`
    (a control loop) that thread reads and decodes the port itself, so a frame reaches it
    without a thread hand-over; the reader thread then only polls and reconnects. Lower
    latency than :class:`AsyncLink`; use it for the control loop.

    Same arguments (see :class:`_Link`) and semantics as :class:`AsyncLink`. Sensor frames:
    :meth:`next_sensors` (blocking, with timeout) or the ``on_sensors`` callback (called on the
    reader thread: keep it short). Thread-safe: ``send_*`` may be called from any thread.
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
