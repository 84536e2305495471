"""Dynamixel Protocol 2.0: the packet codec against the e-Manual's byte vectors, the emulated
X-series control table, the virtual bus driven through ROBOTIS' own ``dynamixel_sdk`` over a
real pseudo-terminal, and :class:`DynamixelDevice` against the virtual bus.

Timing: the virtual bus and the SDK share this process (the GIL) and a busy 2-core machine,
so every device here gets a generous status timeout (``TIMEOUT_MS``) and states are awaited
with long deadlines; no test asserts a duration.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from poise.devices.base import Device, DeviceError, Status
from poise.devices.dynamixel_config import (
    DEFAULT_RADIUS,
    DEFAULT_ZERO,
    ServoConfig,
    default_servos,
    servos_from_config,
)
from poise.sim import dxl_protocol as dxl
from poise.sim.dxl_servo import XM430_W350, XServo

sdk = pytest.importorskip("dynamixel_sdk")

from poise.devices.dynamixel import DynamixelDevice, check_latency_timer  # noqa: E402

#: Status-packet timeout for devices under test [ms]: the bus shares the GIL with the SDK.
TIMEOUT_MS = 1500.0
#: Deadline for the simulated robot to reach a state [s].
SETTLE_S = 60.0

# e-Manual Protocol 2.0 examples (ping ID 1 and its status from an XM430-W210, read Present
# Position of ID 1 and its status, write Goal Position 512, sync read of IDs 1 and 2, sync
# write to IDs 1 and 2); each CRC also checked against the SDK's updateCRC below.
EMANUAL = {
    "ping": "FF FF FD 00 01 03 00 01 19 4E",
    "ping_status": "FF FF FD 00 01 07 00 55 00 06 04 26 65 5D",
    "read": "FF FF FD 00 01 07 00 02 84 00 04 00 1D 15",
    "read_status": "FF FF FD 00 01 08 00 55 00 A6 00 00 00 8C C0",
    "write": "FF FF FD 00 01 09 00 03 74 00 00 02 00 00 CA 89",
    "sync_read": "FF FF FD 00 FE 09 00 82 84 00 04 00 01 02 CE FA",
    "sync_write": "FF FF FD 00 FE 11 00 83 74 00 04 00 01 96 00 00 00 02 AA 00 00 00 82 87",
}


def _hex(s: str) -> bytes:
    return bytes.fromhex(s)


# ---------------------------------------------------------------------------- codec


@pytest.mark.parametrize("name", sorted(EMANUAL))
def test_crc_of_emanual_packets_matches_their_last_two_bytes_and_the_sdk(name):
    raw = _hex(EMANUAL[name])
    crc = dxl.crc16(raw[:-2])
    assert crc == raw[-2] | (raw[-1] << 8)
    assert crc == sdk.PacketHandler(2.0).updateCRC(0, list(raw), len(raw) - 2)


def test_crc16_is_crc16_buypass_check_value():
    assert dxl.crc16(b"123456789") == 0xFEE8  # the catalogued check value of CRC-16/BUYPASS


def test_encode_reproduces_emanual_packets():
    assert dxl.encode(1, dxl.Instruction.PING) == _hex(EMANUAL["ping"])
    assert dxl.encode_status(1, 0, _hex("06 04 26")) == _hex(EMANUAL["ping_status"])
    assert dxl.encode(1, dxl.Instruction.READ, _hex("84 00 04 00")) == _hex(EMANUAL["read"])
    assert dxl.encode_status(1, 0, _hex("A6 00 00 00")) == _hex(EMANUAL["read_status"])
    assert dxl.encode(1, dxl.Instruction.WRITE, _hex("74 00 00 02 00 00")) == \
        _hex(EMANUAL["write"])
    assert dxl.encode(dxl.BROADCAST_ID, dxl.Instruction.SYNC_READ, _hex("84 00 04 00 01 02")) \
        == _hex(EMANUAL["sync_read"])


def test_decoder_splits_emanual_packets_from_a_noisy_stream():
    stream = b"\x00\x13" + _hex(EMANUAL["ping"]) + b"\xff\x42" + _hex(EMANUAL["read_status"])
    dec = dxl.PacketDecoder()
    packets = [p for i in range(0, len(stream), 3) for p in dec.feed(stream[i:i + 3])]
    assert packets == [dxl.Packet(1, dxl.Instruction.PING, b""),
                       dxl.Packet(1, dxl.Instruction.STATUS, _hex("A6 00 00 00"), 0)]
    assert dec.counters.noise == 4 and dec.counters.crc == 0


def test_decoder_drops_a_corrupted_packet_and_keeps_the_next():
    bad = bytearray(_hex(EMANUAL["write"]))
    bad[10] ^= 0x01
    dec = dxl.PacketDecoder()
    packets = dec.feed(bytes(bad) + _hex(EMANUAL["ping"]))
    assert packets == [dxl.Packet(1, dxl.Instruction.PING, b"")]
    assert dec.counters.crc == 1 and dec.bad_crc_ids == [1]


def test_stuffing_of_the_header_pattern():
    assert dxl.stuff(_hex("55 00 FF FF FD 01")) == _hex("55 00 FF FF FD FD 01")
    assert dxl.unstuff(_hex("55 00 FF FF FD FD 01")) == _hex("55 00 FF FF FD 01")


_bytes = st.binary(max_size=64) | st.lists(st.sampled_from([0xFF, 0xFD, 0x00]),
                                           max_size=64).map(bytes)


@given(_bytes)
def test_stuffing_round_trips_and_hides_the_header(body):
    stuffed = dxl.stuff(body)
    assert dxl.unstuff(stuffed) == body
    for i in range(len(stuffed) - 2):
        if stuffed[i:i + 3] == b"\xff\xff\xfd":
            assert stuffed[i + 3:i + 4] == b"\xfd"


@given(st.integers(0, 0xFE), st.sampled_from(list(dxl.Instruction)), _bytes,
       st.integers(1, 17))
def test_encode_decode_round_trip_in_any_chunking(pid, inst, params, chunk):
    if inst == dxl.Instruction.STATUS and not params:
        params = b"\x00"
    wire = b"\x01\x02" + dxl.encode(pid, inst, params)
    dec = dxl.PacketDecoder()
    got = [p for i in range(0, len(wire), chunk) for p in dec.feed(wire[i:i + chunk])]
    if inst == dxl.Instruction.STATUS:
        assert got == [dxl.Packet(pid, inst, params[1:], params[0])]
    else:
        assert got == [dxl.Packet(pid, inst, params)]


@settings(max_examples=50)
@given(st.integers(0, 0xFC), st.sampled_from([dxl.Instruction.WRITE, dxl.Instruction.READ]),
       _bytes)
def test_encode_matches_the_sdk_stuffing_and_crc(pid, inst, params):
    ph = sdk.PacketHandler(2.0)
    packet = [0xFF, 0xFF, 0xFD, 0x00, pid, (len(params) + 3) & 0xFF, (len(params) + 3) >> 8,
              int(inst), *params, 0, 0]
    packet = ph.addStuffing(packet)
    total = (packet[5] | packet[6] << 8) + 7
    crc = ph.updateCRC(0, packet, total - 2)
    packet[total - 2:total] = [crc & 0xFF, crc >> 8]
    assert dxl.encode(pid, inst, params) == bytes(packet[:total])


# ---------------------------------------------------------------------------- control table


def test_servo_refuses_operating_mode_with_torque_on_like_the_real_one():
    servo = XServo(1)
    assert servo.write(64, b"\x01") == 0
    assert servo.write(11, b"\x04") == dxl.ErrorCode.ACCESS
    assert servo.get("Operating Mode") == 3
    assert servo.write(64, b"\x00") == 0
    assert servo.write(11, b"\x02") == dxl.ErrorCode.DATA_RANGE  # 2 is no operating mode
    assert servo.write(11, b"\x04") == 0 and servo.get("Operating Mode") == 4


def test_servo_refuses_read_only_items_and_partial_items():
    servo = XServo(3)
    assert servo.write(132, b"\x00\x00\x00\x00") == dxl.ErrorCode.ACCESS
    assert servo.write(116, b"\x00\x02") == dxl.ErrorCode.DATA_LENGTH
    assert servo.read(0, 2) == (0, XM430_W350.to_bytes(2, "little"))


def test_indirect_data_reads_the_mapped_addresses():
    servo = XServo(1)
    mapping = (70, *range(126, 136))
    assert servo.write(168, b"".join(a.to_bytes(2, "little") for a in mapping)) == 0
    servo.set_present(position=-5, velocity=7, current=-300, moving=True)
    servo.set_hardware_error(0x20)
    error, data = servo.read(224, 11)
    assert error == dxl.ALERT
    assert data[0] == 0x20
    assert int.from_bytes(data[1:3], "little", signed=True) == -300
    assert int.from_bytes(data[3:7], "little", signed=True) == 7
    assert int.from_bytes(data[7:11], "little", signed=True) == -5


def test_torque_on_takes_the_present_position_as_goal():
    servo = XServo(1)
    servo.set_present(position=3000, velocity=0, current=0, moving=False)
    servo.write(64, b"\x01")
    assert servo.get("Goal Position") == 3000


# ---------------------------------------------------------------------------- conversion


@given(st.integers(-1_000_000, 1_000_000), st.sampled_from([1, -1]),
       st.floats(0.002, 0.05), st.integers(-4096, 4096))
def test_counts_and_qa_round_trip(counts, sign, radius, zero):
    cfg = ServoConfig(1, radius=radius, sign=sign, zero=zero, qa_min=-1e3 * radius,
                      qa_max=1e3 * radius)
    assert cfg.counts(cfg.qa(counts)) == counts
    assert cfg.qa(zero) == 0.0


def test_conversion_is_sign_radius_times_shaft_angle():
    cfg = ServoConfig(4, radius=0.02, sign=-1, zero=1000)
    assert cfg.qa(1000 + 1024) == pytest.approx(-0.02 * math.pi / 2, abs=1e-15)
    assert cfg.effort(cfg.current_units(12.5)) == pytest.approx(12.5, rel=0.01)


def test_defaults_are_ids_one_to_m_radius_one_cm_zero_2048():
    servos = default_servos(3)
    assert [s.id for s in servos] == [1, 2, 3]
    assert {s.radius for s in servos} == {DEFAULT_RADIUS} and DEFAULT_RADIUS == 0.01
    assert {s.zero for s in servos} == {DEFAULT_ZERO} and DEFAULT_ZERO == 2048
    assert {s.mode for s in servos} == {4}
    assert servos[0].qa_max == pytest.approx(2 * math.pi * 0.01)


def test_servo_table_errors_name_the_entry_and_key():
    with pytest.raises(ValueError, match=r"device.servos\[1\].*sign"):
        servos_from_config([{"id": 1}, {"id": 2, "sign": 2}])
    with pytest.raises(ValueError, match=r"device.servos\[0\].*unknown key.*radus"):
        servos_from_config([{"id": 1, "radus": 0.01}])
    with pytest.raises(ValueError, match=r"\[3\] appear more than once"):
        servos_from_config([{"id": 3}, {"id": 3}])
    with pytest.raises(ValueError, match=r"mode 5 .* needs current_limit"):
        servos_from_config([{"id": 1, "mode": 5}])


def test_latency_timer_of_an_ftdi_port_gives_the_fix(tmp_path):
    sysfs = tmp_path / "usb-serial"
    (sysfs / "ttyUSB0").mkdir(parents=True)
    (sysfs / "ttyUSB0" / "latency_timer").write_text("16\n")
    (tmp_path / "ttyUSB0").write_text("")
    link = tmp_path / "usb-FTDI_FT232R-if00-port0"
    link.symlink_to(tmp_path / "ttyUSB0")  # like /dev/serial/by-id/… → /dev/ttyUSB0
    lt = check_latency_timer(str(link), str(sysfs))
    assert lt is not None and lt.tty == "ttyUSB0" and lt.ms == 16
    assert f"echo 1 | sudo tee {sysfs}/ttyUSB0/latency_timer" in lt.warning
    (sysfs / "ttyUSB0" / "latency_timer").write_text("1\n")
    assert check_latency_timer(str(link), str(sysfs)).warning == ""
    assert check_latency_timer("/dev/ttyACM0", str(sysfs)) is None  # no latency timer


# ---------------------------------------------------------------------------- the virtual bus


@pytest.fixture
def sdk_port(dxl_sim):
    port = sdk.PortHandler(dxl_sim.bus_path)
    assert port.setBaudRate(1_000_000)
    yield port, sdk.PacketHandler(2.0)
    port.closePort()


def _retry(call, *args):
    """An SDK call repeated while it times out: the plain SDK waits 34 ms for a status packet,
    and the bus thread may be starved longer than that on a busy machine."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        out = call(*args)
        result = out[1] if len(out) == 3 else out[0]  # (value, result, error) | (result, error)
        if result != sdk.COMM_RX_TIMEOUT or time.monotonic() > deadline:
            return out


