"""Messages of the wire protocol and their little-endian byte layouts (``struct``).

Every message is a frozen dataclass with a class attribute ``TYPE`` (the header's message type),
``pack() -> bytes`` (the payload) and ``unpack(payload) -> message``. :func:`encode` and
:class:`MessageDecoder` add and remove the framing of :mod:`poise.firmware_bridge.codec`.
The byte-by-byte layouts and test vectors are in ``docs/protocol.md``.

Direction: H→D host to device, D→H device to host.

=====  ==================  =====  =============================================================
type   message             dir    payload
=====  ==================  =====  =============================================================
0x01   HelloRequest        H→D    (empty)
0x02   Hello               D→H    ``<BBBBHHI16s`` version, n_coordinates, n_actuators, flags,
                                  rate_hz, watchdog_ms, schema_checksum, firmware_id
0x03   Channel             D→H    ``<BB16s8s8sfff`` index, kind, name, unit, effort_unit,
                                  lower, upper, effort_limit
0x10   Sensors             D→H    ``<IHHBB`` status, last_setpoint_seq, last_rx_seq, n_q, n_a,
                                  then f32 q[n_q], qa[n_a], tau[n_a]
0x11   Setpoint            H→D    ``<BB`` flags (bit 0: feed-forward present), n_a, then
                                  f32 qa_ref[n_a] and, if flagged, f32 tau_ff[n_a]
0x12   Heartbeat           H→D    (empty)
0x20   Arm                 H→D    ``<B`` flags (bit 0: also clear a latched e-stop)
0x21   Disarm              H→D    (empty)
0x22   EStop               H→D    (empty)
0x30   ConfigWrite         H→D    ``<HBxf`` key, channel (0xFF: global), pad, value
0x31   Ack                 D→H    ``<BBHH`` ref_type, code (0 = ack, else nack reason),
                                  ref_seq, detail
0x40   Fault               D→H    ``<HBBf16s`` code, channel (0xFF: none), severity, value,
                                  text
=====  ==================  =====  =============================================================
"""

from __future__ import annotations

import enum
import functools
import math
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from poise.firmware_bridge.codec import (
    CRC_SIZE,
    HEADER,
    HEADER_SIZE,
    MAX_PAYLOAD,
    DecodeCounters,
    Header,
    StreamDecoder,
    encode_frame,
)

#: The protocol version this code speaks (header byte 0 and ``Hello.protocol_version``).
PROTOCOL_VERSION = 1
#: "No channel" in ``ConfigWrite.channel`` and ``Fault.channel``.
NO_CHANNEL = 0xFF


class MsgType(enum.IntEnum):
    HELLO_REQUEST = 0x01
    HELLO = 0x02
    CHANNEL = 0x03
    SENSORS = 0x10
    SETPOINT = 0x11
    HEARTBEAT = 0x12
    ARM = 0x20
    DISARM = 0x21
    ESTOP = 0x22
    CONFIG_WRITE = 0x30
    ACK = 0x31
    FAULT = 0x40


class Status(enum.IntFlag):
    """Device status bits (``Sensors.status``, low 16 bits). Bits 16–31 are the plant's own."""

    ARMED = 1 << 0
    ESTOP = 1 << 1  # e-stop latched
    WATCHDOG = 1 << 2  # watchdog tripped, latched until re-armed
    FAULT = 1 << 3  # a fault was reported since the last arm
    LIMIT = 1 << 4  # the last setpoint was clipped to the channel limits
    SATURATED = 1 << 5  # an effort reached its limit
    RX_ERROR = 1 << 6  # the device dropped a malformed frame since the last sensor frame
    FEEDFORWARD = 1 << 7  # the last applied setpoint carried effort feed-forward


class ErrorCode(enum.IntEnum):
    """``Ack.code``: 0 acknowledges, anything else refuses (nack) with this reason."""

    OK = 0
    UNKNOWN_KEY = 1
    OUT_OF_RANGE = 2
    BAD_STATE = 3
    BAD_CHANNEL = 4
    MALFORMED = 5
    UNSUPPORTED = 6


class FaultCode(enum.IntEnum):
    WATCHDOG = 1  # no setpoint/heartbeat within the timeout: safe state, latched
    ESTOP = 2  # e-stop received: actuators disabled, latched
    LIMIT = 3  # a setpoint was outside the channel limits and was clipped
    EFFORT = 4  # an effort exceeded its limit
    SENSOR = 5  # a sensor reading is invalid
    BAD_SETPOINT = 6  # a setpoint had the wrong size or a non-finite value and was ignored
    PLANT = 7  # the plant/driver reported a failure


