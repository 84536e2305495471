"""``poise bench ik``: the Panda IK benchmark against the Robotics Toolbox
(see :mod:`poise.benchmarks.ik_panda`)."""

from __future__ import annotations

import argparse
from typing import Any

from poise.benchmarks.benchout import add_json_option, add_quiet_option

#: Kept here so ``poise --help`` does not import the benchmark (and Numba).
METHODS = ("lm", "lm_numpy", "dls", "pinv", "transpose")


def register(commands: argparse._SubParsersAction, groups: dict[str, Any]) -> None:
    p = groups["bench"].add_parser(
        "ik", help="IK solve rate and time on random reachable Panda poses (TRAC-IK protocol), "
        "against the Robotics Toolbox's ik_LM when it is installed")
    p.add_argument("--n", type=int, default=10_000, help="number of targets (default 10000)")
    p.add_argument("--seed", type=int, default=0, help="seed of the targets (default 0)")
    p.add_argument("--model", default="panda", help="dh_chain pose model (default panda)")
    p.add_argument("--method", nargs="+", default=["lm"], choices=METHODS,
                   help="methods to time (default lm: poise.ik.solve(method='lm'), compiled on "
                   "a dh_chain; lm_numpy: its numpy reference)")
    p.add_argument("--baseline", default="pinv", choices=[*METHODS, "none"],
                   help="reference method timed in the same run "
                   "for ratios ('none' to skip; default pinv)")
    p.add_argument("--baseline-n", type=int, default=None,
                   help="solve only the first N targets with the baseline")
    p.add_argument("--rtb", choices=["auto", "on", "off"], default="auto",
                   help="the Robotics Toolbox's C++ ik_LM on the same targets: auto (default) "
                   "when installed, else a note; on: fail when it is not installed; off")
    p.add_argument("--restarts", type=int, default=50, help="random restarts allowed")
    p.add_argument("--start", choices=["home", "random"], default="home",
                   help="first start configuration (default: the model's home)")
    p.add_argument("--tol", type=float, default=1e-6, help="tolerance on the task error")
    add_json_option(p)
    add_quiet_option(p)
    p.set_defaults(func=cmd_bench_ik)


def cmd_bench_ik(args: argparse.Namespace) -> int:
    import sys

    from poise.benchmarks import rtb
    from poise.benchmarks.benchout import emit
    from poise.benchmarks.ik_panda import format_table, planned_solves, run_ik_benchmark
    from poise.models import load_model
    from poise.progress import progress_bar

    if args.n < 1 or args.restarts < 0 or not args.tol > 0:
        print("poise bench ik: --n must be >= 1, --restarts >= 0, --tol > 0", file=sys.stderr)
        return 2
    try:
        model = load_model(args.model)
    except ValueError as exc:
        print(f"poise bench ik: {exc}", file=sys.stderr)
        return 2
    if getattr(model, "task_kind", "") != "pose":
        print(f"poise bench ik: model {args.model!r} has no pose task", file=sys.stderr)
        return 2
    with_rtb = args.rtb != "off" and rtb.unavailable_reason(model) is None
    if args.rtb == "on" and not with_rtb:
        print(f"poise bench ik: --rtb on: {rtb.unavailable_reason(model)}", file=sys.stderr)
        return 2
    baseline = None if args.baseline == "none" else args.baseline
    total = planned_solves(args.n, tuple(args.method), baseline, args.baseline_n, with_rtb)
    with progress_bar(total, "bench ik", unit="solve", quiet=args.quiet) as bar:
        report = run_ik_benchmark(
            model, n=args.n, seed=args.seed, tol=args.tol, restarts=args.restarts,
            methods=tuple(args.method), start=args.start, baseline=baseline,
            baseline_n=args.baseline_n, with_rtb=args.rtb != "off", progress=bar.update)
    return emit(report, format_table(report), args.json)
