"""The device interface end to end: the poise wire protocol, a Dynamixel bus with its
joint-sensor board (a composite), the factory that opens them from ``[device]``, and the
controller and calibration running on them. Real ptys, the real ``dynamixel-sdk``, the
virtual bus and sensor board in their own process (``poise device sim --protocol dynamixel``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import PATIENT_SETTINGS, wait_until
from poise.api.state import State
from poise.controller.config import ConfigError, DeviceConfig, load_config
from poise.controller.service import Controller
from poise.devices.base import Device, DeviceError, Status
from poise.devices.factory import open_device
from poise.devices.wire import WireDevice
from poise.models import load_model
from poise.models.actuation import split

pytest.importorskip("dynamixel_sdk", reason="the 'dynamixel' extra is part of the test extra")

#: Status-packet timeout for the virtual bus [ms]: its process may be starved on a busy machine
#: (other services' SCHED_FIFO loops, two test runs at once).
BUS_TIMEOUT_MS = 1000.0
#: Sync reads repeated after a failed one before it is a fault (as above).
BUS_RETRIES = 3
#: A target counts as reached below this task error [m].
TOL = 3e-3
#: How long a state may take to come on a slow, busy machine [s] (a wait, not a duration).
PATIENCE = 90.0


@pytest.fixture
def bus_and_board():
    """``poise device sim --protocol dynamixel`` for the double pendulum: (bus pty, board pty)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "poise", "device", "sim", "--model", "double_pendulum",
         "--protocol", "dynamixel", "--parent-pid", str(os.getpid())],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first, second = proc.stdout.readline().split(), proc.stdout.readline().split()
        assert first[:1] == ["PTY"] and second[:1] == ["SENSORS"], (first, second,
                                                                     proc.stderr.read())
        yield first[1], second[1]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        proc.stdout.close()
        proc.stderr.close()


def _config(bus: str, board: str | None, **keys) -> DeviceConfig:
    return DeviceConfig(port=bus, protocol="dynamixel", sensors=board,
                        timeout_ms=BUS_TIMEOUT_MS, **keys)


# ------------------------------------------------------------------------ configuration


def test_device_strings_and_tables_select_the_protocol(tmp_path):
    cfg = load_config(None, {"device.port": ("dynamixel:/dev/ttyUSB0", "--device"),
                             "device.sensors": ("/dev/ttyACM0", "--sensors")})
    assert (cfg.device.protocol, cfg.device.port, cfg.device.sensors) == \
        ("dynamixel", "/dev/ttyUSB0", "/dev/ttyACM0")
    path = tmp_path / "run.toml"
    path.write_text('[device]\nprotocol = "dynamixel"\nport = "/dev/ttyUSB0"\n'
                    'timeout_ms = 50\n[[device.servos]]\nid = 3\nradius = 0.02\n'
                    '[[device.servos]]\nid = 4\nsign = -1\n')
    cfg = load_config(path)
    assert [(s.id, s.radius, s.sign) for s in cfg.device.servos] == [(3, 0.02, 1), (4, 0.01, -1)]
    assert cfg.device.timeout_ms == 50


@pytest.mark.parametrize("text, words", [
    ('[device]\nport = "/dev/ttyACM0"\nsensors = "/dev/ttyACM1"\n', ["device.sensors",
                                                                   "dynamixel"]),
    ('[device]\nprotocol = "can"\n', ["device.protocol", "'dynamixel'"]),
    ('[device]\nprotocol = "dynamixel"\n', ["device.port", "serial port"]),
    ('[device]\nport = "dynamixel:/x"\n[[device.servos]]\nradius = 0.01\n',
     ["device.servos[0]", "'id'"]),
    ('[device]\nport = "dynamixel:/x"\nservos = 3\n', ["device.servos", "array of tables"]),
])
def test_bad_device_tables_are_refused_naming_the_key(tmp_path, text, words):
    path = tmp_path / "run.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    for word in words:
        assert word in str(err.value)


def test_a_missing_port_is_named():
    with pytest.raises(DeviceError, match="/dev/nonexistent-poise"):
        open_device(DeviceConfig(port="/dev/nonexistent-poise"), model="double_pendulum",
                    m=1, rate=100)


# ------------------------------------------------------------------------ the devices