class Severity(enum.IntEnum):
    INFO = 0
    WARNING = 1
    ERROR = 2
    FATAL = 3


class ConfigKey(enum.IntEnum):
    """``ConfigWrite.key`` and its allowed values."""

    WATCHDOG_MS = 1  # global, 10 … 10000 [ms]
    SENSOR_RATE_HZ = 2  # global, 1 … 2000 [Hz]
    SAFE_MODE = 3  # global, 0 = hold, 1 = disabled (what the watchdog does)
    EFFORT_LIMIT = 0x10  # per actuator channel, > 0 [effort unit]; only while disarmed


class ChannelKind(enum.IntEnum):
    COORDINATE = 0  # a measured configuration coordinate (sensor only)
    ACTUATOR = 1  # a commanded actuator coordinate qa: reports position and effort


class MalformedPayload(ValueError):
    """A payload whose length or content does not fit its message type."""


def _text(raw: bytes) -> str:
    return raw.rstrip(b"\x00").decode("utf-8", errors="replace")


def _field_bytes(text: str, size: int, what: str) -> bytes:
    raw = text.encode("utf-8")
    if len(raw) > size:
        raise ValueError(f"{what} {text!r} longer than {size} bytes")
    return raw


class Message:
    """Base of all messages."""

    TYPE: ClassVar[int]

    def pack(self) -> bytes:
        return b""

    @classmethod
    def unpack(cls, payload: bytes) -> Message:
        if payload:
            raise MalformedPayload(f"{cls.__name__} takes no payload, got {len(payload)} bytes")
        return cls()


def _fixed(cls, fmt: struct.Struct, payload: bytes):
    if len(payload) != fmt.size:
        raise MalformedPayload(f"{cls.__name__} payload is {fmt.size} bytes, got {len(payload)}")
    return fmt.unpack(payload)


@dataclass(frozen=True, slots=True)
class HelloRequest(Message):
    """H→D: ask for :class:`Hello` followed by one :class:`Channel` per channel."""

    TYPE: ClassVar[int] = MsgType.HELLO_REQUEST


_HELLO = struct.Struct("<BBBBHHI16s")


@dataclass(frozen=True, slots=True)
class Hello(Message):
    """D→H: who the device is. This layout is frozen across protocol versions.

    Attributes:
        protocol_version: the version the device speaks.
        n_coordinates: measured coordinates (``Channel.kind == COORDINATE``), indices 0 … n_q-1.
        n_actuators: actuator channels, indices n_q … n_q+n_a-1.
        rate_hz: sensor stream rate [Hz].
        watchdog_ms: watchdog timeout [ms].
        schema_checksum: :func:`schema_checksum` of the channels.
        firmware_id: ≤ 16 bytes UTF-8.
    """

    TYPE: ClassVar[int] = MsgType.HELLO
    protocol_version: int
    n_coordinates: int
    n_actuators: int
    rate_hz: int
    watchdog_ms: int
    schema_checksum: int
    firmware_id: str
    flags: int = 0

    def pack(self) -> bytes:
        return _HELLO.pack(self.protocol_version, self.n_coordinates, self.n_actuators,
                           self.flags, self.rate_hz, self.watchdog_ms, self.schema_checksum,
                           _field_bytes(self.firmware_id, 16, "firmware id"))

    @classmethod
    def unpack(cls, payload: bytes) -> Hello:
        ver, nq, na, flags, rate, wd, schema, fw = _fixed(cls, _HELLO, payload)
        return cls(ver, nq, na, rate, wd, schema, _text(fw), flags)


_CHANNEL = struct.Struct("<BB16s8s8sfff")


@dataclass(frozen=True, slots=True)
class Channel(Message):
    """D→H: one channel of the device description.

    Attributes:
        index: 0-based; coordinates first, then actuators.
        kind: :class:`ChannelKind`.
        name: ≤ 16 bytes UTF-8.
        unit: position unit, ≤ 8 bytes (``rad``, ``m``).
        effort_unit: ≤ 8 bytes (``N``, ``N*m``); empty for coordinates.
        lower, upper: position limits [unit].
        effort_limit: |effort| limit [effort_unit]; 0 for coordinates.
    """

    TYPE: ClassVar[int] = MsgType.CHANNEL
    index: int
    kind: int
    name: str
    unit: str
    lower: float
    upper: float
    effort_unit: str = ""
    effort_limit: float = 0.0

    def pack(self) -> bytes:
        return _CHANNEL.pack(self.index, self.kind, _field_bytes(self.name, 16, "channel name"),
                             _field_bytes(self.unit, 8, "unit"),
                             _field_bytes(self.effort_unit, 8, "effort unit"),
                             self.lower, self.upper, self.effort_limit)

    @classmethod
    def unpack(cls, payload: bytes) -> Channel:
        idx, kind, name, unit, eunit, lo, hi, elim = _fixed(cls, _CHANNEL, payload)
        return cls(idx, kind, _text(name), _text(unit), lo, hi, _text(eunit), elim)

    def schema_bytes(self) -> bytes:
        """The part of the channel the schema checksum covers: index, kind, name, units."""
        return self.pack()[:_CHANNEL.size - 12]


