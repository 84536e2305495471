"""``poise bench protocol``: wire-protocol codec cost per message type."""

from __future__ import annotations

import argparse
import json
import pathlib


def register(commands, groups) -> None:
    p = groups["bench"].add_parser(
        "protocol", help="frame encode/decode µs per message type (vs a struct.pack baseline)")
    p.add_argument("--number", type=int, default=2000, help="calls per timing repeat")
    p.add_argument("--repeat", type=int, default=5, help="timing repeats (best is kept)")
    p.add_argument("--json", nargs="?", const="-", metavar="PATH",
                   help="write JSON to PATH (or to stdout without PATH)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from poise.firmware_bridge import benchmark

    result = benchmark.run(args.number, args.repeat)
    if args.json == "-":
        print(json.dumps(result, indent=1))
        return 0
    print(benchmark.table(result))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0
