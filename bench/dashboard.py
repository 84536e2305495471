"""Dashboard frame-time benchmark: update + offscreen render of the whole window with 12 curves ×
5,000 points, against an empty-frame baseline in the same run.

Usage: ``python bench/dashboard.py [--points N] [--frames N] [--json PATH]`` (same as
``poise bench dashboard``). Prints a table; writes JSON (default bench/results/dashboard.json).
"""

from __future__ import annotations

import argparse
import os
import pathlib

from poise.benchmarks.benchout import emit

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from poise.gui import bench


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=5000, help="samples per curve")
    parser.add_argument("--frames", type=int, default=150, help="measured frames per case")
    parser.add_argument("--json", type=pathlib.Path,
                        default=pathlib.Path(__file__).parent / "results" / "dashboard.json",
                        help="write the results here")
    args = parser.parse_args(argv)
    result = bench.run(points=args.points, frames=args.frames)
    return emit(result, bench.table(result), args.json)


if __name__ == "__main__":
    raise SystemExit(main())
