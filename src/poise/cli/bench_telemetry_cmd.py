"""``poise bench telemetry``: MQTT latency and rate, log throughput, effect on a 1 kHz loop."""

from __future__ import annotations

import argparse
import json
import pathlib


def register(commands, groups) -> None:
    p = groups["bench"].add_parser(
        "telemetry", help="MQTT end-to-end latency/rate, log throughput, loop disturbance")
    p.add_argument("--seconds", type=float, default=3.0, help="length of each measurement [s]")
    p.add_argument("--quick", action="store_true", help="short smoke run")
    p.add_argument("--json", nargs="?", const="-", metavar="PATH",
                   help="write JSON to PATH (or to stdout without PATH)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from poise.telemetry import benchmark

    result = benchmark.run(args.seconds, args.quick)
    if args.json == "-":
        print(json.dumps(result, indent=1))
        return 0
    print(benchmark.table(result))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0
