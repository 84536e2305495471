"""Real-time factor of the simulator per reference model, compiled and numpy in the same run
(``poise bench sim``, ``bench/sim.py``).

For each model and integrator: a :class:`~poise.sim.SimPlant` at its internal rate (default
5 kHz) in position mode, stepped and read the way the device endpoint does it
(``step(1/500)``, 10 internal steps, then ``read_sensors()``) for ``duration`` simulated seconds;
real-time factor = simulated time / wall time (best of ``repeat``; also per CPU second of
this thread, which a busy machine disturbs less). Both paths run in the same process on the
same commands, interleaved: the compiled plant (the default, :mod:`poise.sim.compiled`) and the
numpy reference (``compiled=False``); ``ratio`` = compiled RTF / numpy RTF (``ratio_cpu`` per CPU
second). ``startup_s`` is the
making of the compiled plant: compiling its kernels, or loading them from Numba's cache.
Goal (issue 12): ``soft_arm`` ≥ 50× real time at 5 kHz with Euler.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable
from typing import Any

import numba
import numpy as np

from poise.sim.plant import SimPlant, make_plant
from poise.sim.simulator import DEFAULT_RATE

MODELS = ("double_pendulum", "tendon_3link", "soft_arm_stiff", "soft_arm_soft", "dancer",
          "planar_2link")
#: The endpoint's frame period in the benchmark [s].
FRAME = 1.0 / 500.0
#: The goal of issue 12: real-time factor of the soft arm at 5 kHz, Euler.
GOAL_RTF = 50.0
PATHS = ("compiled", "numpy")


def _drive(plant: SimPlant) -> None:
    """Position mode toward 30 % of the actuators' upper range (from rest)."""
    qa_max = plant.physical.qa_max
    plant.set_actuator_command((0.3 * np.clip(np.nan_to_num(qa_max, posinf=1.0), 0.0, 1.0))
                               .tolist(), None)
    plant.set_mode("position")


def _frames_s(name: str, rate: float, integrator: str, compiled: bool, frames: int
              ) -> tuple[float, float]:
    """Wall and CPU seconds of ``frames`` endpoint frames on a fresh plant."""
    plant = make_plant(name, rate=rate, integrator=integrator, noise=False, compiled=compiled)
    _drive(plant)
    step, read = plant.step, plant.read_sensors
    c0, t0 = time.thread_time(), time.perf_counter()
    for _ in range(frames):
        step(FRAME)
        read()
    wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
    if not plant.sim.finite:
        raise RuntimeError(f"{name} ({integrator}): the simulation diverged")
    return wall, cpu


def _case(name: str, rate: float, integrator: str, duration: float, repeat: int
          ) -> dict[str, Any]:
    """Both paths, interleaved (compiled, numpy, compiled, …) so that they share the
    machine's load; the best wall and CPU time of each over ``repeat``."""
    frames = round(duration / FRAME)
    best = {path: [float("inf"), float("inf")] for path in PATHS}
    for _ in range(repeat):
        for path in PATHS:
            wall, cpu = _frames_s(name, rate, integrator, path == "compiled", frames)
            best[path] = [min(best[path][0], wall), min(best[path][1], cpu)]
    simulated = frames * FRAME
    case: dict[str, Any] = {
        path: {"rtf": simulated / wall, "rtf_cpu": simulated / max(cpu, 1e-9),
               "step_us": wall / (simulated * rate) * 1e6}
        for path, (wall, cpu) in best.items()}
    case["ratio"] = case["compiled"]["rtf"] / case["numpy"]["rtf"]
    case["ratio_cpu"] = case["compiled"]["rtf_cpu"] / case["numpy"]["rtf_cpu"]
    return case


def _startup_s(name: str, rate: float) -> float:
    """Seconds to make the compiled plant (kernels compiled now, or loaded from the cache)."""
    t0 = time.perf_counter()
    make_plant(name, rate=rate, noise=False)
    return time.perf_counter() - t0


def run(models: tuple[str, ...] = MODELS, *, rate: float = DEFAULT_RATE,
        integrators: tuple[str, ...] = ("euler", "rk4"), duration: float = 1.0,
        repeat: int = 3, progress: Callable[[int], Any] | None = None) -> dict[str, Any]:
    """Measure; returns a JSON-ready dictionary (see the module docstring).

    ``progress(1)`` after each (model, integrator) case: ``len(models) · len(integrators)``.

    Raises:
        ValueError: an unknown model, a rate below the simulator's minimum, or a duration
            shorter than one frame.
    """
    if round(duration / FRAME) < 1:
        raise ValueError(f"duration = {duration:g} s: must be at least one frame ({FRAME:g} s)")
    load_before = os.getloadavg()
    rows = []
    for name in models:
        row: dict[str, Any] = {"model": name, "rate_hz": rate,
                               "startup_s": _startup_s(name, rate)}
        for integ in integrators:
            row[integ] = _case(name, rate, integ, duration, repeat)
            if progress is not None:
                progress(1)
        rows.append(row)
    return {"benchmark": "sim", "duration_s": duration, "repeat": repeat, "frame_s": FRAME,
            "goal": {"model": "soft_arm", "integrator": "euler", "rate_hz": DEFAULT_RATE,
                     "rtf": GOAL_RTF},
            "loadavg_before": list(load_before), "loadavg_after": list(os.getloadavg()),
            "python": platform.python_version(), "numpy": np.__version__,
            "numba": numba.__version__, "machine": platform.machine(), "results": rows}


def table(result: dict[str, Any]) -> str:
    """The results as a text table."""
    integ = [k for k in ("euler", "rk4") if k in result["results"][0]]
    head = f"{'model':16} {'start s':>7}"
    for k in integ:
        head += f" | {k + ' RTF':>9} {'cpu':>6} {'µs/step':>7} {'numpy':>6} {'ratio':>5}"
    lines = [head, "-" * len(head)]
    for r in result["results"]:
        line = f"{r['model']:16} {r['startup_s']:7.2f}"
        for k in integ:
            c, ref = r[k]["compiled"], r[k]["numpy"]
            line += (f" | {c['rtf']:9.1f} {c['rtf_cpu']:6.1f} {c['step_us']:7.2f} "
                     f"{ref['rtf']:6.2f} {r[k]['ratio_cpu']:5.1f}")
        lines.append(line)
    load = result["loadavg_before"]
    goal = result["goal"]
    rate = result["results"][0]["rate_hz"]
    lines.append(
        f"RTF = simulated / wall time of the compiled plant at {rate:g} Hz, stepped as the "
        f"endpoint does (step({FRAME:g} s) + read_sensors()), {result['duration_s']:g} s "
        f"simulated, best of {result['repeat']}; cpu = per CPU second of this thread; "
        "numpy = the reference's RTF; ratio = compiled / numpy per CPU second; start = compile "
        f"or cache load. Load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}. Goal: "
        f"{goal['model']} ≥ {goal['rtf']:g}× ({goal['integrator']}, {goal['rate_hz']:g} Hz).")
    return "\n".join(lines)


def dumps(result: dict[str, Any]) -> str:
    return json.dumps(result, indent=1) + "\n"


__all__ = ["FRAME", "GOAL_RTF", "MODELS", "dumps", "run", "table"]