def test_wire_device_streams_the_virtual_device(sim_device):
    sim = sim_device("double_pendulum", rate=200)
    dev = WireDevice(sim.path, timeout=5.0)
    try:
        assert isinstance(dev, Device)
        info = dev.describe()
        assert (info.n_q, info.n_a, info.polled) == (2, 1, False)
        assert info.qa_min[0] < 0 < info.qa_max[0]
        first, second = dev.read(5.0), dev.read(5.0)
        assert second.seq > first.seq and second.host_time >= first.host_time
        assert len(first.q) == 2 and len(first.qa) == 1
        dev.arm()
        assert wait_until(lambda: dev.latest().status & Status.ARMED, 10)
        dev.estop()
        assert wait_until(lambda: dev.latest().status & Status.ESTOP, 10)
        with pytest.raises(DeviceError, match="refused to arm"):
            dev.arm()  # latched: needs clear_estop
        dev.arm(clear_estop=True)
        assert wait_until(lambda: not dev.latest().status & Status.ESTOP, 10)
        assert "rtt_us" in dev.stats()
    finally:
        dev.close()


def test_composite_reads_q_from_the_board_and_moves_the_servo(bus_and_board):
    bus, board = bus_and_board
    opened = open_device(_config(bus, board), model="double_pendulum", m=1, rate=200)
    dev = opened.device
    try:
        info = dev.describe()
        assert (info.n_q, info.n_a, info.polled, info.ids) == (2, 1, True, (1,))
        s0 = dev.read(5.0)
        assert len(s0.q) == 2 and len(s0.qa) == 1
        model = load_model("double_pendulum")

        def qa_of(q) -> float:  # the actuator coordinate the board's q implies: c(q)[:m]
            return float(split(model, np.asarray(q))[0][0])

        dev.arm()
        goal = s0.qa[0] + 0.5 * (info.qa_max[0] - s0.qa[0])  # well inside the limits

        def moved() -> bool:
            dev.write([goal])
            s = dev.read(5.0)
            return abs(s.qa[0] - goal) < 1e-3 and abs(qa_of(s.q) - goal) < 2e-3

        assert wait_until(moved, PATIENCE, 0.01), (goal, dev.read(5.0))
        assert abs(qa_of(dev.read(5.0).q) - qa_of(s0.q)) > 0.01  # the arm moved
        assert dev.read(5.0).status & Status.ARMED
        dev.estop()
        s = dev.read(5.0)
        assert s.status & Status.ESTOP and not s.status & Status.ARMED
        with pytest.raises(DeviceError, match="e-stop"):
            dev.arm()
        stats = dev.stats()
        assert stats["actuators"]["bus_rtt_us"]["count"] > 0
        assert stats["sensors"]["sensor_frames"] > 0
    finally:
        dev.close()


def test_the_in_process_plant_is_a_device_in_simulated_time():
    from poise.devices.inprocess import SimulatedDevice
    from poise.sim import make_plant

    dev = SimulatedDevice(make_plant("double_pendulum", seed=1), rate=100.0)
    assert isinstance(dev, Device)
    info = dev.describe()
    assert (info.n_q, info.n_a, info.polled) == (2, 1, False)
    t0 = dev.latest().host_time
    s1, s2 = dev.read(), dev.read()
    assert s1.host_time == pytest.approx(t0 + 0.01) and s2.host_time == pytest.approx(t0 + 0.02)
    goal = 0.5 * info.qa_max[0]
    dev.write([goal])  # disarmed: ignored, as a device ignores it
    for _ in range(100):
        s = dev.read()
    assert abs(s.qa[0]) < 1e-3 and not s.status & Status.ARMED
    dev.arm()
    for _ in range(300):  # 3 s of simulated time
        dev.write([goal])
        s = dev.read()
    assert abs(s.qa[0] - goal) < 2e-3 and s.status & Status.ARMED
    dev.estop()
    assert dev.latest().status & Status.ESTOP
    with pytest.raises(DeviceError, match="e-stop"):
        dev.arm()
    dev.arm(clear_estop=True)
    assert not dev.latest().status & Status.ESTOP


