"""Benchmark: compiled kernels (poise.kernels) against the numpy reference, same run.

Usage::

    poise bench kernels [--json [PATH]] [--no-compile] [--min-time S] [--quiet]
    python bench/kernels.py ...            # the same, JSON to bench/results/kernels.json

Timed per call, each next to its numpy reference (ratio = numpy µs / compiled µs):

* ``alg1_cycle``: the IK of one control cycle of Algorithm 1 as the controller runs it,
  ``qa = stepper.propose(p, None, dt)`` then ``stepper.commit(qa)`` (held Jacobian, DLS
  update, warm-started statics re-solve; the safety layer between the two is not timed), on
  ``double_pendulum`` and ``soft_arm_stiff``;
* ``alg2_cycle`` on ``soft_arm_stiff`` (projector rates, bounded Euler step, blocks at the new
  configuration), ``plain_cycle`` on both;
* ``G``: one ``G(q)`` on ``soft_arm_stiff``; ``fk`` on ``double_pendulum``; ``acceleration``:
  the simulator's right-hand side ``M⁻¹ (Aᵀ τ − C q̇ − D q̇ − G)``.

The cycles track a target that jumps round a small circle every 250 cycles (1 kHz, dt = 1 ms,
the default gains), so every cycle moves the arm and re-solves its statics, as in a run.

Compile time (unless ``--no-compile``): two fresh processes with ``NUMBA_CACHE_DIR`` set to a new
temporary directory; the first compiles every kernel for both models (a cold cache), the
second loads them from that cache (a second start).

Goals (issue 12): Algorithm-1 cycle ≤ 15 µs on double_pendulum and ≤ 40 µs on soft_arm_stiff,
Algorithm-2 cycle ≤ 25 µs on soft_arm_stiff.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable
from functools import partial
from typing import Any

import numba
import numpy as np

from poise.benchmarks.timing import per_call_us
from poise.kernels import pack, steps, warm_up
from poise.models import load_model
from poise.motion.compiled_steppers import make_compiled_stepper
from poise.motion.params import LiveParams
from poise.motion.stepper import make_stepper
from poise.sim.dynamics import Dynamics

#: Called with the number of benchmark steps just finished (see :func:`steps_planned`).
ProgressFn = Callable[[int], Any]

DT = 1e-3  # [s] loop period
GOALS_US = {("alg1_cycle", "double_pendulum"): 15.0, ("alg1_cycle", "soft_arm_stiff"): 40.0,
            ("alg2_cycle", "soft_arm_stiff"): 25.0}
CYCLES = (("alg1", "double_pendulum"), ("alg1", "soft_arm_stiff"), ("alg2", "soft_arm_stiff"),
          ("plain", "double_pendulum"), ("plain", "soft_arm_stiff"))
#: Single calls timed by :func:`bench_model_kernels`: (what, model).
MODEL_KERNELS = (("G", "soft_arm_stiff"), ("fk", "double_pendulum"),
                 ("acceleration", "double_pendulum"), ("acceleration", "soft_arm_stiff"))
#: Fresh processes of the compile-time measurement (first and second start).
COMPILE_RUNS = 2


def moving_targets(model, count: int = 8, hold: int = 250) -> list[LiveParams]:
    """Live parameters for ``count × hold`` cycles: ``count`` targets round a circle of 5 cm
    (±1 cm for a 1-D task) about the task value at a held pose, each held for ``hold`` cycles,
    as if a command moved the target every ``hold`` ms (one LiveParams object per command,
    as the controller makes them)."""
    from poise.ik.statics import solve_statics

    qa = 0.3 * np.where(np.isfinite(model.qa_max), model.qa_max, 1.0)
    centre = model.fk(solve_statics(model, qa, np.zeros(model.n - model.m)).q)
    phase = 2 * np.pi * np.arange(count) / count
    if model.task_dim == 1:
        offsets = 0.01 * np.sin(phase + np.pi / count)[:, None]
    else:
        offsets = 0.05 * np.stack([np.cos(phase), np.sin(phase)], axis=1)
    params = [LiveParams("", "dls", 2.0, 2.0, 20.0, 1e-2, centre + o, "ff") for o in offsets]
    return [p for p in params for _ in range(hold)]


def cycle_function(stepper, targets: list[LiveParams]) -> Callable[[], None]:
    """``propose`` then ``commit`` (the targets stay inside the actuator limits, so the
    safety layer between the two, not timed here, would pass ``qa`` through)."""
    state = {"i": 0}

    def cycle() -> None:
        i = state["i"]
        state["i"] = (i + 1) % len(targets)
        stepper.commit(stepper.propose(targets[i], None, DT))

    return cycle


def bench_cycles(min_time: float, progress: ProgressFn | None = None) -> list[dict[str, object]]:
    """One row per entry of :data:`CYCLES`: µs per control cycle, numpy and compiled."""
    rows = []
    for algorithm, name in CYCLES:
        model = load_model(name)
        packed = pack(model)
        warm_up(packed)
        targets = moving_targets(model)
        times = {}
        for label, stepper in (("numpy", make_stepper(algorithm, model)),
                               ("compiled", make_compiled_stepper(algorithm, model, packed))):
            stepper.reset(np.zeros(model.n), model.qa_min, model.qa_max)
            fn = cycle_function(stepper, targets)
            for _ in range(len(targets)):  # settle onto the trajectory first
                fn()
            assert np.all((stepper.qa >= model.qa_min) & (stepper.qa <= model.qa_max))
            times[label] = per_call_us(fn, min_time)
        rows.append(row(f"{algorithm}_cycle", name, times))
        if progress is not None:
            progress(1)
    return rows


def bench_model_kernels(min_time: float,
                        progress: ProgressFn | None = None) -> list[dict[str, object]]:
    """One row per entry of :data:`MODEL_KERNELS`: µs per call, numpy and compiled."""
    rows = []
    for what, name in MODEL_KERNELS:
        model = load_model(name)
        packed = pack(model)
        warm_up(packed)
        q = np.linspace(0.1, 0.4, model.n)
        qd = np.linspace(-0.5, 0.5, model.n)
        tau = np.full(model.m, 0.1)
        if what == "acceleration":
            ref = partial(Dynamics(model, compiled=False).acceleration, q, qd, tau)
            got = partial(steps.acceleration, packed.args, q, qd, tau)
        else:
            ref = partial(getattr(model, what), q)
            got = partial(getattr(steps, what), packed.args, q)
        rows.append(row(what, name, {"numpy": per_call_us(ref, min_time),
                                     "compiled": per_call_us(got, min_time)}))
        if progress is not None:
            progress(1)
    return rows


def row(what: str, model: str, times: dict[str, float]) -> dict[str, object]:
    """A JSON-ready row: both times, their ratio, and the goal of issue 12 if there is one."""
    goal = GOALS_US.get((what, model))
    out: dict[str, object] = {
        "what": what, "model": model, "numpy_us": times["numpy"],
        "compiled_us": times["compiled"], "ratio": times["numpy"] / times["compiled"],
        "goal_us": goal,
    }
    if goal is not None:
        out["goal_met"] = times["compiled"] <= goal
    return out


_COMPILE_SCRIPT = textwrap.dedent("""
    import json, time
    t0 = time.perf_counter()
    from poise.kernels import pack, warm_up
    from poise.models import load_model
    out = {"import_s": time.perf_counter() - t0, "models": {}}
    for name in ("double_pendulum", "soft_arm_stiff"):
        report = warm_up(pack(load_model(name)))
        out["models"][name] = {"seconds": report.seconds, "kernels": report.kernels}
    out["total_s"] = time.perf_counter() - t0
    print(json.dumps(out))
