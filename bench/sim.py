"""Benchmark: simulator real-time factor per reference model, compiled and numpy reference in
the same run.

Usage::

    nice python bench/sim.py [--duration S] [--repeat N] [--models NAME …] [--json FILE] [--quiet]

The same as ``poise bench sim`` (the protocol is in :mod:`poise.sim.benchmark`), with the JSON
written to ``bench/results/sim.json`` unless ``--json`` says otherwise.
"""

from __future__ import annotations

import pathlib
import sys

from poise.cli import main as poise_main

RESULTS = pathlib.Path(__file__).parent / "results" / "sim.json"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--json" not in argv:
        argv += ["--json", str(RESULTS)]
    return poise_main(["bench", "sim", *argv])


if __name__ == "__main__":
    sys.exit(main())