def test_port_inprocess_is_the_simulated_robot_in_real_time():
    """``[device] port = "inprocess"``: polled, samples on the host clock, the plant kept in
    step with the wall clock (whole periods; a long pause is skipped, not raced through)."""
    from poise.devices.inprocess import RealTimeSimulatedDevice

    opened = open_device(DeviceConfig(port="inprocess"), model="double_pendulum", m=1,
                         rate=200.0)
    dev = opened.device
    assert isinstance(dev, RealTimeSimulatedDevice) and isinstance(dev, Device)
    assert opened.port == "inprocess" and opened.sim is None
    info = dev.describe()
    assert (info.n_q, info.n_a, info.polled, info.rate_hz) == (2, 1, True, 0.0)
    before = time.perf_counter()
    first = dev.latest()
    assert before <= first.host_time <= time.perf_counter()
    t_plant = dev.plant.time
    time.sleep(0.05)
    second = dev.read()
    elapsed = second.host_time - first.host_time
    # each poll leaves the plant within half a period of its clock: the two, one period
    assert dev.plant.time - t_plant == pytest.approx(elapsed, abs=1.0 / 200.0 + 1e-9)
    time.sleep(0.3)  # longer than MAX_CATCH_UP
    t_plant = dev.plant.time
    dev.latest()
    assert dev.plant.time - t_plant == pytest.approx(dev.MAX_CATCH_UP, abs=1e-9)
    dev.close()


# ------------------------------------------------------------------------ the controller


def _controller(bus: str, board: str | None, mode: str, target: float, **keys) -> Controller:
    over = {"device.port": (f"dynamixel:{bus}", "--device"),
            "device.timeout_ms": (BUS_TIMEOUT_MS, "test"),
            "device.retries": (BUS_RETRIES, "test"),
            "model.name": ("double_pendulum", "--model"),
            "loop.mode": (mode, "--mode"), "algorithm.target": ([target], "--target"),
            "algorithm.tolerance": (TOL, "test"), "mqtt.enabled": (False, "test"),
            "loop.rate": (100.0, "--rate"), "limits.sensor_fault": (2.0, "test")}
    if board is not None:
        over["device.sensors"] = (board, "--sensors")
    over.update({k.replace("__", "."): (v, "test") for k, v in keys.items()})
    return Controller(load_config(None, over))


def test_busy_polling_where_no_port_can_be_polled_says_so_and_the_loop_sleeps(bus_and_board):
    bus, board = bus_and_board
    with _controller(bus, board, "fb", 0.6, loop__busy_poll=True) as ctl:
        assert ctl.connect().accepted, ctl.reason
        said = [e.data for e in ctl.history() if e.data.get("code") == "busy_poll_unsupported"]
        assert len(said) == 1 and "CompositeDevice" in said[0]["text"]
        assert wait_until(lambda: ctl.summary()["realtime"].get("busy_poll") is False, 30)


def test_controller_on_bus_and_board_reaches_the_target_in_feedback(bus_and_board):
    bus, board = bus_and_board
    with _controller(bus, board, "fb", 0.6) as ctl:
        assert ctl.start().accepted, ctl.reason
        assert ctl.pacing == "host"  # a polled bus: the host paces the loop

        snapshot: dict = {}

        def reached() -> bool:
            s = ctl.summary()
            assert s["state"] == "running", s["reason"]
            snapshot.update(s)
            return s["task_error"] is not None and s["task_error"] < TOL

        assert wait_until(reached, PATIENCE, 0.1), ctl.summary()
        s = snapshot  # the summary that reached it (the pendulum may still sway after it)
        assert s["bus_rtt_us"]["count"] > 0 and s["link"]["sensor_frames"] > 0
        q = np.asarray(s["q"])
        # the task error is h(measured q)'s, not the prediction's (same summary; the two
        # fields may be one 10 ms cycle apart)
        assert abs(abs(ctl.model.fk(q)[0] - 0.6) - s["task_error"]) < 1e-3
        assert ctl.stop().accepted and ctl.state == State.READY


def test_bus_alone_runs_feedforward_only(bus_and_board):
    bus, _ = bus_and_board
    ctl = _controller(bus, None, "fb", 0.6)
    try:
        r = ctl.connect()
        assert not r.accepted and "does not measure q" in r.reason and "--sensors" in r.reason
    finally:
        ctl.close()
    with _controller(bus, None, "ff", 0.6) as ctl:
        assert ctl.start().accepted, ctl.reason
        assert any(e.data.get("code") == "feedforward_only" for e in ctl.history())
        from poise.api.bus import Command

        r = ctl.submit(Command("mode", "fb"))
        assert not r.accepted and "measured q" in r.reason
        # feed-forward: the predicted arm reaches the target; the servo follows q̄a
        assert wait_until(lambda: (ctl.summary()["task_error_predicted"] or 1) < TOL,
                          PATIENCE, 0.1), ctl.summary()

        def servo_follows() -> bool:  # the measured actuator position is the setpoint q̄a
            s = ctl.summary()
            return abs(s["qa"][0] - s["qa_ref"][0]) < 2e-3

        assert wait_until(servo_follows, PATIENCE, 0.1), ctl.summary()


