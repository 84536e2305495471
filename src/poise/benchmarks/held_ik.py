"""Benchmark: held-configuration IK (seed 000), µs per step and per solve of Algorithms 1 and 2.

Usage::

    poise bench held-ik [--solves N] [--seed S] [--models NAME …] [--json [PATH]] [--quiet]
    python bench/held_ik.py …              # the same, JSON to bench/results/held_ik.json

Per model, in the same run:

* ``baseline``: one bare ``model.G(q)`` call (the cheapest model evaluation) — the ratios
  ``step / baseline`` are what to compare across machines;
* ``alg1_step``: one Algorithm-1 update in numpy (held Jacobian, DLS update, warm-started
  statics re-solve), what a control cycle costs;
* ``alg2_step``: one Algorithm-2 update in numpy (actuation blocks, the limit-aware projector
  rates :func:`~poise.ik.held.limited_rates`, Euler step), and ``alg2_stacked_step`` the same
  with the stacked solve;
* ``alg1_step_compiled`` / ``alg2_step_compiled``: one cycle of the compiled steppers of
  :mod:`poise.kernels` (``propose`` then ``commit``), what the controller runs;
  ``*_compiled_speedup`` = numpy step / compiled step;
* ``alg1_solve`` / ``alg2_solve``: full solves (:func:`~poise.ik.held.algorithm1`, and
  :func:`~poise.ik.held.algorithm2` with Δt = 0.5 and at most 3,000 iterations per attempt)
  to ``--solves`` random reachable held targets (the task values of held configurations at
  actuator positions uniform in 80 % of the range, ``default_rng(seed)``) from the model's
  zero configuration: success rate, median and mean µs per solve (the result's
  ``wall_time``: everything included), mean iterations, restarts; on the compiled kernels
  (the default) and with the numpy reference (``compiled=False``) on the same targets,
  ``*_solve_ratio`` = numpy median / compiled median. ``alg2_misses_alg1`` counts the targets
  Algorithm 1 solves and Algorithm 2 does not (compiled; ``alg2_numpy_misses_alg1`` numpy).

Goals: issue 3, one Algorithm-2 step on ``soft_arm`` ≤ 100 µs, so a 1 kHz loop has room;
issue 12, compiled Algorithm-1 step ≤ 15 µs (double_pendulum) and ≤ 40 µs (soft_arm_stiff),
compiled Algorithm-2 step ≤ 25 µs (soft_arm_stiff); issue 15, Algorithm 2 solves every target
Algorithm 1 solves, and compiled solves of both take ≤ 500 µs median on ``soft_arm_stiff``.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np

from poise.benchmarks.timing import per_call_us
from poise.ik.held import (
    HeldOptions,
    algorithm1,
    algorithm1_step,
    algorithm2,
    algorithm2_rates,
    limited_rates,
)
from poise.ik.statics import solve_statics
from poise.models import load_model
from poise.models.actuation import blocks, join
from poise.models.base import FloatArray, MechanicalModel
from poise.progress import ProgressFn

MODELS = ("double_pendulum", "tendon_3link", "soft_arm_stiff", "soft_arm_soft", "dancer")
#: Algorithm 2's solve settings (Δt, iteration cap per attempt).
ALG2_SOLVE = {"dt": 0.5, "options": HeldOptions(max_iter=3000)}
#: Issue 15, part 4: median compiled solve on soft_arm_stiff [µs].
SOLVE_GOAL_US = 500.0


def reachable_targets(model: MechanicalModel, count: int, rng: np.random.Generator
                      ) -> list[FloatArray]:
    """Task values of held configurations at random actuator positions (80 % of the range)."""
    out = []
    lo, hi = np.nan_to_num(model.qa_min, neginf=-1.0), np.nan_to_num(model.qa_max, posinf=1.0)
    while len(out) < count:
        qa = rng.uniform(0.8 * lo, 0.8 * hi)
        sol = solve_statics(model, qa, np.zeros(model.n - model.m))
        if sol.converged and sol.stable:
            out.append(model.fk(sol.q))
    return out


def compiled_step(model: MechanicalModel, algorithm: str, q0: FloatArray,
                  target: FloatArray) -> Callable[[], None]:
    """One cycle of the compiled stepper (``propose`` then ``commit``: the update and, for
    Algorithm 1, the warm-started statics re-solve), compiled before it is timed."""
    from poise.kernels import pack, warm_up
    from poise.motion.compiled_steppers import make_compiled_stepper

    packed = pack(model)
    warm_up(packed, dynamics=False)
    stepper = make_compiled_stepper(algorithm, model, packed)
    assert stepper is not None
    stepper.reset(q0, model.qa_min, model.qa_max)
    p = SimpleNamespace(update="dls", gamma=1.0, gamma_z=1.0, gamma_e=1.0, damping=1e-3,
                        target=np.asarray(target, dtype=float))

    def step() -> None:
        stepper.commit(stepper.propose(p, None, 1e-3))

    step()
    return step


def step_times(model: MechanicalModel, target: FloatArray) -> dict[str, float]:
    """µs per call of the baseline, the numpy steps and the compiled steps."""
    start = solve_statics(model, np.zeros(model.m), np.zeros(model.n - model.m))
    q_mid = start.q

    def alg1_step() -> None:
        qa, _, _ = algorithm1_step(model, start, target, update="dls", damping=1e-3, dt=1e-3)
        solve_statics(model, np.clip(qa, model.qa_min, model.qa_max), start.qu, tol=1e-9)

    def alg2_step(form: str) -> Callable[[], None]:
        def step() -> None:
            b = blocks(model, q_mid)
            if form == "stacked":
                rates = algorithm2_rates(b, target - b.x, -b.Gu, 1.0, 1.0, form="stacked")
            else:
                rates = limited_rates(b, target - b.x, -b.Gu, 1.0, 1.0, model.qa_min,
                                      model.qa_max)
            qc = np.concatenate([b.qa, b.qu]) + 1e-3 * rates
            join(model, qc[: model.m], qc[model.m :])

        return step

    out = {"baseline_us": per_call_us(lambda: model.G(q_mid)),
           "alg1_step_us": per_call_us(alg1_step)}
    for label in ("alg1", "alg2"):
        out[f"{label}_step_compiled_us"] = per_call_us(compiled_step(model, label, start.q,
                                                                     target))
    out["alg2_step_us"] = per_call_us(alg2_step("projector"))
    out["alg2_stacked_step_us"] = per_call_us(alg2_step("stacked"))
    return out


#: The solves timed per target: (label, solver, keyword arguments).
SOLVES: tuple[tuple[str, Callable[..., Any], dict[str, Any]], ...] = (
    ("alg1", algorithm1, {}),
    ("alg1_numpy", algorithm1, {"compiled": False}),
    ("alg2", algorithm2, ALG2_SOLVE),
    ("alg2_numpy", algorithm2, {**ALG2_SOLVE, "compiled": False}),
)


def solve_stats(model: MechanicalModel, targets: list[FloatArray],
                progress: ProgressFn | None = None) -> dict[str, Any]:
    """Every solve of :data:`SOLVES` on every target: success, µs, iterations, restarts."""
    results: dict[str, list[Any]] = {label: [] for label, _, _ in SOLVES}
    for _, solver, kwargs in SOLVES[::2]:  # compile (or load) before anything is timed
        solver(model, targets[0], **kwargs)
    for target in targets:
        for label, solver, kwargs in SOLVES:
            results[label].append(solver(model, target, **kwargs))
        if progress is not None:
            progress(1)
    row: dict[str, Any] = {}
    for label, res in results.items():
        times = np.array([r.wall_time * 1e6 for r in res])
        row[f"{label}_success_rate"] = float(np.mean([r.success for r in res]))
        row[f"{label}_solve_median_us"] = float(np.median(times))
        row[f"{label}_solve_mean_us"] = float(np.mean(times))
        row[f"{label}_mean_iterations"] = float(np.mean([r.iterations for r in res]))
        row[f"{label}_mean_restarts"] = float(np.mean([r.restarts for r in res]))
    for label in ("alg1", "alg2"):
        row[f"{label}_solve_ratio"] = (row[f"{label}_numpy_solve_median_us"]
                                       / row[f"{label}_solve_median_us"])
    for suffix in ("", "_numpy"):
        row[f"alg2{suffix}_misses_alg1"] = sum(
            bool(a.success and not b.success)
            for a, b in zip(results[f"alg1{suffix}"], results[f"alg2{suffix}"], strict=True))
    return row


def bench_model(name: str, solves: int, seed: int,
                progress: ProgressFn | None = None) -> dict[str, Any]:
    """One row: the model's step times and solve statistics."""
    model = load_model(name)
    targets = reachable_targets(model, solves, np.random.default_rng(seed))
    row: dict[str, Any] = {"model": name, "n": model.n, "m": model.m,
                           "task_dim": model.task_dim}
    row.update(step_times(model, targets[0]))
    if progress is not None:
        progress(1)
    row.update(solve_stats(model, targets, progress))
    row["alg1_step_ratio"] = row["alg1_step_us"] / row["baseline_us"]
    row["alg2_step_ratio"] = row["alg2_step_us"] / row["baseline_us"]
    row["alg1_compiled_speedup"] = row["alg1_step_us"] / row["alg1_step_compiled_us"]
    row["alg2_compiled_speedup"] = row["alg2_step_us"] / row["alg2_step_compiled_us"]
    return row


