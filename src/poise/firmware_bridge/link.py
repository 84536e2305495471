"""Host-side link logic without I/O, shared by the asyncio and the threaded transports.

:class:`LinkCore` frames outgoing messages (sequence numbers, send times), decodes incoming bytes,
keeps :class:`LinkStats` (frames, errors by cause, sequence gaps, round-trip time), collects the
handshake and matches acknowledgements. The transports only move bytes.
"""

from __future__ import annotations

import errno as _errno
import math
import time
from array import array
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from poise.firmware_bridge import messages as m


class LinkError(RuntimeError):
    """Base of the transport errors; the message says what happened and what was sent."""


class PortNotFoundError(LinkError):
    """The serial port does not exist (``/dev/ttyXYZ: no such device``)."""


class DeviceTimeoutError(LinkError):
    """The device did not answer in time."""


class VersionMismatchError(LinkError):
    """The device speaks another protocol version."""


class SchemaMismatchError(LinkError):
    """The device's channels are not the ones expected (or not self-consistent)."""


class NotConnectedError(LinkError):
    """The link is down (unplugged, reconnecting, or closed)."""


class PortBusyError(LinkError):
    """Another process holds the serial port (every poise link opens its port exclusively)."""


@dataclass(frozen=True)
class DeviceDescription:
    """What the handshake learned: :class:`~messages.Hello` and the channels."""

    hello: m.Hello
    channels: tuple[m.Channel, ...]

    @property
    def protocol_version(self) -> int:
        return self.hello.protocol_version

    @property
    def firmware_id(self) -> str:
        return self.hello.firmware_id

    @property
    def rate_hz(self) -> int:
        return self.hello.rate_hz

    @property
    def schema_checksum(self) -> int:
        return self.hello.schema_checksum

    @property
    def coordinates(self) -> tuple[m.Channel, ...]:
        return self.channels[:self.hello.n_coordinates]

    @property
    def actuators(self) -> tuple[m.Channel, ...]:
        return self.channels[self.hello.n_coordinates:]

    def as_dict(self) -> dict:
        kinds = {m.ChannelKind.COORDINATE: "coordinate", m.ChannelKind.ACTUATOR: "actuator"}
        return {
            "protocol_version": self.protocol_version,
            "firmware_id": self.firmware_id,
            "rate_hz": self.rate_hz,
            "watchdog_ms": self.hello.watchdog_ms,
            "schema_checksum": f"0x{self.schema_checksum:08x}",
            "channels": [{"index": c.index, "kind": kinds.get(c.kind, str(c.kind)),
                          "name": c.name, "unit": c.unit, "lower": c.lower, "upper": c.upper,
                          "effort_unit": c.effort_unit, "effort_limit": c.effort_limit}
                         for c in self.channels],
        }


@dataclass(frozen=True, slots=True)
class SensorSample:
    """A decoded sensor frame and when the host received it.

    Attributes:
        host_time: ``time.perf_counter()`` when the bytes that completed the frame were read [s].
        seq: device sequence number of the frame.
        device_time_us: the device's timestamp [µs, wraps at 2³²].
        sensors: the decoded :class:`~messages.Sensors`.
    """

    host_time: float
    seq: int
    device_time_us: int
    sensors: m.Sensors


class RoundTrip:
    """Setpoint round-trip times: a fixed ring of the last :attr:`WINDOW` samples [s], and the
    count and maximum of all of them. Recording allocates nothing beyond the sample.

    Percentiles are over the window (the recent past), ``max`` and ``count`` over every
    sample since the link was created.
    """

    WINDOW = 4096

    def __init__(self) -> None:
        self._ring = array("d", bytes(8 * self.WINDOW))
        self.count = 0
        self.max = 0.0

    def record(self, rtt: float) -> None:
        """Add one round-trip time [s]."""
        self._ring[self.count % self.WINDOW] = rtt
        self.count += 1
        if rtt > self.max:
            self.max = rtt

    def percentile(self, p: float) -> float:
        """Percentile ``p`` (0–100) of the window [s]; NaN without samples."""
        n = min(self.count, self.WINDOW)
        if n == 0:
            return math.nan
        xs = sorted(self._ring[:n])
        return xs[min(n - 1, max(0, round(p / 100 * (n - 1))))]

    def as_dict(self) -> dict[str, float | int | None]:
        """``{"count", "p50", "p99", "max"}`` in µs (``None`` without samples)."""
        if self.count == 0:
            return {"count": 0, "p50": None, "p99": None, "max": None}
        return {"count": self.count, "p50": round(self.percentile(50) * 1e6, 1),
                "p99": round(self.percentile(99) * 1e6, 1), "max": round(self.max * 1e6, 1)}


