"""The wire cycle (:mod:`poise.kernels.wire`): a sensor frame's bytes to its setpoint frame's bytes
in one compiled call must give exactly what the codec, :meth:`CompiledStepper.cycle` and
:func:`~poise.firmware_bridge.messages.encode_setpoint` give one after the other, and leave
everything unusual to them untouched."""

from __future__ import annotations

import binascii
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.test_kernels import MODELS, STEPPERS, _limits_for, params, setup, start_configuration

from poise.firmware_bridge import codec
from poise.firmware_bridge import messages as m
from poise.kernels import wire as w
from poise.motion.compiled_steppers import make_compiled_stepper
from poise.motion.step import ControlStep

ARMED, SATURATED = int(m.Status.ARMED), int(m.Status.SATURATED)


def _u8(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype=np.uint8)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=250))
def test_cobs_and_crc_equal_the_codec(data):
    """COBS both ways and the CRC equal the codec's on any bytes (zeros, full blocks)."""
    out = np.zeros(w.MAX_WIRE_FRAME + 4, dtype=np.uint8)
    src = np.frombuffer(data + b"\x01", dtype=np.uint8)  # never empty: a kernel argument
    size = w.cobs_encode_into(src, len(data), out)
    assert bytes(out[:size]) == codec.cobs_encode(data) + b"\x00"
    raw = np.zeros(w.MAX_WIRE_FRAME + 4, dtype=np.uint8)
    back = w.cobs_decode_into(out, size - 1, raw)
    assert bytes(raw[:back]) == data
    assert w.crc16(src, len(data)) == binascii.crc_hqx(data, 0)


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=1, max_size=40))
def test_cobs_decode_refuses_what_the_codec_refuses(data):
    """Invalid stuffing (a zero byte, a block past the end): −1 exactly where the codec raises."""
    raw = np.zeros(64, dtype=np.uint8)
    size = w.cobs_decode_into(_u8(data), len(data), raw)
    try:
        want = codec.cobs_decode(data)
    except codec.CobsError:
        assert size == -1
    else:
        assert bytes(raw[:size]) == want


def _rig(name: str, algorithm: str, feedforward: bool, seed: int):
    model, packed, _ = setup(name)
    rng = np.random.default_rng(seed)
    limits = _limits_for(model, rng)
    arrays = ControlStep(model, limits, 1e-3)._limit_arrays()
    wired, plain = (make_compiled_stepper(algorithm, model, packed) for _ in range(2))
    q0 = start_configuration(model, seed=seed)
    for stepper in (wired, plain):
        stepper.reset(q0, limits.qa_min, limits.qa_max)
    buffers = wired.wire_buffers(version=m.PROTOCOL_VERSION, sensors_type=m.MsgType.SENSORS,
                                 setpoint_type=m.MsgType.SETPOINT, feedforward=feedforward,
                                 armed_bit=ARMED, saturated_bit=SATURATED)
    return model, rng, arrays, wired, plain, q0, buffers


def _sensors(q, qa, status: int, seq: int = 7, ts: int = 123_456) -> bytes:
    tau = [0.25 * v for v in qa]
    return m.encode(m.Sensors(status, 11, 12, tuple(q), tuple(qa), tuple(tau)), seq, ts)


