"""The protocol constants of ``poise bench tracking`` (:mod:`poise.benchmarks.tracking`): the
cases, the references, the measurement and the goals (issue 33). A module of its own,
importing only :mod:`~poise.benchmarks.control_protocol` (the robots, modes and
algorithms are ``poise bench control``'s), so that ``poise``'s command-line parser can offer
them without loading the controller."""

from __future__ import annotations

from poise.benchmarks.control_protocol import ALGORITHMS, MODES
from poise.benchmarks.control_protocol import MODELS as ROBOTS

#: First line of the benchmark's description (``poise bench tracking --help``).
DESCRIPTION = ("Moving references followed by every reference robot with actuation "
               "(``poise bench tracking``): a sine or a circle at three frequencies and a "
               "step sequence, streamed at 50 Hz or sent as a trajectory, in simulated time; "
               "with --live, end to end through poise run and MQTT.")
#: The periodic references' frequencies [Hz].
FREQS = (0.05, 0.1, 0.25)
#: ``sine``: one task coordinate (1-D tasks); ``circle``: the first two (2-D tasks);
#: ``steps``: a step sequence along the first coordinate (every task).
KINDS = ("sine", "circle", "steps")
#: How the reference reaches the loop.
AS = ("stream", "trajectory")
#: The references' amplitude (sine), radius (circle) and step size: this fraction of the
#: robot's reach (``model.reach``).
AMPLITUDE = 0.10
#: Samples per second of a streamed reference, and the spacing of a trajectory's waypoints.
STREAM_HZ = 50.0
#: Simulated time between ``start()`` and the reference [s]: the arm settles at the
#: example's target.
SETTLE_S = 6.0
#: The lead-in from where the arm stands to the reference's first point [s]
#: (minimum jerk; not measured).
LEAD_IN_S = 2.0
#: The step sequence: this many steps of the amplitude, this far apart [s]; measured from the
#: last step to the end.
STEPS = 4
STEP_S = 3.0
#: A trajectory's waypoints go on past the measured window for this long [s]: its spline
#: comes to rest at its last waypoint, outside the measurement.
TRAJECTORY_TAIL_S = 1.0
#: The steady lag is searched within ± this [s].
MAX_LAG_S = 1.0
#: A sine or circle is held back from its reference (flag C) when the loop says so
#: (:func:`poise.motion.live.clamp_status`) on this share of the window's cycles or more; a
#: step sequence when it says so in the last third of the window (after a step the
#: filtered reference runs ahead of the arm for a while: that is the step, not a limit).
CLAMPED_SHARE = 0.01
#: A case is rate-bound when a setpoint moved at this fraction of its rate limit (the
#: stream's filter keeps to 0.95 of it).
RATE_BOUND = 0.94
#: ... or when the stream's filter slowed the reference on this share of the window's cycles.
FILTER_SHARE = 0.01
#: Seed of the sensor noise.
SEED = 33
#: The goals: (as, mode, frequency [Hz], plant: "model" or "plant" (one that differs from
#: the model), the RMS error's limit [% of the amplitude]).
GOALS = (
    ("stream", "fb", 0.1, "model", 10.0),
    ("stream", "fb", 0.25, "model", 15.0),
    ("trajectory", "ff", 0.1, "model", 3.0),
    ("trajectory", "fb", 0.1, "plant", 5.0),
)
#: The plant made for ``--plant NAME`` alone: every joint spring this much stiffer.
PLANT_STIFFER = 1.10
#: Quick smoke test (``--quick``): one mode, one algorithm, one frequency.
QUICK = {"modes": ("fb",), "algorithms": ("alg1",), "freqs": (0.1,)}


__all__ = ["ALGORITHMS", "AMPLITUDE", "AS", "CLAMPED_SHARE", "DESCRIPTION", "FILTER_SHARE",
           "FREQS", "GOALS", "KINDS", "LEAD_IN_S", "MAX_LAG_S", "MODES", "PLANT_STIFFER",
           "QUICK", "RATE_BOUND", "ROBOTS", "SEED", "SETTLE_S", "STEPS", "STEP_S", "STREAM_HZ",
           "TRAJECTORY_TAIL_S"]
