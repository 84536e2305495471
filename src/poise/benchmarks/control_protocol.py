"""The protocol constants of ``poise bench control`` (:mod:`poise.benchmarks.control`): the
cases, the success band, the seed and the settling goal. A module of its own, importing
nothing, so that ``poise``'s command-line parser can offer them without loading the
controller."""

from __future__ import annotations

#: First line of the benchmark's description (``poise bench control --help``).
DESCRIPTION = ("Closed-loop control on every reference robot with actuation "
               "(``poise bench control``).")
#: The reference robots with actuation, the loop modes and the algorithms benchmarked.
MODELS = ("double_pendulum", "tendon_3link", "soft_arm_stiff", "soft_arm_soft", "dancer")
MODES = ("ff", "fb")
ALGORITHMS = ("alg1", "alg2")
#: Targets per model.
TARGETS = 20
#: How long the error must stay in the band [s].
HOLD = 2.0
#: The success band: min(SUCCESS_ABS [m], SUCCESS_REL × the reach).
SUCCESS_ABS = 3e-3
SUCCESS_REL = 5e-3
#: Targets' actuators are drawn from this central fraction of each actuator's range.
INNER = 0.8
#: Seed of the targets and of the sensor noise.
SEED = 14
#: The settling goal, in periods of the slowest structural mode.
GOAL_PERIODS = 3.0


__all__ = ["ALGORITHMS", "DESCRIPTION", "GOAL_PERIODS", "HOLD", "INNER", "MODELS", "MODES",
           "SEED", "SUCCESS_ABS", "SUCCESS_REL", "TARGETS"]
