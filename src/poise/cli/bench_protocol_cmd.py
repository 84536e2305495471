"""``poise bench protocol``: wire-protocol codec cost per message type."""

from __future__ import annotations

import argparse

from poise.benchmarks.benchout import add_json_option, emit


def register(commands, groups) -> None:
    p = groups["bench"].add_parser(
        "protocol", help="frame encode/decode µs per message type (vs a struct.pack baseline)")
    p.add_argument("--number", type=int, default=2000, help="calls per timing repeat")
    p.add_argument("--repeat", type=int, default=5, help="timing repeats (best is kept)")
    add_json_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from poise.firmware_bridge import benchmark

    result = benchmark.run(args.number, args.repeat)
    return emit(result, benchmark.table(result), args.json)
