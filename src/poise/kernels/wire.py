"""The wire cycle: a sensor frame's bytes in, the setpoint frame's bytes out, in one compiled call.

In the service a cycle's Python runs 3–6× slower than in a tight loop (its caches go cold while
the loop sleeps between frames), so the time from a sensor frame to its setpoint is about
proportional to how much Python lies between them. :func:`wire_cycle` takes that path into
compiled code: COBS, CRC-16/XMODEM, the header and the Sensors payload of the read
(:mod:`poise.firmware_bridge.codec`, :mod:`poise.firmware_bridge.messages`), the whole IK cycle
(:func:`poise.kernels.cycle.cycle`, called, not rewritten) and the Setpoint frame, byte for byte
what :func:`~poise.firmware_bridge.messages.encode_setpoint` makes. The Python around it only
reads the port, calls it, writes the frame and does the bookkeeping after the write
(:mod:`poise.controller.wirecycle`).

Anything unusual is left to the ordinary path, which the call does not disturb (it changes no
argument but its outputs ``raw``, ``f32``, ``io``, ``knobs[K_SATURATED]``, ``scratch`` and
``out``): a read that is not exactly one whole valid Sensors frame of the expected version and
sizes (:data:`NOT_ONE_FRAME`), a device that is not armed (:data:`NOT_ARMED`), a non-finite
measurement (:data:`NONFINITE_Q`), and a cycle that did not end in a finite state committed by
Newton with values a float32 holds (:data:`STEP_ELSEWHERE`). The caller then decodes the same
bytes with the codec and runs the same cycle from the same state, which reports and faults as
it always has.

The ``io`` vector (float64; integers up to 2³² are exact) carries the scalars both ways: what
the caller sets at :data:`W_VERSION` … :data:`W_SAT_BIT`, what the call writes at
:data:`W_SEQ` … :data:`W_OUT_LEN`, and from :data:`W_VALUES` the decoded q, q_a and τ of the
frame (float32 values widened exactly, as :mod:`struct` does).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from poise.kernels import cycle as one_call
from poise.kernels.guard import NONFINITE
from poise.kernels.steps import OK

#: Outcomes of :func:`wire_cycle` (see the module docstring).
WIRE_OK, NOT_ONE_FRAME, NOT_ARMED, NONFINITE_Q, STEP_ELSEWHERE = range(5)

#: ``io`` slots the caller sets: protocol version, the Sensors and Setpoint type codes, the
#: setpoint's sequence number and timestamp [µs], whether τ_ff goes out, where q̄a and G_a lie
#: in the stepper's state, and the status bits for "armed" and "effort saturated".
(W_VERSION, W_SENSORS, W_SETPOINT, W_TX_SEQ, W_TX_TS, W_FF, W_QA_LO, W_GA_LO, W_ARMED_BIT,
 W_SAT_BIT) = range(10)
#: ``io`` slots the call writes: the frame's sequence number, timestamp [µs], status, the echoed
#: setpoint and host sequence numbers, and the length of the setpoint frame in ``out``.
W_SEQ, W_TS, W_STATUS, W_SP_ECHO, W_RX_ECHO, W_OUT_LEN = range(10, 16)
#: Where the frame's values start in ``io``: q (n), then q_a (m), then τ (m).
W_VALUES = 16

HEADER_SIZE = 8
CRC_SIZE = 2
SENSORS_HEAD = 10  # <IHHBB: status, last setpoint seq, last rx seq, n_q, n_a
SETPOINT_HEAD = 2  # <BB: flags, n_a
HAS_FF = 1
MAX_RAW_FRAME = 250
MAX_WIRE_FRAME = 252
MIN_RAW_FRAME = HEADER_SIZE + CRC_SIZE
FLOAT32_MAX = float(np.finfo(np.float32).max)


def io_size(n: int, m: int) -> int:
    """Length of the ``io`` vector for n coordinates and m actuators."""
    return W_VALUES + n + 2 * m


class WireBuffers:
    """The arrays :func:`wire_cycle` works in, made once per link and stepper: ``io`` (with
    the caller's constant slots set), the raw-frame and float32 scratch and the output frame.
    ``io[W_TX_SEQ]`` and ``io[W_TX_TS]`` are the caller's to set before each call."""

    def __init__(self, n: int, m: int, *, version: int, sensors_type: int,
                 setpoint_type: int, feedforward: bool, qa_lo: int, ga_lo: int,
                 armed_bit: int, saturated_bit: int) -> None:
        self.n, self.m = n, m
        self.io = np.zeros(io_size(n, m))
        for at, value in ((W_VERSION, version), (W_SENSORS, sensors_type),
                          (W_SETPOINT, setpoint_type), (W_FF, feedforward), (W_QA_LO, qa_lo),
                          (W_GA_LO, ga_lo), (W_ARMED_BIT, armed_bit),
                          (W_SAT_BIT, saturated_bit)):
            self.io[at] = value
        self.raw = np.zeros(MAX_WIRE_FRAME, dtype=np.uint8)
        self.f32 = np.zeros(n + 2 * m, dtype=np.float32)
        self.out = np.zeros(MAX_WIRE_FRAME, dtype=np.uint8)
        self.out_view = memoryview(self.out)  # what the write takes (no copy)
        #: The decoded frame's q (a view of ``io``: current after each call).
        self.q = self.io[W_VALUES:W_VALUES + n]
        #: ... and its measured actuator efforts τ (a view, as :attr:`q`).
        self.efforts = self.io[W_VALUES + n + m:W_VALUES + n + 2 * m]

    def frame(self) -> memoryview:
        """The setpoint frame the last :data:`WIRE_OK` call wrote."""
        return self.out_view[:int(self.io[W_OUT_LEN])]

    def values(self) -> tuple[list[float], list[float], list[float]]:
        """The decoded frame's q, q_a and τ as lists of floats."""
        n, m = self.n, self.m
        v = self.io[W_VALUES:].tolist()
        return v[:n], v[n:n + m], v[n + m:]


def _crc_table() -> np.ndarray:
    table = np.zeros(256, dtype=np.uint16)
    for byte in range(256):
        crc = byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
        table[byte] = crc & 0xFFFF
    return table


_CRC_TABLE = _crc_table()


@njit(cache=True)
def crc16(buf, n):  # type: ignore[no-untyped-def]
    """CRC-16/XMODEM of ``buf[:n]`` (poly 0x1021, init 0; :func:`binascii.crc_hqx`)."""
    crc = 0
    for i in range(n):
        crc = ((crc << 8) & 0xFFFF) ^ _CRC_TABLE[((crc >> 8) ^ buf[i]) & 0xFF]
    return crc


@njit(cache=True)
def cobs_decode_into(src, n, dst):  # type: ignore[no-untyped-def]
    """COBS-decode ``src[:n]`` (no delimiter) into ``dst`` (≥ n bytes); the decoded length,
    or −1 where :func:`~poise.firmware_bridge.codec.cobs_decode` raises (a zero byte, a block
    running past the end)."""
    o = 0
    idx = 0
    after_full = True  # the first block, and one after a full 254-byte block: no zero before
    while idx < n:
        code = src[idx]
        if code == 0:
            return -1
        if not after_full:
            dst[o] = 0
            o += 1
        end = idx + code
        if end > n:
            return -1
        for j in range(idx + 1, end):
            b = src[j]
            if b == 0:
                return -1
            dst[o] = b
            o += 1
        after_full = code == 0xFF
        idx = end
    return o


@njit(cache=True)
def cobs_encode_into(src, n, dst):  # type: ignore[no-untyped-def]
    """COBS-encode ``src[:n]`` into ``dst`` (≥ n + n // 254 + 2 bytes) and append the
    delimiter; the wire length (:func:`~poise.firmware_bridge.codec.seal`'s framing)."""
    code_at = 0
    o = 1
    code = 1
    for i in range(n):
        b = src[i]
        if b == 0:
            dst[code_at] = code
            code_at = o
            o += 1
            code = 1
            continue
        dst[o] = b
        o += 1
        code += 1
        if code == 0xFF:
            dst[code_at] = code
            code_at = o
            o += 1
            code = 1
    dst[code_at] = code
    dst[o] = 0
    return o + 1


@njit(cache=True)
def _u16(buf, at):  # type: ignore[no-untyped-def]
    return buf[at] | (buf[at + 1] << 8)


@njit(cache=True)
def _u32(buf, at):  # type: ignore[no-untyped-def]
    return (buf[at] | (buf[at + 1] << 8) | (buf[at + 2] << 16)) + buf[at + 3] * 16777216


@njit(cache=True)
def decode_sensors(wire, n_wire, raw, f32, io, n, m):  # type: ignore[no-untyped-def]
    """Decode ``wire[:n_wire]``, one whole frame with its delimiter, as a Sensors frame with
    ``n`` coordinates and ``m`` actuators into ``io`` (:data:`W_SEQ` … :data:`W_RX_ECHO` and
    the values from :data:`W_VALUES`); True when it is one, False for anything else (which
    the stream decoder then decodes and counts)."""
    if n_wire < 2 or n_wire > MAX_WIRE_FRAME or wire[n_wire - 1] != 0:
        return False
    size = cobs_decode_into(wire, n_wire - 1, raw)  # a zero before the last: -1
    if size < MIN_RAW_FRAME or size > MAX_RAW_FRAME:
        return False
    body = size - CRC_SIZE
    if crc16(raw, body) != _u16(raw, body):
        return False
    if raw[0] != io[W_VERSION] or raw[1] != io[W_SENSORS]:
        return False
    p = HEADER_SIZE
    count = n + 2 * m
    if body - p != SENSORS_HEAD + 4 * count or raw[p + 8] != n or raw[p + 9] != m:
        return False
    io[W_SEQ] = _u16(raw, 2)
    io[W_TS] = _u32(raw, 4)
    io[W_STATUS] = _u32(raw, p)
    io[W_SP_ECHO] = _u16(raw, p + 4)
    io[W_RX_ECHO] = _u16(raw, p + 6)
    as_bytes = f32.view(np.uint8)
    start = p + SENSORS_HEAD
    as_bytes[:4 * count] = raw[start:start + 4 * count]
    for i in range(count):
        io[W_VALUES + i] = f32[i]
    return True


@njit(cache=True)
def encode_setpoint(qa, tau, ff, io, raw, f32, out):  # type: ignore[no-untyped-def]
    """The Setpoint frame of ``qa`` (and ``tau`` if ``ff``) into ``out`` with the header's
    version, sequence number and timestamp from ``io``; its wire length, or −1 when a value
    does not fit a float32 (:mod:`struct` raises there)."""
    m = qa.size
    count = 2 * m if ff else m
    for i in range(count):
        v = qa[i] if i < m else tau[i - m]
        if abs(v) > FLOAT32_MAX:
            return -1
        f32[i] = v
    seq = int(io[W_TX_SEQ]) & 0xFFFF
    ts = int(io[W_TX_TS]) & 0xFFFFFFFF
    raw[0] = int(io[W_VERSION])
    raw[1] = int(io[W_SETPOINT])
    raw[2], raw[3] = seq & 0xFF, seq >> 8
    for i in range(4):
        raw[4 + i] = (ts >> (8 * i)) & 0xFF
    raw[8] = HAS_FF if ff else 0
    raw[9] = m
    start = HEADER_SIZE + SETPOINT_HEAD
    raw[start:start + 4 * count] = f32.view(np.uint8)[:4 * count]
    body = start + 4 * count
    crc = crc16(raw, body)
    raw[body] = crc & 0xFF
    raw[body + 1] = crc >> 8
    return cobs_encode_into(raw, body + CRC_SIZE, out)


@njit(cache=True)
def wire_cycle(wire, n_wire, raw, f32, io, args, state, target, move_qa, A, projection,  # type: ignore[no-untyped-def]
               limits, knobs, scratch, out):
    """One control cycle from the bytes of one read to the bytes of its setpoint.

    Args:
        wire: the read (uint8), ``n_wire`` bytes long; raw, f32: scratch (uint8 of
            :data:`MAX_WIRE_FRAME`, float32 of n + 2m); io: the scalars (module docstring).
        args … scratch: as :func:`poise.kernels.cycle.cycle` takes them (``knobs`` with
            :data:`~poise.kernels.cycle.K_SATURATED` set here from the frame's status).
        out: receives the setpoint frame (uint8, ≥ :data:`MAX_WIRE_FRAME`).

    Returns:
        ``(outcome, new state, h(q), guard status)``: with :data:`WIRE_OK` the frame in
        ``out[:io[W_OUT_LEN]]`` is the setpoint of the new state's q̄a (and τ_ff); any other
        outcome sends nothing and the state stays the caller's (module docstring).
    """
    m = A.shape[0]
    n = A.shape[1]
    nothing = np.empty(0)
    if not decode_sensors(wire, n_wire, raw, f32, io, n, m):
        return NOT_ONE_FRAME, state, nothing, 0
    status = int(io[W_STATUS])
    if not status & int(io[W_ARMED_BIT]):
        return NOT_ARMED, state, nothing, 0
    q = io[W_VALUES:W_VALUES + n].copy()
    for v in q:
        if not np.isfinite(v):
            return NONFINITE_Q, state, nothing, 0
    knobs[one_call.K_SATURATED] = 1.0 if status & int(io[W_SAT_BIT]) else 0.0
    new, x_meas, p_status, g_status, c_status, finite = one_call.cycle(
        args, state, q, target, move_qa, A, projection, limits, knobs, scratch)
    if p_status != OK or g_status & NONFINITE or c_status != OK or not finite:
        return STEP_ELSEWHERE, state, x_meas, g_status
    qa_lo, ga_lo = int(io[W_QA_LO]), int(io[W_GA_LO])
    size = encode_setpoint(new[qa_lo:qa_lo + m], new[ga_lo:ga_lo + m], io[W_FF] != 0.0, io,
                           raw, f32, out)
    if size < 0:
        return STEP_ELSEWHERE, state, x_meas, g_status
    io[W_OUT_LEN] = size
    return WIRE_OK, new, x_meas, g_status


__all__ = [
    "NONFINITE_Q",
    "NOT_ARMED",
    "NOT_ONE_FRAME",
    "STEP_ELSEWHERE",
    "WIRE_OK",
    "W_VALUES",
    "WireBuffers",
    "cobs_decode_into",
    "cobs_encode_into",
    "crc16",
    "decode_sensors",
    "encode_setpoint",
    "io_size",
    "wire_cycle",
]
