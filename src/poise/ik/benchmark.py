"""The Panda IK benchmark protocol (TRAC-IK / Robotics Toolbox style).

Protocol (``run_ik_benchmark``):

1. ``n`` targets from ``numpy.random.default_rng(seed)``: ``q`` uniform within the joint
   limits, target = ``model.pose(q)`` (so every target is reachable within the limits).
2. Each target is solved from the model's home configuration (``q_home``; the Panda's "ready"
   pose — TRAC-IK's tests likewise seed every solve with one nominal configuration), or with
   ``start="random"`` from a random configuration within the limits drawn from
   ``default_rng(seed + 1)``; then up to ``restarts`` random restarts, uniform within the
   limits (``solve(..., seed=i)`` for target ``i``).
3. Success: ``IKResult.success`` — ``task_error = √(‖p_d − p‖² + ϑ²) ≤ tol`` (``ϑ`` the angle of
   ``R_d Rᵀ`` [rad]) — re-checked independently with ``model.pose`` and the joint limits.
4. Reported per method: solve rate, mean and median wall time per solve [µs] (``perf_counter``
   around each ``solve`` call, everything included), process CPU time per solve [µs] (less
   sensitive to other load on a shared machine), mean iterations of the returned attempt,
   mean restarts, and the ratio of the mean time to the baseline method's mean time measured in
   the same run on the same targets (ratios travel between machines better than µs).
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from poise.ik.clik import solve
from poise.ik.orientation import orientation_error

#: Options per method used by the benchmark (everything else: ``solve`` defaults).
BENCH_OPTIONS: dict[str, dict[str, Any]] = {
    "lm": {"max_iter": 30, "stall_window": 2, "stall_rtol": 0.1},
    "dls": {"max_iter": 30, "stall_window": 2, "stall_rtol": 0.1},
    "pinv": {"max_iter": 30, "stall_window": 2, "stall_rtol": 0.1},
    "transpose": {"max_iter": 300},
}


def sample_targets(model: Any, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(q (n, dof), poses (n, 4, 4))``: q uniform within the limits, poses by FK."""
    rng = np.random.default_rng(seed)
    qs = rng.uniform(model.q_min, model.q_max, size=(n, model.n))
    return qs, np.array([model.pose(q) for q in qs])


def run_method(model: Any, poses: np.ndarray, starts: np.ndarray | None, method: str, *,
               tol: float, restarts: int,
               progress: Callable[[int], Any] | None = None) -> dict[str, Any]:
    """Solve every pose with ``method``; statistics as a JSON-ready dictionary.

    ``progress(1)`` is called after each solve, outside the timed region.
    """
    opts = BENCH_OPTIONS.get(method, {})
    times = np.empty(len(poses))
    iterations = np.empty(len(poses))
    restarts_used = np.empty(len(poses))
    success = np.zeros(len(poses), dtype=bool)
    clock = time.perf_counter
    cpu0 = time.process_time()
    for i, T in enumerate(poses):
        q0 = None if starts is None else starts[i]
        t0 = clock()
        r = solve(model, T, method=method, q0=q0, tol=tol, restarts=restarts, seed=i, **opts)
        times[i] = clock() - t0
        iterations[i] = r.iterations
        restarts_used[i] = r.restarts
        if r.success:
            Tq = model.pose(r.q)
            err = np.hypot(np.linalg.norm(Tq[:3, 3] - T[:3, 3]),
                           orientation_error(T[:3, :3], Tq[:3, :3])[1])
            inside = np.all(r.q >= model.q_min) and np.all(r.q <= model.q_max)
            success[i] = err <= tol * (1 + 1e-6) and inside
        if progress is not None:
            progress(1)
    cpu_us = (time.process_time() - cpu0) / len(poses) * 1e6
    us = times * 1e6
    return {
        "method": method, "options": opts, "n": len(poses),
        "solve_rate": float(success.mean()), "solved": int(success.sum()),
        "mean_us": float(us.mean()), "median_us": float(np.median(us)),
        "p95_us": float(np.percentile(us, 95)), "cpu_us": cpu_us,
        "mean_us_solved": float(us[success].mean()) if success.any() else None,
        "mean_iterations": float(iterations.mean()), "mean_restarts": float(restarts_used.mean()),
    }


