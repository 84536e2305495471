"""Benchmark: moving references on every reference robot with actuation (issue 33).

Usage::

    nice python bench/tracking.py [--robots NAME …] [--modes fb] [--freqs 0.1,0.25]
                                  [--kinds sine,circle,steps] [--as stream,trajectory]
                                  [--plant NAME[=FILE]] [--quick] [--workers N]
                                  [--figure PNG] [--json FILE] [--quiet]
    nice python bench/tracking.py --live [--robots NAME …] [--commands N]

The same as ``poise bench tracking`` (the protocol is in :mod:`poise.benchmarks.tracking`,
the end-to-end part in :mod:`poise.benchmarks.tracking_live`), with the JSON written to
``bench/results/tracking.json`` (``tracking_live.json`` with ``--live``) unless ``--json``
says otherwise.
"""

from __future__ import annotations

import pathlib
import sys

from poise.cli import main as poise_main

RESULTS = pathlib.Path(__file__).parent / "results"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--json" not in argv:
        name = "tracking_live.json" if "--live" in argv else "tracking.json"
        argv += ["--json", str(RESULTS / name)]
    return poise_main(["bench", "tracking", *argv])


if __name__ == "__main__":
    sys.exit(main())