def test_sdk_pings_and_reads_the_model_number(sdk_port):
    port, ph = sdk_port
    model, result, error = _retry(ph.ping, port, 1)
    assert (model, result, error) == (XM430_W350, sdk.COMM_SUCCESS, 0)
    number, result, error = _retry(ph.read2ByteTxRx, port, 2, 0)
    assert (number, result, error) == (XM430_W350, sdk.COMM_SUCCESS, 0)


def test_sdk_ping_of_a_missing_id_times_out(sdk_port):
    port, ph = sdk_port
    _, result, _ = ph.ping(port, 9)
    assert result == sdk.COMM_RX_TIMEOUT


def test_sdk_torque_enable_and_operating_mode_refused_with_torque_on(sdk_port, dxl_sim):
    port, ph = sdk_port
    assert _retry(ph.write1ByteTxRx, port, 1, 64, 1) == (sdk.COMM_SUCCESS, 0)
    assert _retry(ph.read1ByteTxRx, port, 1, 64)[0] == 1
    result, error = _retry(ph.write1ByteTxRx, port, 1, 11, 4)
    assert result == sdk.COMM_SUCCESS and error == dxl.ErrorCode.ACCESS
    assert "not available" in ph.getRxPacketError(error)
    assert dxl_sim.bus.servo(1).get("Operating Mode") == 3
    assert _retry(ph.write1ByteTxRx, port, 1, 64, 0) == (sdk.COMM_SUCCESS, 0)
    assert _retry(ph.write1ByteTxRx, port, 1, 11, 4) == (sdk.COMM_SUCCESS, 0)


