"""Framing of the wire protocol: COBS, CRC-16/XMODEM, header, and a resynchronising stream decoder.

A frame on the wire is::

    COBS( header ‖ payload ‖ crc16_le ) ‖ 0x00

* ``header`` (8 bytes, little-endian ``<BBHI``): protocol version (u8), message type (u8),
  sequence number (u16, wraps), sender timestamp in microseconds (u32, wraps after ~71.6 min).
* ``payload``: the message body, 0 … :data:`MAX_PAYLOAD` bytes (layouts in ``messages.py``).
* ``crc16_le``: CRC-16/XMODEM (poly 0x1021, init 0) of ``header ‖ payload``, little-endian;
  ``binascii.crc_hqx(data, 0)``.
* COBS (consistent overhead byte stuffing) removes every zero byte, so the single ``0x00`` that
  ends a frame is unambiguous and a receiver that lost sync resynchronises on the next one.

The raw frame is at most ``8 + 240 + 2 = 250`` bytes, so its COBS form is at most 251 bytes and the
frame on the wire at most 252 bytes (:data:`MAX_WIRE_FRAME`). A receiver drops anything longer.
"""

from __future__ import annotations

import binascii
import struct
from dataclasses import dataclass, field

#: Header layout: version, type, sequence number, timestamp [µs].
HEADER = struct.Struct("<BBHI")
HEADER_SIZE = HEADER.size  # 8
CRC_SIZE = 2
#: Largest payload a frame may carry [bytes].
MAX_PAYLOAD = 240
#: Largest raw (un-stuffed) frame: header + payload + CRC [bytes].
MAX_RAW_FRAME = HEADER_SIZE + MAX_PAYLOAD + CRC_SIZE  # 250
#: Largest COBS-encoded frame, without the delimiter [bytes].
MAX_ENCODED_FRAME = MAX_RAW_FRAME + (MAX_RAW_FRAME + 253) // 254  # 251
#: Largest frame on the wire, delimiter included [bytes].
MAX_WIRE_FRAME = MAX_ENCODED_FRAME + 1  # 252
MIN_RAW_FRAME = HEADER_SIZE + CRC_SIZE
DELIMITER = 0x00


class FrameError(ValueError):
    """A frame that cannot be decoded; ``kind`` names the counter it goes to."""

    kind = "frame"


class CobsError(FrameError):
    kind = "cobs"


class LengthError(FrameError):
    kind = "length"


class CrcError(FrameError):
    kind = "crc"


def crc16(data: bytes) -> int:
    """CRC-16/XMODEM (poly 0x1021, init 0x0000, no reflection, no final xor)."""
    return binascii.crc_hqx(data, 0)


def cobs_encode(data: bytes) -> bytes:
    """COBS-encode ``data``: the result contains no zero byte and is ≤ len + ⌈len/254⌉ + 1."""
    out = bytearray()
    for part in data.split(b"\x00"):
        # Each part is followed by an implied zero (except the last); a full block of 254
        # non-zero bytes (code 0xFF) carries no implied zero.
        while len(part) >= 254:
            out.append(0xFF)
            out += part[:254]
            part = part[254:]
        out.append(len(part) + 1)
        out += part
    return bytes(out)


def _cobs_encode_reference(data: bytes) -> bytes:
    """Plain, obviously-correct COBS encoder (used to check the fast one in the tests)."""
    out = bytearray([0])
    code_idx = 0
    code = 1
    for byte in data:
        if byte == 0:
            out[code_idx] = code
            code_idx = len(out)
            out.append(0)
            code = 1
            continue
        out.append(byte)
        code += 1
        if code == 0xFF:
            out[code_idx] = code
            code_idx = len(out)
            out.append(0)
            code = 1
    out[code_idx] = code
    return bytes(out)


def cobs_decode(data: bytes) -> bytes:
    """Invert :func:`cobs_encode`. Raises :class:`CobsError` on a zero byte or a short block.

    One check for a zero byte over the whole frame (in C), then in place: each code byte
    becomes the zero it stands for, or is dropped (the first, and one after a full 254-byte
    block). A sensor frame decodes in ~1 µs (slicing out each block and joining them: ~1.8).
    """
    if 0 in data:
        raise CobsError("zero byte inside a COBS block")
    buf = bytearray(data)
    n = len(buf)
    idx = 0
    code = 1
    drop = []
    full = True  # the code byte at idx follows a full block (or starts the frame): no zero
    while idx < n:
        code = buf[idx]
        if full:
            drop.append(idx)
        else:
            buf[idx] = 0
        full = code == 0xFF
        idx += code
    if idx > n:
        raise CobsError(f"COBS block of {code - 1} bytes runs past the frame end")
    for at in reversed(drop):
        del buf[at]
    return bytes(buf)


@dataclass(frozen=True, slots=True)
class Header:
    """Frame header: protocol ``version``, message ``type``, ``seq`` (u16) and
    ``timestamp_us`` (u32)."""

    version: int
    type: int
    seq: int
    timestamp_us: int


def encode_frame(version: int, msg_type: int, seq: int, timestamp_us: int,
                 payload: bytes = b"") -> bytes:
    """One wire frame, delimiter included. ``seq`` and ``timestamp_us`` are wrapped to u16/u32."""
    if len(payload) > MAX_PAYLOAD:
        raise LengthError(f"payload of {len(payload)} bytes exceeds {MAX_PAYLOAD}")
    return seal(HEADER.pack(version, msg_type, seq & 0xFFFF, timestamp_us & 0xFFFFFFFF)
                + payload)


