"""``poise bench sim``: real-time factor of the plant simulator per reference model."""

from __future__ import annotations

import argparse
import pathlib
import sys

from poise.cli.benchout import add_quiet_option
from poise.sim import benchmark


def register(commands: argparse._SubParsersAction, groups: dict) -> None:
    """Add ``poise bench sim``."""
    p = groups["bench"].add_parser(
        "sim", help="simulator real-time factor per reference model (vs a bare G(q) call)",
        description=benchmark.__doc__.splitlines()[0])
    p.add_argument("--duration", type=float, default=1.0, metavar="S",
                   help="simulated seconds per model and integrator (default 1)")
    p.add_argument("--repeat", type=int, default=3, help="timing repeats (best is kept)")
    p.add_argument("--rate", type=float, default=5000.0, metavar="HZ",
                   help="internal rate (default 5000)")
    p.add_argument("--models", nargs="+", default=list(benchmark.MODELS), metavar="NAME")
    p.add_argument("--integrators", nargs="+", default=["euler", "rk4"],
                   choices=["euler", "rk4"])
    p.add_argument("--json", nargs="?", const="-", metavar="PATH",
                   help="write JSON to PATH (or to stdout without PATH)")
    add_quiet_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from poise.progress import progress_bar

    cases = len(args.models) * len(args.integrators)
    try:
        with progress_bar(cases, "bench sim", unit="case", quiet=args.quiet) as bar:
            result = benchmark.run(tuple(args.models), rate=args.rate,
                                   integrators=tuple(args.integrators),
                                   duration=args.duration, repeat=args.repeat,
                                   progress=bar.update)
    except ValueError as exc:
        print(f"poise bench sim: {exc}", file=sys.stderr)
        return 2
    if args.json == "-":
        print(benchmark.dumps(result), end="")
        return 0
    print(benchmark.table(result))
    if args.json:
        pathlib.Path(args.json).write_text(benchmark.dumps(result))
        print(f"wrote {args.json}")
    return 0