def test_sdk_sync_write_drives_the_plant_and_sync_read_reports_it(sdk_port, dxl_sim):
    port, ph = sdk_port
    goals = {1: DEFAULT_ZERO + 300, 2: DEFAULT_ZERO - 200}  # ~ +4.6 mm, -3.1 mm of tendon
    for sid in goals:
        assert _retry(ph.write1ByteTxRx, port, sid, 11, 4) == (sdk.COMM_SUCCESS, 0)
        assert _retry(ph.write1ByteTxRx, port, sid, 64, 1) == (sdk.COMM_SUCCESS, 0)
    write = sdk.GroupSyncWrite(port, ph, 116, 4)
    read = sdk.GroupSyncRead(port, ph, 126, 10)
    for sid, goal in goals.items():
        write.addParam(sid, list((goal & 0xFFFFFFFF).to_bytes(4, "little")))
        read.addParam(sid)
    assert write.txPacket() == sdk.COMM_SUCCESS
    deadline = time.monotonic() + SETTLE_S
    positions: dict[int, int] = {}
    while time.monotonic() < deadline:
        if read.txRxPacket() == sdk.COMM_SUCCESS:
            positions = {sid: read.getData(sid, 132, 4) for sid in goals}
            if all(abs(positions[s] - g) <= 3 for s, g in goals.items()):
                break
        time.sleep(0.01)
    assert all(abs(positions[s] - g) <= 3 for s, g in goals.items()), positions
    qa = dxl_sim.plant.sim.qa  # the simulated tendons moved, not just the registers
    assert qa[0] == pytest.approx(300 * 2 * math.pi / 4096 * 0.01, abs=5e-5)
    assert qa[1] == pytest.approx(-200 * 2 * math.pi / 4096 * 0.01, abs=5e-5)


