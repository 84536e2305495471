"""Start-up (issue 12: launch → running): what overlaps what, and that nothing is lost by it.

The command line builds only the parser of the command it runs; the real-time process
launches its virtual device before its own imports and checks the gains itself; the embedded
broker is launched before the controller and handed to the telemetry. Each is checked by
what it leaves observable (modules loaded, processes, their command lines and schedulers,
errors), never by wall time; ``poise bench startup`` measures the time.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import socket
import subprocess
import sys
import textwrap
import threading

import pytest

from conftest import wait_until
from poise.api.state import State
from poise.benchmarks import startup
from poise.cli import build_parser, command_modules, owner
from poise.controller.config import ConfigError, build_model, load_config
from poise.controller.realtime import RealtimeController, RealtimeError
from poise.controller.realtime.process import ChildProcess
from poise.controller.ring import CycleRing
from poise.controller.service import Controller
from poise.devices.factory import early_device_spec
from poise.devices.simdevice import launch_early
from poise.examples import EXAMPLES_DIR
from poise.firmware_bridge.lifetime import fifo
from poise.telemetry.broker import EmbeddedBroker, embedded_broker_needed, free_port
from poise.telemetry.service import attach

SLOW = 120.0


def config(**keys: object):
    over = {"device.port": ("sim", "test"), "mqtt.enabled": (False, "test"),
            "loop.rate": (200.0, "test"), "algorithm.target": ([0.5], "test"),
            "device.watchdog_ms": (400, "test")}
    for k, v in keys.items():
        over[k.replace("__", ".")] = (v, "test")
    return load_config(EXAMPLES_DIR / "double_pendulum.toml", over)


def loaded_after(code: str) -> set[str]:
    """The modules a fresh interpreter has loaded after running ``code``."""
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code) +
                          "\nimport sys; print(' '.join(sorted(sys.modules)))"],
                         capture_output=True, text=True, timeout=SLOW, check=True)
    return set(out.stdout.split())


def fifo_granted() -> bool:
    """Whether this process may use SCHED_FIFO (tried in a thread of its own, which ends)."""
    got: list[dict] = []
    t = threading.Thread(target=lambda: got.append(fifo(1)))
    t.start()
    t.join()
    return got[0].get("scheduler") == "fifo"


def cmdline(pid: int) -> list[str]:
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        return fh.read().decode().split("\0")


# ------------------------------------------------------------------ the command line

def test_owner_follows_the_naming_rule_and_knows_when_it_cannot_tell():
    assert owner(["run", "--duration", "1"]) == "run_cmd"
    assert owner(["device", "sim", "--model", "x"]) == "device_cmd"
    assert owner(["bench", "held-ik", "--solves", "3"]) == "bench_held_ik_cmd"
    assert owner(["log", "show", "x.mcap"]) == "log_cmd"
    # a group without its sub-command, an option first, or an unknown command: no owner
    for argv in (["bench"], ["bench", "--help"], ["--help"], [], ["nosuch"]):
        assert owner(argv) is None, argv
    assert set(command_modules()) >= {"run_cmd", "device_cmd", "bench_startup_cmd"}


def test_a_command_line_builds_only_the_parser_of_its_command():
    mods = loaded_after("""
        from poise.cli import build_parser
        p = build_parser(["run", "--duration", "1"])
        assert p.parse_args(["run", "--duration", "1"]).duration == 1.0
    """)
    cmds = {m for m in mods if m.startswith("poise.cli.") and m.endswith("_cmd")}
    assert cmds == {"poise.cli.run_cmd"}, cmds
    # an unknown sub-command gets the whole parser (and its error lists every choice)
    p = build_parser(["device", "nosuch"])
    with pytest.raises(SystemExit):
        p.parse_args(["device", "nosuch"])
    full = build_parser()
    sub = next(a for a in full._actions if a.__class__.__name__ == "_SubParsersAction")
    assert {"run", "solve", "bench", "device", "log"} <= set(sub.choices)


def test_the_whole_parser_loads_neither_the_controller_nor_numba_nor_scipy():
    mods = loaded_after("from poise.cli import build_parser; build_parser()")
    assert {"numba", "scipy", "poise.controller.service", "poise.sim"}.isdisjoint(mods), \
        sorted(m for m in mods if m.split(".")[0] in ("numba", "scipy") or
               m in ("poise.controller.service", "poise.sim"))
    # importing one submodule of the controller package no longer loads the loop
    mods = loaded_after("import poise.controller.config")
    assert "poise.controller.service" not in mods and "numba" not in mods
    from poise import controller
    assert controller.Controller is Controller and controller.State is State


# ------------------------------------------------------------------ the virtual device

def test_a_launched_virtual_device_is_the_one_the_first_connect_opens_below_the_loop():
    cfg = config(loop__priority=20, loop__process="shared")
    launched = launch_early(early_device_spec(cfg.device, model=cfg.model.name,
                                              rate=cfg.loop.rate, priority=cfg.loop.priority))
    assert launched is not None
    ctl = Controller(cfg, launched=launched)
    try:
        assert ctl.connect().accepted
        assert ctl.sim is launched and launched.running
        pid = launched.proc.pid
        line = cmdline(pid)
        assert line[line.index("--fifo-priority") + 1] == "19"  # one below the loop
        if fifo_granted():  # it took priority 19 itself, once started
            assert os.sched_getscheduler(pid) == os.SCHED_FIFO
            assert os.sched_getparam(pid).sched_priority == 19
        else:  # refused: the normal scheduler
            assert os.sched_getscheduler(pid) == os.SCHED_OTHER
        assert ctl.start().accepted
        assert ctl.wait_for(State.RUNNING, timeout=SLOW)
    finally:
        ctl.close()
    assert not launched.running


def test_a_launched_virtual_device_that_is_never_connected_is_stopped_by_close():
    cfg = config(loop__process="shared")
    launched = launch_early(early_device_spec(cfg.device, model=cfg.model.name,
                                              rate=cfg.loop.rate, priority=0))
    assert launched is not None and launched.running
    assert "--fifo-priority" not in cmdline(launched.proc.pid)  # no real-time priority: none
    Controller(cfg, launched=launched).close()
    assert not launched.running
    # no virtual device for another port or protocol
    other = config(device__port="/dev/null")
    assert early_device_spec(other.device, model="x", rate=100, priority=20) is None


def test_the_real_time_process_launches_its_device_before_importing_numpy_or_its_config():
    # spawn imports the target's module before running it: the boot's imports are all that
    # comes before the launch (the configuration is unpickled after it)
    mods = loaded_after("import poise.controller.realtime.boot")
    assert not {m for m in mods if m.split(".")[0] in ("numpy", "scipy", "numba")}, \
        sorted(m for m in mods if m.split(".")[0] in ("numpy", "scipy", "numba"))
    assert {m for m in mods if m.startswith("poise.")} <= {
        "poise.api", "poise.api.lazy",  # the packages' lazy exports (standard library only)
        "poise.controller", "poise.controller.realtime", "poise.controller.realtime.boot",
        "poise.devices.simdevice"}, \
        sorted(m for m in mods if m.startswith("poise."))
    # nor does the simulator or the controller's stability bound load SciPy on import
    # (0.3 s of each process's start-up: loaded where a numpy reference path first needs it)
    mods = loaded_after("import poise.sim, poise.motion.stability, poise.ik.clik")
    assert not {m for m in mods if m.split(".")[0] == "scipy"}


def test_the_real_time_process_launches_its_virtual_device_early():
    rt = RealtimeController(config(loop__priority=20))
    try:
        assert rt.start().accepted
        pid = rt.device_pid()
        assert pid is not None
        # only a device launched before the child's controller was built has the flag (a
        # device started at connect inherits the child's priority instead)
        line = cmdline(pid)
        assert line[line.index("--fifo-priority") + 1] == "19"
        assert line[line.index("--parent-pid") + 1] == str(rt.pid)
    finally:
        rt.close()
    assert not [p for p in mp.active_children() if p.name == "poise-realtime"]


def test_a_gain_above_the_bound_is_refused_by_the_real_time_process_naming_the_flag():
    cfg = load_config(EXAMPLES_DIR / "soft_arm_stiff.toml",
                      {"algorithm.gamma": (40.0, "--gamma"), "device.port": ("sim", "t"),
                       "mqtt.enabled": (False, "t")})
    with pytest.raises(ConfigError, match=r"--gamma \(algorithm.gamma\) = 40.0: must be "
                                          r"below [0-9.]+"):
        RealtimeController(cfg, check_gains=True, origins={"algorithm.gamma": (40.0,
                                                                               "--gamma")})
    assert not [p for p in mp.active_children() if p.name == "poise-realtime"]
    # without the check the same configuration starts (the parent decides what to check)
    rt = RealtimeController(cfg)
    rt.close()


def test_a_real_time_process_that_builds_too_slowly_is_abandoned_and_leaves_nothing():
    # the timeout counts until the child has built its controller (its imports alone take
    # longer than 50 ms); after that its gain check may take as long as compiling does
    with pytest.raises(RealtimeError, match=r"did not build its controller in 0\.05 s"):
        RealtimeController(config(), startup_timeout=0.05, check_gains=True)
    assert not [p for p in mp.active_children() if p.name == "poise-realtime"]


@pytest.mark.parametrize("moment", ["launched", "device_ready"])
def test_a_real_time_process_stopped_while_starting_takes_its_device_and_folder_with_it(
        tmp_path, monkeypatch, moment):
    # the parent abandons a start-up with SIGTERM (a Ctrl-C while starting): whenever it
    # lands, the child stops its virtual device and exits by itself, and the device's
    # folder is gone by then (the default action ended the child at once, and the orphaned
    # device removed its folder only after its parent had exited)
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the child's tempfile (spawned: it reads it)
    cfg = config()
    m = build_model(cfg.model).model
    child = ChildProcess(cfg, CycleRing.create(m.n, m.m, m.task_dim, capacity=64), None)
    try:
        assert wait_until(lambda: list(tmp_path.glob("poise-sim-*")), SLOW, step=0.002), \
            "the child launched no virtual device"
        folders = list(tmp_path.glob("poise-sim-*"))
        if moment == "device_ready":
            assert wait_until(lambda: (folders[0] / "device").exists(), SLOW)
        child.proc.terminate()
        child.proc.join(SLOW)
        assert child.proc.exitcode == 0  # it ended itself, not the signal's default action
        assert not list(tmp_path.glob("poise-sim-*"))
    finally:
        child.kill()
        child.release()


# ------------------------------------------------------------------ the broker

def test_a_launched_broker_is_handed_to_the_telemetry_and_stopped_with_it():
    cfg = config(mqtt__enabled=True, loop__process="shared")
    assert embedded_broker_needed(cfg)
    assert not embedded_broker_needed(cfg, mqtt=False)
    assert not embedded_broker_needed(cfg, url="mqtt://127.0.0.1:1883")
    ctl = Controller(cfg)
    broker = EmbeddedBroker(free_port()).launch()
    try:
        telemetry = attach(ctl, broker=broker, out=None)
        try:
            assert telemetry.broker is broker and telemetry.url == broker.url
            socket.create_connection((broker.host, broker.port), timeout=5).close()
            assert telemetry.bridge is not None and telemetry.bridge.connected.wait(30)
        finally:
            telemetry.stop()
        assert broker.pid is None  # stopped with the telemetry
        # launched for a configuration that needs none: stopped, not used
        spare = EmbeddedBroker(free_port()).launch()
        proc = spare._proc
        telemetry = attach(ctl, mqtt=False, broker=spare, out=None)
        assert telemetry.broker is None and proc is not None and proc.poll() is not None
        telemetry.stop()
    finally:
        ctl.close()
        broker.stop()


# ------------------------------------------------------------------ the benchmark

def test_the_startup_benchmark_measures_each_phase_from_the_runs_own_log():
    result = startup.run(["--no-mqtt", "--set", "loop.rate=200"], runs=1)
    run = result["runs"][0]
    assert run["exit_code"] in (0, 1)  # reached or not in its one second: both ran
    phases = [run[name] for name in ("idle", "connect", "arm")]
    assert all(p > 0 for p in phases)
    assert abs(sum(phases) - run["total"]) <= 0.003  # three roundings of 1 ms
    assert run["total"] < run["process_s"]  # running came before the process ended
    assert result["stats"]["total"]["median"] == run["total"]
    assert result["goal_met"] == (run["total"] <= startup.GOAL_S)
    assert f"{run['total']:.3f}" in startup.table(result)
    # the run's first line (what starts) was read as it came, before the controller ran
    assert 0 < run["first_line"] < run["total"]
    assert result["first_line_goal_met"] == (run["first_line"] <= startup.FIRST_LINE_GOAL_S)
    assert f"{run['first_line']:.3f}" in startup.table(result)
    with pytest.raises(ValueError, match="--quiet"):
        startup.run(["--quiet"], runs=1)
