"""Live references made for a control step: a stream begun where the arm is, its filter's
limits kept current, and whether the arm is held back from it.

One place for what the service's commands (:mod:`poise.controller.commands`) and the
simulated loop (:mod:`poise.controller.simulate`) both do when a reference starts to stream
(:mod:`poise.motion.streaming`):

* :func:`begin_stream`: the :class:`~poise.motion.streaming.StreamedReference` starts at the
  arm's predicted task value ``h(q̄)`` at the next cycle's time, filtered
  (:class:`~poise.motion.streaming.ReferenceFilter`) with the bandwidth of the slowest
  structural mode at the current plan's goal and the actuators' rate and acceleration limits
  mapped into task space through the held Jacobian at q̄ (:func:`actuator_map`);
* :func:`clamp_status`: whether the arm is held back from the reference (an actuator at its
  position limit, or a reference outside the held configurations the loop can reach): the
  service's state says so;
* :func:`prepare_trajectory`: a trajectory (:mod:`poise.motion.trajectory`) checked and
  shaped before anything moves, from where the arm is: shaped with preview on the structural
  modes there, after a lead-in from the arm's task value to its first waypoint when it
  starts elsewhere (a rest-to-rest cubic as fast as the actuator limits allow, checked too);
  :func:`begin_trajectory` makes the step follow it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from poise.ik.held_common import held_jacobian
from poise.models.actuation import blocks
from poise.models.base import FloatArray, MechanicalModel
from poise.motion.safety import SafetyLimits
from poise.motion.shaping import shaper_for
from poise.motion.step import ControlStep
from poise.motion.streaming import Following, ReferenceFilter, StreamedReference, bandwidth
from poise.motion.trajectory import Previewed, Trajectory, TrajectoryRefused, check_trajectory

#: A stream's filter maps the actuator limits into task space through the held Jacobian at
#: q̄, recomputed (by the service's command thread) at most this often [s].
MAP_REFRESH_S = 0.05
#: The arm counts as held back from a streamed reference when its predicted task value
#: h(q̄) is farther from the filtered reference than this many tolerances ...
CLAMP_TOLERANCES = 10.0
#: ... and at least this fraction of the robot's reach.
CLAMP_REACH = 0.02


def actuator_map(model: MechanicalModel, q_bar: FloatArray) -> FloatArray | None:
    """``J⁺`` (m, task_dim) of the held Jacobian at ``q_bar``: how far each actuator moves
    per task unit along E; None where it cannot be computed (a singular H_uu)."""
    try:
        jac = held_jacobian(blocks(model, np.asarray(q_bar, dtype=float)))
        return np.linalg.pinv(jac)
    except (np.linalg.LinAlgError, ValueError):
        return None


def begin_stream(step: ControlStep, ident: str = "") -> Following:
    """A stream followed by ``step`` from its next cycle: it starts at ``h(q̄)`` (at rest),
    filtered within the step's limits (see the module docstring). The step must have run
    (it has a stepper)."""
    stepper = step.stepper
    if stepper is None:
        raise ValueError("a stream needs a running loop (no q̄ yet)")
    x0 = np.array(step.model.fk(stepper.q_bar), dtype=float)
    plan = step.plan
    modes = plan.loop.structural_modes() if plan is not None and plan.loop is not None else []
    lim = step.limits
    filt = ReferenceFilter(x0, bandwidth(modes[0].omega if modes else None), lim.qa_rate,
                           lim.accel)
    filt.set_actuator_map(actuator_map(step.model, stepper.q_bar))
    # the start one cycle before the stream's first: a sample at its time 0 comes after it
    following = Following(StreamedReference(x0, -step.period), "stream", step.period, filt,
                          ident)
    step.follow_source(following)
    return following


def clamp_status(model: MechanicalModel, following: Following, q_bar: FloatArray,
                 qa: FloatArray, qa_min: FloatArray, qa_max: FloatArray, tolerance: float,
                 reach: float | None) -> str:
    """Why the arm is held back from the followed reference ('' when it is not): its
    predicted task value ``h(q̄)`` is farther than :data:`CLAMP_TOLERANCES` tolerances (and
    :data:`CLAMP_REACH` of the reach) from the filtered reference, with an actuator at its
    position limit or none (then the reference has left the held configurations the loop
    reaches from here: out of reach, or reachable only by an unstable one)."""
    if following.x_d.size == 0:
        return ""
    error = float(np.linalg.norm(following.x_d - model.fk(np.asarray(q_bar, dtype=float))))
    if error <= max(CLAMP_TOLERANCES * tolerance, CLAMP_REACH * (reach or 0.0)):
        return ""
    qa = np.asarray(qa, dtype=float)
    at_limit = [i for i in range(qa.size)
                if qa[i] <= qa_min[i] + 1e-9 or qa[i] >= qa_max[i] - 1e-9]
    where = (f"actuator {', '.join(map(str, at_limit))} at its position limit" if at_limit
             else "outside the held configurations the loop reaches from here")
    return (f"reference clamped: the arm holds the closest held configuration, "
            f"{error:.3g} from the reference ({where})")


#: A lead-in to a trajectory's first waypoint lasts at least this long [s] ...
LEAD_IN_MIN_S = 0.5
#: ... and this many times what the actuators' rate and acceleration limits need for it.
LEAD_IN_MARGIN = 1.5


class ChainedReference:
    """Shaped trajectories one after the other, as one source (``at``, ``duration``): each
    runs from its :attr:`~poise.motion.trajectory.Previewed.start` to its ``duration``, the
    next beginning where it ends (at rest). Time 0 is the first one's start."""

    def __init__(self, parts: list[Previewed]) -> None:
        self.parts = parts
        spans = [p.duration - p.start for p in parts]
        #: When each part begins [s].
        self.begins = list(np.concatenate([[0.0], np.cumsum(spans)[:-1]]))
        self.duration = float(sum(spans))

    def at(self, t: float) -> tuple[FloatArray, FloatArray]:
        """``(x_ref, ẋ_ref)`` at ``t`` [s since the first part's start]."""
        k = len(self.parts) - 1
        while k > 0 and t < self.begins[k]:
            k -= 1
        part = self.parts[k]
        return part.at(t - self.begins[k] + part.start)