""")


def bench_compile(progress: ProgressFn | None = None) -> dict[str, object]:
    """First start (cold cache) and second start (cache filled by the first), in fresh
    processes sharing a new ``NUMBA_CACHE_DIR``."""
    with tempfile.TemporaryDirectory(prefix="poise-numba-cache-") as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache}
        runs = {}
        for label in ("first_start", "second_start"):
            done = subprocess.run([sys.executable, "-c", _COMPILE_SCRIPT], env=env, check=True,
                                  capture_output=True, text=True)
            runs[label] = json.loads(done.stdout.strip().splitlines()[-1])
            if progress is not None:
                progress(1)
    return runs


def steps_planned(compile_time: bool = True) -> int:
    """How many steps :func:`run` reports to its ``progress`` (cycle rows, kernel rows, and
    the two compile runs unless ``compile_time`` is false)."""
    return len(CYCLES) + len(MODEL_KERNELS) + (COMPILE_RUNS if compile_time else 0)


def run(min_time: float = 0.2, compile_time: bool = True,
        progress: ProgressFn | None = None) -> dict[str, Any]:
    """Time every cycle and kernel, then (unless ``compile_time`` is false) the compile time;
    returns the JSON-ready report with the load average before and after."""
    load_before = os.getloadavg()
    rows = bench_cycles(min_time, progress) + bench_model_kernels(min_time, progress)
    report: dict[str, Any] = {
        "benchmark": "kernels", "python": sys.version.split()[0], "numba": numba.__version__,
        "numpy": np.__version__, "machine": platform.machine(), "cpus": os.cpu_count(),
        "loadavg_before": load_before, "loadavg_after_timing": os.getloadavg(),
        "dt_s": DT, "rows": rows,
    }
    if compile_time:
        report["compile"] = bench_compile(progress)
        report["loadavg_after_compile"] = os.getloadavg()
    return report


def table(report: dict[str, Any]) -> str:
    """The rows as a text table, then the compile times and the load average."""
    head = (f"{'what':14} {'model':16} {'numpy µs':>9} {'compiled µs':>12} {'ratio':>7} "
            f"{'goal µs':>8} {'met':>4}")
    lines = [head, "-" * len(head)]
    for r in report["rows"]:
        goal = "" if r["goal_us"] is None else f"{r['goal_us']:.0f}"
        met = "" if "goal_met" not in r else ("yes" if r["goal_met"] else "no")
        lines.append(f"{r['what']:14} {r['model']:16} {r['numpy_us']:9.1f} "
                     f"{r['compiled_us']:12.2f} {r['ratio']:7.1f} {goal:>8} {met:>4}")
    for label, run_ in report.get("compile", {}).items():
        per_model = ", ".join(f"{m} {v['seconds']:.1f} s" for m, v in run_["models"].items())
        lines.append(f"{label}: import {run_['import_s']:.2f} s, warm-up {per_model}, "
                     f"total {run_['total_s']:.1f} s")
    after = report.get("loadavg_after_compile", report["loadavg_after_timing"])
    lines.append(f"load average (1, 5, 15 min): before {report['loadavg_before']}, "
                 f"after {after}")
    return "\n".join(lines)


__all__ = ["CYCLES", "GOALS_US", "MODEL_KERNELS", "run", "steps_planned", "table"]