# ---------------------------------------------------------------------------- the device


def _device(sim, servos=None, **kw):
    return DynamixelDevice(sim.bus_path, servos, m=None if servos else 2,
                           timeout_ms=TIMEOUT_MS, **kw)


def _wait_qa(dev, target, tol, setpoint=None, settled=20):
    """Read (and keep writing ``setpoint``) until every |qa - target| < tol and |q̇a| < 1 mm/s
    in ``settled`` reads in a row (the arm's passive joints sway the tendons for a while)."""
    deadline = time.monotonic() + SETTLE_S
    streak = 0
    while True:
        s = dev.read()
        near = all(abs(a - b) < tol for a, b in zip(s.qa, target, strict=True))
        still = all(abs(v) < 1e-3 for v in dev.qa_velocity)
        streak = streak + 1 if near and still else 0
        if streak >= settled:
            return s
        if time.monotonic() > deadline:
            pytest.fail(f"qa {s.qa} did not settle at {target} within {SETTLE_S} s")
        if setpoint is not None:
            dev.write(setpoint)
        time.sleep(0.005)


def test_device_connects_and_describes_the_bus(dxl_sim):
    with _device(dxl_sim) as dev:
        assert isinstance(dev, Device)
        info = dev.describe()
        rtt = dev.bus_rtt_us()
        sample = dev.read()
    assert info.polled and info.n_q == 0 and info.n_a == 2 and info.ids == (1, 2)
    assert info.qa_max == pytest.approx((2 * math.pi * 0.01,) * 2)
    assert info.name == "dynamixel XM430-W350 ×2"
    assert info.extra["latency_timer_ms"] is None  # a pty has no latency timer
    assert rtt["count"] >= 10 and 0 < rtt["p50"] <= rtt["p99"] <= rtt["max"]
    assert sample.q == () and sample.qa == pytest.approx((0.0, 0.0), abs=1e-4)
    assert not sample.status & Status.ARMED


