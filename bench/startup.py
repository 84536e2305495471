"""Benchmark: start-up time of ``poise run`` (launch → running), phase by phase.

Usage::

    python bench/startup.py [--runs N] [--cold] [--json FILE] [--quiet] [-- RUN_ARGS …]

The same as ``poise bench startup`` (the protocol is in :mod:`poise.benchmarks.startup`), with
the JSON written to ``bench/results/startup.json`` unless ``--json`` says otherwise.
"""

from __future__ import annotations

import pathlib
import sys

from poise.cli import main as poise_main

RESULTS = pathlib.Path(__file__).parent / "results" / "startup.json"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--json" not in argv:
        argv += ["--json", str(RESULTS)]
    return poise_main(["bench", "startup", *argv])


if __name__ == "__main__":
    sys.exit(main())
