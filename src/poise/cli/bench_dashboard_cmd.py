"""``poise bench dashboard``: frame time of the dashboard under load (offscreen)."""

from __future__ import annotations

import argparse
import os

from poise.benchmarks.benchout import add_json_option, emit


def register(commands, groups) -> None:
    p = groups["bench"].add_parser(
        "dashboard", help="dashboard frame time (12 curves × 5,000 points vs an empty frame)")
    p.add_argument("--points", type=int, default=5000, help="samples per curve (default 5000)")
    p.add_argument("--frames", type=int, default=150, help="measured frames per case")
    add_json_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from poise.api.extras import require

    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    require("gui", "poise bench dashboard")
    from poise.gui import bench

    result = bench.run(points=args.points, frames=args.frames)
    return emit(result, bench.table(result), args.json)
