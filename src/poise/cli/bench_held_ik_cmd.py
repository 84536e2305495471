"""``poise bench held-ik``: µs per step and per solve of Algorithms 1 and 2 per model.

Thin: the protocol lives in the benchmark module (``bench/held_ik.py`` of a source checkout
until it moves into :mod:`poise.benchmarks`); every option goes to its ``main(argv)``
(``poise bench held-ik --help`` lists them).
"""

from __future__ import annotations

from poise.cli.bench_script import register_script


def register(commands, groups) -> None:
    """Add ``poise bench held-ik``."""
    register_script(groups, "held-ik", "held_ik",
                    "held IK: µs per Algorithm-1/2 step and solve on every reference model")