def steps_planned(models: list[str] | tuple[str, ...], solves: int) -> int:
    """How many steps :func:`run` reports to its ``progress``: per model, the step timings
    and each target."""
    return len(models) * (solves + 1)


def run(models: list[str] | tuple[str, ...] = MODELS, solves: int = 20, seed: int = 0,
        progress: ProgressFn | None = None) -> dict[str, Any]:
    """The JSON-ready report of every model, with the load average before and after."""
    load_before = os.getloadavg()
    rows = [bench_model(name, solves, seed, progress) for name in models]
    soft = next((r for r in rows if r["model"] == "soft_arm_stiff"), None)
    goals = {
        "alg2 step on soft_arm_stiff <= 100 us (issue 3)":
            None if soft is None else soft["alg2_step_us"] <= 100.0,
        "alg2 solves every target alg1 solves (issue 15)":
            all(r["alg2_misses_alg1"] == 0 and r["alg2_numpy_misses_alg1"] == 0 for r in rows),
        f"compiled alg1 and alg2 median solve on soft_arm_stiff <= {SOLVE_GOAL_US:g} us "
        "(issue 15)": None if soft is None else max(
            soft["alg1_solve_median_us"], soft["alg2_solve_median_us"]) <= SOLVE_GOAL_US,
    }
    return {
        "benchmark": "held_ik", "python": sys.version.split()[0],
        "machine": platform.machine(), "cpus": os.cpu_count(), "solves_per_model": solves,
        "seed": seed, "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
        "goals": goals, "rows": rows,
    }


