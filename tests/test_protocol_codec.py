"""Codec and message tests: round trips, bounds, and a stream decoder that survives any input."""

from __future__ import annotations

import binascii
import random

import numpy as np
import pytest
from hypothesis import find, given, settings
from hypothesis import strategies as st

from poise.firmware_bridge import messages as m
from poise.firmware_bridge.codec import (
    MAX_ENCODED_FRAME,
    MAX_PAYLOAD,
    MAX_WIRE_FRAME,
    CobsError,
    CrcError,
    LengthError,
    StreamDecoder,
    _cobs_encode_reference,
    cobs_decode,
    cobs_encode,
    crc16,
    decode_frame,
    encode_frame,
)

# ---------------------------------------------------------------- COBS / CRC / frames


def test_crc16_is_xmodem_check_value():
    assert crc16(b"123456789") == 0x31C3 == binascii.crc_hqx(b"123456789", 0)


@given(st.binary(max_size=1200))
def test_cobs_round_trip_has_no_zero_and_bounded_overhead(data):
    enc = cobs_encode(data)
    assert 0 not in enc
    assert len(enc) <= len(data) + len(data) // 254 + 1
    assert enc == _cobs_encode_reference(data)
    assert cobs_decode(enc) == data


@given(st.integers(0, 255), st.integers(0, 0xFFFF), st.integers(0, 0xFFFFFFFF),
       st.binary(max_size=MAX_PAYLOAD))
def test_frame_round_trip_and_wire_bound(msg_type, seq, ts, payload):
    wire = encode_frame(1, msg_type, seq, ts, payload)
    assert len(wire) <= MAX_WIRE_FRAME and wire[-1] == 0 and 0 not in wire[:-1]
    header, got = decode_frame(wire[:-1])
    assert (header.version, header.type, header.seq, header.timestamp_us) == (1, msg_type, seq, ts)
    assert got == payload


def test_oversized_payload_is_refused():
    try:
        encode_frame(1, 2, 0, 0, bytes(MAX_PAYLOAD + 1))
    except LengthError:
        return
    raise AssertionError("no LengthError")


def test_decode_frame_errors_have_their_kind():
    wire = encode_frame(1, 0x12, 5, 6)[:-1]
    bad_crc = bytearray(cobs_decode(wire))
    bad_crc[3] ^= 0x40
    cases = [(cobs_encode(bytes(bad_crc)), CrcError), (b"\x05\x01", CobsError),
             (cobs_encode(b"\x01\x02\x03"), LengthError), (b"\x01" * (MAX_ENCODED_FRAME + 1),
                                                            LengthError)]
    for data, exc in cases:
        try:
            decode_frame(data)
        except exc:
            continue
        raise AssertionError(f"{data!r} did not raise {exc.__name__}")


# ---------------------------------------------------------------- messages

f32 = st.floats(width=32, allow_nan=False)
u16 = st.integers(0, 0xFFFF)
u8 = st.integers(0, 255)
text16 = st.text(st.characters(min_codepoint=1, max_codepoint=0x7E), max_size=16)
text8 = st.text(st.characters(min_codepoint=1, max_codepoint=0x7E), max_size=8)


@st.composite
def sensors(draw):
    nq = draw(st.integers(0, 12))
    na = draw(st.integers(0, 12))
    return m.Sensors(draw(st.integers(0, 0xFFFFFFFF)), draw(u16), draw(u16),
                     tuple(draw(st.lists(f32, min_size=nq, max_size=nq))),
                     tuple(draw(st.lists(f32, min_size=na, max_size=na))),
                     tuple(draw(st.lists(f32, min_size=na, max_size=na))))


@st.composite
def setpoints(draw):
    na = draw(st.integers(0, 29))
    qa = tuple(draw(st.lists(f32, min_size=na, max_size=na)))
    ff = draw(st.none() | st.lists(f32, min_size=na, max_size=na).map(tuple))
    return m.Setpoint(qa, ff)


ALL_MESSAGES = st.one_of(
    st.just(m.HelloRequest()),
    st.builds(m.Hello, u8, u8, u8, u16, u16, st.integers(0, 0xFFFFFFFF), text16, u8),
    st.builds(m.Channel, u8, st.sampled_from(list(m.ChannelKind)), text16, text8, f32, f32,
              text8, f32),
    sensors(),
    setpoints(),
    st.just(m.Heartbeat()),
    st.builds(m.Arm, st.booleans()),
    st.just(m.Disarm()),
    st.just(m.EStop()),
    st.builds(m.ConfigWrite, u16, f32, u8),
    st.builds(m.Ack, u8, u8, u16, u16),
    st.builds(m.Fault, u16, u8, u8, f32, text16),
)


