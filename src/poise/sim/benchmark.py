"""Real-time factor of the simulator per reference model (``poise bench sim``, ``bench/sim.py``).

For each model: a :class:`~poise.sim.SimPlant` at its internal rate (default 5 kHz) in position
mode, stepped the way the device endpoint steps it (``step(1/500)``, 10 internal steps each) for
``duration`` simulated seconds; real-time factor = simulated time / wall time (best of
``repeat``). Baseline in the same run: the cost of one bare ``model.G(q)`` call, and the cost of
one internal step expressed in those calls (a machine-independent ratio).
"""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from poise.models import load_model
from poise.sim.plant import make_plant
from poise.sim.simulator import DEFAULT_RATE

MODELS = ("double_pendulum", "tendon_3link", "soft_arm_stiff", "soft_arm_soft", "dancer",
          "planar_2link")
#: The endpoint's frame period in the benchmark [s].
FRAME = 1.0 / 500.0


def _g_call_us(name: str, number: int = 2000, repeat: int = 5) -> float:
    model = load_model(name)
    q = np.full(model.n, 0.1)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            model.G(q)
        best = min(best, time.perf_counter() - t0)
    return best / number * 1e6


def _rtf(name: str, rate: float, integrator: str, duration: float, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        plant = make_plant(name, rate=rate, integrator=integrator, noise=False)
        model = plant.physical
        qa = 0.3 * np.clip(np.nan_to_num(model.qa_max, posinf=1.0), 0.0, 1.0)
        plant.set_actuator_command(qa.tolist(), None)
        plant.set_mode("position")
        frames = round(duration / FRAME)
        t0 = time.perf_counter()
        for _ in range(frames):
            plant.step(FRAME)
            plant.read_sensors()
        best = min(best, time.perf_counter() - t0)
        if not np.all(np.isfinite(plant.q)):
            raise RuntimeError(f"{name}: the simulation diverged")
    return duration / best


def run(models: tuple[str, ...] = MODELS, *, rate: float = DEFAULT_RATE,
        integrators: tuple[str, ...] = ("euler", "rk4"), duration: float = 1.0,
        repeat: int = 3, progress: Callable[[int], Any] | None = None) -> dict[str, Any]:
    """Measure; returns a JSON-ready dictionary (see the module docstring).

    ``progress(1)`` after each (model, integrator) case: ``len(models) · len(integrators)``.
    """
    rows = []
    for name in models:
        g_us = _g_call_us(name)
        row: dict[str, Any] = {"model": name, "rate_hz": rate, "G_call_us": g_us}
        for integ in integrators:
            rtf = _rtf(name, rate, integ, duration, repeat)
            step_us = 1e6 / (rtf * rate)
            row[integ] = {"rtf": rtf, "step_us": step_us, "step_in_G_calls": step_us / g_us}
            if progress is not None:
                progress(1)
        rows.append(row)
    return {"benchmark": "sim", "duration_s": duration, "repeat": repeat, "frame_s": FRAME,
            "python": platform.python_version(), "numpy": np.__version__,
            "machine": platform.machine(), "results": rows}


def table(result: dict[str, Any]) -> str:
    """The results as a text table."""
    integ = [k for k in ("euler", "rk4") if k in result["results"][0]]
    head = f"{'model':16} {'rate':>6} {'G() µs':>7}"
    for k in integ:
        head += f" | {k + ' RTF':>9} {'µs/step':>8} {'×G':>5}"
    lines = [head, "-" * len(head)]
    for r in result["results"]:
        line = f"{r['model']:16} {r['rate_hz']:6.0f} {r['G_call_us']:7.1f}"
        for k in integ:
            line += f" | {r[k]['rtf']:9.2f} {r[k]['step_us']:8.1f} {r[k]['step_in_G_calls']:5.1f}"
        lines.append(line)
    lines.append(f"RTF = simulated / wall time, stepped as the endpoint does (step({FRAME:g} s)), "
                 f"{result['duration_s']:g} s simulated, best of {result['repeat']}")
    return "\n".join(lines)


def dumps(result: dict[str, Any]) -> str:
    return json.dumps(result, indent=1) + "\n"


__all__ = ["MODELS", "dumps", "run", "table"]
