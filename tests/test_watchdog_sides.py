"""A device watchdog fault says which side went quiet: the host (it wrote nothing), or the way
between host and device (the host kept writing). End to end with the real-time process frozen
by SIGSTOP against the virtual device, and the diagnosis's own rules."""

from __future__ import annotations

import math
import os
import signal
import threading
import time
import uuid

from conftest import wait_until
from poise.api.bus import CommandResponse
from poise.api.state import State
from poise.controller.config import load_config
from poise.controller.realtime import RealtimeController
from poise.examples import EXAMPLES_DIR
from poise.firmware_bridge.faultinfo import HostWrites, quiet_side, watchdog_cause
from poise.firmware_bridge.lifetime import fifo
from poise.telemetry.client import Recorder, forget
from poise.telemetry.mqtt import MqttConfig
from poise.telemetry.stress import broker_url
from poise.telemetry.urgent import serve_in_process

SLOW = 120.0


def test_a_frozen_host_is_named_as_the_quiet_side_with_the_devices_silence():
    """SIGSTOP the real-time process for 0.6 s: the virtual device (its own process, still
    running) trips its 150 ms watchdog; once the host runs again its fault names the host."""
    over = {"device.port": ("sim", "t"), "mqtt.enabled": (False, "t"),
            "loop.rate": (200.0, "t"), "algorithm.target": ([0.5], "t"),
            "device.watchdog_ms": (150, "t"), "limits.sensor_hold": (0.1, "t"),
            "limits.sensor_fault": (5.0, "t")}
    rt = RealtimeController(load_config(EXAMPLES_DIR / "double_pendulum.toml", over))
    try:
        assert rt.start().accepted
        assert rt.wait_for(State.RUNNING, timeout=SLOW)
        # running is said before the loop's first cycle: on a busy machine the SIGSTOP could
        # come before the host's first setpoint ("the host never wrote one", also right)
        assert wait_until(lambda: rt.timing().get("cycles", 0) >= 20, timeout=SLOW)
        os.kill(rt.pid, signal.SIGSTOP)
        try:
            time.sleep(0.6)
        finally:
            os.kill(rt.pid, signal.SIGCONT)
        assert rt.wait_for(State.FAULT, timeout=SLOW), rt.state
        reason = rt.reason
        assert reason.startswith("device watchdog: "), reason
        assert "(limit 150 ms)" in reason and "the host went quiet" in reason, reason
        assert reason.count("watchdog") == 1, reason

        def host_faults() -> list:
            return [e for e in rt.history() if e.kind == "fault"
                    and e.data.get("source") == "host"]

        # the fault's event comes from the real-time process after its state: on a busy
        # machine (two test suites on 2 cores) it was not there yet when the state was
        assert wait_until(lambda: bool(host_faults()), timeout=SLOW), rt.history()
        faults = host_faults()
        assert faults[-1].data["quiet_side"] == "host", faults
        device = [e for e in rt.history() if e.kind == "fault" and e.data.get("source") == "device"]
        if device:  # the Fault frame (the status word may have told first): the silence it saw
            assert device[-1].data["text"] == "host silent"
            assert device[-1].data["value"] >= 0.150
    finally:
        rt.close()


def test_host_writes_keep_the_longest_recent_gap_not_only_the_open_one():
    writes = HostWrites(window=1.0)
    assert writes.silence(0.0) == math.inf                  # never wrote
    for k in range(10):
        writes.wrote(k * 0.001)
    assert math.isclose(writes.silence(0.0095), 0.001, rel_tol=1e-9)  # a 1 kHz host
    writes.wrote(0.509)                                     # a 500 ms stall, then writes again
    writes.wrote(0.510)
    assert math.isclose(writes.silence(0.511), 0.5, rel_tol=1e-9)
    for k in range(2000):                                   # 2 s of steady writing later
        writes.wrote(0.511 + k * 0.001)
    assert writes.silence(2.511) < 0.002                    # the stall has aged out


def test_the_side_is_the_host_only_when_it_paused_for_half_the_limit_or_more():
    assert quiet_side(0.050, 100) == "host"
    assert quiet_side(0.049, 100) == "link"
    assert quiet_side(math.inf, 100) == "host"
    cause, side = watchdog_cause(0.123, 0.004, 100)
    assert side == "link"
    assert cause == ("device watchdog: no setpoint reached the device for 123 ms (limit 100 ms);"
                     " the host was writing (its longest pause 4 ms): its setpoints were held up"
                     " between host and device (link or device side)")
    cause, side = watchdog_cause(None, math.inf, None)
    assert side == "host" and "in time (limit 100 ms)" in cause and "never wrote" in cause


