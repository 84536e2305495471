"""Benchmark: compiled kernels (poise.kernels) against the numpy reference, same run.

Usage::

    python bench/kernels.py [--json FILE] [--no-compile] [--min-time S] [--quiet]

The same as ``poise bench kernels`` (the protocol is in :mod:`poise.benchmarks.kernels`), with
the JSON written to ``bench/results/kernels.json`` unless ``--json`` says otherwise.
"""

from __future__ import annotations

import pathlib
import sys

from poise.cli import main as poise_main

RESULTS = pathlib.Path(__file__).parent / "results" / "kernels.json"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--json" not in argv:
        argv += ["--json", str(RESULTS)]
    return poise_main(["bench", "kernels", *argv])


if __name__ == "__main__":
    sys.exit(main())
