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
  service's state says so.
"""

from __future__ import annotations

import numpy as np

from poise.ik.held_common import held_jacobian
from poise.models.actuation import blocks
from poise.models.base import FloatArray, MechanicalModel
from poise.motion.step import ControlStep
from poise.motion.streaming import Following, ReferenceFilter, StreamedReference, bandwidth

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


__all__ = ["CLAMP_REACH", "CLAMP_TOLERANCES", "actuator_map", "begin_stream", "clamp_status"]
