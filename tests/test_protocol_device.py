"""Device endpoint logic (no I/O, synthetic time) driving a small, physically honest plant."""

from __future__ import annotations

import math

import pytest

from poise.firmware_bridge import messages as m
from poise.firmware_bridge.device import DeviceEndpoint, FaultInjection
from poise.firmware_bridge.plant import Plant
from poise.sim import SimChannel


class LagPlant:
    """Two tendon-driven revolute joints, one tendon per joint (pulley radius ``r``).

    Actuator: first-order lag of the tendon position ``qa`` toward its reference with time
    constant ``t_a`` [s] in ``position`` mode (``hold`` freezes the reference where the tendon is);
    effort (tendon tension) = ``k`` · (qa_ref − qa) + tau_ff, saturated at ``effort_limit`` [N].
    ``disabled``: no tension; the joint springs back toward 0 with time constant ``t_passive``.
    Measured joint angles q = qa / r [rad].
    """

    def __init__(self, r: float = 0.01, t_a: float = 0.02, k: float = 2000.0,
                 effort_limit: float = 40.0, t_passive: float = 0.5) -> None:
        self.r, self.t_a, self.k, self.effort_limit, self.t_passive = r, t_a, k, effort_limit, \
            t_passive
        self.time = 0.0
        self.mode = "disabled"
        self.qa = [0.0, 0.0]
        self.ref = [0.0, 0.0]
        self.ff = [0.0, 0.0]
        self.tau = [0.0, 0.0]
        self.commands = 0

    def describe(self):
        lim = 0.03
        return [SimChannel("theta1", "coordinate", "rad", -lim / self.r, lim / self.r),
                SimChannel("theta2", "coordinate", "rad", -lim / self.r, lim / self.r),
                SimChannel("tendon1", "actuator", "m", -lim, lim, "N", self.effort_limit),
                {"name": "tendon2", "kind": "actuator", "unit": "m", "lower": -lim,
                 "upper": lim, "effort_unit": "N", "effort_limit": self.effort_limit}]

    def set_mode(self, mode):
        if mode == "hold":
            self.ref = list(self.qa)
            self.ff = [0.0, 0.0]
        self.mode = mode

    def set_actuator_command(self, qa_ref, tau_ff):
        self.commands += 1
        self.ref = list(qa_ref)
        self.ff = list(tau_ff) if tau_ff is not None else [0.0, 0.0]

    def step(self, dt):
        for i in range(2):
            if self.mode == "disabled":
                self.tau[i] = 0.0
                self.qa[i] -= self.qa[i] * (1 - math.exp(-dt / self.t_passive))
            else:
                err = self.ref[i] - self.qa[i]
                t = self.k * err + self.ff[i]
                self.tau[i] = max(-self.effort_limit, min(self.effort_limit, t))
                self.qa[i] += err * (1 - math.exp(-dt / self.t_a))
        self.time += dt

    def read_sensors(self):
        return [x / self.r for x in self.qa], list(self.qa), list(self.tau), 0


def frames(ep: DeviceEndpoint) -> list[m.Message]:
    dec = m.MessageDecoder()
    out = []
    for b in ep.outgoing():
        out += [f.message for f in dec.feed(b)]
    return out


def host(msg: m.Message, seq: int) -> bytes:
    return m.encode(msg, seq)


def make(**kw) -> tuple[DeviceEndpoint, LagPlant]:
    plant = LagPlant()
    return DeviceEndpoint(plant, **kw), plant


def test_lag_plant_satisfies_the_plant_protocol():
    assert isinstance(LagPlant(), Plant)


def test_hello_request_is_answered_with_hello_and_all_channels():
    ep, _ = make(firmware_id="unit")
    ep.receive(host(m.HelloRequest(), 0), 0.0)
    out = frames(ep)
    hello, *chans = out
    assert isinstance(hello, m.Hello) and hello.firmware_id == "unit"
    assert (hello.n_coordinates, hello.n_actuators) == (2, 2)
    assert [c.name for c in chans] == ["theta1", "theta2", "tendon1", "tendon2"]
    assert hello.schema_checksum == m.schema_checksum(chans)


def test_setpoints_are_ignored_until_armed_then_tracked_with_lag():
    ep, plant = make(rate_hz=1000)
    ep.receive(host(m.Setpoint((0.01, 0.01)), 0), 0.0)
    assert plant.commands == 0 and ep.stats.setpoints_ignored == 1
    ep.receive(host(m.Arm(), 1), 0.0)
    assert isinstance(frames(ep)[0], m.Ack)
    t = 0.0
    for k in range(100):  # 100 ms ≈ 5 time constants
        ep.receive(host(m.Setpoint((0.01, -0.005)), 2 + k), t)
        t += 1e-3
        ep.tick(t)
    sensors = [x for x in frames(ep) if isinstance(x, m.Sensors)][-1]
    assert sensors.status & m.Status.ARMED
    assert sensors.last_setpoint_seq == 101
    assert abs(sensors.qa[0] - 0.01) < 0.01 * math.exp(-4)  # first-order lag: e^(-t/T) left
    assert abs(sensors.q[1] - (-0.5)) < 0.5 * math.exp(-4)


def test_setpoint_outside_limits_is_clipped_and_reported_once():
    ep, plant = make()
    ep.receive(host(m.Arm(), 0), 0.0)
    ep.receive(host(m.Setpoint((1.0, 0.0)), 1), 0.0)
    ep.receive(host(m.Setpoint((1.0, 0.0)), 2), 0.0)
    ep.tick(0.001)
    out = frames(ep)
    faults = [x for x in out if isinstance(x, m.Fault)]
    assert [f.code for f in faults] == [m.FaultCode.LIMIT]
    assert plant.ref[0] == pytest.approx(0.03)
    assert out[-1].status & m.Status.LIMIT