def table(report: dict[str, Any]) -> str:
    """Two tables (µs per step; per solve, compiled and numpy), the goals and the load."""
    rows = report["rows"]
    head = (f"{'model':16} {'G(q) µs':>8} {'A1 step':>8} {'compiled':>9} {'A2 step':>8} "
            f"{'compiled':>9} {'A2 stk':>7} {'A2/G':>6}")
    lines = ["µs per step (numpy, compiled)", head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['model']:16} {r['baseline_us']:8.1f} {r['alg1_step_us']:8.1f} "
            f"{r['alg1_step_compiled_us']:9.1f} {r['alg2_step_us']:8.1f} "
            f"{r['alg2_step_compiled_us']:9.1f} {r['alg2_stacked_step_us']:7.1f} "
            f"{r['alg2_step_ratio']:6.1f}")
    head = (f"{'model':16} {'':4}{'ok':>6} {'it':>6} {'rst':>5} {'median µs':>10} "
            f"{'mean µs':>9} {'numpy ok':>9} {'numpy med':>10} {'ratio':>6}")
    lines += ["", f"per solve ({report['solves_per_model']} targets, seed {report['seed']}, "
              "from q = 0; compiled, then the numpy reference)", head, "-" * len(head)]
    for r in rows:
        for label, alg in (("A1", "alg1"), ("A2", "alg2")):
            lines.append(
                f"{r['model'] if label == 'A1' else '':16} {label:4}"
                f"{r[f'{alg}_success_rate']:6.0%} {r[f'{alg}_mean_iterations']:6.1f} "
                f"{r[f'{alg}_mean_restarts']:5.2f} {r[f'{alg}_solve_median_us']:10.0f} "
                f"{r[f'{alg}_solve_mean_us']:9.0f} {r[f'{alg}_numpy_success_rate']:9.0%} "
                f"{r[f'{alg}_numpy_solve_median_us']:10.0f} {r[f'{alg}_solve_ratio']:6.1f}")
    lines.append("")
    for goal, met in report["goals"].items():
        lines.append(f"goal: {goal}: {'-' if met is None else ('met' if met else 'NOT met')}")
    lines.append(f"load average (1, 5, 15 min): before {report['loadavg_before']}, "
                 f"after {report['loadavg_after']}")
    return "\n".join(lines)


__all__ = ["MODELS", "reachable_targets", "run", "steps_planned", "table"]
