"""``poise bench held-ik``: µs per step and per solve of Algorithms 1 and 2 per model,
compiled and numpy in the same run (the protocol: :mod:`poise.benchmarks.held_ik`)."""

from __future__ import annotations

import argparse

from poise.benchmarks.benchout import add_json_option, add_quiet_option, emit


def register(commands, groups) -> None:
    """Add ``poise bench held-ik``."""
    p = groups["bench"].add_parser(
        "held-ik", help="held IK: µs per Algorithm-1/2 step and solve on every reference "
        "model, compiled and numpy")
    p.add_argument("--solves", type=int, default=20, metavar="N",
                   help="random reachable targets per model (default 20)")
    p.add_argument("--seed", type=int, default=0, help="seed of the targets (default 0)")
    p.add_argument("--models", nargs="+", default=None, metavar="NAME",
                   help="reference models (default: all five with an unactuated part)")
    add_json_option(p)
    add_quiet_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from poise.benchmarks import held_ik
    from poise.progress import progress_bar

    if args.solves < 1:
        raise SystemExit("poise bench held-ik: --solves must be at least 1")
    models = args.models or list(held_ik.MODELS)
    unknown = [name for name in models if name not in held_ik.MODELS]
    if unknown:
        raise SystemExit(f"poise bench held-ik: --models: unknown {', '.join(unknown)} "
                         f"(allowed: {', '.join(held_ik.MODELS)})")
    with progress_bar(held_ik.steps_planned(models, args.solves), "bench held-ik",
                      unit="step", quiet=args.quiet) as bar:
        report = held_ik.run(models, args.solves, args.seed, progress=bar.update)
    return emit(report, held_ik.table(report), args.json)
