"""Benchmark: classic IK on the Panda (TRAC-IK / Robotics Toolbox protocol), poise against the
Robotics Toolbox for Python in the same run.

Usage::

    poise bench ik [--n 10000] [--method lm ...] [--rtb auto|on|off] [--json [PATH]]
    python bench/ik_panda.py ...            # the same, JSON to bench/results/ik_panda.json

Protocol (:func:`run_ik_benchmark`):

1. ``n`` targets from ``numpy.random.default_rng(seed)``: ``q`` uniform within the joint
   limits, target = ``model.pose(q)`` (so every target is reachable within the limits).
2. Each target is solved from the model's home configuration (``q_home``; the Panda's "ready"
   pose — TRAC-IK's tests likewise seed every solve with one nominal configuration), or with
   ``start="random"`` from a random configuration within the limits drawn from
   ``default_rng(seed + 1)``; then up to ``restarts`` random restarts, uniform within the
   limits (``solve(..., seed=i)`` for target ``i``).
3. Success: the task error ``√(‖p_d − p‖² + ϑ²) ≤ tol`` (``ϑ`` the angle of ``R_d Rᵀ``
   [rad]) re-checked independently with ``model.pose`` and the joint limits, for every solver.
4. Reported per method: solve rate, mean and median wall time per solve [µs] (``perf_counter``
   around each call, everything included: target validation, the solve, the result object),
   and this thread's CPU time per solve [µs] (mean and median: what other processes on a
   shared machine do not inflate, see :func:`timed`), mean iterations of the returned
   attempt, mean restarts, and the ratios of the mean times (wall and CPU) to the baseline
   method's and to the Robotics Toolbox's measured in the same run on the same targets
   (ratios travel between machines better than µs).

Methods: ``lm`` is :func:`poise.ik.solve` with ``method="lm"`` as users call it (on a
``dh_chain`` model the compiled solver, :mod:`poise.ik.clik_compiled`, warmed up before
timing); ``lm_numpy``, ``dls``, ``pinv`` and ``transpose`` are the numpy reference
(:data:`BENCH_OPTIONS` their stopping rules). ``rtb`` is the Robotics Toolbox's C++
``ik_LM`` (:mod:`poise.benchmarks.rtb`), when it is installed.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from poise.benchmarks import rtb
from poise.ik.clik import solve
from poise.ik.orientation import orientation_error

#: Called with the number of solves just finished.
ProgressFn = Callable[[int], Any]

#: The methods :func:`run_ik_benchmark` times, and the ``solve`` options each uses.
BENCH_OPTIONS: dict[str, dict[str, Any]] = {
    "lm": {"method": "lm"},
    "lm_numpy": {"method": "lm", "compiled": False, "max_iter": 30, "stall_window": 2,
                 "stall_rtol": 0.1},
    "dls": {"method": "dls", "max_iter": 30, "stall_window": 2, "stall_rtol": 0.1},
    "pinv": {"method": "pinv", "max_iter": 30, "stall_window": 2, "stall_rtol": 0.1},
    "transpose": {"method": "transpose", "max_iter": 300},
}
METHODS = tuple(BENCH_OPTIONS)


def sample_targets(model: Any, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(q (n, dof), poses (n, 4, 4))``: q uniform within the limits, poses by FK."""
    rng = np.random.default_rng(seed)
    qs = rng.uniform(model.q_min, model.q_max, size=(n, model.n))
    return qs, np.array([model.pose(q) for q in qs])


def solved(model: Any, T: np.ndarray, q: np.ndarray, tol: float) -> bool:
    """Protocol step 3: ``√(‖p_d − p‖² + ϑ²) ≤ tol`` at ``q`` by an independent FK call, and
    ``q`` within the joint limits."""
    Tq = model.pose(q)
    err = np.hypot(np.linalg.norm(Tq[:3, 3] - T[:3, 3]),
                   orientation_error(T[:3, :3], Tq[:3, :3])[1])
    inside = np.all(q >= model.q_min) and np.all(q <= model.q_max)
    return bool(err <= tol * (1 + 1e-6) and inside)


def statistics(name: str, options: dict[str, Any], times: np.ndarray, cpu: np.ndarray,
               success: np.ndarray, iterations: np.ndarray,
               restarts_used: np.ndarray) -> dict[str, Any]:
    """One row of the report (JSON-ready) from per-solve wall and CPU times [s] and outcomes."""
    us = times * 1e6
    return {
        "method": name, "options": options, "n": len(times),
        "solve_rate": float(success.mean()), "solved": int(success.sum()),
        "mean_us": float(us.mean()), "median_us": float(np.median(us)),
        "p95_us": float(np.percentile(us, 95)), "cpu_us": float(cpu.mean() * 1e6),
        "cpu_median_us": float(np.median(cpu) * 1e6),
        "mean_us_solved": float(us[success].mean()) if success.any() else None,
        "mean_iterations": float(iterations.mean()), "mean_restarts": float(restarts_used.mean()),
    }