@dataclass
class LinkStats:
    """Link statistics (host side).

    ``rtt`` samples: time from sending a host frame to receiving the first sensor frame that echoes
    its sequence number in ``last_rx_seq`` (any host frame; heartbeats while idle). It includes
    up to one sensor period of waiting for the next frame.

    ``setpoint_rtt`` (``rtt_us`` in :meth:`as_dict`): time from writing the setpoint with
    sequence number *s* to receiving the first sensor frame whose ``last_setpoint_seq`` is *s*:
    the whole loop through the wire and the device, as the controller experiences it (it also
    includes up to one sensor period). Setpoints the device replaced before it reported them
    (two arriving within one sensor period) give no sample.
    """

    rx_frames: int = 0
    tx_frames: int = 0
    tx_dropped: int = 0
    sensor_frames: int = 0
    seq_gaps: int = 0
    lost_frames: int = 0
    duplicates: int = 0
    reconnects: int = 0
    sample_overruns: int = 0
    decode: dict[str, int] = field(default_factory=dict)
    rtt: deque[float] = field(default_factory=lambda: deque(maxlen=4096))
    setpoint_rtt: RoundTrip = field(default_factory=RoundTrip)
    first_sensor_time: float | None = None
    last_sensor_time: float | None = None
    _rate_frames: int = 0

    @property
    def crc_errors(self) -> int:
        return self.decode.get("crc", 0)

    @property
    def frame_rate_hz(self) -> float:
        """Measured sensor frame rate since the first sensor frame (or the last reset)."""
        if self.first_sensor_time is None or self.last_sensor_time is None or \
                self._rate_frames < 2 or self.last_sensor_time <= self.first_sensor_time:
            return 0.0
        return (self._rate_frames - 1) / (self.last_sensor_time - self.first_sensor_time)

    def rtt_percentile(self, p: float) -> float:
        """Round-trip time percentile ``p`` (0–100) [s]; NaN without samples."""
        if not self.rtt:
            return math.nan
        xs = sorted(self.rtt)
        return xs[min(len(xs) - 1, max(0, round(p / 100 * (len(xs) - 1))))]

    def reset_rate(self) -> None:
        self.first_sensor_time = self.last_sensor_time = None
        self._rate_frames = 0

    def as_dict(self) -> dict:
        ms = 1e3
        return {
            "rx_frames": self.rx_frames, "tx_frames": self.tx_frames,
            "tx_dropped": self.tx_dropped, "sensor_frames": self.sensor_frames,
            "frame_rate_hz": round(self.frame_rate_hz, 2),
            "crc_errors": self.crc_errors, "decode_errors": dict(self.decode),
            "seq_gaps": self.seq_gaps, "lost_frames": self.lost_frames,
            "duplicates": self.duplicates, "reconnects": self.reconnects,
            "sample_overruns": self.sample_overruns, "rtt_samples": len(self.rtt),
            "rtt_ms": {"p50": self.rtt_percentile(50) * ms, "p95": self.rtt_percentile(95) * ms,
                       "max": self.rtt_percentile(100) * ms},
            "rtt_us": self.setpoint_rtt.as_dict(),
        }


#: Setpoint send times kept for the round trip (a ring indexed by ``seq % SETPOINT_RING``):
#: enough for 4 s of setpoints in flight at 1 kHz.
SETPOINT_RING = 4096


