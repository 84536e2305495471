"""``poise bench kernels``: compiled kernels against the numpy reference, same run."""

from __future__ import annotations

import argparse

from poise.benchmarks.benchout import add_json_option, add_quiet_option, emit


def register(commands, groups) -> None:
    """Add ``poise bench kernels``."""
    p = groups["bench"].add_parser(
        "kernels", help="µs per control cycle and per kernel, compiled (Numba) vs numpy, "
        "and the compile time of a first and a second start")
    p.add_argument("--no-compile", action="store_true",
                   help="skip the compile-time measurement (two fresh processes, ~2 min)")
    p.add_argument("--min-time", type=float, default=0.2, metavar="S",
                   help="seconds per timing repeat group (default 0.2)")
    add_json_option(p)
    add_quiet_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from poise.benchmarks import kernels
    from poise.progress import progress_bar

    compile_time = not args.no_compile
    with progress_bar(kernels.steps_planned(compile_time), "bench kernels", unit="step",
                      quiet=args.quiet) as bar:
        report = kernels.run(args.min_time, compile_time, progress=bar.update)
    return emit(report, kernels.table(report), args.json)