def timed(call: Callable[[], Any]) -> tuple[Any, float, float]:
    """``(call(), wall [s], CPU [s])``: ``perf_counter`` around the call, and this thread's
    CPU time (``thread_time``) around that, which a preemption by other processes on a
    shared machine does not inflate (a 4 ms time slice in 1 % of the solves doubled the mean
    wall time of the compiled solver at load 2.5)."""
    c0 = time.thread_time()
    t0 = time.perf_counter()
    out = call()
    t1 = time.perf_counter()
    return out, t1 - t0, time.thread_time() - c0


def solve_each(model: Any, poses: np.ndarray, starts: np.ndarray | None, q_default: Any,
               call: Callable[[int, np.ndarray, Any], Callable[[], Any]],
               read: Callable[[Any], tuple[bool, int, int, np.ndarray]], tol: float,
               progress: ProgressFn | None) -> tuple[np.ndarray, ...]:
    """Time one solve per pose (``starts[i]``, or ``q_default``, as the initial guess):
    ``call(i, T, q0)`` makes the solve (outside the timed region) and ``read(result)`` says
    ``(success, iterations, restarts, q)``; a success counts when :func:`solved` agrees.
    ``progress(1)`` after each solve. Returns ``times, cpu, success, iterations, restarts``
    (per pose; [s] for the first two), the arguments of :func:`statistics` after the options."""
    n = len(poses)
    times, cpu, iterations, restarts_used = (np.empty(n) for _ in range(4))
    success = np.zeros(n, dtype=bool)
    for i, T in enumerate(poses):
        solve_one = call(i, T, q_default if starts is None else starts[i])
        out, times[i], cpu[i] = timed(solve_one)
        ok, iterations[i], restarts_used[i], q = read(out)
        success[i] = ok and solved(model, T, q, tol)
        if progress is not None:
            progress(1)
    return times, cpu, success, iterations, restarts_used


def run_method(model: Any, poses: np.ndarray, starts: np.ndarray | None, method: str, *,
               tol: float, restarts: int,
               progress: ProgressFn | None = None) -> dict[str, Any]:
    """Solve every pose with ``method`` (a key of :data:`BENCH_OPTIONS`); statistics as a
    JSON-ready dictionary. ``progress(1)`` is called after each solve, outside the timed
    region."""
    opts = BENCH_OPTIONS[method]

    def call(i: int, T: np.ndarray, q0: Any) -> Callable[[], Any]:
        return lambda: solve(model, T, q0=q0, tol=tol, restarts=restarts, seed=i, **opts)

    return statistics(method, opts, *solve_each(
        model, poses, starts, None, call, lambda r: (r.success, r.iterations, r.restarts, r.q),
        tol, progress))


def warm_up(model: Any, methods: tuple[str, ...]) -> dict[str, float] | None:
    """Compile (or load) the compiled solver before timing, when a method uses it; the
    seconds it took per target kind."""
    from poise.ik.clik_compiled import unavailable_reason
    from poise.ik.clik_compiled import warm_up as warm_up_compiled

    uses = [m for m in methods if BENCH_OPTIONS[m].get("compiled", True) and unavailable_reason(
        model, method=BENCH_OPTIONS[m]["method"]) is None]
    return warm_up_compiled(model).kernels if uses else None


