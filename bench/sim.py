"""Simulator real-time factor per reference model (same as ``poise bench sim``).

Usage: ``nice python bench/sim.py [--duration S] [--repeat N] [--json PATH]``; prints a table and
writes JSON (default ``bench/results/sim.json``).
"""

from __future__ import annotations

import argparse
import pathlib
import sys

from poise.sim import benchmark

DEFAULT_JSON = pathlib.Path(__file__).parent / "results" / "sim.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--duration", type=float, default=1.0, metavar="S",
                        help="simulated seconds per model and integrator (default 1)")
    parser.add_argument("--repeat", type=int, default=3, help="timing repeats (best is kept)")
    parser.add_argument("--rate", type=float, default=5000.0, metavar="HZ",
                        help="internal rate (default 5000)")
    parser.add_argument("--models", nargs="+", default=list(benchmark.MODELS), metavar="NAME")
    parser.add_argument("--integrators", nargs="+", default=["euler", "rk4"],
                        choices=["euler", "rk4"])
    parser.add_argument("--json", default=str(DEFAULT_JSON), metavar="PATH",
                        help="write the results here ('-': stdout only, '': nowhere)")


def run_cli(args: argparse.Namespace) -> int:
    result = benchmark.run(tuple(args.models), rate=args.rate,
                           integrators=tuple(args.integrators), duration=args.duration,
                           repeat=args.repeat)
    if args.json == "-":
        print(benchmark.dumps(result), end="")
        return 0
    print(benchmark.table(result))
    if args.json:
        path = pathlib.Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(benchmark.dumps(result))
        print(f"wrote {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run_cli(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