def test_bad_setpoint_size_is_ignored_with_a_fault():
    ep, plant = make()
    ep.receive(host(m.Arm(), 0), 0.0)
    ep.receive(host(m.Setpoint((0.01,)), 1), 0.0)
    assert any(isinstance(x, m.Fault) and x.code == m.FaultCode.BAD_SETPOINT for x in frames(ep))
    assert plant.commands == 1  # only the no-jump reference on arm


def test_watchdog_trips_latches_and_only_rearm_clears_it():
    ep, plant = make(watchdog_ms=50)
    ep.receive(host(m.Arm(), 0), 0.0)
    ep.receive(host(m.Heartbeat(), 1), 0.040)
    ep.tick(0.080)  # 40 ms after the heartbeat: still armed
    assert ep.armed
    ep.tick(0.095)  # 55 ms of silence
    out = frames(ep)
    assert not ep.armed and ep.watchdog_tripped and plant.mode == "hold"
    assert any(isinstance(x, m.Fault) and x.code == m.FaultCode.WATCHDOG for x in out)
    assert out[-1].status & m.Status.WATCHDOG and not out[-1].status & m.Status.ARMED
    # latched: setpoints and heartbeats do not clear it
    ep.receive(host(m.Heartbeat(), 2), 0.1)
    ep.receive(host(m.Setpoint((0.01, 0.01)), 3), 0.1)
    ep.tick(0.101)
    assert ep.watchdog_tripped and not ep.armed
    ep.receive(host(m.Arm(), 4), 0.2)
    assert ep.armed and not ep.watchdog_tripped and plant.mode == "position"


def test_estop_latches_until_arm_with_clear_flag():
    ep, plant = make()
    ep.receive(host(m.Arm(), 0), 0.0)
    ep.receive(host(m.EStop(), 1), 0.0)
    out = frames(ep)
    assert plant.mode == "disabled" and ep.estop
    assert any(isinstance(x, m.Fault) and x.code == m.FaultCode.ESTOP for x in out)
    ep.receive(host(m.Arm(), 2), 0.0)
    (nack,) = frames(ep)
    assert nack.code == m.ErrorCode.BAD_STATE and not ep.armed
    ep.receive(host(m.Arm(clear_estop=True), 3), 0.0)
    (ack,) = frames(ep)
    assert ack.ok and ep.armed and not ep.estop


@pytest.mark.parametrize(("cw", "code"), [
    (m.ConfigWrite(m.ConfigKey.WATCHDOG_MS, 50.0), m.ErrorCode.OK),
    (m.ConfigWrite(m.ConfigKey.WATCHDOG_MS, 5.0), m.ErrorCode.OUT_OF_RANGE),
    (m.ConfigWrite(m.ConfigKey.SENSOR_RATE_HZ, 250.0), m.ErrorCode.OK),
    (m.ConfigWrite(m.ConfigKey.SENSOR_RATE_HZ, math.nan), m.ErrorCode.OUT_OF_RANGE),
    (m.ConfigWrite(m.ConfigKey.SAFE_MODE, 1.0), m.ErrorCode.OK),
    (m.ConfigWrite(m.ConfigKey.SAFE_MODE, 0.5), m.ErrorCode.OUT_OF_RANGE),
    (m.ConfigWrite(m.ConfigKey.WATCHDOG_MS, 50.0, 0), m.ErrorCode.BAD_CHANNEL),
    (m.ConfigWrite(m.ConfigKey.EFFORT_LIMIT, 20.0, 2), m.ErrorCode.OK),
    (m.ConfigWrite(m.ConfigKey.EFFORT_LIMIT, 20.0, 0), m.ErrorCode.BAD_CHANNEL),
    (m.ConfigWrite(m.ConfigKey.EFFORT_LIMIT, -1.0, 3), m.ErrorCode.OUT_OF_RANGE),
    (m.ConfigWrite(0x7777, 1.0), m.ErrorCode.UNKNOWN_KEY),
])
def test_config_writes_are_acked_or_nacked_with_a_reason(cw, code):
    ep, _ = make()
    ep.receive(host(cw, 77), 0.0)
    (ack,) = frames(ep)
    assert (ack.ref_type, ack.ref_seq, ack.detail, ack.code) == (m.MsgType.CONFIG_WRITE, 77,
                                                                  cw.key, code)


def test_effort_limit_cannot_change_while_armed():
    ep, _ = make()
    ep.receive(host(m.Arm(), 0), 0.0)
    ep.receive(host(m.ConfigWrite(m.ConfigKey.EFFORT_LIMIT, 20.0, 2), 1), 0.0)
    assert frames(ep)[-1].code == m.ErrorCode.BAD_STATE


def test_corrupted_host_frames_set_rx_error_and_are_survived():
    ep, _ = make()
    good = host(m.Heartbeat(), 5)
    ep.receive(b"\x07\x01\x02\x00" + good, 0.0)
    ep.tick(0.001)
    s = frames(ep)[-1]
    assert s.status & m.Status.RX_ERROR and s.last_rx_seq == 5
    ep.tick(0.002)
    assert not frames(ep)[-1].status & m.Status.RX_ERROR


def test_fault_injection_validates_probabilities():
    with pytest.raises(ValueError, match="drop probability"):
        FaultInjection(drop=1.5)
