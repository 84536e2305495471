"""Shared fixtures."""

from __future__ import annotations

import itertools
import pathlib
import time
from collections.abc import Sequence

import pytest

from poise.devices.simdevice import SimDevice


def pytest_sessionstart(session: pytest.Session) -> None:
    """Compile (or load from Numba's cache) the kernels of both families once per process,
    before any test and outside every test's timeout: the service and the simulator compile
    them at start-up, and on a fresh clone that takes a minute, which subprocess tests must
    not spend inside their own timeouts. pytest-xdist's controller runs this hook before it
    spawns its workers, so it compiles and each worker loads them in seconds. Compiled by
    four workers at once in the first test's setup instead, a fresh clone on a busy 2-core
    machine took longer than the 300 s timeout, and a compile cut off by it left Numba
    unable to cache the kernel (``RuntimeError: no compiled object yet``): every test of
    every worker errored (2026-12-05)."""
    from poise.kernels import pack, warm_up
    from poise.models import load_model

    for name in ("double_pendulum", "soft_arm_stiff"):
        warm_up(pack(load_model(name)))


@pytest.fixture
def sim_device():
    """Start ``poise device sim`` subprocesses: ``sim_device(model, *flags, rate=500,
    params=None)`` returns a started :class:`~poise.devices.simdevice.SimDevice` (its
    ``path`` is a symlink to the current pty, stable across ``--disconnect-after``); all are
    stopped at the end of the test."""
    devices: list[SimDevice] = []

    def start(model: str, *flags: str, rate: float = 500, params: str | None = None
              ) -> SimDevice:
        device = SimDevice(model, rate=rate, params=params, extra=flags)
        devices.append(device)
        device.start()
        return device

    yield start
    for device in devices:
        device.stop()


@pytest.fixture(scope="session")
def dancer_crossing():
    """The dancer's crossing of ``poise bench control`` (target 14 after 13): ``(loop,
    q_start, plan)``, a :class:`~poise.controller.simulate.SimulatedLoop` of the dancer
    (ff, Algorithm 1), the configuration held at target 13 and the plan of target 14 from
    there (the stance leg swings from 0.81 to −0.79 rad). Shared by the session: tests that
    step a controller take their own (``crossing_step``)."""
    from poise.benchmarks.control import config_for, reachable_targets
    from poise.benchmarks.control_protocol import SEED
    from poise.controller.simulate import SimulatedLoop

    loop = SimulatedLoop(config_for("dancer", "ff", "alg1"), seed=SEED)
    targets = reachable_targets(loop.model, loop.limits.qa_min, loop.limits.qa_max)
    tol = loop.config.algorithm.tolerance
    q_start = loop.step.make_plan(targets[13], loop.measured(), tol).q_goal
    assert q_start is not None
    return loop, q_start, loop.step.make_plan(targets[14], q_start, tol, loop.params)


@pytest.fixture
def crossing_step(dancer_crossing):
    """A new control step of ``dancer_crossing``'s loop (same model, limits, period, stepper
    and shaper), reset at the crossing's start."""
    from poise.motion.step import ControlStep

    loop, q_start, _ = dancer_crossing
    step = ControlStep(loop.model, loop.limits, loop.period,
                       effort_feedforward=loop.config.loop.effort_feedforward,
                       stepper_factory=loop.step.stepper_factory, delay=0,
                       shaper=loop.config.loop.shaper)
    step.reset(q_start, loop.params.algorithm)
    return step


# ------------------------------------------------------------------ helpers shared by tests
# (``from conftest import wait_until``; the tests folder is on the path, as for test_mqtt)

#: Default patience of :func:`wait_until` [s]: a busy machine is 4-6 times slower.
DEADLINE_S = 120.0


def plant_with_springs(robot: str, factors: float | Sequence[float], folder: pathlib.Path
                       ) -> pathlib.Path:
    """A plant file of the built-in ``robot`` with its joint springs scaled: every one by
    ``factors`` (a number), or the first ones by ``factors`` (a sequence; the rest as they
    are), written into ``folder``."""
    from poise.models.registry import builtin_path
    from poise.sim.named import _scaled_lines

    if isinstance(factors, int | float):
        scales = itertools.repeat(float(factors))
    else:
        scales = itertools.chain(factors, itertools.repeat(1.0))
    text, count = _scaled_lines(builtin_path(robot).read_text(), "stiffness",
                                iter(lambda: next(scales), None))
    assert count > 0, f"{robot} has no joint springs"
    path = folder / f"{robot}_springs.toml"
    path.write_text(text)
    return path


def wait_until(pred, timeout: float = DEADLINE_S, step: float = 0.02) -> bool:
    """Poll ``pred`` every ``step`` seconds until it holds or ``timeout`` seconds passed;
    whether it holds (checked once more at the end)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(step)
    return bool(pred())


def wait_for(what: str, predicate, timeout: float) -> None:
    """Poll ``predicate`` until it holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


@pytest.fixture
def dxl_sim():
    """A virtual Dynamixel bus (tendon_3link, 1 Mbaud) in this process (needs the
    dynamixel_sdk, like the tests that use it)."""
    from poise.devices.dynamixel_sim import start_dynamixel_sim

    sim = start_dynamixel_sim("tendon_3link", 1000.0)
    yield sim
    sim.stop()


#: ``poise run`` arguments for a device watchdog and a sensor timeout in runs that are not
#: about them (tests/test_watchdog_sides.py is): on the 2-core CI machine, 4 test workers and
#: a cold kernel cache, the host of a ``poise run`` went quiet for 559 ms and the default
#: 100 ms watchdog faulted it before the test's signal; in another run the virtual device
#: was starved for 0.503 s and the default 0.5 s ``limits.sensor_fault`` latched a fault.
PATIENT_WATCHDOG = ("--set", "device.watchdog_ms=2000", "--set", "limits.sensor_fault=5")
#: The same as run-configuration settings, for the loop benchmark's runs in tests (its own
#: device and controller process: with two test suites at once on 2 cores, the stream's run
#: of tests/test_streaming.py ended in a fault; the bench itself keeps the defaults).
PATIENT_SETTINGS = {"device.watchdog_ms": 2000, "limits.sensor_fault": 5}