@settings(max_examples=400)
@given(ALL_MESSAGES, u16, st.integers(0, 0xFFFFFFFF))
def test_every_message_round_trips_through_the_stream_decoder(msg, seq, ts):
    dec = m.MessageDecoder()
    frames = dec.feed(m.encode(msg, seq, ts))
    assert len(frames) == 1
    assert frames[0].message == msg
    assert (frames[0].header.seq, frames[0].header.timestamp_us) == (seq, ts)
    assert dec.counters.errors == 0


def test_every_message_type_is_covered_by_the_round_trip_strategy():
    # one example of each branch of the strategy (deterministic: sampling the union 300 times
    # missed the one-valued Heartbeat branch once in a full run)
    seen = {type(find(branch, lambda _: True)) for branch in ALL_MESSAGES.original_strategies}
    assert seen == set(m.MESSAGE_TYPES.values())


def test_schema_checksum_ignores_limits_but_not_units():
    a = m.Channel(0, 1, "tendon1", "m", -0.1, 0.1, "N", 40.0)
    assert m.schema_checksum([a]) == m.schema_checksum([m.Channel(0, 1, "tendon1", "m", -1, 1,
                                                                   "N", 4.0)])
    assert m.schema_checksum([a]) != m.schema_checksum([m.Channel(0, 1, "tendon1", "mm", -0.1,
                                                                   0.1, "N", 40.0)])


def test_malformed_payloads_are_counted_not_raised():
    dec = m.MessageDecoder()
    bad = [encode_frame(1, m.MsgType.SENSORS, 0, 0, b"\x00" * 10 + b"\x01"),
           encode_frame(1, m.MsgType.SETPOINT, 1, 0, b"\x00\x02" + bytes(4)),
           encode_frame(1, m.MsgType.SETPOINT, 1, 0, b"\x80\x00"),
           encode_frame(1, m.MsgType.HEARTBEAT, 2, 0, b"\x00"),
           encode_frame(1, m.MsgType.ACK, 3, 0, bytes(5))]
    assert dec.feed(b"".join(bad)) == []
    assert dec.counters.malformed == len(bad)


def test_other_version_is_dropped_except_hello():
    dec = m.MessageDecoder()
    hello = m.Hello(2, 0, 0, 100, 100, 0, "future")
    frames = dec.feed(m.encode(m.Heartbeat(), 1, version=2) + m.encode(hello, 2, version=2))
    assert [f.message for f in frames] == [hello]
    assert dec.counters.version == 1


# ---------------------------------------------------------------- stream decoder robustness


@settings(max_examples=300)
@given(st.binary(max_size=2000))
def test_random_bytes_never_raise_and_every_drop_is_counted(data):
    dec = m.MessageDecoder()
    frames = dec.feed(data)
    c = dec.counters
    assert c.frames == len(frames)
    # every non-empty delimited chunk is either a frame or a counted error
    chunks = [x for x in data.split(b"\x00")[:-1] if x]
    assert c.frames + c.errors <= len(chunks) + 1
    assert c.frames + c.errors >= len([x for x in chunks if len(x) <= MAX_ENCODED_FRAME])


@settings(max_examples=200)
@given(st.lists(ALL_MESSAGES, min_size=1, max_size=8), st.binary(min_size=1, max_size=400),
       st.integers(0, 2**32 - 1))
def test_decoder_resynchronises_after_garbage_and_corruption(msgs, garbage, seed):
    rng = random.Random(seed)
    good = [m.encode(x, i) for i, x in enumerate(msgs)]
    # Garbage, then one corrupted copy of each frame (a flipped non-delimiter bit), then the
    # good frames: the good ones all come through, in order, and the corrupted ones are counted.
    corrupted = []
    for frame in good:
        b = bytearray(frame)
        i = rng.randrange(len(b) - 1)
        b[i] ^= 1 << rng.randrange(8)
        if b[i] == 0:
            b[i] = 0xA5
        corrupted.append(bytes(b))
    stream = garbage + b"\x00" + b"".join(corrupted) + b"".join(good)
    dec = m.MessageDecoder()
    frames = []
    pos = 0
    while pos < len(stream):  # arbitrary read sizes
        n = rng.randint(1, 64)
        frames += dec.feed(stream[pos:pos + n])
        pos += n
    assert [f.message for f in frames[-len(msgs):]] == msgs
    # nothing vanishes silently: every corrupted copy is either counted or (CRC collision) decoded
    assert dec.counters.frames + dec.counters.errors >= 2 * len(msgs)


