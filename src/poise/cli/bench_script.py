"""``poise bench NAME ARGS…`` for a benchmark whose options its own ``main(argv)`` parses.

The sub-command passes every argument through (``--help`` too) to the module found by
:func:`poise.benchmarks.scripts.load`, so nothing is imported before the command runs.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register_script(groups: dict[str, Any], command: str, module: str, help_text: str) -> None:
    """Add ``poise bench <command>`` running the benchmark module ``module``."""
    p = groups["bench"].add_parser(
        command, help=help_text, add_help=False, prefix_chars="\0",
        usage=f"poise bench {command} [OPTIONS…]  (poise bench {command} --help lists them)")
    p.add_argument("argv", nargs="*", metavar="OPTIONS", help=argparse.SUPPRESS)
    p.set_defaults(func=lambda args: run_script(command, module, args.argv))


def run_script(command: str, module: str, argv: list[str]) -> int:
    """Load the benchmark and run its ``main(argv)``; 2 when it cannot be found."""
    from poise.benchmarks.scripts import CHECKOUT_BENCH, load

    found = load(module)
    if found is None:
        print(f"poise bench {command}: this benchmark is not part of the installed package "
              f"yet; run it from a source checkout ({CHECKOUT_BENCH.name}/{module}.py)",
              file=sys.stderr)
        return 2
    return int(found.main(argv) or 0)