class LinkCore:
    """Framing, statistics and bookkeeping of one host link (no I/O, not thread-safe).

    Args:
        on_sensors: called with each :class:`SensorSample` as soon as it is decoded.
        on_fault: called with each :class:`~messages.Fault`.
    """

    def __init__(self, on_sensors: Callable[[SensorSample], None] | None = None,
                 on_fault: Callable[[m.Fault], None] | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.decoder = m.MessageDecoder()
        self.stats = LinkStats(decode=self.decoder.counters.as_dict())
        self.on_sensors = on_sensors
        self.on_fault = on_fault
        self.faults: deque[tuple[float, m.Fault]] = deque(maxlen=256)
        self.last_sensors: SensorSample | None = None
        self.hello: m.Hello | None = None
        self.channels: dict[int, m.Channel] = {}
        self.acks: dict[int, m.Ack] = {}
        self._tx_seq = 0
        self._t0 = clock()
        self._sent_at = [math.nan] * 65536
        self._rx_expected: int | None = None
        self._last_echo: int | None = None
        self._last_sp_echo: int | None = None
        # setpoint send times by seq % SETPOINT_RING, and which seq each slot holds (-1: none)
        self._sp_sent = array("d", bytes(8 * SETPOINT_RING))
        self._sp_seq = array("l", [-1]) * SETPOINT_RING
        self.last_tx_time = 0.0

    # ------------------------------------------------------------- tx
    def frame(self, msg: m.Message) -> tuple[int, bytes]:
        """Frame ``msg`` with the next sequence number; records the send time."""
        seq = self._tx_seq
        self._tx_seq = (seq + 1) & 0xFFFF
        now = self.clock()
        self._sent_at[seq] = now
        self.last_tx_time = now
        self.stats.tx_frames += 1
        if type(msg) is m.Setpoint:
            slot = seq % SETPOINT_RING
            self._sp_sent[slot] = now
            self._sp_seq[slot] = seq
        return seq, m.encode(msg, seq, int((now - self._t0) * 1e6))

    # ------------------------------------------------------------- rx
    def feed(self, data: bytes, now: float | None = None) -> list[m.Frame]:
        """Decode ``data`` (read at ``now``); dispatch sensors, faults, hello, channels, acks.

        Returns the frames that were not sensor frames (for the caller's waiters).
        """
        if now is None:
            now = self.clock()
        frames = self.decoder.feed(data)
        self.stats.decode = self.decoder.counters.as_dict()
        other: list[m.Frame] = []
        for fr in frames:
            self.stats.rx_frames += 1
            self._check_seq(fr.header.seq)
            msg = fr.message
            if isinstance(msg, m.Sensors):
                self._sensors(fr, msg, now)
                continue
            if isinstance(msg, m.Hello):
                self.hello = msg
                self.channels = {}
            elif isinstance(msg, m.Channel):
                self.channels[msg.index] = msg
            elif isinstance(msg, m.Ack):
                self.acks[msg.ref_seq] = msg
            elif isinstance(msg, m.Fault):
                self.faults.append((now, msg))
                if self.on_fault:
                    self.on_fault(msg)
            other.append(fr)
        return other

    def _check_seq(self, seq: int) -> None:
        exp = self._rx_expected
        self._rx_expected = (seq + 1) & 0xFFFF
        if exp is None or seq == exp:
            return
        ahead = (seq - exp) & 0xFFFF
        if ahead < 0x8000:
            self.stats.seq_gaps += 1
            self.stats.lost_frames += ahead
        else:
            self.stats.duplicates += 1

    def _sensors(self, fr: m.Frame, msg: m.Sensors, now: float) -> None:
        st = self.stats
        st.sensor_frames += 1
        st._rate_frames += 1
        if st.first_sensor_time is None:
            st.first_sensor_time = now
        st.last_sensor_time = now
        echo = msg.last_rx_seq
        if self._last_echo is not None and echo != self._last_echo:
            sent = self._sent_at[echo]
            if not math.isnan(sent):
                st.rtt.append(now - sent)
                self._sent_at[echo] = math.nan  # one sample per host frame
        self._last_echo = echo
        sp = msg.last_setpoint_seq
        if sp != self._last_sp_echo:
            if self._last_sp_echo is not None:
                slot = sp % SETPOINT_RING
                if self._sp_seq[slot] == sp:
                    st.setpoint_rtt.record(now - self._sp_sent[slot])
                    self._sp_seq[slot] = -1  # one sample per setpoint
            self._last_sp_echo = sp
        sample = SensorSample(now, fr.header.seq, fr.header.timestamp_us, msg)
        self.last_sensors = sample
        if self.on_sensors:
            self.on_sensors(sample)

    def reset_rx(self) -> None:
        """After a reconnect: forget the partial frame and the sequence history."""
        self.decoder.reset()
        self._rx_expected = None
        self._last_echo = None
        self._last_sp_echo = None

    # ------------------------------------------------------------- handshake
    def description(self) -> DeviceDescription | None:
        """The description once Hello and all its channels have arrived (else ``None``)."""
        h = self.hello
        if h is None or h.protocol_version != m.PROTOCOL_VERSION:
            return None
        n = h.n_coordinates + h.n_actuators
        if any(i not in self.channels for i in range(n)):
            return None
        return DeviceDescription(h, tuple(self.channels[i] for i in range(n)))


def check_description(desc: DeviceDescription, port: str,
                      expected_schema: int | None = None) -> None:
    """Refuse a description whose schema checksum is inconsistent or not the expected one."""
    got = m.schema_checksum(desc.channels)
    if got != desc.schema_checksum:
        raise SchemaMismatchError(
            f"{port}: device announces schema checksum 0x{desc.schema_checksum:08x} but its "
            f"channels give 0x{got:08x}")
    if expected_schema is not None and expected_schema != desc.schema_checksum:
        names = ", ".join(f"{c.name} [{c.unit}]" for c in desc.channels)
        raise SchemaMismatchError(
            f"{port}: schema mismatch: expected checksum 0x{expected_schema:08x}, device "
            f"'{desc.firmware_id}' has 0x{desc.schema_checksum:08x} (channels: {names})")


def version_error(port: str, hello: m.Hello) -> VersionMismatchError:
    return VersionMismatchError(
        f"{port}: protocol version mismatch: host expects {m.PROTOCOL_VERSION}, device "
        f"'{hello.firmware_id}' speaks {hello.protocol_version}; update the "
        f"{'firmware' if hello.protocol_version < m.PROTOCOL_VERSION else 'host (poise)'}")


def port_error(port: str, exc: BaseException) -> LinkError:
    """Map a pyserial/OS error on open to a clear :class:`LinkError`."""
    errno = getattr(exc, "errno", None)
    text = str(exc)
    if errno == 2 or "No such file" in text or ("could not open port" in text and \
            "[Errno 2]" in text):
        return PortNotFoundError(f"{port}: no such device")
    if errno == 13 or "Permission denied" in text:
        return LinkError(f"{port}: permission denied (is the user in the 'dialout' group?)")
    if errno in (_errno.EAGAIN, _errno.EWOULDBLOCK, _errno.EBUSY) or \
            "exclusively lock" in text or "busy" in text.lower():
        return PortBusyError(f"{port} is already in use by another process (opened "
                             "exclusively); stop the other poise run (or whatever holds the "
                             "port) first")
    return LinkError(f"{port}: cannot open: {text}")


def timeout_error(port: str, seconds: float, sent: list[tuple[str, bytes]],
                  received_bytes: int, waiting_for: str) -> DeviceTimeoutError:
    what = "; ".join(f"{name} ({frame.hex()})" for name, frame in sent[-3:])
    got = (f"received {received_bytes} bytes but no valid frame" if received_bytes
           else "received nothing")
    return DeviceTimeoutError(
        f"{port}: no {waiting_for} within {seconds:g} s; sent {len(sent)} frame(s): {what}; "
        f"{got}")
