"""Dynamixel Protocol 2.0 packets: framing, CRC-16, byte stuffing (the servo side's codec).

Packet layout (ROBOTIS e-Manual, "Protocol 2.0"; all multi-byte fields little-endian)::

    FF FF FD 00 | ID | LEN_L LEN_H | INST | params ... | CRC_L CRC_H
    header        id   length       instruction          CRC-16 over everything before it

* ``LEN`` counts the bytes after it: instruction, (stuffed) parameters and the CRC
  (``len(params) + 3``). A *status* packet (servo → host) has instruction ``0x55`` and its
  first parameter is the error byte (:class:`ErrorCode` in bits 0-6, :data:`ALERT` in bit 7).
* CRC: CRC-16 with polynomial ``0x8005``, initial value 0, no reflection, no final XOR
  (CRC-16/BUYPASS, the table of the SDK's ``updateCRC``), computed over the packet as sent,
  i.e. after byte stuffing.
* Byte stuffing: inside instruction + parameters, every ``FF FF FD`` is sent as
  ``FF FF FD FD`` so that the header pattern cannot appear in the payload; ``LEN`` counts the
  stuffed bytes.

Example (e-Manual, ping ID 1): ``FF FF FD 00 01 03 00 01 19 4E``.

This module is pure (bytes in, bytes out); :class:`PacketDecoder` resynchronises on the header
after noise or a bad CRC, as a servo does.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

HEADER = b"\xff\xff\xfd\x00"
#: The broadcast ID: every servo executes the instruction (sync read/write, broadcast ping).
BROADCAST_ID = 0xFE
#: Highest servo ID.
MAX_ID = 0xFC
#: Alert bit of a status packet's error byte: the servo has a hardware error (address 70).
ALERT = 0x80
#: Longest packet accepted [bytes] (the SDK's buffer size).
MAX_PACKET = 1024


class Instruction(enum.IntEnum):
    """Protocol 2.0 instruction codes."""

    PING = 0x01
    READ = 0x02
    WRITE = 0x03
    REG_WRITE = 0x04
    ACTION = 0x05
    FACTORY_RESET = 0x06
    REBOOT = 0x08
    CLEAR = 0x10
    STATUS = 0x55
    SYNC_READ = 0x82
    SYNC_WRITE = 0x83
    FAST_SYNC_READ = 0x8A
    BULK_READ = 0x92
    BULK_WRITE = 0x93


class ErrorCode(enum.IntEnum):
    """Error numbers of a status packet (bits 0-6 of its error byte)."""

    OK = 0
    RESULT_FAIL = 1
    INSTRUCTION = 2
    CRC = 3
    DATA_RANGE = 4
    DATA_LENGTH = 5
    DATA_LIMIT = 6
    ACCESS = 7


def _crc_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x8005) if crc & 0x8000 else crc << 1
        table.append(crc & 0xFFFF)
    return tuple(table)


_CRC_TABLE = _crc_table()


def crc16(data: bytes | bytearray, crc: int = 0) -> int:
    """The Dynamixel CRC-16 (poly 0x8005, init 0, MSB first, no XOR out) of ``data``."""
    table = _CRC_TABLE
    for b in data:
        crc = ((crc << 8) ^ table[((crc >> 8) ^ b) & 0xFF]) & 0xFFFF
    return crc


def stuff(body: bytes | bytearray) -> bytes:
    """Byte-stuff ``body`` (instruction + parameters): ``FF FF FD`` → ``FF FF FD FD``."""
    out = bytearray()
    for b in body:
        out.append(b)
        if b == 0xFD and len(out) >= 3 and out[-3] == 0xFF and out[-2] == 0xFF:
            out.append(0xFD)
    return bytes(out)


def unstuff(body: bytes | bytearray) -> bytes:
    """Undo :func:`stuff`: drop the ``FD`` that follows each ``FF FF FD``."""
    out = bytearray()
    i = 0
    while i < len(body):
        b = body[i]
        out.append(b)
        i += 1
        if (b == 0xFD and len(out) >= 3 and out[-3] == 0xFF and out[-2] == 0xFF
                and i < len(body) and body[i] == 0xFD):
            i += 1
    return bytes(out)


def encode(packet_id: int, instruction: int, params: bytes | bytearray = b"") -> bytes:
    """A complete packet (header, length, stuffed body, CRC).

    For a status packet pass ``instruction = Instruction.STATUS`` and the error byte as the
    first byte of ``params`` (or use :func:`encode_status`).
    """
    if not 0 <= packet_id <= 0xFE:
        raise ValueError(f"packet id {packet_id} not in 0 … 254")
    body = stuff(bytes([instruction]) + bytes(params))
    length = len(body) + 2
    if length + 7 - 2 > MAX_PACKET:
        raise ValueError(f"packet of {length + 5} bytes is longer than {MAX_PACKET}")
    head = HEADER + bytes([packet_id, length & 0xFF, length >> 8])
    crc = crc16(head + body)
    return head + body + bytes([crc & 0xFF, crc >> 8])


def encode_status(servo_id: int, error: int, params: bytes | bytearray = b"") -> bytes:
    """A status packet of servo ``servo_id`` with error byte ``error`` and ``params``."""
    return encode(servo_id, Instruction.STATUS, bytes([error & 0xFF]) + bytes(params))


@dataclass(frozen=True, slots=True)
class Packet:
    """A decoded packet.

    Attributes:
        id: servo ID (or :data:`BROADCAST_ID`).
        instruction: instruction code (``0x55`` for a status packet).
        params: unstuffed parameters (for a status packet: without the error byte).
        error: the status packet's error byte; ``None`` for instruction packets.
    """

    id: int
    instruction: int
    params: bytes
    error: int | None = None


@dataclass
class DecoderCounters:
    """What a :class:`PacketDecoder` dropped: ``crc`` packets with a bad CRC, ``length``
    packets whose length field is impossible, ``noise`` bytes skipped before a header."""

    packets: int = 0
    crc: int = 0
    length: int = 0
    noise: int = 0


class PacketDecoder:
    """Split a byte stream into :class:`Packet` s (feed bytes as they arrive).

    A bad CRC or length drops the header's first byte and searches again, so one corrupted
    packet never loses the next one. ``bad_crc_ids`` collects the IDs of packets dropped for a
    bad CRC (a servo answers those with :attr:`ErrorCode.CRC`).
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self.counters = DecoderCounters()
        self.bad_crc_ids: list[int] = []

    def reset(self) -> None:
        self._buf.clear()

    def feed(self, data: bytes | bytearray) -> list[Packet]:
        buf = self._buf
        buf.extend(data)
        out: list[Packet] = []
        while True:
            start = buf.find(HEADER)
            if start < 0:
                keep = 3 if len(buf) >= 3 else len(buf)  # a header may straddle two reads
                self.counters.noise += len(buf) - keep
                del buf[: len(buf) - keep]
                return out
            if start:
                self.counters.noise += start
                del buf[:start]
            if len(buf) < 7:
                return out
            length = buf[5] | (buf[6] << 8)
            if length < 3 or length + 7 > MAX_PACKET:
                self.counters.length += 1
                del buf[:1]
                continue
            total = 7 + length
            if len(buf) < total:
                return out
            raw = bytes(buf[:total])
            if crc16(raw[:-2]) != raw[-2] | (raw[-1] << 8):
                self.counters.crc += 1
                self.bad_crc_ids.append(raw[4])
                del buf[:1]
                continue
            del buf[:total]
            body = unstuff(raw[7:-2])
            self.counters.packets += 1
            if body[0] == Instruction.STATUS and len(body) >= 2:
                out.append(Packet(raw[4], body[0], bytes(body[2:]), body[1]))
            else:
                out.append(Packet(raw[4], body[0], bytes(body[1:])))


__all__ = ["ALERT", "BROADCAST_ID", "HEADER", "MAX_ID", "MAX_PACKET", "DecoderCounters",
           "ErrorCode", "Instruction", "Packet", "PacketDecoder", "crc16", "encode",
           "encode_status", "stuff", "unstuff"]