def test_calibrate_runs_over_the_bus_and_board(bus_and_board, tmp_path):
    """``poise calibrate`` over a Dynamixel bus and its sensor board identifies the simulated
    robot's statics (the virtual device simulates the nominal double pendulum)."""
    bus, board = bus_and_board
    out = tmp_path / "cal.json"
    proc = subprocess.run(
        [sys.executable, "-m", "poise", "calibrate", "--model", "double_pendulum",
         "--device", f"dynamixel:{bus}", "--sensors", board, "--levels", "5", "--out",
         str(out), "--json", "--quiet",
         # a busy machine stalls the virtual bus for 100 ms at times: wait longer for
         # settling, with tolerances still far tighter than the 2 % checked below
         "--timeout", "60", "--velocity-tol", "0.01", "--change-tol", "0.001"],
        capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    assert result["ok"] and result["poses"] >= 9, result
    found = {p["name"]: p for p in result["parameters"]}
    for name in ("stiffness[link1]", "stiffness[link2]", "mass_moment[link1]"):
        p = found[name]
        assert abs(p["value"] - p["nominal"]) < 0.02 * abs(p["nominal"]), p
    doc = json.loads(out.read_text())
    assert doc["calibration"]["provenance"]["device"] == f"dynamixel:{bus}"


# ------------------------------------------------------------------------ compiled cycle


@pytest.mark.parametrize("compiled", [True, False])
def test_the_cycle_runs_on_the_kernels_warmed_up_before_ready(compiled):
    from poise.motion.compiled_steppers import CompiledStepper

    over = {"mqtt.enabled": (False, "test"), "loop.compiled": (compiled, "test"),
            "algorithm.target": ([0.5], "test"), "loop.rate": (200.0, "test")}
    with Controller(load_config(None, over)) as ctl:
        events = ctl.events()
        assert ctl.start().accepted, ctl.reason
        kinds = [(e.kind, e.data.get("code") or e.data.get("to")) for e in events.drain()]
        warmed = ("info", "kernels_ready") in kinds
        assert warmed == compiled
        if compiled:  # compiled before the controller said it was ready
            assert kinds.index(("info", "kernels_ready")) < kinds.index(("state", "ready"))
        assert wait_until(lambda: (ctl.summary()["task_error"] or 1) < TOL, PATIENCE, 0.1), \
            ctl.summary()
        assert isinstance(ctl.step.stepper, CompiledStepper) == compiled


@pytest.mark.parametrize(("priority", "busy_poll"), [(0, True), (10, False)])  # no FIFO spinner
def test_the_loop_thread_freezes_the_gc_and_asks_for_fifo(priority, busy_poll):
    over = {"mqtt.enabled": (False, "test"), "loop.priority": (priority, "test"),
            "algorithm.target": ([0.5], "test"), "loop.rate": (200.0, "test"),
            "loop.busy_poll": (busy_poll, "test")}
    over.update({k: (v, "test") for k, v in PATIENT_SETTINGS.items()})  # not about them
    with Controller(load_config(None, over)) as ctl:
        assert ctl.start().accepted, ctl.reason
        assert wait_until(lambda: any(e.data.get("code") == "realtime"
                                      for e in ctl.history()), 30)
        info = next(e.data for e in ctl.history() if e.data.get("code") == "realtime")
        assert info["gc_frozen"] > 1000  # the start-up's objects
        assert info["busy_poll"] is busy_poll  # a poise-protocol port: supported
        if priority == 0:
            assert info["scheduler"] == "other" and "refused" not in info
        elif os.geteuid() == 0:  # root may: granted
            assert (info["scheduler"], info["priority"]) == ("fifo", priority)
        else:  # granted by a limit, or refused with the reason
            assert info["scheduler"] == "fifo" or "SCHED_FIFO" in info["refused"]
        assert wait_until(lambda: (ctl.summary()["task_error"] or 1) < TOL, PATIENCE, 0.1)
