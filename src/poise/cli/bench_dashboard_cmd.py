"""``poise bench dashboard``: frame time of the dashboard under load (offscreen)."""

from __future__ import annotations

import argparse
import json
import os
import pathlib


def register(commands, groups) -> None:
    p = groups["bench"].add_parser(
        "dashboard", help="dashboard frame time (12 curves × 5,000 points vs an empty frame)")
    p.add_argument("--points", type=int, default=5000, help="samples per curve (default 5000)")
    p.add_argument("--frames", type=int, default=150, help="measured frames per case")
    p.add_argument("--json", nargs="?", const="-", metavar="PATH",
                   help="write JSON to PATH (or to stdout without PATH)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from poise.gui import bench

    result = bench.run(points=args.points, frames=args.frames)
    if args.json == "-":
        print(json.dumps(result, indent=1))
        return 0
    print(bench.table(result))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0
