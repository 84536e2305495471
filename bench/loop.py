"""Control-loop benchmark: lateness, latency and missed cycles at 500 Hz and 1 kHz.

Usage: ``python bench/loop.py [--seconds S] [--json PATH]`` (same as ``poise bench loop``).
The controller runs against ``poise device sim`` in a separate process; prints a table and
writes JSON (default ``bench/results/loop.json``).
"""

from __future__ import annotations

import argparse
import pathlib
import tempfile

from poise.benchmarks.benchout import emit
from poise.controller import benchmark
from poise.telemetry.service import bench_attach


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="measured seconds per rate")
    parser.add_argument("--rates", type=float, nargs="+", default=[500.0, 1000.0])
    parser.add_argument("--pacing", choices=("device", "host"), default="device")
    parser.add_argument("--no-telemetry", action="store_true",
                        help="measure without MQTT telemetry and the MCAP log")
    parser.add_argument("--json", type=pathlib.Path,
                        default=pathlib.Path(__file__).parent / "results" / "loop.json")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as logs:
        attach = None if args.no_telemetry else bench_attach(logs)
        result = benchmark.run(args.seconds, tuple(args.rates), pacing=args.pacing,
                               attach=attach)
    return emit(result, benchmark.table(result), args.json)


if __name__ == "__main__":
    raise SystemExit(main())
