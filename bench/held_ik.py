"""Benchmark: held IK, µs per step and per solve of Algorithms 1 and 2 on every reference model.

Usage::

    python bench/held_ik.py [--solves N] [--seed S] [--models NAME …] [--json FILE] [--quiet]

The same as ``poise bench held-ik`` (the protocol is in :mod:`poise.benchmarks.held_ik`), with
the JSON written to ``bench/results/held_ik.json`` unless ``--json`` says otherwise.
"""

from __future__ import annotations

import pathlib
import sys

from poise.cli import main as poise_main

RESULTS = pathlib.Path(__file__).parent / "results" / "held_ik.json"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--json" not in argv:
        argv += ["--json", str(RESULTS)]
    return poise_main(["bench", "held-ik", *argv])


if __name__ == "__main__":
    sys.exit(main())