def seal(raw: bytes) -> bytes:
    """``raw`` (header ‖ payload) as a wire frame: its CRC appended, COBS-encoded, delimited."""
    return cobs_encode(raw + binascii.crc_hqx(raw, 0).to_bytes(2, "little")) + b"\x00"


def decode_frame(encoded: bytes) -> tuple[Header, bytes]:
    """Decode one COBS-encoded frame (delimiter stripped) into its header and payload.

    Raises:
        LengthError: encoded or raw length outside the protocol's bounds.
        CobsError: invalid COBS stuffing.
        CrcError: checksum mismatch.
    """
    if len(encoded) > MAX_ENCODED_FRAME:
        raise LengthError(f"frame of {len(encoded)} encoded bytes exceeds {MAX_ENCODED_FRAME}")
    raw = cobs_decode(encoded)
    if not MIN_RAW_FRAME <= len(raw) <= MAX_RAW_FRAME:
        raise LengthError(f"raw frame of {len(raw)} bytes outside [{MIN_RAW_FRAME}, "
                          f"{MAX_RAW_FRAME}]")
    body = raw[:-2]
    if binascii.crc_hqx(body, 0) != int.from_bytes(raw[-2:], "little"):
        raise CrcError("CRC mismatch")
    return Header(*HEADER.unpack_from(body)), body[HEADER_SIZE:]


@dataclass
class DecodeCounters:
    """What a stream decoder dropped, by cause, and what it delivered."""

    frames: int = 0
    crc: int = 0
    cobs: int = 0
    length: int = 0
    unknown_type: int = 0
    malformed: int = 0
    version: int = 0
    bytes: int = 0

    @property
    def errors(self) -> int:
        """All dropped frames."""
        return (self.crc + self.cobs + self.length + self.unknown_type + self.malformed
                + self.version)

    def as_dict(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in ("frames", "crc", "cobs", "length", "unknown_type",
                                               "malformed", "version", "bytes")}


@dataclass
class StreamDecoder:
    """Split a byte stream on ``0x00`` into frames; never raises on bad input.

    Feed it whatever the port returned; it returns the frames completed by those bytes as
    ``(header, payload)`` pairs and counts every dropped frame in :attr:`counters` by cause.
    An over-long run without a delimiter is dropped as a ``length`` error and the decoder
    resynchronises on the next delimiter. ``known_types`` (if given) drops other types as
    ``unknown_type``.
    """

    known_types: frozenset[int] | None = None
    counters: DecodeCounters = field(default_factory=DecodeCounters)
    _buf: bytearray = field(default_factory=bytearray, repr=False)
    _overflow: bool = field(default=False, repr=False)

    def reset(self) -> None:
        """Drop a partial frame (e.g. after a reconnect)."""
        self._buf.clear()
        self._overflow = False

    def feed(self, data: bytes) -> list[tuple[Header, bytes]]:
        out: list[tuple[Header, bytes]] = []
        self.counters.bytes += len(data)
        start = 0
        while True:
            end = data.find(b"\x00", start)
            if end < 0:
                self._append(data[start:])
                return out
            self._append(data[start:end])
            chunk = bytes(self._buf)
            overflow = self._overflow
            self._buf.clear()
            self._overflow = False
            start = end + 1
            if overflow:
                continue  # counted when it overflowed
            if not chunk:
                continue  # idle delimiters are legal
            frame = self._decode(chunk)
            if frame is not None:
                out.append(frame)

    def whole(self, data: bytes) -> bytes | None:
        """The fast path of the usual read, one whole frame and nothing pending: its raw
        bytes (header ‖ payload ‖ CRC), the CRC checked; None when ``data`` is anything else
        or does not decode (:meth:`feed` it then: it decodes and counts). Counts nothing:
        the caller counts the frame it accepts (:meth:`count_whole`)."""
        n = len(data)
        if self.pending or n > MAX_WIRE_FRAME or data.find(b"\x00") != n - 1:
            return None
        try:
            raw = cobs_decode(data[:-1])
        except CobsError:
            return None
        if not MIN_RAW_FRAME <= len(raw) <= MAX_RAW_FRAME or \
                binascii.crc_hqx(raw[:-2], 0) != int.from_bytes(raw[-2:], "little"):
            return None
        return raw

    @property
    def pending(self) -> bool:
        """Whether bytes of an unfinished frame (or an over-long run) are held."""
        return bool(self._buf) or self._overflow

    def count_whole(self, data: bytes) -> None:
        """Count ``data``, a frame :meth:`whole` decoded and the caller accepted."""
        self.counters.bytes += len(data)
        self.counters.frames += 1

    def _append(self, piece: bytes) -> None:
        if self._overflow or not piece:
            return
        self._buf += piece
        if len(self._buf) > MAX_ENCODED_FRAME:
            self.counters.length += 1
            self._overflow = True
            self._buf.clear()

    def _decode(self, chunk: bytes) -> tuple[Header, bytes] | None:
        try:
            header, payload = decode_frame(chunk)
        except FrameError as exc:
            setattr(self.counters, exc.kind, getattr(self.counters, exc.kind) + 1)
            return None
        if self.known_types is not None and header.type not in self.known_types:
            self.counters.unknown_type += 1
            return None
        self.counters.frames += 1
        return header, payload
