"""Seed 001 III-B protocol: Jacobian vs DLS vs VVL on cc3d_N, N = 2…7 (and ``robust``).

For every N: ``groups`` groups of ``group_size`` targets sampled uniformly in joint space
(κ_i ∈ [0, π], φ_i ∈ [−π, π), nominal lengths L = 1), each method solved once from the neutral
start to 500 iterations with the smallest tolerance, recording the first iteration at which the
eq.-(21) metric falls below each tolerance. Success within cap c at tolerance τ ⇔ that first
iteration ≤ c (counted twice: tolerance met; tolerance met with every |κ_i L_i| ≤ 2π).

``--methods robust`` (beyond the paper, :mod:`poise.ik.continuum_robust`) runs on the same
targets through the public single-target API: its iterations count every evaluation of every
restart, its answer is re-checked with the numpy reference kinematics (error and |κ_i L_i|),
and every solve is timed; a second, timed pass at tol 1e-6 gives the median time per solve.

    poise bench vvl [--quick] [--segments 2 3 ...] [--json FILE] [--workers 2] [--quiet]
    python bench/vvl.py ...   (a source checkout; same options)

Progress: a bar of solved targets on stderr (:mod:`poise.progress`: none with ``--quiet`` or
when stderr is not a terminal, where each finished group is logged as a line instead).
docs/continuum.md has the protocol and the results.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from poise.api.extras import require
from poise.benchmarks.benchout import add_quiet_option
from poise.ik import se3
from poise.ik.continuum import (
    ALL_METHODS,
    DEFAULT_BETA,
    METHODS,
    ROBUST_METHOD,
    ContinuumOptions,
    random_targets,
)
from poise.ik.continuum_batch import solve_batch
from poise.models.cc3d import cc3d
from poise.progress import ProgressFn, progress_bar

CAPS = (30, 60, 100, 160, 500)
TOLS = (1e-4, 1e-6, 1e-8)
TIME_TOL = 1e-6
"""Tolerance of the robust method's timing pass (the goal's tolerance)."""


def run_group(n_seg: int, method: str, group: int, size: int, seed: int, beta: float,
              start: str = "neutral", extra: dict | None = None,
              robust: dict | None = None) -> dict:
    """One group: per-target first hits (T,) and coil flags, plus target positions."""
    model = cc3d(n_seg)
    rng = np.random.default_rng([seed, n_seg, group])
    _, targets = random_targets(model, size, rng)
    if method == ROBUST_METHOD:
        return run_robust(model, targets, robust)
    q0 = None
    if start == "perturbed":  # seed 001 III-A: "randomly perturbed" instead of neutral
        prng = np.random.default_rng([seed, n_seg, group, 1])
        q0 = model.join(prng.uniform(-1e-3, 1e-3, (size, n_seg)),
                        prng.uniform(-math.pi, math.pi, (size, n_seg)))
    opts = ContinuumOptions(method=method, beta=beta, tol=min(TOLS), max_iter=max(CAPS),
                            **(extra or {}))
    t = time.perf_counter()
    res = solve_batch(model, targets, q0, opts, tols=TOLS)
    order = [int(np.flatnonzero(res.tols == t)[0]) for t in TOLS]  # columns in TOLS order
    return {
        "first_hit": res.first_hit[:, order], "coiled_at_hit": res.coiled_at_hit[:, order],
        "positions": targets[:, :3, 3], "seconds": time.perf_counter() - t,
        "length_error": res.length_error,
    }


def run_robust(model, targets: np.ndarray, overrides: dict | None = None) -> dict:
    """The robust method on one group, one public-API solve per target.

    Pass 1 (tol = min(TOLS), cap = max(CAPS)): first iteration with ``e_k < τ`` per tolerance
    from ``residual_history`` (the running error over every restart; a solve stopped at τ
    would stop there, since restarts do not depend on τ or on the cap). The final answer is
    re-checked with the numpy reference (``model.pose``, ``se3.log``, ``|κ_i L_i| ≤ 2π``); a
    hit whose answer fails the check counts as coiled (not valid). Pass 2: the same solves at
    tol = TIME_TOL, timed one by one (wall time of the whole call). The method runs with its
    default options and ``overrides`` (``--robust KEY=VALUE``); the paper methods' ``extra``
    settings do not apply to it.
    """
    from poise.ik.continuum_robust import RobustOptions, solve_robust

    opts = RobustOptions(**(overrides or {}), tol=min(TOLS), max_iter=max(CAPS))
    size = len(targets)
    first_hit = np.full((size, len(TOLS)), -1, dtype=np.int64)
    invalid = np.zeros(size, dtype=bool)
    restarts = np.zeros(size, dtype=np.int64)
    t = time.perf_counter()
    for i, T_D in enumerate(targets):
        res = solve_robust(model, T_D, options=opts)
        h = res.residual_history
        for j, tol in enumerate(TOLS):
            below = np.flatnonzero(h < tol)
            first_hit[i, j] = below[0] if below.size else -1
        V = se3.log(T_D @ se3.inverse(model.pose(res.q)))
        invalid[i] = bool(model.coiled(res.q)) or (res.success and float(V @ V) >= opts.tol)
        restarts[i] = res.restarts
    seconds = time.perf_counter() - t
    timing = RobustOptions(**{**opts.__dict__, "tol": TIME_TOL})
    times, cpu = np.empty(size), np.empty(size)
    for i, T_D in enumerate(targets):
        t0, c0 = time.perf_counter(), time.thread_time()
        solve_robust(model, T_D, options=timing)
        times[i], cpu[i] = time.perf_counter() - t0, time.thread_time() - c0
    return {
        "first_hit": first_hit, "coiled_at_hit": np.repeat(invalid[:, None], len(TOLS), 1),
        "positions": targets[:, :3, 3], "seconds": seconds,
        "length_error": np.zeros(size), "times": times, "cpu_times": cpu, "restarts": restarts,
    }


def _job(args):
    return args, run_group(*args)


def summarise(hits: list[dict]) -> dict:
    """Per (cap, tol): success rates (both definitions) and mean iterations over successes,
    as mean ± std over groups."""
    out = {}
    if "times" in hits[0]:  # robust: time per solve (tol TIME_TOL, cap 500) and restarts
        times = np.concatenate([g["times"] for g in hits])
        cpu = np.concatenate([g["cpu_times"] for g in hits])
        restarts = np.concatenate([g["restarts"] for g in hits])
        out["timing"] = {
            "tol": TIME_TOL, "median_us": float(1e6 * np.median(times)),
            "mean_us": float(1e6 * np.mean(times)), "p99_us": float(1e6 * np.quantile(times, 0.99)),
            "cpu_median_us": float(1e6 * np.median(cpu)), "cpu_mean_us": float(1e6 * np.mean(cpu)),
            "cpu_p99_us": float(1e6 * np.quantile(cpu, 0.99)),
            "mean_restarts": float(restarts.mean()),
            "share_restarted": float(np.mean(restarts > 0)),
        }
    for ti, tol in enumerate(TOLS):
        for cap in CAPS:
            rates, rates_valid, iters, iters_valid, all_valid = [], [], [], [], []
            for g in hits:
                h, c = g["first_hit"][:, ti], g["coiled_at_hit"][:, ti]
                ok = (h >= 0) & (h <= cap)
                okv = ok & ~c
                rates.append(ok.mean())
                rates_valid.append(okv.mean())
                iters.append(h[ok].mean() if ok.any() else math.nan)
                iters_valid.append(h[okv].mean() if okv.any() else math.nan)
                all_valid.append(h[okv])
            out[f"{cap}|{tol:g}"] = {
                "cap": cap, "tol": tol,
                "success": float(np.mean(rates)), "success_std": float(np.std(rates)),
                "success_valid": float(np.mean(rates_valid)),
                "success_valid_std": float(np.std(rates_valid)),
                "mean_iters": float(np.nanmean(iters)), "mean_iters_std": float(np.nanstd(iters)),
                "mean_iters_valid": float(np.nanmean(iters_valid)),
            }
            if "times" in hits[0]:
                valid = np.concatenate(all_valid)
                out[f"{cap}|{tol:g}"]["median_iters_valid"] = (
                    float(np.median(valid)) if valid.size else math.nan)
    return out


def run(segments, groups, size, seed, beta, methods=METHODS, workers=1, start="neutral",
        extra=None, log=print, robust=None, progress: ProgressFn | None = None):
    """The protocol; returns (summary dict, raw per-group results).

    ``log`` gets one line per finished group, ``progress`` (:mod:`poise.progress`) the number
    of targets it solved; neither changes what is measured.
    """
    jobs = [(n, m, g, size, seed, beta, start, extra, robust)
            for n in segments for m in methods for g in range(groups)]
    raw: dict = {}
    t0 = time.perf_counter()

    def finished(args, r) -> None:
        raw.setdefault((args[0], args[1]), []).append(r)
        log(f"  N={args[0]} {args[1]:8s} group {args[2]:2d}: {r['seconds']:.1f} s")
        if progress is not None:
            progress(args[3])

    if workers > 1:
        with ProcessPoolExecutor(workers) as pool:
            for args, r in pool.map(_job, jobs):
                finished(args, r)
    else:
        for args in jobs:
            finished(*_job(args))
    summary = {
        "protocol": {
            "segments": list(segments), "groups": groups, "group_size": size, "seed": seed,
            "beta": beta, "caps": list(CAPS), "tols": list(TOLS), "start": start,
            "extra": extra or {}, "robust_options": robust or {},
            "sampling": "kappa_i ~ U[0, pi] 1/m, phi_i ~ U[-pi, pi), L_i = 1 m",
            "metric": "||log(T_D T_e^-1)||^2 (base-frame twist [w; v]), eq. (21)",
            "trials": len(jobs) * size, "wall_time_s": time.perf_counter() - t0,
        },
        "results": {
            f"{n}|{m}": summarise(v) | {"seconds": float(sum(g["seconds"] for g in v))}
            for (n, m), v in sorted(raw.items())
        },
    }
    return summary, raw


def markdown(summary: dict) -> str:
    """Tables: success (tolerance met / met and uncoiled) and mean iterations, mean ± std."""
    p = summary["protocol"]
    lines = ["# VVL benchmark (seed 001 III-B protocol)\n",
             f"{p['groups']} group(s) × {p['group_size']} targets per N, β = {p['beta']}, "
             f"start: {p['start']} {p['extra'] or ''}"
             f"{' robust options ' + str(p['robust_options']) if p.get('robust_options') else ''}"
             f"; {p['trials']:,} trials in "
             f"{p['wall_time_s']:.0f} s. Cells: success % (tol met) / % (tol met, all "
             "|κl| ≤ 2π) ± std over groups of the first; mean iterations of the successes.\n"]
    segs = sorted({int(k.split('|')[0]) for k in summary["results"]})
    methods = [m for m in ALL_METHODS if f"{segs[0]}|{m}" in summary["results"]]
    for tol in TOLS:
        lines.append(f"\n## tolerance {tol:g}\n")
        lines.append("| N | method | " + " | ".join(f"cap {c}" for c in CAPS) + " |")
        lines.append("|---|---|" + "---|" * len(CAPS))
        for n in segs:
            for m in methods:
                r = summary["results"][f"{n}|{m}"]
                cells = []
                for c in CAPS:
                    s = r[f"{c}|{tol:g}"]
                    cells.append(f"{100 * s['success']:.1f} / {100 * s['success_valid']:.1f} "
                                 f"± {100 * s['success_std']:.1f} ({s['mean_iters']:.0f} it)")
                lines.append(f"| {n} | {m} | " + " | ".join(cells) + " |")
    head = "\n".join(lines[:2]) + compact(summary)
    if ROBUST_METHOD in methods:
        head += robust_table(summary)
    return head + "\n".join(lines[2:]) + "\n"


def robust_table(summary: dict) -> str:
    """The robust method against its goal: tol 1e-6 met with every |κl| ≤ 2π (verified with the
    reference kinematics) at caps 30 / 100 / 500, iterations, restarts, time per solve."""
    res = summary["results"]
    segs = sorted({int(k.split("|")[0]) for k in res})
    out = [f"\n## {ROBUST_METHOD}: tol 1e-6, success % (tol met and uncoiled, verified) and cost"
           "\n", "Iterations count every evaluation of every restart (candidates included). "
           f"Time: one `solve_robust` call at tol {TIME_TOL:g}, cap 500, wall clock and the "
           "thread's CPU time (the mean and p99 of wall time include waits for the CPU on a "
           "loaded machine).\n",
           "| N | cap 30 | cap 100 | cap 500 (± std over groups) | iterations mean / median "
           "(cap 500) | restarted % | mean restarts | wall median / mean / p99 [µs] | "
           "CPU median / mean / p99 [µs] |",
           "|---|---|---|---|---|---|---|---|---|"]
    for n in segs:
        r = res[f"{n}|{ROBUST_METHOD}"]
        c30, c100, c500 = (r[f"{c}|1e-06"] for c in (30, 100, 500))
        t = r["timing"]
        out.append(
            f"| {n} | {100 * c30['success_valid']:.2f} | {100 * c100['success_valid']:.2f} | "
            f"{100 * c500['success_valid']:.3f} ± {100 * c500['success_valid_std']:.2f} | "
            f"{c500['mean_iters_valid']:.1f} / {c500['median_iters_valid']:.0f} | "
            f"{100 * t['share_restarted']:.1f} | {t['mean_restarts']:.2f} | "
            f"{t['median_us']:.0f} / {t['mean_us']:.0f} / {t['p99_us']:.0f} | "
            f"{t['cpu_median_us']:.0f} / {t['cpu_mean_us']:.0f} / {t['cpu_p99_us']:.0f} |")
    return "\n".join(out) + "\n"


def compact(summary: dict) -> str:
    """The paper's comparison at a glance: success at caps 30 / 500 (tol 1e-4), both success
    definitions, and mean iterations at cap 500 per tolerance, VVL relative to Jacobian."""
    res = summary["results"]
    segs = sorted({int(k.split("|")[0]) for k in res})
    methods = [m for m in ALL_METHODS if f"{segs[0]}|{m}" in res]
    out = ["\n## Summary (tol 1e-4): success % at cap 30 / cap 500 — tol met | tol met and "
           "uncoiled\n",
           "| N | " + " | ".join(f"{m}: tol met | {m}: uncoiled" for m in methods) + " |",
           "|---|" + "---|" * (2 * len(methods))]
    for n in segs:
        cells = []
        for m in methods:
            a, b = res[f"{n}|{m}"]["30|0.0001"], res[f"{n}|{m}"]["500|0.0001"]
            cells.append(f"{100 * a['success']:.1f} / {100 * b['success']:.1f} | "
                         f"{100 * a['success_valid']:.1f} / {100 * b['success_valid']:.1f}")
        out.append(f"| {n} | " + " | ".join(cells) + " |")
    out += ["\n## Mean iterations of the successes (cap 500), tol 1e-4 / 1e-6 / 1e-8\n",
            "| N | " + " | ".join(methods) + " |", "|---|" + "---|" * len(methods)]
    for n in segs:
        cells = []
        for m in methods:
            r = res[f"{n}|{m}"]
            cells.append(" / ".join(f"{r[f'500|{t:g}']['mean_iters']:.1f}" for t in TOLS))
        out.append(f"| {n} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def figures(summary: dict, raw: dict, outdir: Path, tag: str = "") -> list[Path]:
    """Figs. 3/4 (workspace, failures at cap 500, tol 1e-4 in red) and Fig. 6 (bars); needs
    matplotlib (``poise[plot]``)."""
    require("plot", "--figures")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    outdir.mkdir(parents=True, exist_ok=True)
    paths = []
    segs = sorted({n for n, _ in raw})
    methods = [m for m in ALL_METHODS if (segs[0], m) in raw]
    fig, axes = plt.subplots(len(methods), len(segs),
                             figsize=(2.6 * len(segs), 2.6 * len(methods)), squeeze=False)
    for i, m in enumerate(methods):
        for j, n in enumerate(segs):
            g = raw[(n, m)][0]
            h, c = g["first_hit"][:, 0], g["coiled_at_hit"][:, 0]
            fail = ~((h >= 0) & ~c)
            P = g["positions"]
            r = np.hypot(P[:, 0], P[:, 1])  # the workspace is symmetric about the z axis
            ax = axes[i, j]
            ax.scatter(r[~fail], P[~fail, 2], s=0.6, c="tab:blue", alpha=0.4, linewidths=0,
                       rasterized=True)
            ax.scatter(r[fail], P[fail, 2], s=0.8, c="red", alpha=0.6, linewidths=0,
                       rasterized=True)
            ax.set_title(f"{m}, N={n}: {100 * fail.mean():.1f}% fail", fontsize=8)
            ax.set_aspect("equal")
            ax.tick_params(labelsize=6)
            if j == 0:
                ax.set_ylabel("z [m]", fontsize=7)
            if i == len(methods) - 1:
                ax.set_xlabel("√(x² + y²) [m]", fontsize=7)
    fig.suptitle("Targets (blue); red: failed (tol 1e-4, cap 500, all |κl| ≤ 2π); first group",
                 fontsize=9)
    fig.tight_layout()
    path = outdir / f"continuum_workspace{tag}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    paths.append(path)

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5), sharey=True)
    width = 0.8 / len(methods)
    for ax, cap in zip(axes, (30, 500), strict=True):
        for i, m in enumerate(methods):
            res = [summary["results"][f"{n}|{m}"][f"{cap}|0.0001"] for n in segs]
            x = np.arange(len(segs)) + (i - (len(methods) - 1) / 2) * width
            ax.bar(x, [100 * r["success"] for r in res], width, alpha=0.35,
                   color=f"C{i}")
            ax.bar(x, [100 * r["success_valid"] for r in res], width, label=m, color=f"C{i}",
                   yerr=[100 * r["success_valid_std"] for r in res])
        ax.set_xticks(np.arange(len(segs)), [str(n) for n in segs])
        ax.set_xlabel("segments")
        ax.set_title(f"tol 1e-4, cap {cap} (pale: tol met incl. coiled)")
    axes[0].set_ylabel("success %")
    axes[0].legend()
    fig.tight_layout()
    path = outdir / f"continuum_success{tag}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    paths.append(path)
    return paths


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="poise bench vvl", description=__doc__.split("\n")[0])
    add_arguments(ap)
    return run_cli(ap.parse_args(argv))


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--quick", action="store_true", help="one group of 1,000 targets per N")
    ap.add_argument("--segments", type=int, nargs="+", default=[2, 3, 4, 5, 6, 7])
    ap.add_argument("--groups", type=int, default=None, help="groups per N (default 15)")
    ap.add_argument("--size", type=int, default=None, help="targets per group (default 10,000)")
    ap.add_argument("--beta", type=float, default=DEFAULT_BETA)
    ap.add_argument("--start", choices=["neutral", "perturbed"], default="neutral")
    ap.add_argument("--vvl-free-iters", type=int, default=None,
                    help="VVL free-length phase cap (0: augmented task from the start)")
    ap.add_argument("--vvl-switch", type=float, default=None,
                    help="VVL: end the free-length phase below this virtual-length error")
    ap.add_argument("--max-step", type=float, default=None,
                    help="safeguard (beyond seed 001): clip every step to max|Δx| ≤ this")
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=ALL_METHODS,
                    help=f"default: the paper's {' '.join(METHODS)}; {ROBUST_METHOD}: beyond "
                         "the paper, default options (the settings above do not apply)")
    ap.add_argument("--robust", nargs="+", default=None, metavar="KEY=VALUE",
                    help="robust: option overrides (poise.ik.continuum_robust.RobustOptions), "
                         "e.g. candidates=1 max_step=0.5")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1),
                    help="worker processes (default: min(2, CPUs))")
    ap.add_argument("--json", type=Path, default=None, help="write the summary JSON here")
    ap.add_argument("--markdown", type=Path, default=None, help="write the table here")
    ap.add_argument("--figures", type=Path, default=None,
                    help="directory for the PNG figures (e.g. docs/figures)")
    ap.add_argument("--report", type=Path, default=None,
                    help="only re-print the tables of an earlier --json summary")
    ap.add_argument("--tag", default="", help="suffix of the figure names")
    add_quiet_option(ap)


def robust_overrides(pairs: list[str]) -> dict:
    """``["candidates=1", "max_step=0.5"]`` → typed RobustOptions overrides (checked)."""
    from poise.ik.continuum_robust import RobustOptions

    defaults = RobustOptions().__dict__
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or key not in defaults or key in ("tol", "max_iter"):
            raise ValueError(f"{pair!r}: expected KEY=VALUE with KEY one of "
                             f"{', '.join(k for k in defaults if k not in ('tol', 'max_iter'))}")
        out[key] = type(defaults[key])(float(value))
    RobustOptions(**out)  # InvalidInputError (a ValueError) for values out of range
    return out


def run_cli(args: argparse.Namespace) -> int:
    if args.report:
        summary = json.loads(args.report.read_text())
        table = markdown(summary)
        print(table)
        if args.markdown:
            args.markdown.write_text(table)
        return 0
    groups = args.groups or (1 if args.quick else 15)
    size = args.size or (1000 if args.quick else 10000)
    if any(n < 1 for n in args.segments) or groups < 1 or size < 1:
        print("segments, groups and size must be ≥ 1", file=sys.stderr)
        return 2
    extra = {k: v for k, v in (("vvl_free_iters", args.vvl_free_iters),
                               ("vvl_switch", args.vvl_switch),
                               ("max_step", args.max_step)) if v is not None}
    try:
        robust = robust_overrides(args.robust or [])
    except ValueError as exc:
        print(f"--robust: {exc}", file=sys.stderr)
        return 2
    if args.figures:
        require("plot", "--figures")  # before the long run, not after it
    total = len(args.segments) * len(args.methods) * groups * size
    with progress_bar(total, "bench vvl", unit="target", quiet=args.quiet) as bar:
        def log(line: str) -> None:  # the bar shows the last group; without one, a line each
            if bar.disable:
                print(line, file=sys.stderr)
            else:
                bar.set_postfix_str(" ".join(line.split()), refresh=False)

        summary, raw = run(args.segments, groups, size, args.seed, args.beta, args.methods,
                           args.workers, args.start, extra or None, log=log,
                           robust=robust or None, progress=bar.update)
    table = markdown(summary)
    print(table)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(summary, indent=1))
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(table)
    if args.figures:
        for p in figures(summary, raw, args.figures, args.tag):
            print(f"wrote {p}", file=sys.stderr)
    print(f"{summary['protocol']['trials']:,} trials in "
          f"{summary['protocol']['wall_time_s']:.1f} s", file=sys.stderr)
    return 0
