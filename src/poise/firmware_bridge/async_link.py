"""The asyncio host transport: :class:`AsyncLink` (pyserial-asyncio-fast).

For a link that is one of many asyncio tasks (probing, the service's slower paths, tools):
~100 µs p50 (~250 µs p99) per pty round trip through the event loop, against ~10 µs for the
threaded :class:`~poise.firmware_bridge.serial_link.SerialLink`
(:mod:`poise.firmware_bridge.transport`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import serial
import serial_asyncio_fast

from poise.firmware_bridge import messages as m
from poise.firmware_bridge.driver import LinkDriver
from poise.firmware_bridge.link import (
    DeviceDescription,
    LinkError,
    LinkState,
    Pending,
    SensorSample,
)


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


class AsyncLink(LinkDriver[Awaitable[m.Ack]]):
    """Asyncio serial link to a poise device (arguments: see
    :class:`~poise.firmware_bridge.driver.LinkDriver`).

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


__all__ = ["AsyncLink"]