def schema_checksum(channels: Sequence[Channel]) -> int:
    """CRC-32 (zlib/IEEE) over each channel's index, kind, name, unit and effort unit, in order.

    Limits are configuration, not schema: they are not covered.
    """
    crc = 0
    for ch in channels:
        crc = zlib.crc32(ch.schema_bytes(), crc)
    return crc


_SENSORS = struct.Struct("<IHHBB")


@functools.lru_cache(maxsize=64)
def _floats(n: int) -> struct.Struct:
    """The layout of ``n`` little-endian float32 values (made once per count)."""
    return struct.Struct(f"<{n}f")


@dataclass(frozen=True, slots=True)
class Sensors(Message):
    """D→H, at ``rate_hz``: the measured state.

    Attributes:
        status: :class:`Status` bits (low 16) | plant bits (high 16).
        last_setpoint_seq: header seq of the last setpoint the device applied (RTT, gaps).
        last_rx_seq: header seq of the last valid host frame of any type.
        q: measured coordinates [channel units].
        qa: measured actuator positions [channel units].
        tau: actuator efforts [effort units].
    """

    TYPE: ClassVar[int] = MsgType.SENSORS
    status: int
    last_setpoint_seq: int
    last_rx_seq: int
    q: tuple[float, ...]
    qa: tuple[float, ...]
    tau: tuple[float, ...]

    def pack(self) -> bytes:
        nq, na = len(self.q), len(self.qa)
        if len(self.tau) != na:
            raise ValueError(f"tau has {len(self.tau)} values, qa {na}")
        return (_SENSORS.pack(self.status, self.last_setpoint_seq, self.last_rx_seq, nq, na)
                + _floats(nq + 2 * na).pack(*self.q, *self.qa, *self.tau))

    @classmethod
    def unpack(cls, payload: bytes) -> Sensors:
        return cls.unpack_from(payload, 0, len(payload))

    @classmethod
    def unpack_from(cls, buf: bytes, start: int, end: int) -> Sensors:
        """The Sensors whose payload is ``buf[start:end]`` (without copying it out)."""
        size = end - start
        if size < _SENSORS.size:
            raise MalformedPayload(f"Sensors payload of {size} bytes is too short")
        status, sp, rx, nq, na = _SENSORS.unpack_from(buf, start)
        n = nq + 2 * na
        if size != _SENSORS.size + 4 * n:
            raise MalformedPayload(f"Sensors with n_q={nq}, n_a={na} is "
                                   f"{_SENSORS.size + 4 * n} bytes, got {size}")
        v = _floats(n).unpack_from(buf, start + _SENSORS.size)
        return cls(status, sp, rx, v[:nq], v[nq:nq + na], v[nq + na:])


_SETPOINT = struct.Struct("<BB")
SETPOINT_HAS_FF = 0x01


@dataclass(frozen=True, slots=True)
class Setpoint(Message):
    """H→D, at the control rate: actuator references and optional effort feed-forward.

    Attributes:
        qa_ref: actuator position references [channel units], one per actuator channel.
        tau_ff: effort feed-forward [effort units] or ``None``.
    """

    TYPE: ClassVar[int] = MsgType.SETPOINT
    qa_ref: tuple[float, ...]
    tau_ff: tuple[float, ...] | None = None

    def pack(self) -> bytes:
        return _setpoint_payload(self.qa_ref, self.tau_ff)

    @classmethod
    def unpack(cls, payload: bytes) -> Setpoint:
        if len(payload) < _SETPOINT.size:
            raise MalformedPayload("Setpoint payload is too short")
        flags, na = _SETPOINT.unpack_from(payload)
        if flags & ~SETPOINT_HAS_FF:
            raise MalformedPayload(f"Setpoint has unknown flags 0x{flags:02x}")
        n = 2 * na if flags & SETPOINT_HAS_FF else na
        if len(payload) != _SETPOINT.size + 4 * n:
            raise MalformedPayload(f"Setpoint with n_a={na}, flags={flags} is "
                                   f"{_SETPOINT.size + 4 * n} bytes, got {len(payload)}")
        v = _floats(n).unpack_from(payload, _SETPOINT.size)
        return cls(v[:na], v[na:] if flags & SETPOINT_HAS_FF else None)


