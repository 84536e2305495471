"""``poise bench sim``: real-time factor of the plant simulator per reference model, compiled
and numpy reference in the same run."""

from __future__ import annotations

import argparse
import sys

from poise.benchmarks.benchout import add_json_option, add_quiet_option, emit


def register(commands: argparse._SubParsersAction, groups: dict) -> None:
    """Add ``poise bench sim``."""
    text = "simulator real-time factor per reference model, compiled vs numpy"
    p = groups["bench"].add_parser("sim", help=text, description=text[0].upper() + text[1:])
    p.add_argument("--duration", type=float, default=1.0, metavar="S",
                   help="simulated seconds per model, integrator and path (default 1)")
    p.add_argument("--repeat", type=int, default=3, help="timing repeats (best is kept)")
    p.add_argument("--rate", type=float, default=5000.0, metavar="HZ",
                   help="internal rate (default 5000)")
    p.add_argument("--models", nargs="+", metavar="NAME",
                   help="models (default: every reference model of poise.sim.benchmark)")
    p.add_argument("--integrators", nargs="+", default=["euler", "rk4"],
                   choices=["euler", "rk4"])
    add_json_option(p)
    add_quiet_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from poise.progress import progress_bar
    from poise.sim import benchmark  # here, not at the top: the parser loads no simulator

    if args.repeat < 1:
        print(f"poise bench sim: --repeat {args.repeat}: must be >= 1", file=sys.stderr)
        return 2
    models = args.models or list(benchmark.MODELS)
    cases = len(models) * len(args.integrators)
    try:
        with progress_bar(cases, "bench sim", unit="case", quiet=args.quiet) as bar:
            result = benchmark.run(tuple(models), rate=args.rate,
                                   integrators=tuple(args.integrators),
                                   duration=args.duration, repeat=args.repeat,
                                   progress=bar.update)
    except ValueError as exc:
        print(f"poise bench sim: {exc}", file=sys.stderr)
        return 2
    return emit(result, benchmark.table(result), args.json)
