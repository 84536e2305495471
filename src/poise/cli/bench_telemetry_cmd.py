"""``poise bench telemetry``: MQTT latency and rate, log throughput, effect on a 1 kHz loop."""

from __future__ import annotations

import argparse

from poise.benchmarks.benchout import add_json_option, emit


def register(commands, groups) -> None:
    p = groups["bench"].add_parser(
        "telemetry", help="MQTT end-to-end latency/rate, log throughput, loop disturbance")
    p.add_argument("--seconds", type=float, default=3.0, help="length of each measurement [s]")
    p.add_argument("--quick", action="store_true", help="short smoke run")
    add_json_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from poise.telemetry import benchmark

    result = benchmark.run(args.seconds, args.quick)
    return emit(result, benchmark.table(result), args.json)