@pytest.mark.parametrize("feedforward", [False, True])
@pytest.mark.parametrize("algorithm", STEPPERS)
@pytest.mark.parametrize("name", MODELS)
def test_wire_cycle_equals_decode_cycle_encode(name, algorithm, feedforward):
    """Over consecutive cycles (feedback and feed-forward, an approach move or not, the
    device saturated or not), the wire cycle commits the state ``cycle`` commits from the
    frame's float32 q, and writes the frame ``encode_setpoint`` makes of q̄a (and τ_ff); the
    decoded values are the codec's."""
    model, rng, arrays, wired, plain, q0, buffers = _rig(name, algorithm, feedforward, 51)
    p = params(algorithm, model.fk(q0) + 0.02)
    for cycle in range(12):
        q = q0 + rng.normal(scale=3e-3, size=model.n)
        fb, saturated = cycle % 2 == 0, cycle % 5 == 4
        move = plain.qa + 0.01 if cycle % 7 == 3 else None
        windup = fb and move is None
        status = ARMED | (SATURATED if saturated else 0)
        frame = _sensors(q, model.C[:model.m] @ q, status, seq=cycle)
        decoded = m.MessageDecoder().feed(frame)[0].message
        seq, ts = 1000 + cycle, 777 * cycle
        buffers.io[w.W_TX_SEQ], buffers.io[w.W_TX_TS] = seq, ts
        outcome, x_meas, x_used, g_status = wired.wire(p, fb, move, windup, arrays, 1e-3,
                                                       buffers, frame)
        want_x, want_used, want_status = plain.cycle(p, np.array(decoded.q), fb, move, windup,
                                             saturated, arrays, 1e-3)
        where = f"{name} {algorithm} cycle {cycle}"
        assert outcome == w.WIRE_OK, where
        assert g_status == want_status, where
        np.testing.assert_array_equal(x_meas, want_x, err_msg=where)
        np.testing.assert_array_equal(x_used, want_used, err_msg=where)
        np.testing.assert_array_equal(wired.state, plain.state, err_msg=where)
        tau = plain.tau if feedforward else None
        assert bytes(buffers.frame()) == m.encode_setpoint(plain.qa, tau, seq, ts), where
        got_q, got_qa, got_tau = buffers.values()
        assert (tuple(got_q), tuple(got_qa), tuple(got_tau)) == \
            (decoded.q, decoded.qa, decoded.tau), where
        assert buffers.io[w.W_STATUS] == status and buffers.io[w.W_SEQ] == cycle
        assert (buffers.io[w.W_TS], buffers.io[w.W_SP_ECHO], buffers.io[w.W_RX_ECHO]) == \
            (123_456, 11, 12)


def _unusual(model, q0) -> dict[str, tuple[bytes, int]]:
    qa = model.C[:model.m] @ q0
    good = _sensors(q0, qa, ARMED)
    nan_q = q0.copy()
    nan_q[0] = math.nan
    fewer = _sensors(q0[:-1], qa, ARMED)
    return {
        "two frames in one read": (good + good, w.NOT_ONE_FRAME),
        "half a frame": (good[:len(good) // 2], w.NOT_ONE_FRAME),
        "a bad CRC": (bytes(good[:3]) + bytes([good[3] ^ 0x40]) + good[4:], w.NOT_ONE_FRAME),
        "another type": (m.encode(m.Heartbeat(), 3, 4), w.NOT_ONE_FRAME),
        "another version": (m.encode(m.Sensors(ARMED, 0, 0, tuple(q0), tuple(qa),
                                               tuple(qa)), 1, 2,
                                     version=m.PROTOCOL_VERSION + 1), w.NOT_ONE_FRAME),
        "another size": (fewer, w.NOT_ONE_FRAME),
        "not armed": (_sensors(q0, qa, 0), w.NOT_ARMED),
        "a NaN in q": (_sensors(nan_q, qa, ARMED), w.NONFINITE_Q),
    }


@pytest.mark.parametrize("name", ["double_pendulum", "soft_arm_stiff"])
def test_anything_unusual_is_left_to_the_ordinary_path(name):
    """A read that is not one whole valid frame of the expected version and sizes, a device
    not armed, a NaN measurement, a NaN target: the outcome names it and nothing changed."""
    model, _, arrays, wired, _, q0, buffers = _rig(name, "alg1", True, 52)
    p = params("alg1", model.fk(q0) + 0.02)
    before = wired.state.copy()
    cases = _unusual(model, q0)
    for what, (data, want) in cases.items():
        buffers.io[w.W_OUT_LEN] = 0
        outcome, *_ = wired.wire(p, True, None, True, arrays, 1e-3, buffers, data)
        assert outcome == want, what
        np.testing.assert_array_equal(wired.state, before, err_msg=what)
        assert buffers.io[w.W_OUT_LEN] == 0, what
    bad = params("alg1", np.full(model.task_dim, math.nan))
    outcome, *_ = wired.wire(bad, False, None, False, arrays, 1e-3, buffers,
                               _sensors(q0, model.C[:model.m] @ q0, ARMED))
    assert outcome == w.STEP_ELSEWHERE
    np.testing.assert_array_equal(wired.state, before)


def test_a_setpoint_a_float32_cannot_hold_is_left_to_the_codec():
    """q̄a beyond the float32 range: struct refuses it, so the wire cycle sends nothing."""
    qa = np.array([1e39, 0.0])
    f32 = np.zeros(4, dtype=np.float32)
    io = np.zeros(w.io_size(0, 2))
    raw, out = (np.zeros(w.MAX_WIRE_FRAME, dtype=np.uint8) for _ in range(2))
    assert w.encode_setpoint(qa, qa, False, io, raw, f32, out) == -1
    with pytest.raises(OverflowError):
        m.encode_setpoint(qa, None, 0)