def run_ik_benchmark(model: Any, *, n: int = 10_000, seed: int = 0, tol: float = 1e-6,
                     restarts: int = 50, methods: tuple[str, ...] = ("lm",),
                     start: str = "home",
                     baseline: str | None = "pinv", baseline_n: int | None = None,
                     progress: Callable[[int], Any] | None = None) -> dict[str, Any]:
    """Run the protocol (module docstring) for ``methods`` and the ``baseline`` method.

    ``baseline_n`` solves only the first ``baseline_n`` targets with the baseline (it is slow);
    the ratio then compares the mean times on those same targets. ``progress(k)`` is told of
    every finished solve (:func:`planned_solves` of them in all).
    """
    if start not in ("home", "random"):
        raise ValueError(f"start = {start!r}: must be 'home' or 'random'")
    _, poses = sample_targets(model, n, seed)
    starts = None if start == "home" else np.random.default_rng(seed + 1).uniform(
        model.q_min, model.q_max, size=(n, model.n))
    rows = [run_method(model, poses, starts, m, tol=tol, restarts=restarts, progress=progress)
            for m in methods]
    base = None
    if baseline is not None:
        k = n if baseline_n is None else min(n, baseline_n)
        sub = None if starts is None else starts[:k]
        base = run_method(model, poses[:k], sub, baseline, tol=tol, restarts=restarts,
                          progress=progress)
        for row in rows:
            same = row if k == n else run_method(model, poses[:k], sub, row["method"],
                                                 tol=tol, restarts=restarts, progress=progress)
            row["ratio_to_baseline"] = same["mean_us"] / base["mean_us"]
            row["cpu_ratio_to_baseline"] = same["cpu_us"] / base["cpu_us"]
        base["ratio_to_baseline"] = base["cpu_ratio_to_baseline"] = 1.0
    return {
        "benchmark": "ik_panda", "model": getattr(model, "name", "?"), "n": n, "seed": seed,
        "tol": tol, "error_norm": "sqrt(|p_d - p|^2 + angle(R_d R^T)^2) [m, rad]",
        "restarts": restarts,
        "start": "model.q_home" if start == "home" else "random within limits (rng seed + 1)",
        "restart_configurations": "uniform within limits, default_rng(i) for target i",
        "results": rows, "baseline": base,
        "machine": {"python": platform.python_version(), "numpy": np.__version__,
                    "processor": platform.machine(), "system": platform.system()},
    }


def planned_solves(n: int, methods: tuple[str, ...], baseline: str | None,
                   baseline_n: int | None = None) -> int:
    """How many solves :func:`run_ik_benchmark` makes with these arguments (for a progress
    bar): every method on ``n`` targets, the baseline on ``k = min(n, baseline_n)``, and the
    methods again on those ``k`` when ``k < n`` (the ratio compares the same targets)."""
    total = n * len(methods)
    if baseline is not None:
        k = n if baseline_n is None else min(n, baseline_n)
        total += k + (len(methods) * k if k < n else 0)
    return total


def format_table(report: dict[str, Any]) -> str:
    """Human-readable table of :func:`run_ik_benchmark`'s report."""
    lines = [f"IK benchmark {report['model']}: n = {report['n']}, seed = {report['seed']}, "
             f"tol = {report['tol']:g} on {report['error_norm']}, restarts ≤ "
             f"{report['restarts']}",
             f"{'method':<10} {'n':>6} {'rate %':>8} {'mean µs':>9} {'median µs':>10} "
             f"{'p95 µs':>9} {'cpu µs':>8} {'iter':>6} {'restarts':>9} {'ratio':>7} "
             f"{'cpu ratio':>9}"]
    rows = list(report["results"]) + ([report["baseline"]] if report["baseline"] else [])
    for r in rows:
        ratio = r.get("ratio_to_baseline")
        cpu_ratio = r.get("cpu_ratio_to_baseline")
        lines.append(f"{r['method']:<10} {r['n']:>6} {100 * r['solve_rate']:>8.2f} "
                     f"{r['mean_us']:>9.0f} {r['median_us']:>10.0f} {r['p95_us']:>9.0f} "
                     f"{r['cpu_us']:>8.0f} "
                     f"{r['mean_iterations']:>6.1f} {r['mean_restarts']:>9.2f} "
                     f"{'-' if ratio is None else f'{ratio:.3f}':>7} "
                     f"{'-' if ratio is None else format(cpu_ratio, '.3f'):>9}")
    return "\n".join(lines)