def _setpoint_payload(qa_ref: Sequence[float], tau_ff: Sequence[float] | None) -> bytes:
    """The payload of ``Setpoint(qa_ref, tau_ff)``: flags, n_a, q̄a, then τ_ff if given."""
    na = len(qa_ref)
    if tau_ff is None:
        return _SETPOINT.pack(0, na) + _floats(na).pack(*qa_ref)
    if len(tau_ff) != na:
        raise ValueError(f"tau_ff has {len(tau_ff)} values, qa_ref {na}")
    return _SETPOINT.pack(SETPOINT_HAS_FF, na) + _floats(2 * na).pack(*qa_ref, *tau_ff)


def encode_setpoint(qa_ref: Sequence[float], tau_ff: Sequence[float] | None, seq: int,
                    timestamp_us: int = 0, version: int = PROTOCOL_VERSION) -> bytes:
    """``encode(Setpoint(qa_ref, tau_ff), seq, timestamp_us)`` without the message object:
    the control loop's write every cycle (any sequences of numbers: tuples, lists, arrays).

    Raises:
        ValueError: τ_ff's length differs from q̄a's, or the payload is too long.
    """
    return encode_frame(version, MsgType.SETPOINT, seq, timestamp_us,
                        _setpoint_payload(qa_ref, tau_ff))


@dataclass(frozen=True, slots=True)
class Heartbeat(Message):
    """H→D: keeps the watchdog fed while the host sends no setpoints."""

    TYPE: ClassVar[int] = MsgType.HEARTBEAT


_ARM = struct.Struct("<B")
ARM_CLEAR_ESTOP = 0x01


@dataclass(frozen=True, slots=True)
class Arm(Message):
    """H→D: enable the actuators (clears a watchdog latch; an e-stop latch only with the flag)."""

    TYPE: ClassVar[int] = MsgType.ARM
    clear_estop: bool = False

    def pack(self) -> bytes:
        return _ARM.pack(ARM_CLEAR_ESTOP if self.clear_estop else 0)

    @classmethod
    def unpack(cls, payload: bytes) -> Arm:
        (flags,) = _fixed(cls, _ARM, payload)
        if flags & ~ARM_CLEAR_ESTOP:
            raise MalformedPayload(f"Arm has unknown flags 0x{flags:02x}")
        return cls(bool(flags & ARM_CLEAR_ESTOP))


@dataclass(frozen=True, slots=True)
class Disarm(Message):
    """H→D: go to the safe state without a latch."""

    TYPE: ClassVar[int] = MsgType.DISARM


@dataclass(frozen=True, slots=True)
class EStop(Message):
    """H→D: disable the actuators at once; latched until ``Arm(clear_estop=True)``."""

    TYPE: ClassVar[int] = MsgType.ESTOP


_CONFIG = struct.Struct("<HBxf")


@dataclass(frozen=True, slots=True)
class ConfigWrite(Message):
    """H→D: set a :class:`ConfigKey` (answered by :class:`Ack`)."""

    TYPE: ClassVar[int] = MsgType.CONFIG_WRITE
    key: int
    value: float
    channel: int = NO_CHANNEL

    def pack(self) -> bytes:
        return _CONFIG.pack(self.key, self.channel, self.value)

    @classmethod
    def unpack(cls, payload: bytes) -> ConfigWrite:
        key, channel, value = _fixed(cls, _CONFIG, payload)
        return cls(key, value, channel)


_ACK = struct.Struct("<BBHH")


@dataclass(frozen=True, slots=True)
class Ack(Message):
    """D→H: answer to ConfigWrite, Arm, Disarm, EStop. ``code`` 0 = ack, else nack reason.

    Attributes:
        ref_type: message type answered.
        code: :class:`ErrorCode`.
        ref_seq: header seq of the frame answered.
        detail: the config key for ConfigWrite, else 0.
    """

    TYPE: ClassVar[int] = MsgType.ACK
    ref_type: int
    code: int
    ref_seq: int
    detail: int = 0

    @property
    def ok(self) -> bool:
        return self.code == ErrorCode.OK

    def pack(self) -> bytes:
        return _ACK.pack(self.ref_type, self.code, self.ref_seq, self.detail)

    @classmethod
    def unpack(cls, payload: bytes) -> Ack:
        return cls(*_fixed(cls, _ACK, payload))


