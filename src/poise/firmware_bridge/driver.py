"""What both host transports share: :class:`LinkDriver`, the glue between a
:class:`~poise.firmware_bridge.link.LinkCore` and an open port.

The core holds the protocol logic (handshake, requests and Acks, heartbeats, reconnect
policy, statistics); a driver opens and closes the port, writes what the core returns, feeds
it what it reads, and waits. The two drivers are :class:`~poise.firmware_bridge.serial_link.
SerialLink` (a thread, blocking pyserial) and :class:`~poise.firmware_bridge.async_link.
AsyncLink` (asyncio); :mod:`poise.firmware_bridge.transport` says which to use.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar, Generic, TypeVar

import serial

from poise.firmware_bridge import messages as m
from poise.firmware_bridge.link import (
    DeviceDescription,
    DeviceTimeoutError,
    LinkCore,
    LinkError,
    LinkStats,
    Pending,
    SensorSample,
)

DEFAULT_BAUD = 1_000_000
#: Longest a driver's loop goes without polling the core: the reader thread's read timeout,
#: the asyncio ticker's period when nothing is due sooner [s].
IDLE_POLL = 0.05

#: What a request returns: the Ack itself (threaded) or an awaitable of it (asyncio).
AckT = TypeVar("AckT")


class LinkDriver(ABC, Generic[AckT]):
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


__all__ = ["DEFAULT_BAUD", "IDLE_POLL", "LinkDriver"]
