"""One whole control cycle in one compiled call: ``h(q)``, the IK update, the guard, the commit.

In the service a cycle used to call four kernels from Python (:func:`~poise.kernels.steps.fk`,
:func:`~poise.kernels.steps.propose`, :func:`~poise.kernels.guard.guard`,
:func:`~poise.kernels.steps.commit`). Each call converts its arguments from Python objects
(the packed model's tuple of arrays alone costs ~2 µs) and each result back: about half of a
cycle's IK time on the 2-core machine went there and to the Python between the calls.
:func:`cycle` makes the same four calls inside compiled code, so the arguments cross once.

The arithmetic is the four kernels' own (they are called, not rewritten), so the result is
the one the separate calls give; ``tests/test_kernels.py`` checks it against them and, through
:class:`~poise.controller.step.ControlStep`, against the numpy reference.
"""

from __future__ import annotations

from numba import njit

from poise.kernels import family
from poise.kernels.guard import NONFINITE, guard
from poise.kernels.steps import OK, commit, propose


@njit(cache=True)
def cycle(args, algorithm, state, q, fb, x_lo, x_hi, qa_lo, target, update, gamma, gamma_z,
          gamma_e, damping, dt, max_step, alg_qa_min, alg_qa_max, move_qa, windup, saturated,
          A, band, qa_min, qa_max, rate, tol, newton_iter):  # type: ignore[no-untyped-def]
    """One cycle from the measured configuration ``q`` (n,) [rad, m].

    Args:
        args: the packed model's arguments; algorithm: a value of
            :data:`~poise.kernels.steps.ALGORITHM_CODES`; state: the stepper's state vector.
        fb: feedback mode: the IK's error uses the measured ``h(q)``, else the predicted x̄
            (``state[x_lo:x_hi]``); qa_lo: where q̄a starts in the state.
        target … alg_qa_max: :func:`~poise.kernels.steps.propose`'s parameters (x̄ target,
            update law, Γ, ΓZ, ΓE [1/s], λ, Δt [s], largest joint step [rad], Algorithm 2's
            actuator limits).
        move_qa … rate: :func:`~poise.kernels.guard.guard`'s (the approach move or an empty
            array, anti-windup on, effort saturation, ``A`` (m, n), the anti-windup band,
            position and rate limits).
        tol, newton_iter: :func:`~poise.kernels.steps.commit`'s statics tolerance [N·m] and
            Newton steps.

    Returns:
        ``(new state, h(q), proposal [qa; qu] (n,), q̄a sent (m,), propose status, guard
        status, commit status)``. A propose status other than
        :data:`~poise.kernels.steps.OK`, or the guard's
        :data:`~poise.kernels.guard.NONFINITE`, stops the cycle there: the state returned
        is the old one and nothing is to be sent.
    """
    P = family.as_arrays(args)
    m = qa_min.size
    x_meas = family.fk(P, q)
    x = x_meas if fb else state[x_lo:x_hi]
    proposed, p_status = propose(P.C, P.C_inv, m, P.task_dim, algorithm, state, x, target,
                                 update, gamma, gamma_z, gamma_e, damping, dt, max_step,
                                 alg_qa_min, alg_qa_max)
    if p_status != OK:
        return state, x_meas, proposed, state[qa_lo:qa_lo + m].copy(), p_status, 0, OK
    qa_safe, g_status = guard(state[qa_lo:qa_lo + m], proposed[:m], move_qa, A, q, band,
                              windup, saturated, qa_min, qa_max, rate, dt)
    if g_status & NONFINITE:
        return state, x_meas, proposed, qa_safe, OK, g_status, OK
    new, c_status = commit(args, algorithm, state, qa_safe, proposed, tol, newton_iter)
    return new, x_meas, proposed, qa_safe, OK, g_status, c_status


__all__ = ["cycle"]
