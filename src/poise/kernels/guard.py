"""The part of a control cycle between the IK's proposal and the commit, compiled.

:meth:`poise.motion.step.ControlStep.update` passes every proposal through the same chain:
the NaN guard on the IK's output, the approach move that replaces it while a plan's goal is
being approached, the feedback anti-windup (:meth:`~poise.motion.step.ControlStep._anti_windup`)
and the safety layer (:func:`poise.motion.safety.limit_setpoint`). In numpy that chain is
some forty small-array calls (~35 µs a cycle on the 2-core reference machine); here it is one
call. The numpy functions stay the reference: ``tests/test_kernels.py`` compares the two.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

#: Status bits of :func:`guard`.
NONFINITE = 1  #: the IK's proposal is not finite: nothing may be sent (a fault)
HELD = 2  #: the anti-windup held at least one actuator's setpoint this cycle


@njit(cache=True, error_model="numpy")  # x/0 is inf or NaN, as in numpy, not an exception
def guard(qa_prev, proposed, move_qa, A, q, band, windup, saturated, qa_min, qa_max, rate,
          dt):  # type: ignore[no-untyped-def]
    """The setpoint of one cycle from the IK's proposal.

    Args:
        qa_prev: the last setpoint q̄a (m,) [actuator units].
        proposed: the IK's proposal (m,).
        move_qa: the approach move's setpoint this cycle, replacing the proposal (m,), or
            an empty array (none: the IK's proposal stands).
        A: the actuated rows of ``C`` (m, n): ``qa = A q``.
        q: the measured configuration (n,) (the anti-windup's lag ``proposed − A q``).
        band: the anti-windup band per actuator (m,) [actuator units].
        windup: apply the anti-windup (feedback mode, no approach move).
        saturated: the device reports an actuator at its effort limit.
        qa_min, qa_max: position limits (m,); rate: rate limits (m,) [units/s]; dt: Δt [s].

    Returns:
        ``(qa_safe, status)``: ``status`` bits :data:`NONFINITE` (then ``qa_safe`` is
        ``qa_prev``) and :data:`HELD`.
    """
    m = qa_prev.size
    for i in range(m):
        if not math.isfinite(proposed[i]):
            return qa_prev.copy(), NONFINITE
    status = 0
    target = np.empty(m)
    if move_qa.size:
        target[:] = move_qa
    elif windup:
        held = False
        for i in range(m):
            aq = 0.0
            for j in range(q.size):
                aq += A[i, j] * q[j]
            lag = proposed[i] - aq
            away = (abs(lag) > band[i] or saturated) and (proposed[i] - qa_prev[i]) * lag > 0
            held = held or away
            target[i] = qa_prev[i] if away else proposed[i]
        if held:
            status |= HELD
    else:
        target[:] = proposed
    # the safety layer: scale the whole step into the rate limits (its direction kept; a
    # NaN ratio, 0/0, leaves it unscaled as numpy's max does), then clip to the positions
    ratio = 0.0
    for i in range(m):
        r = abs(target[i] - qa_prev[i]) / (rate[i] * dt)
        if math.isnan(r):
            ratio = r
            break
        ratio = max(ratio, r)
    out = np.empty(m)
    for i in range(m):
        step = target[i] - qa_prev[i]
        if ratio > 1.0:
            step = step / ratio
        out[i] = min(max(qa_prev[i] + step, qa_min[i]), qa_max[i])
    return out, status


@njit(cache=True)
def finite_prefix(state, end):  # type: ignore[no-untyped-def]
    """Whether ``state[:end]`` is all finite (a stepper's q̄, q̄a, q̄u, x̄ and τ_ff)."""
    for i in range(end):  # noqa: SIM110 (a generator in all() does not compile in Numba)
        if not math.isfinite(state[i]):
            return False
    return True


__all__ = ["HELD", "NONFINITE", "finite_prefix", "guard"]