_FAULT = struct.Struct("<HBBf16s")


@dataclass(frozen=True, slots=True)
class Fault(Message):
    """D→H: something went wrong on the device (:class:`FaultCode`, :class:`Severity`)."""

    TYPE: ClassVar[int] = MsgType.FAULT
    code: int
    severity: int = Severity.ERROR
    channel: int = NO_CHANNEL
    value: float = 0.0
    text: str = ""

    def pack(self) -> bytes:
        return _FAULT.pack(self.code, self.channel, self.severity, self.value,
                           _field_bytes(self.text, 16, "fault text"))

    @classmethod
    def unpack(cls, payload: bytes) -> Fault:
        code, channel, severity, value, text = _fixed(cls, _FAULT, payload)
        return cls(code, severity, channel, value, _text(text))


MESSAGE_TYPES: dict[int, type[Message]] = {
    cls.TYPE: cls
    for cls in (HelloRequest, Hello, Channel, Sensors, Setpoint, Heartbeat, Arm, Disarm, EStop,
                ConfigWrite, Ack, Fault)
}
#: Types whose payload layout is frozen across protocol versions (decoded whatever the version).
VERSION_FREE_TYPES = frozenset({MsgType.HELLO_REQUEST, MsgType.HELLO})


def encode(message: Message, seq: int, timestamp_us: int = 0,
           version: int = PROTOCOL_VERSION) -> bytes:
    """The wire frame (delimiter included) of ``message``."""
    payload = message.pack()
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"{type(message).__name__} payload of {len(payload)} bytes exceeds "
                         f"{MAX_PAYLOAD}")
    return encode_frame(version, message.TYPE, seq, timestamp_us, payload)


def decode_payload(msg_type: int, payload: bytes) -> Message:
    """Parse a payload; raises :class:`MalformedPayload` or ``KeyError`` (unknown type)."""
    return MESSAGE_TYPES[msg_type].unpack(payload)


@dataclass(frozen=True, slots=True)
class Frame:
    """A decoded frame: its header and message."""

    header: Header
    message: Message


@dataclass
class MessageDecoder:
    """Stream decoder that returns :class:`Frame` objects; never raises on bad input.

    Drops and counts (in :attr:`counters`): CRC, COBS, length, unknown type, malformed payload,
    and frames of another protocol version (except :data:`VERSION_FREE_TYPES`).
    """

    version: int = PROTOCOL_VERSION
    _stream: StreamDecoder = field(
        default_factory=lambda: StreamDecoder(known_types=frozenset(MESSAGE_TYPES)))

    @property
    def counters(self) -> DecodeCounters:
        return self._stream.counters

    def reset(self) -> None:
        self._stream.reset()

    def sensors(self, data: bytes) -> tuple[int, int, Sensors] | None:
        """The fast path of a control loop's read: when ``data`` is exactly one whole, valid
        Sensors frame of this version (and nothing is pending), ``(seq, timestamp_us,
        Sensors)`` without the intermediate :class:`Frame` and :class:`Header`, counted as
        :meth:`feed` counts it; else None, and nothing counted (:meth:`feed` it then)."""
        stream = self._stream
        raw = stream.whole(data)
        if raw is None:
            return None
        version, msg_type, seq, timestamp = HEADER.unpack_from(raw)
        if msg_type != MsgType.SENSORS or version != self.version:
            return None
        try:
            msg = Sensors.unpack_from(raw, HEADER_SIZE, len(raw) - CRC_SIZE)
        except MalformedPayload:
            return None
        stream.count_whole(data)
        return seq, timestamp, msg

    def count_whole(self, data: bytes) -> None:
        """Count ``data``, one whole frame decoded elsewhere, as :meth:`sensors` counts it."""
        self._stream.count_whole(data)

    @property
    def pending(self) -> bool:
        """Whether part of a frame waits for its rest (a read is then not one whole frame)."""
        return self._stream.pending

    def feed(self, data: bytes) -> list[Frame]:
        out: list[Frame] = []
        counters = self._stream.counters
        for header, payload in self._stream.feed(data):
            if header.version != self.version and header.type not in VERSION_FREE_TYPES:
                counters.version += 1
                counters.frames -= 1
                continue
            try:
                msg = MESSAGE_TYPES[header.type].unpack(payload)
            except (MalformedPayload, UnicodeDecodeError, struct.error):
                counters.malformed += 1
                counters.frames -= 1
                continue
            out.append(Frame(header, msg))
        return out


def finite(values: Sequence[float]) -> bool:
    return all(math.isfinite(v) for v in values)