def test_reads_from_several_threads_at_once_each_get_their_data(dxl_sim):
    """The loop reads the bus while a command thread arms (which reads it too): every read
    returns its own complete block. (A sync read's data used to be taken outside the bus
    lock: the other thread's next sync read cleared it in between, "servo 1: no data in the
    sync read", seen as a failed arm on a busy machine.)"""
    errors: list[BaseException] = []
    reads = [0, 0, 0]

    def reader(k: int) -> None:
        try:
            for _ in range(200):
                sample = dev.read()
                assert len(sample.qa) == 2
                reads[k] += 1
        except BaseException as exc:
            errors.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as a loaded machine would
    try:
        with _device(dxl_sim) as dev:
            threads = [threading.Thread(target=reader, args=(k,)) for k in range(3)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
    finally:
        sys.setswitchinterval(interval)
    assert not errors, errors[:3]
    assert reads == [200, 200, 200]


def test_device_arms_writes_and_the_plant_follows(dxl_sim):
    target = (0.02, -0.01)  # [m] of tendon
    with _device(dxl_sim) as dev:
        dev.arm()
        assert all(dxl_sim.bus.servo(i).torque_on for i in (1, 2))
        assert [dxl_sim.bus.servo(i).get("Operating Mode") for i in (1, 2)] == [4, 4]
        dev.write(target)
        s = _wait_qa(dev, target, 2e-4, setpoint=target)
        true_qa = dxl_sim.plant.sim.qa  # before disarm: without torque the arm sags
        dev.disarm()
    assert s.status & Status.ARMED
    assert true_qa == pytest.approx(target, abs=3e-4)
    assert all(abs(e) > 1.0 for e in s.efforts)  # holding the arm takes tendon tension [N]


def test_device_clips_to_the_limits_and_refuses_bad_setpoints(dxl_sim):
    with _device(dxl_sim, [ServoConfig(1, qa_max=0.005), ServoConfig(2)]) as dev:
        dev.arm()
        dev.write((0.03, 0.0))
        assert dev.read().status & Status.LIMIT
        assert dxl_sim.bus.servo(1).get("Goal Position") == ServoConfig(1).counts(0.005)
        with pytest.raises(DeviceError, match=r"need 2 finite .*servos \[1, 2\]"):
            dev.write((0.0, math.nan))
        with pytest.raises(DeviceError, match="need 2 finite"):
            dev.write((0.0,))
        dev.disarm()


def _torque_via_sdk(path):
    port = sdk.PortHandler(path)
    port.setBaudRate(1_000_000)
    ph = sdk.PacketHandler(2.0)
    try:
        return [_retry(ph.read1ByteTxRx, port, i, 64)[0] for i in (1, 2)]
    finally:
        port.closePort()


def test_disarm_turns_torque_off_read_back_through_the_sdk(dxl_sim):
    dev = _device(dxl_sim)
    dev.arm()
    dev.close()
    assert _torque_via_sdk(dxl_sim.bus_path) == [1, 1]
    dev = _device(dxl_sim)  # connecting leaves a device disarmed
    dev.close()
    assert _torque_via_sdk(dxl_sim.bus_path) == [0, 0]
    dev = _device(dxl_sim)
    dev.arm()
    dev.disarm()
    dev.close()
    assert _torque_via_sdk(dxl_sim.bus_path) == [0, 0]


def test_estop_turns_torque_off_and_latches_until_clear(dxl_sim):
    dev = _device(dxl_sim)
    try:
        dev.arm()
        dev.estop()
        assert dev.read().status & Status.ESTOP
        assert not any(dxl_sim.bus.servo(i).torque_on for i in (1, 2))
        dev.write((0.01, 0.01))  # ignored while e-stopped
        assert dxl_sim.bus.servo(1).get("Goal Position") != ServoConfig(1).counts(0.01)
        with pytest.raises(DeviceError, match="e-stop latched"):
            dev.arm()
        dev.clear()
        dev.arm()
        assert all(dxl_sim.bus.servo(i).torque_on for i in (1, 2))
        dev.estop()
    finally:
        dev.close()
    assert _torque_via_sdk(dxl_sim.bus_path) == [0, 0]


def test_a_missing_servo_id_is_named_with_the_baud_rate(dxl_sim):
    with pytest.raises(DeviceError, match=r"servo 5 does not answer on .* at 1000000 baud"):
        DynamixelDevice(dxl_sim.bus_path, [ServoConfig(1), ServoConfig(5)],
                        timeout_ms=TIMEOUT_MS)


def test_a_hardware_error_raises_naming_the_servo(dxl_sim):
    with _device(dxl_sim) as dev:
        dev.arm()
        dev.read()
        dxl_sim.bus.servo(2).set_hardware_error(0x20)
        with pytest.raises(DeviceError, match=r"servo 2: hardware error status 0x20 "
                                              r"\(overload\)"):
            dev.read()
        with pytest.raises(DeviceError, match="servo 2"):
            dev.arm()


def test_a_servo_that_stops_answering_is_named(dxl_sim):
    with _device(dxl_sim) as dev:
        dev.read()
        dxl_sim.bus.servo(1).responsive = False
        with pytest.raises(DeviceError, match=r"servo 1 stopped answering .*There is no "
                                              r"status packet"):
            dev.read()


def test_a_second_opener_of_the_bus_is_refused(dxl_sim):
    with _device(dxl_sim), pytest.raises(DeviceError, match="already in use"):
        _device(dxl_sim)


def test_the_latency_timer_reaches_describe(dxl_sim, tmp_path):
    tty = os.path.basename(os.path.realpath(dxl_sim.bus_path))
    (tmp_path / tty).mkdir()
    (tmp_path / tty / "latency_timer").write_text("16\n")
    with _device(dxl_sim, sysfs_root=str(tmp_path)) as dev:
        extra = dev.describe().extra
    assert extra["latency_timer_ms"] == 16
    assert extra["latency_timer_fix"] == f"echo 1 | sudo tee {tmp_path}/{tty}/latency_timer"
    assert any("latency timer is 16 ms" in w for w in extra["warnings"])


# ---------------------------------------------------------------------------- command line


def test_poise_device_sim_dynamixel_prints_both_ptys_and_serves_bus_and_sensor_board():
    from poise.firmware_bridge.transport import SerialLink

    proc = subprocess.Popen([sys.executable, "-m", "poise", "device", "sim", "--protocol",
                             "dynamixel", "--model", "tendon_3link", "--duration", "120"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first, second = proc.stdout.readline().split(), proc.stdout.readline().split()
        assert first[0] == "PTY" and second[0] == "SENSORS", (first, second)
        target = (0.015, 0.0)
        with DynamixelDevice(first[1], m=2, timeout_ms=TIMEOUT_MS) as dev, \
                SerialLink(second[1], timeout=10.0) as board:
            assert (board.description.hello.n_coordinates,
                    board.description.hello.n_actuators) == (3, 0)
            q0 = board.next_sensors(timeout=10.0).sensors.q
            dev.arm()
            _wait_qa(dev, target, 2e-4, setpoint=target)
            deadline = time.monotonic() + SETTLE_S
            while time.monotonic() < deadline:  # the joints moved with the tendon
                q = board.next_sensors(timeout=10.0).sensors.q
                if abs(q[0] - q0[0]) > 0.05:
                    break
            dev.disarm()
        assert abs(q[0] - q0[0]) > 0.05, (q0, q)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        proc.stdout.close()
        proc.stderr.close()


def test_the_example_servo_table_is_valid():
    import tomllib

    from poise.examples import path as example_path

    path = example_path("dynamixel/tendon_arm")
    with open(path, "rb") as f:
        servos = servos_from_config(tomllib.load(f)["device"]["servos"])
    assert [(s.id, s.sign, s.mode) for s in servos] == [(1, 1, 4), (2, -1, 5)]
    assert servos[1].current_limit_units() == round(1.2 / 0.00269)