def test_overlong_run_counts_one_length_error_and_resyncs():
    dec = StreamDecoder()
    good = encode_frame(1, 0x12, 9, 0)
    out = dec.feed(b"\x11" * 1000) + dec.feed(b"\x22" * 10 + b"\x00" + good)
    assert dec.counters.length == 1
    assert [h.seq for h, _ in out] == [9]


def test_unknown_type_is_counted():
    dec = m.MessageDecoder()
    assert dec.feed(encode_frame(1, 0x7F, 0, 0)) == []
    assert dec.counters.unknown_type == 1


def test_each_error_kind_is_counted_separately():
    dec = m.MessageDecoder()
    good = encode_frame(1, m.MsgType.HEARTBEAT, 1, 0)
    raw = bytearray(cobs_decode(good[:-1]))
    raw[-1] ^= 0xFF
    stream = (cobs_encode(bytes(raw)) + b"\x00"  # crc
              + b"\x09\x01\x00"  # cobs: block runs past the end
              + cobs_encode(b"\x01\x02") + b"\x00"  # length: too short
              + encode_frame(1, 0x7E, 1, 0)  # unknown type
              + good)
    frames = dec.feed(stream)
    c = dec.counters
    assert (c.crc, c.cobs, c.length, c.unknown_type, c.frames) == (1, 1, 1, 1, 1)
    assert len(frames) == 1


# ---------------------------------------------------------------- the control loop's fast paths


@settings(max_examples=300)
@given(sensors(), u16, st.integers(0, 0xFFFFFFFF))
def test_the_fast_sensor_path_decodes_and_counts_exactly_what_feed_does(msg, seq, ts):
    wire = m.encode(msg, seq, ts)
    fast, slow = m.MessageDecoder(), m.MessageDecoder()
    assert fast.sensors(wire) == (seq, ts, msg)
    (frame,) = slow.feed(wire)
    assert (frame.header.seq, frame.header.timestamp_us, frame.message) == (seq, ts, msg)
    assert fast.counters.as_dict() == slow.counters.as_dict()


def test_the_fast_sensor_path_declines_all_else_counts_nothing_and_feed_still_decodes_it():
    """Anything but one whole, valid Sensors frame of this version with nothing pending goes
    back to ``feed`` (None, nothing counted), which decodes or counts it as always."""
    s = m.Sensors(3, 1, 2, (0.5, -1.0), (0.25,), (2.0,))
    one = m.encode(s, 7, 99)
    bad_crc = bytearray(cobs_decode(one[:-1]))
    bad_crc[-3] ^= 0x10
    other_version = m.encode(s, 7, 99, version=m.PROTOCOL_VERSION + 1)
    cases = {"two frames in one read": (one + one, 2, 0),
             "half a frame": (one[:5], 0, 0),
             "a setpoint": (m.encode(m.Setpoint((0.1,), None), 8), 1, 0),
             "a bad CRC": (cobs_encode(bytes(bad_crc)) + b"\x00", 0, 1),
             "another protocol version": (other_version, 0, 0),
             "no delimiter": (one[:-1], 0, 0)}
    for what, (data, frames, crc_errors) in cases.items():
        dec = m.MessageDecoder()
        before = dec.counters.as_dict()
        assert dec.sensors(data) is None, what
        assert dec.counters.as_dict() == before, what
        assert len(dec.feed(data)) == frames, what
        assert dec.counters.crc == crc_errors, what
    dec = m.MessageDecoder()
    dec.feed(one[:5])  # a partial frame pending: the next read completes it, not the fast path
    assert dec.sensors(one[5:]) is None
    assert [f.message for f in dec.feed(one[5:])] == [s]


@settings(max_examples=300)
@given(setpoints(), u16, st.integers(0, 0xFFFFFFFF))
def test_encode_setpoint_is_encode_of_a_setpoint_byte_for_byte(sp, seq, ts):
    want = m.encode(sp, seq, ts)
    ff = None if sp.tau_ff is None else list(sp.tau_ff)
    assert m.encode_setpoint(sp.qa_ref, sp.tau_ff, seq, ts) == want
    assert m.encode_setpoint(np.array(sp.qa_ref, dtype=float), ff, seq, ts) == want


def test_encode_setpoint_refuses_what_setpoint_refuses():
    with pytest.raises(ValueError, match="tau_ff has 1 values, qa_ref 2"):
        m.encode_setpoint((0.1, 0.2), (0.0,), 1)
    with pytest.raises(ValueError, match="exceeds"):
        m.encode_setpoint([0.0] * 40, [0.0] * 40, 1)
