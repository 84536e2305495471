"""Telemetry and logging benchmark: MQTT end-to-end latency and rate, broker relay rate, log
throughput, and what logging and MQTT do to a 1 kHz timing thread's lateness (same run).

Usage: ``python bench/telemetry.py [--seconds S] [--quick] [--json PATH]`` (same as
``poise bench telemetry``). Prints a table; writes JSON (default bench/results/telemetry.json).
"""

from __future__ import annotations

import argparse
import pathlib

from poise.benchmarks.benchout import emit
from poise.telemetry import benchmark

DEFAULT_JSON = pathlib.Path(__file__).parent / "results" / "telemetry.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="length of each measurement")
    parser.add_argument("--quick", action="store_true", help="short smoke run")
    parser.add_argument("--json", type=pathlib.Path, default=DEFAULT_JSON,
                        help=f"write the results here (default {DEFAULT_JSON})")
    args = parser.parse_args(argv)
    result = benchmark.run(args.seconds, args.quick)
    return emit(result, benchmark.table(result), args.json)


if __name__ == "__main__":
    raise SystemExit(main())