def run_ik_benchmark(model: Any, *, n: int = 10_000, seed: int = 0, tol: float = 1e-6,
                     restarts: int = 50, methods: tuple[str, ...] = ("lm",),
                     start: str = "home", baseline: str | None = "pinv",
                     baseline_n: int | None = None, with_rtb: bool = True,
                     progress: ProgressFn | None = None) -> dict[str, Any]:
    """Run the protocol (module docstring) for ``methods``, the Robotics Toolbox (when
    ``with_rtb`` and it is installed) and the ``baseline`` method.

    ``baseline_n`` solves only the first ``baseline_n`` targets with the baseline (it is slow);
    the ratio then compares the mean times on those same targets. ``progress(k)`` is told of
    every finished solve (:func:`planned_solves` of them in all).
    """
    if start not in ("home", "random"):
        raise ValueError(f"start = {start!r}: must be 'home' or 'random'")
    unknown = [m for m in (*methods, *([baseline] if baseline else [])) if m not in METHODS]
    if unknown:
        raise ValueError(f"methods {unknown}: must be among {', '.join(METHODS)}")
    _, poses = sample_targets(model, n, seed)
    starts = None if start == "home" else np.random.default_rng(seed + 1).uniform(
        model.q_min, model.q_max, size=(n, model.n))
    load_before = os.getloadavg()
    compile_s = warm_up(model, methods)
    rows = [run_method(model, poses, starts, m, tol=tol, restarts=restarts, progress=progress)
            for m in methods]
    rtb_row, rtb_note = None, None
    if with_rtb:
        rtb_note = rtb.unavailable_reason(model)
        if rtb_note is None:
            rtb_row = rtb.run(model, poses, starts, tol=tol, restarts=restarts,
                              progress=progress)
            for row in rows:
                row["ratio_to_rtb"] = row["mean_us"] / rtb_row["mean_us"]
                row["cpu_ratio_to_rtb"] = row["cpu_us"] / rtb_row["cpu_us"]
                row["median_ratio_to_rtb"] = row["median_us"] / rtb_row["median_us"]
    else:
        rtb_note = "not run (--rtb off)"
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
        "restart_configurations": "uniform within limits (poise: seed i for target i)",
        "compile_s": compile_s,
        "results": rows, "rtb": rtb_row, "rtb_note": rtb_note, "baseline": base,
        "load_average": {"before": list(load_before), "after": list(os.getloadavg())},
        "machine": {"python": platform.python_version(), "numpy": np.__version__,
                    "processor": platform.machine(), "system": platform.system(),
                    "cpus": os.cpu_count()},
    }


def planned_solves(n: int, methods: tuple[str, ...], baseline: str | None,
                   baseline_n: int | None = None, with_rtb: bool = False) -> int:
    """How many solves :func:`run_ik_benchmark` makes with these arguments (for a progress
    bar): every method on ``n`` targets, the Toolbox on ``n`` when it runs, the baseline on
    ``k = min(n, baseline_n)``, and the methods again on those ``k`` when ``k < n`` (the ratio
    compares the same targets)."""
    total = n * (len(methods) + (1 if with_rtb else 0))
    if baseline is not None:
        k = n if baseline_n is None else min(n, baseline_n)
        total += k + (len(methods) * k if k < n else 0)
    return total


def format_table(report: dict[str, Any]) -> str:
    """Human-readable table of :func:`run_ik_benchmark`'s report."""
    lines = [f"IK benchmark {report['model']}: n = {report['n']}, seed = {report['seed']}, "
             f"tol = {report['tol']:g} on {report['error_norm']}, restarts ≤ "
             f"{report['restarts']}, start {report['start']}",
             f"{'method':<10} {'n':>6} {'rate %':>7} {'mean µs':>8} {'median':>7} {'p95':>7} "
             f"{'cpu µs':>7} {'median':>7} {'iter':>5} {'restarts':>8} {'/ rtb':>6} "
             f"{'cpu/rtb':>7} {'/ base':>6}"]

    def ratio(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}"

    rows = list(report["results"]) + [r for r in (report["rtb"], report["baseline"]) if r]
    for r in rows:
        lines.append(f"{r['method']:<10} {r['n']:>6} {100 * r['solve_rate']:>7.2f} "
                     f"{r['mean_us']:>8.0f} {r['median_us']:>7.0f} {r['p95_us']:>7.0f} "
                     f"{r['cpu_us']:>7.0f} {r['cpu_median_us']:>7.0f} "
                     f"{r['mean_iterations']:>5.1f} {r['mean_restarts']:>8.2f} "
                     f"{ratio(r.get('ratio_to_rtb')):>6} {ratio(r.get('cpu_ratio_to_rtb')):>7} "
                     f"{ratio(r.get('ratio_to_baseline')):>6}")
    if report["rtb"] is None:
        lines.append(f"Robotics Toolbox: {report['rtb_note']}")
    else:
        lines.append(f"rtb = {report['rtb']['solver']}")
    if report["compile_s"]:
        lines.append("compiled solver warm-up (outside the timing): " + ", ".join(
            f"{k} {v:.2f} s" for k, v in report["compile_s"].items()))
    load = report["load_average"]
    lines.append(f"load average before {load['before'][0]:.2f}, after {load['after'][0]:.2f} "
                 f"({report['machine']['cpus']} CPUs)")
    return "\n".join(lines)
