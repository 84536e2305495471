"""Benchmark: the seed 001 III-B protocol, Jacobian vs DLS vs VVL (and ``robust``) on cc3d_N.

Usage::

    python bench/vvl.py [--quick] [--segments 2 3 ...] [--json FILE] [--workers 2] [--quiet]

The same as ``poise bench vvl``: the protocol, tables and figures are in
:mod:`poise.benchmarks.vvl` (docs/continuum.md). Worker processes run numpy single-threaded
(``OMP_NUM_THREADS=1`` unless set), as the published runs did.
"""

from __future__ import annotations

import os
import sys

from poise.cli import main as poise_main


def main(argv: list[str] | None = None) -> int:
    return poise_main(["bench", "vvl", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
