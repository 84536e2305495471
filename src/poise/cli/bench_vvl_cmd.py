"""``poise bench vvl``: the seed 001 III-B benchmark (Jacobian vs DLS vs VVL on cc3d_N).

Thin: the protocol, tables and figures live in :mod:`poise.benchmarks.vvl`; every option goes
to its ``main(argv)`` (``poise bench vvl --help`` lists them).
"""

from __future__ import annotations

from poise.cli.bench_script import register_script


def register(commands, groups) -> None:
    """Add ``poise bench vvl``."""
    register_script(groups, "vvl", "vvl",
                    "continuum IK: Jacobian vs DLS vs VVL on cc3d_2…7 (seed 001 III-B)")
