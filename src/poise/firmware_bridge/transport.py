"""Host transports: asyncio (pyserial-asyncio-fast) and a threaded blocking one (pyserial).

Both are thin I/O drivers (:class:`~poise.firmware_bridge.driver.LinkDriver`) around a
:class:`~poise.firmware_bridge.link.LinkCore`, which holds
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

from poise.firmware_bridge.async_link import AsyncLink
from poise.firmware_bridge.driver import DEFAULT_BAUD, IDLE_POLL
from poise.firmware_bridge.link import (
    DeviceDescription,
    DeviceTimeoutError,
    LinkError,
    LinkStats,
    NotConnectedError,
    PortBusyError,
    PortNotFoundError,
    SchemaMismatchError,
    SensorSample,
    VersionMismatchError,
)
from poise.firmware_bridge.serial_link import CALLER_READS, RawRead, SerialLink

__all__ = [
    "CALLER_READS",
    "DEFAULT_BAUD",
    "IDLE_POLL",
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
