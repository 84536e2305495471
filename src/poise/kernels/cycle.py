"""One whole control cycle in one compiled call: ``h(q)``, the IK update, the guard, the commit.

In the service a cycle used to call four kernels from Python (:func:`~poise.kernels.steps.fk`,
:func:`~poise.kernels.steps.propose`, :func:`~poise.kernels.guard.guard`,
:func:`~poise.kernels.steps.commit`). Each call converts its arguments from Python objects
(the packed model's tuple of arrays alone costs ~2 µs) and each result back: about half of a
cycle's IK time on the 2-core machine went there and to the Python between the calls.
:func:`cycle` makes the same four calls inside compiled code, so the arguments cross once.

The arithmetic is the four kernels' own (they are called, not rewritten), so the result is
the one the separate calls give; ``tests/test_kernels.py`` checks it against them and, through
:class:`~poise.motion.step.ControlStep`, against the numpy reference.
"""

from __future__ import annotations

from numba import njit

from poise.kernels import family
from poise.kernels.guard import NONFINITE, finite_prefix, guard
from poise.kernels.linalg import matvec
from poise.kernels.steps import OK, commit, propose

#: Where each number sits in the ``knobs`` vector (float64) :func:`cycle` takes: the
#: algorithm code, feedback mode, where x̄ and q̄a lie in the state, the update law, Γ, ΓZ, ΓE
#: [1/s], λ, Δt [s], the largest joint step [rad], anti-windup on, effort saturation, the
#: statics tolerance [N·m], Newton steps, and how much of the new state must be finite (its
#: q̄, q̄a, q̄u, x̄, τ_ff and G_u: :func:`~poise.kernels.guard.finite_prefix`). One array
#: rather than seventeen arguments: each argument a compiled call converts costs ~0.1 µs,
#: each array it returns ~0.5 µs.
(K_ALGORITHM, K_FB, K_X_LO, K_X_HI, K_QA_LO, K_UPDATE, K_GAMMA, K_GAMMA_Z, K_GAMMA_E, K_DAMPING,
 K_DT, K_MAX_STEP, K_WINDUP, K_SATURATED, K_TOL, K_NEWTON, K_FINITE_END) = range(17)
KNOBS = 17
#: The rows of the ``limits`` matrix (6, m): Algorithm 2's actuator limits (the model's),
#: then the guard's anti-windup band, position limits and rate limits.
L_ALG_MIN, L_ALG_MAX, L_BAND, L_MIN, L_MAX, L_RATE = range(6)
LIMIT_ROWS = 6


@njit(cache=True)
def cycle(args, state, q, target, move_qa, A, projection, limits, knobs, scratch):  # type: ignore[no-untyped-def]
    """One cycle from the measured configuration ``q`` (n,) [rad, m].

    Args:
        args: the packed model's arguments; state: the stepper's state vector.
        target: the task target x̄.
        move_qa: the approach move's q̄a this cycle, or an empty array.
        A: ``qa = A q`` (m, n), for the anti-windup's lag.
        projection: ``Π`` (k, k) of the measured error in feedback mode, the IK stepping
            with ``x̄ − Π (x̄ − h(q))`` (:mod:`poise.motion.agreement`), or an empty (0, 0)
            array: none.
        limits: (6, m), rows :data:`L_ALG_MIN` … :data:`L_RATE`.
        knobs: the scalars, at :data:`K_ALGORITHM` … :data:`K_FINITE_END` (see there). In
            feedback mode the IK's error uses the measured ``h(q)``, else the predicted x̄.
        scratch: (n + m,): receives the proposal ``[qa; qu]`` (n) and the q̄a sent (m)
            (untouched when the update failed).

    Calls :func:`~poise.kernels.steps.propose`, :func:`~poise.kernels.guard.guard` and
    :func:`~poise.kernels.steps.commit` with these (their docstrings give the units).

    Returns:
        ``(new state, h(q), propose status, guard status, commit status, whether the new
        state's prefix is finite)``. A propose status other than
        :data:`~poise.kernels.steps.OK`, or the guard's :data:`NONFINITE`, stops the cycle
        there: the state returned is the old one and nothing is to be sent.
    """
    P = family.as_arrays(args)
    m = A.shape[0]
    n = q.size
    algorithm = int(knobs[K_ALGORITHM])
    fb = knobs[K_FB] != 0.0
    x_lo, qa_lo = int(knobs[K_X_LO]), int(knobs[K_QA_LO])
    dt = knobs[K_DT]
    x_meas = family.fk(P, q)
    x = x_meas if fb else state[x_lo:int(knobs[K_X_HI])]
    if fb and projection.shape[0] > 0:
        x = target - matvec(projection, target - x_meas)
    proposed, p_status = propose(P.C, P.C_inv, m, P.task_dim, algorithm, state, x, target,
                                 int(knobs[K_UPDATE]), knobs[K_GAMMA], knobs[K_GAMMA_Z],
                                 knobs[K_GAMMA_E], knobs[K_DAMPING], dt, knobs[K_MAX_STEP],
                                 limits[L_ALG_MIN], limits[L_ALG_MAX])
    if p_status != OK:  # nothing proposed
        return state, x_meas, p_status, 0, OK, False
    scratch[:n] = proposed
    qa_safe, g_status = guard(state[qa_lo:qa_lo + m], proposed[:m], move_qa, A, q,
                              limits[L_BAND], knobs[K_WINDUP] != 0.0,
                              knobs[K_SATURATED] != 0.0, limits[L_MIN], limits[L_MAX],
                              limits[L_RATE], dt)
    scratch[n:] = qa_safe
    if g_status & NONFINITE:
        return state, x_meas, OK, g_status, OK, False
    new, c_status = commit(args, algorithm, state, qa_safe, proposed, knobs[K_TOL],
                           int(knobs[K_NEWTON]))
    return (new, x_meas, OK, g_status, c_status,
            finite_prefix(new, int(knobs[K_FINITE_END])))


__all__ = ["KNOBS", "LIMIT_ROWS", "cycle"]
