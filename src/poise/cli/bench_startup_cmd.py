"""``poise bench startup``: launch → ``running`` of ``poise run``, phase by phase."""

from __future__ import annotations

import argparse
import sys

from poise.benchmarks.benchout import add_json_option, add_quiet_option, emit


def register(commands: argparse._SubParsersAction, groups: dict) -> None:
    """Add ``poise bench startup``."""
    from poise.benchmarks import startup

    p = groups["bench"].add_parser(
        "startup", help="start-up time of 'poise run' (launch → running), phase by phase",
        description=startup.__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5, help="warm start-ups (default 5)")
    p.add_argument("--cold", action="store_true",
                   help="first one start-up with an empty Numba cache (reported apart)")
    p.add_argument("run_args", nargs=argparse.REMAINDER, metavar="-- RUN_ARGS",
                   help="flags for 'poise run' after '--' (default: the demo)")
    add_json_option(p)
    add_quiet_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from poise.benchmarks import startup
    from poise.progress import progress_bar

    run_args = [a for a in args.run_args if a != "--"]
    try:
        with progress_bar(args.runs + args.cold, "bench startup", unit="run",
                          quiet=args.quiet) as bar:
            result = startup.run(run_args, runs=args.runs, cold=args.cold,
                                 progress=bar.update)
    except (ValueError, RuntimeError) as exc:
        print(f"poise bench startup: {exc}", file=sys.stderr)
        return 2
    return emit(result, startup.table(result), args.json)
