"""A first start (issue 32): ``poise run`` says what starts before anything compiles, shows the
compile's progress, never compiles beside an armed device, and ``poise warmup`` compiles
ahead of time so that a later process loads every kernel from Numba's cache.

Checked by state (the order of the lines, what the cache held, whether a device was open),
never by wall time; ``poise bench startup`` measures the times.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from poise.api.state import State
from poise.cli.compiling import CompileView
from poise.controller.config import load_config
from poise.controller.service import Controller
from poise.devices.factory import early_device_spec
from poise.devices.simdevice import launch_early
from poise.examples import EXAMPLES_DIR
from poise.kernels.warmup import KernelProgress

#: A deadline for what a slow, busy machine does in seconds (a first compile: minutes).
SLOW = 120.0
COMPILE = 1200.0


def fresh_cache_env(tmp_path) -> dict[str, str]:
    """The environment of a process that finds Numba's cache empty (a fresh install)."""
    return {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba-cache")}


# ------------------------------------------------------------------ what poise run says

@pytest.mark.timeout(COMPILE + SLOW)  # its own deadlines, not the suite's 300 s
def test_poise_run_says_what_starts_before_its_first_kernel_compiles(tmp_path):
    """With an empty cache the first line (model, algorithm, device) comes first, then the
    notice that a first start compiles (how long, and ``poise warmup``), then the first step
    of the compile; a Ctrl-C during the compile stops the start-up cleanly."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "poise", "run", "--duration", "5", "--no-mqtt", "--no-log"],
        env=fresh_cache_env(tmp_path), cwd=tmp_path, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    at = 0  # the lines read when the compile's first step was reported
    stuck = threading.Timer(COMPILE, proc.kill)  # a hung process ends the test, not the run
    stuck.start()
    try:
        for line in proc.stderr:  # type: ignore[union-attr]  # until it exits
            lines.append(line.rstrip("\n"))
            if line.startswith("poise run: compiling 1/") and not at:
                proc.send_signal(signal.SIGINT)  # the compile has only begun
                at = len(lines)
        proc.wait(SLOW)
    finally:
        stuck.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert at, lines
    lines, rest = lines[:at], "\n".join(lines[at:])
    assert lines[0].startswith("poise run: double_pendulum, alg1, mode fb, 500 Hz, device "
                               "sim, 5 s"), lines
    assert lines[1].startswith("poise run: compiling the kernels for double_pendulum (first "
                               "start only, about 1–2 min on a 2-core machine); 'poise "
                               "warmup' compiles them ahead of time"), lines
    assert len(lines) == 3 and lines[2].startswith("poise run: compiling 1/"), lines
    assert "SIGINT during start-up: stopped" in rest and "compiled in" not in rest, rest
    assert proc.returncode == 1


def progress_of(model: str, names: list[str], cached: bool) -> list[KernelProgress]:
    """The progress reports of a warm-up of ``names`` (each as it starts, then the end)."""
    return [KernelProgress(model, done, len(names), name, cached, 2.0 * done, "/cache")
            for done, name in enumerate([*names, ""])]


def test_the_compile_view_prints_a_first_starts_steps_and_nothing_for_a_cached_start():
    piped = io.StringIO()  # not a terminal: lines, no bar
    view = CompileView("poise run", stream=piped)
    for p in progress_of("double_pendulum", ["fk", "cycle alg1"], cached=False):
        view(p)
    view.close()
    assert piped.getvalue().splitlines() == [
        "poise run: compiling the kernels for double_pendulum (first start only, about 1–2 "
        "min on a 2-core machine); 'poise warmup' compiles them ahead of time",
        "poise run: compiling 1/2: fk (0 s so far)",
        "poise run: compiling 2/2: cycle alg1 (2 s so far)",
        "poise run: kernels for double_pendulum compiled in 4 s and cached in /cache: later "
        "starts load them in about a second"]
    for view in (CompileView("poise run", stream=(out := io.StringIO())),
                 CompileView("poise run", quiet=True, stream=(quiet := io.StringIO()))):
        for p in progress_of("double_pendulum", ["fk"], cached=True):
            view(p)
    for p in progress_of("double_pendulum", ["fk"], cached=False):
        CompileView("poise run", quiet=True, stream=quiet)(p)
    assert out.getvalue() == "" and quiet.getvalue() == ""
    # poise warmup: one line for a model that came from the cache, no poise warmup hint
    view = CompileView("poise warmup", every_model=True, hint=False, stream=(w := io.StringIO()))
    for p in progress_of("dancer", ["fk"], cached=True):
        view(p)
    assert w.getvalue() == "poise warmup: kernels for dancer loaded from the cache in 2.0 s " \
                           "(/cache)\n"


# ------------------------------------------------------------------ never beside an armed device

def test_a_slow_kernel_warm_up_runs_before_the_device_is_opened_and_trips_no_watchdog():
    """The kernels are prepared before the controller opens (and so can arm) its device: a
    warm-up held up for several watchdog periods per step, while the virtual device launched
    early is already streaming, leaves no device open; the run then starts, runs and stops
    without a watchdog trip or any fault. The watchdog is 200 ms, not the default 100 ms:
    with two suites at once on 2 cores a 50 ms one tripped while running (a host stall, not
    the warm-up: that is checked by the device never being open during it)."""
    cfg = load_config(EXAMPLES_DIR / "double_pendulum.toml",
                      {"loop.process": ("shared", "test"), "mqtt.enabled": (False, "test"),
                       "loop.rate": (200.0, "test"), "device.watchdog_ms": (200, "test")})
    launched = launch_early(early_device_spec(cfg.device, model=cfg.model.name,
                                              rate=cfg.loop.rate, priority=0))
    assert launched is not None
    ctl = Controller(cfg, launched=launched)
    events = ctl.events()
    during: list[tuple[str, object, State]] = []

    def slow(p: KernelProgress) -> None:  # a first start's compile, each step 3 watchdogs
        during.append((p.name, ctl.device, ctl.state))
        time.sleep(3 * cfg.device.watchdog_ms / 1e3)

    try:
        deadline = time.monotonic() + SLOW  # the device streams before the host prepares
        while not os.path.exists(launched.path) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert os.path.exists(launched.path)
        ctl.prepare_kernels(progress=slow)
        assert len(during) > 3
        assert all(device is None and state == State.IDLE for _n, device, state in during), \
            during
        assert ctl.start().accepted, ctl.reason
        assert ctl.wait_for(State.RUNNING, timeout=SLOW)
        deadline = time.monotonic() + SLOW
        while ctl.timing()["cycles"] < 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ctl.timing()["cycles"] >= 200
        assert ctl.stop().accepted
        assert ctl.state == State.READY, ctl.reason
    finally:
        ctl.close()
    seen = events.drain()
    # a sensor frame late on a loaded machine makes the loop hold for a moment (a fault
    # event with action "hold", seen once with two test suites beside it): not the warm-up's
    # doing; a watchdog trip or a latched fault would be
    faults = [e.data for e in seen if e.kind == "fault"]
    assert not [f for f in faults if f.get("action") != "hold" or "watchdog" in
                str(f.get("code", ""))], faults
    assert not [e for e in seen if e.kind == "state" and e.data["to"] == "fault"]


# ------------------------------------------------------------------ poise warmup

LOAD_AS_A_RUN = textwrap.dedent("""
    import json, sys
    from poise.cli.warmup_cmd import model_config
    from poise.controller.service import Controller
    from poise.kernels import cache
    from poise.sim import make_plant

    ctl = Controller(model_config("double_pendulum"))
    cached = ctl.kernels_cached()
    ctl.prepare_kernels()              # what the run prepares (the same code)
    make_plant("double_pendulum")      # the virtual device's and the calibration's plant
    ctl.close()
    every = cache.dispatchers([m for name, m in list(sys.modules.items())
                               if name.startswith("poise.")])
    print(json.dumps({
        "cached": cached,
        "hits": sum(sum(f.stats.cache_hits.values()) for f in every),
        "compiled": sorted(f"{f.__module__}.{f.__name__}" for f in every
                           if sum(f.stats.cache_misses.values())),
        "loaded": sorted(f.__name__ for f in every if f.signatures)}))
""")


@pytest.mark.timeout(COMPILE + 3 * SLOW)  # its own deadlines (a first compile under load
# took over 300 s, the suite's default, with a suite and two simulations beside it)
def test_warmup_fills_the_cache_so_that_a_new_process_loads_every_kernel_without_compiling(
        tmp_path):
    env = fresh_cache_env(tmp_path)
    warm = subprocess.run([sys.executable, "-m", "poise", "warmup", "--model",
                           "double_pendulum", "--json"], env=env, capture_output=True,
                          text=True, timeout=COMPILE, check=False)
    assert warm.returncode == 0, warm.stderr[-2000:]
    report = json.loads(warm.stdout)
    (model,) = report["models"]
    assert model["model"] == "double_pendulum" and model["cached"] is False
    assert "poise.kernels.cycle.cycle" in model["compiled"], model
    assert {"timing percentiles", "cycle alg1", "wire cycle", "algorithm 2 attempt",
            "simulated plant"} <= set(model["kernels"])
    assert report["cache_dir"].startswith(env["NUMBA_CACHE_DIR"])
    assert "compiling the kernels for double_pendulum" in warm.stderr  # progress on stderr
    # a new process, as a run: every kernel from the cache, none compiled
    out = subprocess.run([sys.executable, "-c", LOAD_AS_A_RUN], env=env, capture_output=True,
                         text=True, timeout=SLOW, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    loaded = json.loads(out.stdout)
    assert loaded["cached"] is True and loaded["compiled"] == [], loaded
    assert loaded["hits"] > 0 and {"cycle", "wire_cycle", "ring_percentiles", "advance",
                                   "alg1_attempt"} <= set(loaded["loaded"]), loaded
    # warmup again: everything already there, nothing compiled, said in one line
    again = subprocess.run([sys.executable, "-m", "poise", "warmup", "--model",
                            "double_pendulum", "--json"], env=env, capture_output=True,
                           text=True, timeout=SLOW, check=False)
    assert again.returncode == 0, again.stderr[-2000:]
    (model,) = json.loads(again.stdout)["models"]
    assert model["cached"] is True and model["compiled"] == [], model
    assert again.stderr.startswith("poise warmup: kernels for double_pendulum loaded from the "
                                   "cache in "), again.stderr


def test_warmup_refuses_a_model_poise_run_does_not_drive_and_an_unknown_one():
    for name, why in (("panda", "poise run does not drive this model"), ("nosuch", "unknown")):
        out = subprocess.run([sys.executable, "-m", "poise", "warmup", "--model", name],
                             capture_output=True, text=True, timeout=SLOW, check=False)
        assert out.returncode == 2 and why in out.stderr and "Traceback" not in out.stderr, \
            out.stderr


def test_warmup_by_default_takes_every_built_in_model_poise_run_drives():
    from poise.cli.warmup_cmd import runnable_models

    names = runnable_models()
    assert {"double_pendulum", "dancer", "soft_arm_stiff", "tendon_3link"} <= set(names)
    assert not {"panda", "cc3d_2"} & set(names)
