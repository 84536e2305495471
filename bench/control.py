"""Benchmark: closed-loop control on every reference robot with actuation (issue 14).

Usage::

    nice python bench/control.py [--models NAME …] [--targets N] [--workers N] [--figure PNG]
                                 [--json FILE] [--quiet]

The same as ``poise bench control`` (the protocol is in :mod:`poise.benchmarks.control`), with
the JSON written to ``bench/results/control.json`` unless ``--json`` says otherwise.
"""

from __future__ import annotations

import pathlib
import sys

from poise.cli import main as poise_main

RESULTS = pathlib.Path(__file__).parent / "results" / "control.json"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--json" not in argv:
        argv += ["--json", str(RESULTS)]
    return poise_main(["bench", "control", *argv])


if __name__ == "__main__":
    sys.exit(main())
