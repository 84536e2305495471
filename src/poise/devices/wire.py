"""A device that speaks the poise wire protocol over serial: our C firmware, a joint-sensor
board, or the virtual device (``poise device sim``) on a pseudo-terminal.

:class:`WireDevice` is the :class:`~poise.devices.base.Device` face of a connected
:class:`~poise.firmware_bridge.transport.SerialLink`: the link keeps its own reader thread,
reconnects after an unplug and records round-trip times; this class turns its frames into
:class:`~poise.devices.base.Sample` s and its refusals and timeouts into
:class:`~poise.devices.base.DeviceError` s that name the port.

The device streams: :meth:`read` waits for the next frame, :meth:`latest` returns the newest
one without waiting (host pacing).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

from poise.devices.base import DeviceError, DeviceInfo, DeviceTimeout, Sample
from poise.firmware_bridge import messages as msg
from poise.firmware_bridge.link import (
    DeviceDescription,
    DeviceTimeoutError,
    LinkError,
    SensorSample,
)
from poise.firmware_bridge.transport import RawRead, SerialLink


def _code_name(code: int) -> str:
    try:
        return msg.ErrorCode(code).name
    except ValueError:
        return f"code {code}"


def to_sample(frame: SensorSample) -> Sample:
    """A wire :class:`SensorSample` as a device :class:`Sample` (efforts = the frame's τ)."""
    s = frame.sensors
    return Sample(host_time=frame.host_time, device_time_us=frame.device_time_us, q=s.q,
                  qa=s.qa, efforts=s.tau, status=int(s.status), seq=frame.seq)


class WireDevice:
    """A poise-protocol device on ``port`` (see the module docstring).

    Args:
        port: serial device path (or a pty, or a symlink that follows a re-plugged device).
        baud: baud rate (ignored by USB-CDC devices and ptys) [bit/s].
        timeout: handshake and acknowledgement timeout [s].
        on_fault: called with every Fault frame the device sends (on the reader thread).
        heartbeat: send a Heartbeat when nothing was sent for this long [s] (``None``: never;
            a joint-sensor board that gets no setpoints needs it to keep its watchdog fed).
        reconnect: re-open the port after an unplug (the same name must come back).
        on_close: called once after the link is closed (e.g. stops a virtual device process).

    Raises:
        DeviceError: the port cannot be opened or the handshake failed.
    """

    def __init__(self, port: str, *, baud: int = 1_000_000, timeout: float = 2.0,
                 on_fault: Callable[[msg.Fault], None] | None = None,
                 heartbeat: float | None = None, reconnect: bool = True,
                 on_close: Callable[[], None] | None = None) -> None:
        self.port = port
        self._on_close = on_close
        #: A decoded sample :meth:`read_raw` received in place of a raw read (for
        #: :meth:`read_nowait`).
        self._decoded: SensorSample | None = None
        self.link = SerialLink(port, baudrate=baud, timeout=timeout, reconnect=reconnect,
                               heartbeat=heartbeat, on_fault=on_fault)
        try:
            self.description: DeviceDescription = self.link.connect()
        except (LinkError, OSError, ValueError) as exc:
            self.close()
            raise DeviceError(f"{port}: {exc}") from None

    # ------------------------------------------------------------------ Device protocol

    def describe(self) -> DeviceInfo:
        d = self.description
        return DeviceInfo(
            name=d.firmware_id, n_q=len(d.coordinates), n_a=len(d.actuators),
            qa_min=tuple(float(c.lower) for c in d.actuators),
            qa_max=tuple(float(c.upper) for c in d.actuators),
            rate_hz=float(d.rate_hz), polled=False, raw_reads=True,
            extra={"port": self.port, "protocol_version": d.protocol_version,
                   "schema_checksum": f"0x{d.schema_checksum:08x}",
                   "watchdog_ms": d.hello.watchdog_ms,
                   "channels": [c.name for c in d.channels]})

    @property
    def connected(self) -> bool:
        """Whether the link is up (False while it reconnects after an unplug)."""
        return self.link.connected

    def configure(self, rate_hz: float | None = None, watchdog_ms: float | None = None) -> None:
        """Set the sensor stream rate [Hz] and the watchdog timeout [ms] (``None``: leave)."""
        for key, value, what in ((msg.ConfigKey.SENSOR_RATE_HZ, rate_hz, "rate {} Hz"),
                                 (msg.ConfigKey.WATCHDOG_MS, watchdog_ms, "watchdog {} ms")):
            if value is None:
                continue
            ack = self._request(lambda k=key, v=value: self.link.configure(k, v),
                                "configure")
            if not ack.ok:
                raise DeviceError(f"{self.port}: the device refused "
                                  f"{what.format(f'{value:g}')} ({_code_name(ack.code)})")

    def read(self, timeout: float | None = None) -> Sample:
        """The next sensor frame (waits up to ``timeout`` s; ``None``: the link's timeout).

        Raises:
            DeviceTimeout: no frame in time.
        """
        try:
            return to_sample(self.link.next_sensors(timeout))
        except DeviceTimeoutError as exc:
            raise DeviceTimeout(f"{self.port}: {exc}") from None

    def read_raw(self, timeout: float | None = None) -> RawRead | None:
        """:meth:`read` for a loop that answers a read itself (the wire cycle,
        :mod:`poise.controller.wirepath`; :class:`~poise.devices.base.RawReads`): the
        undecoded bytes of the next read (:meth:`feed_raw` them unless :meth:`answered`), or
        None when a sample decoded earlier is waiting (:meth:`read_nowait` returns it).

        Raises:
            DeviceTimeout: nothing in time.
        """
        try:
            got = self.link.next_read(timeout)
        except DeviceTimeoutError as exc:
            raise DeviceTimeout(f"{self.port}: {exc}") from None
        if type(got) is RawRead:
            return got
        self._decoded = got  # type: ignore[assignment]
        return None

    def feed_raw(self, read: RawRead) -> None:
        """Decode a read of :meth:`read_raw` as usual (its samples: :meth:`read_nowait`)."""
        self.link.feed(read)

    def answered(self, read: RawRead, seq: int, timestamp_us: int, sensors: msg.Sensors,
                 start: int = 0) -> tuple[Sample, int]:
        """Account for a read of :meth:`read_raw` whose last frame, from byte ``start``, was
        a Sensors frame the caller decoded and answered (the link's statistics, as if it had
        decoded the whole read); its sample and how many sensor frames came before it in the
        read (skipped: only the newest is answered)."""
        frame, skipped = self.link.answered(read, seq, timestamp_us, sensors, start)
        return to_sample(frame), skipped

    def poll_busily(self, on: bool) -> bool:
        """``loop.busy_poll``: the thread that reads polls the port without sleeping between
        frames; returns True (supported)."""
        self.link.busy_poll = bool(on)
        return True

    def read_nowait(self) -> Sample | None:
        """The next sample already received, or None (never waits, never raises)."""
        frame = self._decoded
        if frame is not None:  # the one :meth:`read_raw` took from the link's queue
            self._decoded = None
        else:
            frame = self.link.sensors_nowait()
        return None if frame is None else to_sample(frame)

    def latest(self) -> Sample | None:
        """The newest frame received so far, without waiting (``None``: none yet)."""
        frame = self.link.core.last_sensors
        return None if frame is None else to_sample(frame)

    def write(self, qa: Sequence[float], tau_ff: Sequence[float] | None = None) -> None:
        """Stream one setpoint (never waits; dropped and counted while disconnected)."""
        self.link.send_setpoint(qa, tau_ff)

    def arm(self, clear_estop: bool = False) -> None:
        ack = self._request(lambda: self.link.arm(clear_estop=clear_estop), "arm")
        if not ack.ok:
            hint = " (an e-stop is latched: clear it first)" \
                if ack.code == msg.ErrorCode.BAD_STATE and not clear_estop else ""
            raise DeviceError(f"{self.port}: the device refused to arm "
                              f"({_code_name(ack.code)}){hint}")

    def disarm(self) -> None:
        ack = self._request(self.link.disarm, "disarm")
        if not ack.ok:
            raise DeviceError(f"{self.port}: the device refused to disarm "
                              f"({_code_name(ack.code)})")

    def estop(self) -> None:
        """EStop, acknowledged by the device (raises if it was not)."""
        self._request(self.link.estop, "e-stop")

    def clear(self) -> None:
        """Nothing to send: the wire protocol clears the e-stop with ``arm(clear_estop=True)``."""

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.link.close()
        on_close, self._on_close = self._on_close, None
        if on_close is not None:
            on_close()

    def stats(self) -> dict[str, Any]:
        """Link statistics (frames, CRC errors, drops, setpoint round trip ``rtt_us``)."""
        return self.link.stats.as_dict()

    # ------------------------------------------------------------------ helpers

    def _request(self, call: Callable[[], msg.Ack], what: str) -> msg.Ack:
        try:
            return call()
        except LinkError as exc:
            raise DeviceError(f"{self.port}: {what} failed: {exc}") from None


__all__ = ["WireDevice", "to_sample"]