def _schedulers(pid: int) -> list[tuple[int, int]]:
    """(policy, real-time priority) of each thread of process ``pid`` (``/proc/PID/task``)."""
    out = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            t = int(tid)
            out.append((os.sched_getscheduler(t), os.sched_getparam(t).sched_priority))
        except ProcessLookupError:  # a thread that ended meanwhile
            continue
    return out


def _realtime_threads(pid: int) -> list[tuple[int, int]]:
    return sorted(t for t in _schedulers(pid) if t[0] != os.SCHED_OTHER)


def _fifo_granted() -> bool:
    granted: list[bool] = []
    probe = threading.Thread(target=lambda: granted.append(fifo(20)["scheduler"] == "fifo"))
    probe.start()  # its own thread: the test process keeps its scheduler
    probe.join()
    return granted[0]


def test_only_the_loop_and_the_estop_threads_run_at_real_time_priority_the_device_one_below():
    """A process-wide SCHED_FIFO made the command server and the pump real-time too: a flood
    of commands, or the kernels loading at a start, held both CPUs of a 2-core machine above
    another controller's virtual device, whose watchdog fired (100-240 ms unserved). Running
    without MQTT: exactly two threads of the real-time process at ``loop.priority`` (the loop,
    the e-stop server), the rest and the main thread at the normal scheduler; the virtual
    device one priority below (its main thread and the threads it starts; the math library's
    idle pool, started at import, stays at the normal scheduler). With the MQTT e-stop
    listener served there (a real broker): two more, the listener and its ``$state``
    announcer, and an e-stop published on MQTT latches and is announced."""
    granted = _fifo_granted()
    over = {"device.port": ("sim", "t"), "mqtt.enabled": (False, "t"),
            "loop.rate": (200.0, "t"), "loop.priority": (20, "t")}
    rt = RealtimeController(load_config(EXAMPLES_DIR / "double_pendulum.toml", over))
    try:
        assert rt.start().accepted
        assert rt.wait_for(State.RUNNING, timeout=SLOW)
        assert wait_until(lambda: rt.timing().get("cycles", 0) >= 20, timeout=SLOW)
        threads = _schedulers(rt.pid)
        realtime = _realtime_threads(rt.pid)
        main_thread = (os.sched_getscheduler(rt.pid), os.sched_getparam(rt.pid).sched_priority)
        device_pid = rt.device_pid()
        assert device_pid is not None
        device = set(_schedulers(device_pid))
        device_main = (os.sched_getscheduler(device_pid),
                       os.sched_getparam(device_pid).sched_priority)
        with broker_url() as url:
            mqtt = MqttConfig.from_url(url, robot_id="test-" + uuid.uuid4().hex[:10])
            answers: list[CommandResponse] = []
            line = rt.serve_urgent(mqtt, 20, answers.append, starter=serve_in_process)
            assert line.connected.wait(SLOW)
            with_listener = _realtime_threads(rt.pid)
            try:
                with Recorder(mqtt) as rec:
                    rec.command("estop", id="e1")
                    assert rt.wait_for(State.ESTOP, timeout=SLOW)
                    assert wait_until(lambda: any(a.id == "e1" for a in answers), SLOW)
                    assert rec.wait_for(lambda m: m.name == "$state" and
                                        m.json().get("state") == "estop", SLOW)
            finally:
                forget(mqtt)
    finally:
        rt.close()
    assert main_thread == (os.SCHED_OTHER, 0)
    if granted:
        assert realtime == [(os.SCHED_FIFO, 20)] * 2, threads
        assert len(threads) >= 4, threads  # the command server, the pump: normal scheduler
        assert device_main == (os.SCHED_FIFO, 19)
        assert device - {(os.SCHED_OTHER, 0)} == {(os.SCHED_FIFO, 19)}, device
        # the listener, its announcer, and the idle worker its event loop connected in
        # (aiomqtt runs paho's blocking connect in asyncio's executor, a thread the
        # listener's thread starts)
        assert with_listener == [(os.SCHED_FIFO, 20)] * 5, with_listener
    else:  # no privilege: everything at the normal scheduler
        assert realtime == [] and with_listener == [], threads
        assert device == {(os.SCHED_OTHER, 0)}, device