@dataclass(frozen=True)
class TrajectoryRun:
    """A trajectory checked and shaped, ready for :func:`begin_trajectory`.

    Attributes:
        source: the lead-in (if any) and the trajectory, shaped with preview.
        trajectory: the trajectory as given.
        lead_in_s: how long the lead-in to its first waypoint lasts [s] (0: none).
        peak_rate, peak_accel: the largest actuator speed [units/s] and acceleration
            [units/s²] the check found, per actuator (m,).
    """

    source: ChainedReference
    trajectory: Trajectory
    lead_in_s: float
    peak_rate: FloatArray
    peak_accel: FloatArray

    def summary(self) -> dict[str, Any]:
        """JSON-ready: waypoints, duration (lead-in and shaping included) and peaks."""
        times, points = self.trajectory.waypoints
        return {"waypoints": {"t": times.tolist(), "x": points.tolist()},
                "duration_s": self.source.duration, "lead_in_s": self.lead_in_s,
                "peak_rate": self.peak_rate.tolist(), "peak_accel": self.peak_accel.tolist()}


def lead_in_time(model: MechanicalModel, q_bar: FloatArray, goal: FloatArray,
                 limits: SafetyLimits) -> float:
    """How long a rest-to-rest cubic from ``h(q̄)`` to ``goal`` takes within the actuator
    limits [s]: its peak speed ``1.5 Δ/T`` and acceleration ``6 Δ/T²`` per actuator, with
    ``Δqa ≈ J⁺ Δx`` through the held Jacobian at q̄, times :data:`LEAD_IN_MARGIN`; at least
    :data:`LEAD_IN_MIN_S`."""
    jmap = actuator_map(model, q_bar)
    if jmap is None:
        return 10.0 * LEAD_IN_MIN_S
    dqa = np.abs(jmap @ (np.asarray(goal, dtype=float) - model.fk(q_bar)))
    with np.errstate(divide="ignore", invalid="ignore"):
        need = max(float(np.max(np.where(dqa > 0, 1.5 * dqa / limits.qa_rate, 0.0))),
                   float(np.max(np.where(dqa > 0, np.sqrt(6.0 * dqa / limits.accel), 0.0))))
    return max(LEAD_IN_MIN_S, LEAD_IN_MARGIN * need) if math.isfinite(need) else \
        10.0 * LEAD_IN_MIN_S


