"""Host transports: asyncio (pyserial-asyncio-fast) and a threaded blocking one (pyserial).

Both do the handshake on connect (refusing a protocol-version or schema mismatch with a message
that says what differs), keep :class:`~poise.firmware_bridge.link.LinkStats`, send heartbeats
while idle, reconnect after an unplug (re-handshake, same schema required), and deliver decoded
sensor frames with host receive timestamps so that a controller can pace its loop by the
device's stream. ``send_setpoint`` never blocks on the device. Both open the port exclusively
(pyserial ``exclusive=True``, an ``flock``): a second poise process that tries the same port is
refused with :class:`~poise.firmware_bridge.link.PortBusyError` and the first one keeps its
stream undisturbed.

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
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import serial
import serial_asyncio_fast

from poise.firmware_bridge import messages as m
from poise.firmware_bridge.link import (
    DeviceDescription,
    DeviceTimeoutError,
    LinkCore,
    LinkError,
    LinkStats,
    NotConnectedError,
    PortBusyError,
    PortNotFoundError,
    SchemaMismatchError,
    SensorSample,
    VersionMismatchError,
    check_description,
    port_error,
    timeout_error,
    version_error,
)

__all__ = [
    "AsyncLink",
    "DeviceDescription",
    "DeviceTimeoutError",
    "LinkError",
    "LinkStats",
    "NotConnectedError",
    "PortBusyError",
    "PortNotFoundError",
    "SchemaMismatchError",
    "SensorSample",
    "SerialLink",
    "VersionMismatchError",
]

DEFAULT_BAUD = 1_000_000
#: How many handshake requests are sent within the timeout.
HELLO_TRIES = 3


def _floats(xs: Sequence[float] | None) -> tuple[float, ...] | None:
    return None if xs is None else tuple(float(x) for x in xs)


class _LinkSettings:
    """What both transports are configured with, and their protocol core (no I/O)."""

    def __init__(self, port: str, baudrate: int, timeout: float, expected_schema: int | None,
                 reconnect: bool, heartbeat: float | None,
                 on_sensors: Callable[[SensorSample], None] | None,
                 on_fault: Callable[[m.Fault], None] | None) -> None:
        self.port = port
        self.baudrate = baudrate
        self.timeout = timeout
        self.expected_schema = expected_schema
        self.reconnect = reconnect
        self.heartbeat_interval = heartbeat
        self.user_on_sensors = on_sensors
        self.core = LinkCore(on_sensors=self._on_sample, on_fault=on_fault)
        self.description: DeviceDescription | None = None

    def _port_options(self) -> dict[str, Any]:
        """pyserial options both transports open the port with: the baud rate and an exclusive
        lock (``flock``), so that a second process cannot share the port and interleave its
        frames with ours; it gets :class:`PortBusyError` instead."""
        return {"baudrate": self.baudrate, "exclusive": True}

    def _on_sample(self, sample: SensorSample) -> None:
        raise NotImplementedError


class _Protocol(asyncio.Protocol):
    def __init__(self, link: AsyncLink) -> None:
        self.link = link

    def data_received(self, data: bytes) -> None:
        self.link._data(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.link._lost(exc)


class AsyncLink(_LinkSettings):
    """Asyncio serial link to a poise device.

    Args:
        port: serial device path (``/dev/ttyACM0``, a pty, a ``/dev/serial/by-id`` link).
        baudrate: ignored by USB-CDC and ptys, used by real UARTs.
        timeout: handshake and acknowledgement timeout [s].
        expected_schema: refuse a device whose schema checksum differs (``None``: any).
        reconnect: reopen the port and redo the handshake after an unplug.
        heartbeat: send a Heartbeat when nothing was sent for this long [s]; ``None``:
            a quarter of the device's watchdog timeout; ``0``: never.
        queue_size: sensor samples buffered for :meth:`sensors` (oldest dropped, counted in
            ``stats.sample_overruns``).
        on_sensors: called on the event loop with each :class:`SensorSample` as it is decoded.

    Use as ``async with AsyncLink(port) as link:`` (connects and handshakes) or
    ``link = await AsyncLink.open(port)``.
    """

    def __init__(self, port: str, *, baudrate: int = DEFAULT_BAUD, timeout: float = 2.0,
                 expected_schema: int | None = None, reconnect: bool = True,
                 heartbeat: float | None = None, queue_size: int = 64,
                 on_sensors: Callable[[SensorSample], None] | None = None,
                 on_fault: Callable[[m.Fault], None] | None = None) -> None:
        _LinkSettings.__init__(self, port, baudrate, timeout, expected_schema, reconnect,
                               heartbeat, on_sensors, on_fault)
        self._queue: asyncio.Queue[SensorSample] = asyncio.Queue(maxsize=queue_size)
        self._transport: asyncio.Transport | None = None
        self._connected = asyncio.Event()
        self._closing = False
        self._tasks: set[asyncio.Task] = set()
        self._waiters: list[tuple[Callable[[m.Frame], bool], asyncio.Future]] = []
        self._rx_bytes = 0

    # ------------------------------------------------------------------ public API

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

    @property
    def stats(self) -> LinkStats:
        return self.core.stats

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    async def connect(self) -> DeviceDescription:
        """Open the port and do the handshake. Raises a :class:`LinkError` subclass."""
        await self._open_port()
        try:
            desc = await self._handshake()
        except BaseException:
            self._drop_transport()
            raise
        if self.description is not None and desc.schema_checksum != \
                self.description.schema_checksum:
            self._drop_transport()
            raise SchemaMismatchError(
                f"{self.port}: after reconnect the device has schema 0x"
                f"{desc.schema_checksum:08x}, before 0x{self.description.schema_checksum:08x}")
        self.description = desc
        self._connected.set()
        if not any(t.get_name() == "poise-heartbeat" for t in self._tasks):
            self._spawn(self._heartbeat_loop(), "poise-heartbeat")
        return desc

    async def close(self) -> None:
        self._closing = True
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._drop_transport()

    def send_setpoint(self, qa_ref: Sequence[float], tau_ff: Sequence[float] | None = None
                      ) -> int:
        """Queue a setpoint for sending now (non-blocking); returns its sequence number.

        While disconnected the setpoint is dropped and counted in ``stats.tx_dropped``.
        """
        return self._send(m.Setpoint(tuple(float(x) for x in qa_ref), _floats(tau_ff)))

    def send_heartbeat(self) -> int:
        return self._send(m.Heartbeat())

    async def arm(self, clear_estop: bool = False) -> m.Ack:
        """Arm (and with ``clear_estop`` also clear a latched e-stop); returns the Ack/nack."""
        return await self._request(m.Arm(clear_estop))

    async def disarm(self) -> m.Ack:
        return await self._request(m.Disarm())

    async def estop(self) -> m.Ack:
        return await self._request(m.EStop())

    async def configure(self, key: int, value: float, channel: int = m.NO_CHANNEL) -> m.Ack:
        """Write a configuration value; returns the Ack (``ack.ok``) or nack (``ack.code``)."""
        return await self._request(m.ConfigWrite(int(key), float(value), int(channel)))

    async def sensors(self) -> AsyncIterator[SensorSample]:
        """Decoded sensor frames as they arrive (survives reconnects)."""
        while not self._closing:
            yield await self._queue.get()

    async def next_sensors(self, timeout: float | None = None) -> SensorSample:
        """The next sensor frame; :class:`DeviceTimeoutError` after ``timeout`` seconds."""
        t = self.timeout if timeout is None else timeout
        try:
            return await asyncio.wait_for(self._queue.get(), t)
        except TimeoutError:
            raise DeviceTimeoutError(f"{self.port}: no sensor frame within {t:g} s") from None

    # ------------------------------------------------------------------ internals

    def _spawn(self, coro, name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _open_port(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            transport, _ = await serial_asyncio_fast.create_serial_connection(
                loop, lambda: _Protocol(self), self.port, **self._port_options())
        except (serial.SerialException, OSError) as exc:
            raise port_error(self.port, exc) from None
        self._transport = transport
        self.core.reset_rx()
        self._rx_bytes = 0
        with contextlib.suppress(Exception):
            transport.serial.reset_input_buffer()

    def _drop_transport(self) -> None:
        self._connected.clear()
        if self._transport is not None:
            t, self._transport = self._transport, None
            with contextlib.suppress(Exception):
                t.abort()
            # abort() closes the port in a background task that may never run (the event
            # loop ends); close it now so that its exclusive lock is released at once.
            with contextlib.suppress(Exception):
                t.serial.close()

    async def _handshake(self) -> DeviceDescription:
        sent: list[tuple[str, bytes]] = []
        deadline = time.monotonic() + self.timeout
        interval = self.timeout / HELLO_TRIES
        self.core.hello = None
        while True:
            frame = self._write(m.HelloRequest())[1]
            sent.append(("HelloRequest", frame))
            until = min(deadline, time.monotonic() + interval)
            while time.monotonic() < until:
                hello = self.core.hello
                if hello is not None and hello.protocol_version != m.PROTOCOL_VERSION:
                    raise version_error(self.port, hello)
                desc = self.core.description()
                if desc is not None:
                    check_description(desc, self.port, self.expected_schema)
                    return desc
                await self._wait_frame(lambda f: isinstance(f.message, m.Hello | m.Channel),
                                       until - time.monotonic())
            if time.monotonic() >= deadline:
                raise timeout_error(self.port, self.timeout, sent, self._rx_bytes,
                                    "Hello/Channel answer")

    async def _wait_frame(self, pred: Callable[[m.Frame], bool], timeout: float) -> None:
        if timeout <= 0:
            return
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        entry = (pred, fut)
        self._waiters.append(entry)
        try:
            await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            pass
        finally:
            with contextlib.suppress(ValueError):
                self._waiters.remove(entry)

    async def _request(self, msg: m.Message) -> m.Ack:
        if not self.connected:
            raise NotConnectedError(f"{self.port}: not connected")
        seq, frame = self._write(msg)
        deadline = time.monotonic() + self.timeout
        while (ack := self.core.acks.pop(seq, None)) is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise timeout_error(self.port, self.timeout, [(type(msg).__name__, frame)],
                                    self._rx_bytes, f"Ack for seq {seq}")
            await self._wait_frame(lambda f: isinstance(f.message, m.Ack), left)
        return ack

    def _write(self, msg: m.Message) -> tuple[int, bytes]:
        seq, frame = self.core.frame(msg)
        if self._transport is None or self._transport.is_closing():
            self.core.stats.tx_dropped += 1
        else:
            self._transport.write(frame)
        return seq, frame

    def _send(self, msg: m.Message) -> int:
        if not self.connected:
            self.core.stats.tx_dropped += 1
            return -1
        return self._write(msg)[0]

    def _data(self, data: bytes) -> None:
        self._rx_bytes += len(data)
        for fr in self.core.feed(data):
            for pred, fut in list(self._waiters):
                if not fut.done() and pred(fr):
                    fut.set_result(None)

    def _on_sample(self, sample: SensorSample) -> None:
        if self.user_on_sensors:
            self.user_on_sensors(sample)
        if self._queue.full():
            self._queue.get_nowait()
            self.core.stats.sample_overruns += 1
        self._queue.put_nowait(sample)

    def _lost(self, exc: Exception | None) -> None:
        self._connected.clear()
        self._transport = None
        if not self._closing and self.reconnect:
            self._spawn(self._reconnect_loop(), "poise-reconnect")

    async def _reconnect_loop(self) -> None:
        delay = 0.05
        while not self._closing:
            await asyncio.sleep(delay)
            try:
                await self.connect()
            except SchemaMismatchError:
                raise
            except (LinkError, OSError):
                delay = min(delay * 2, 1.0)
                continue
            self.core.stats.reconnects += 1
            return

    async def _heartbeat_loop(self) -> None:
        while not self._closing:
            interval = self.heartbeat_interval
            if interval is None:
                wd = self.description.hello.watchdog_ms if self.description else 100
                interval = max(wd / 4e3, 0.005)
            if interval <= 0:
                return
            await asyncio.sleep(interval)
            if self.connected and self.core.clock() - self.core.last_tx_time >= interval:
                self._send(m.Heartbeat())


class SerialLink(_LinkSettings):
    """Threaded blocking serial link (pyserial): a reader thread decodes, the caller's thread
    writes. Lower latency than :class:`AsyncLink`; use it for the control loop.

    Same arguments and semantics as :class:`AsyncLink`. Sensor frames: :meth:`next_sensors`
    (blocking, with timeout) or the ``on_sensors`` callback (called on the reader thread: keep it
    short). Thread-safe: ``send_*`` may be called from any thread.
    """

    def __init__(self, port: str, *, baudrate: int = DEFAULT_BAUD, timeout: float = 2.0,
                 expected_schema: int | None = None, reconnect: bool = True,
                 heartbeat: float | None = None, queue_size: int = 64,
                 on_sensors: Callable[[SensorSample], None] | None = None,
                 on_fault: Callable[[m.Fault], None] | None = None) -> None:
        _LinkSettings.__init__(self, port, baudrate, timeout, expected_schema, reconnect,
                               heartbeat, on_sensors, on_fault)
        self._queue: queue.Queue[SensorSample] = queue.Queue(maxsize=queue_size)
        self._ser: serial.Serial | None = None
        self._lock = threading.Lock()  # tx and core state
        self._cond = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._connected = threading.Event()
        self._reader: threading.Thread | None = None
        self._rx_bytes = 0

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

    @property
    def stats(self) -> LinkStats:
        return self.core.stats

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    def connect(self) -> DeviceDescription:
        self._open_port()
        if self._reader is None:
            self._reader = threading.Thread(target=self._read_loop, name="poise-serial-rx",
                                            daemon=True)
            self._reader.start()
        try:
            desc = self._handshake()
        except BaseException:
            self._close_port()
            raise
        if self.description is not None and \
                desc.schema_checksum != self.description.schema_checksum:
            self._close_port()
            raise SchemaMismatchError(
                f"{self.port}: after reconnect the device has schema 0x"
                f"{desc.schema_checksum:08x}, before 0x{self.description.schema_checksum:08x}")
        self.description = desc
        self._connected.set()
        return desc

    def close(self) -> None:
        self._stop.set()
        self._close_port()
        if self._reader is not None and self._reader is not threading.current_thread():
            self._reader.join(timeout=2)

    def send_setpoint(self, qa_ref: Sequence[float], tau_ff: Sequence[float] | None = None
                      ) -> int:
        """Write a setpoint now (never waits for the device); returns its sequence number, or
        -1 while disconnected (counted in ``stats.tx_dropped``)."""
        return self._send(m.Setpoint(tuple(float(x) for x in qa_ref), _floats(tau_ff)))

    def send_heartbeat(self) -> int:
        return self._send(m.Heartbeat())

    def arm(self, clear_estop: bool = False) -> m.Ack:
        return self._request(m.Arm(clear_estop))

    def disarm(self) -> m.Ack:
        return self._request(m.Disarm())

    def estop(self) -> m.Ack:
        return self._request(m.EStop())

    def configure(self, key: int, value: float, channel: int = m.NO_CHANNEL) -> m.Ack:
        return self._request(m.ConfigWrite(int(key), float(value), int(channel)))

    def next_sensors(self, timeout: float | None = None) -> SensorSample:
        """Block until the next sensor frame; :class:`DeviceTimeoutError` after ``timeout``."""
        t = self.timeout if timeout is None else timeout
        try:
            return self._queue.get(timeout=t)
        except queue.Empty:
            raise DeviceTimeoutError(f"{self.port}: no sensor frame within {t:g} s") from None

    # ------------------------------------------------------------------ internals

    def _open_port(self) -> None:
        try:
            ser = serial.Serial(self.port, **self._port_options(), timeout=0.05,
                                write_timeout=0.5)
        except (serial.SerialException, OSError) as exc:
            raise port_error(self.port, exc) from None
        with contextlib.suppress(Exception):
            ser.reset_input_buffer()
        with self._lock:
            self._ser = ser
            self.core.reset_rx()
            self._rx_bytes = 0

    def _close_port(self) -> None:
        self._connected.clear()
        with self._lock:
            ser, self._ser = self._ser, None
        if ser is not None:
            with contextlib.suppress(Exception):
                ser.close()

    def _write(self, msg: m.Message) -> tuple[int, bytes]:
        with self._lock:
            seq, frame = self.core.frame(msg)
            ser = self._ser
        if ser is None:
            self.core.stats.tx_dropped += 1
            return seq, frame
        try:
            ser.write(frame)
        except (serial.SerialException, OSError, TypeError, AttributeError):
            # TypeError/AttributeError: the reader thread closed the port under us (unplug);
            # pyserial then selects on a None file descriptor. The frame is lost like on a
            # real unplugged wire; the reader reconnects.
            self.core.stats.tx_dropped += 1
        return seq, frame

    def _send(self, msg: m.Message) -> int:
        if not self.connected:
            self.core.stats.tx_dropped += 1
            return -1
        return self._write(msg)[0]

    def _wait(self, pred: Callable[[], object], deadline: float) -> object:
        with self._cond:
            while True:
                got = pred()
                if got:
                    return got
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)

    def _handshake(self) -> DeviceDescription:
        sent: list[tuple[str, bytes]] = []
        deadline = time.monotonic() + self.timeout
        with self._lock:
            self.core.hello = None

        def ready():
            hello = self.core.hello
            if hello is not None and hello.protocol_version != m.PROTOCOL_VERSION:
                return hello
            return self.core.description()

        while time.monotonic() < deadline:
            sent.append(("HelloRequest", self._write(m.HelloRequest())[1]))
            got = self._wait(ready, min(deadline, time.monotonic() + self.timeout / HELLO_TRIES))
            if isinstance(got, m.Hello):
                raise version_error(self.port, got)
            if isinstance(got, DeviceDescription):
                check_description(got, self.port, self.expected_schema)
                return got
        raise timeout_error(self.port, self.timeout, sent, self._rx_bytes,
                            "Hello/Channel answer")

    def _request(self, msg: m.Message) -> m.Ack:
        if not self.connected:
            raise NotConnectedError(f"{self.port}: not connected")
        seq, frame = self._write(msg)
        got = self._wait(lambda: self.core.acks.pop(seq, None),
                         time.monotonic() + self.timeout)
        if got is None:
            raise timeout_error(self.port, self.timeout, [(type(msg).__name__, frame)],
                                self._rx_bytes, f"Ack for seq {seq}")
        return got  # type: ignore[return-value]

    def _on_sample(self, sample: SensorSample) -> None:
        if self.user_on_sensors:
            self.user_on_sensors(sample)
        try:
            self._queue.put_nowait(sample)
        except queue.Full:
            with contextlib.suppress(queue.Empty):
                self._queue.get_nowait()
            self.core.stats.sample_overruns += 1
            self._queue.put_nowait(sample)

    def _read_loop(self) -> None:
        next_hb = time.monotonic()
        while not self._stop.is_set():
            ser = self._ser
            if ser is None:
                if not self.reconnect or self.description is None:
                    self._stop.wait(0.02)
                    continue
                self._try_reconnect()
                continue
            try:
                data = ser.read(max(1, ser.in_waiting))
            except (serial.SerialException, OSError, TypeError, AttributeError):
                self._close_port()
                continue
            now = self.core.clock()
            if data:
                with self._cond:
                    self._rx_bytes += len(data)
                    self.core.feed(data, now)
                    self._cond.notify_all()
            # heartbeat while idle
            interval = self.heartbeat_interval
            if interval is None and self.description is not None:
                interval = max(self.description.hello.watchdog_ms / 4e3, 0.005)
            mono = time.monotonic()
            if interval and self.connected and mono >= next_hb:
                next_hb = mono + interval / 2
                if self.core.clock() - self.core.last_tx_time >= interval:
                    self._send(m.Heartbeat())

    def _try_reconnect(self) -> None:
        delay = 0.05
        while not self._stop.is_set():
            if self._stop.wait(delay):
                return
            try:
                self._open_port()
            except LinkError:
                delay = min(delay * 2, 1.0)
                continue
            # handshake needs the reader (this thread): run it in a helper thread
            result: list[BaseException | DeviceDescription] = []
            helper = threading.Thread(target=lambda out=result: out.append(
                self._safe_handshake()), daemon=True)
            helper.start()
            while helper.is_alive():
                self._pump_once()
            if result and isinstance(result[0], DeviceDescription):
                desc = result[0]
                if desc.schema_checksum == self.description.schema_checksum:  # type: ignore
                    self._connected.set()
                    self.core.stats.reconnects += 1
                    return
            self._close_port()
            delay = min(delay * 2, 1.0)

    def _safe_handshake(self) -> BaseException | DeviceDescription:
        try:
            return self._handshake()
        except BaseException as exc:
            return exc

    def _pump_once(self) -> None:
        ser = self._ser
        if ser is None:
            time.sleep(0.01)
            return
        try:
            data = ser.read(max(1, ser.in_waiting))
        except (serial.SerialException, OSError, TypeError, AttributeError):
            self._close_port()
            return
        if data:
            with self._cond:
                self._rx_bytes += len(data)
                self.core.feed(data, self.core.clock())
                self._cond.notify_all()
