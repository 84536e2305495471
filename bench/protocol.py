"""Protocol codec benchmark: frame encode/decode µs per message type, with a struct.pack baseline.

Usage: ``python bench/protocol.py [--number N] [--json PATH]`` (same as ``poise bench protocol``).
Prints a table; writes JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import pathlib

from poise.firmware_bridge import benchmark


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=2000, help="calls per timing repeat")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", type=pathlib.Path, help="write the results here")
    args = parser.parse_args(argv)
    result = benchmark.run(args.number, args.repeat)
    print(benchmark.table(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