def prepare_trajectory(model: MechanicalModel, trajectory: Trajectory, q_bar: FloatArray,
                       limits: SafetyLimits, *, period: float, tolerance: float,
                       delay: int = 1, shaper: str = "auto") -> TrajectoryRun:
    """``trajectory`` checked and shaped from the arm's predicted configuration ``q_bar``
    (see the module docstring): shaped on the structural modes of the loop linearised at
    q̄ (``[loop] shaper``), after a lead-in when its first waypoint is farther than
    ``tolerance`` from ``h(q̄)``; each checked (:func:`~poise.motion.trajectory.
    check_trajectory`) as shaped, the trajectory from where the lead-in ends. The
    trajectory's preview compensates the shaper's attenuation of slow motion
    (:class:`~poise.motion.trajectory.Previewed`) where the actuators' limits allow that,
    else it is shaped as it is (the compensation adds acceleration where the trajectory's
    own changes fast).

    Raises:
        TrajectoryRefused: a part is unreachable, unstable or too fast; the message names
            the first waypoint at fault (the lead-in's fault says it is the lead-in's).
    """
    from poise.motion.stability import LoopLinearisation

    q_bar = np.asarray(q_bar, dtype=float)
    loop = LoopLinearisation(model, q_bar, period, delay=delay)
    kind = shaper_for(loop.structural_modes(), shaper)
    times, points = trajectory.waypoints
    parts: list[Previewed] = []
    lead_in = 0.0
    start = q_bar
    peaks_v, peaks_a = [], []
    if float(np.linalg.norm(points[0] - model.fk(q_bar))) > tolerance:
        lead_in = lead_in_time(model, q_bar, points[0], limits)
        lead = Previewed(Trajectory([0.0, lead_in], [model.fk(q_bar), points[0]]), kind,
                         compensate=False)  # a move to rest at its end: nothing to keep
        try:
            path = check_trajectory(lead, model, limits, period=period, tolerance=tolerance,
                                    q_start=q_bar)
        except TrajectoryRefused as exc:
            raise TrajectoryRefused(
                f"the lead-in from where the arm is ({np.round(model.fk(q_bar), 4).tolist()}) "
                f"to waypoint 0 (t = {times[0]:g} s) in {lead_in:.2f} s: {exc}", exc.reason,
                exc.t, 0) from None
        parts.append(lead)
        start = path.q[-1]
        peaks_v.append(path.peak_rate)
        peaks_a.append(path.peak_accel)
    try:  # the shaper's attenuation compensated where the limits allow it, else as shaped
        main = Previewed(trajectory, kind)
        path = check_trajectory(main, model, limits, period=period, tolerance=tolerance,
                                q_start=start)
    except TrajectoryRefused:
        main = Previewed(trajectory, kind, compensate=False)
        path = check_trajectory(main, model, limits, period=period, tolerance=tolerance,
                                q_start=start)
    parts.append(main)
    peaks_v.append(path.peak_rate)
    peaks_a.append(path.peak_accel)
    return TrajectoryRun(ChainedReference(parts), trajectory, lead_in,
                         np.max(peaks_v, axis=0), np.max(peaks_a, axis=0))


def begin_trajectory(step: ControlStep, run: TrajectoryRun, ident: str = "") -> Following:
    """Make ``step`` follow the prepared trajectory from its next cycle (no filter: it was
    checked and shaped beforehand)."""
    following = Following(run.source, "trajectory", step.period, None, ident)
    step.follow_source(following)
    return following


__all__ = ["CLAMP_REACH", "CLAMP_TOLERANCES", "LEAD_IN_MARGIN", "LEAD_IN_MIN_S", "MAP_REFRESH_S",
           "ChainedReference", "TrajectoryRun", "actuator_map", "begin_stream",
           "begin_trajectory", "clamp_status", "lead_in_time", "prepare_trajectory"]
