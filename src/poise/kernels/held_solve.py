"""Offline held-configuration IK, compiled: the statics solver and Algorithms 1 and 2.

The same iterations as the numpy reference, on a packed model (``args`` first, as every
kernel): :func:`statics_solve` is :func:`poise.ik.statics.solve_statics` on its stable branch
(Newton on ``U`` along the fibre, Hessian made positive definite by its eigenvalues, a step
down negative curvature, Armijo backtracking on ``U``); :func:`alg1_attempt` and
:func:`alg2_attempt` are one attempt of :func:`poise.ik.held.algorithm1` and
:func:`poise.ik.held.algorithm2` from one start (the restarts, the verdicts ``unreachable`` /
``stalled at a limit`` and the result are made in Python, :mod:`poise.ik.held_kernels`).

A solve runs entirely in compiled code: the blocks of every iterate come from the family's
fused ``statics_terms`` (:mod:`poise.kernels.blocks`), the small solves from
:mod:`poise.kernels.linalg` (Jacobi ``eigh`` where the reference calls LAPACK ``eigh``),
Algorithm 1's update from :func:`poise.kernels.steps.alg1_propose` and Algorithm 2's rates
from :func:`poise.kernels.steps.limited_rates`, the functions the control cycle runs.

Attempt status codes: :data:`CONVERGED`, :data:`ITERATION_CAP`, :data:`STALLED` (the
reference's :class:`~poise.ik.result.Status`), :data:`SINGULAR` (where the reference raises
``numpy.linalg.LinAlgError``).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from poise.api.numerics import SINGULAR_EIG
from poise.kernels import family
from poise.kernels.blocks import offsets, state_at, unpack
from poise.kernels.linalg import eigh, norm, smallest_singular
from poise.kernels.steps import (
    _held_jacobian,
    _join,
    alg1_propose,
    follow_statics,
    limited_rates,
)

CONVERGED = 0
ITERATION_CAP = 1
STALLED = 2
SINGULAR = 3

#: Halvings of a rejected Algorithm-1 step (``poise.ik.held_alg1._accept_step``).
HALVINGS = 10
#: Relative improvement below which a window of iterations counts as a stall.
STALL_RATIO = 1e-3


# ----------------------------------------------------------------------------- statics


@njit(cache=True)
def statics_solve(args, qa, qu0, tol, max_iter, min_curvature, negative_step):  # type: ignore[no-untyped-def]
    """``G_u(qa, qu) = 0`` for ``qu``, stable branch, warm-started at ``qu0``
    (:func:`poise.ik.statics.solve_statics`; ``tol`` [N·m], ``min_curvature`` [N·m/rad],
    ``negative_step`` [units of ``qu``]).

    Returns:
        ``(state at c⁻¹(qa, qu), qu, iterations, converged)``.
    """
    return _statics(family.as_arrays(args), qa, qu0, tol, max_iter, min_curvature,
                    negative_step)


@njit(cache=True)
def _statics(P, qa, qu0, tol, max_iter, min_curvature, negative_step):  # type: ignore[no-untyped-def]
    n, m, k = P.C.shape[0], P.m, P.task_dim
    nu = n - m
    o = offsets(n, m, k)
    qu = qu0.copy()
    state = state_at(P, _join(P.C_inv, qa, qu))
    iterations = 0
    for it in range(1, max_iter + 1):
        iterations = it
        gu = state[o[5]:o[6]].copy()
        g_norm = norm(gu)
        huu = state[o[9]:o[10]].reshape(nu, nu)
        eig, vec = eigh(0.5 * (huu + huu.T))
        convex = nu == 0 or eig[0] > 0.0
        if g_norm <= tol and (nu == 0 or eig[0] > -SINGULAR_EIG):
            iterations = it - 1
            break
        # step = −V diag(1 / max(|λ|, floor)) Vᵀ G_u: Newton with the Hessian made ≻ 0
        weights = np.empty(nu)
        for i in range(nu):
            acc = 0.0
            for r in range(nu):
                acc += vec[r, i] * gu[r]
            weights[i] = acc / max(abs(eig[i]), min_curvature)
        step = np.empty(nu)
        for r in range(nu):
            acc = 0.0
            for i in range(nu):
                acc += vec[r, i] * weights[i]
            step[r] = -acc
        if not convex:  # also down the most negative curvature, away from a saddle
            along = 0.0
            for r in range(nu):
                along += vec[r, 0] * gu[r]
            sign = -1.0 if along > 0 else 1.0
            for r in range(nu):
                step[r] = step[r] + negative_step * (vec[r, 0] * sign)
        trial = state_at(P, _join(P.C_inv, qa, qu + step))
        if convex and norm(trial[o[5]:o[6]]) <= (1.0 - 1e-4) * g_norm:
            qu = qu + step
            state = trial
            continue
        qu = _line_search(P, qa, qu, step, gu)
        state = state_at(P, _join(P.C_inv, qa, qu))
    return state, qu, iterations, norm(state[o[5]:o[6]]) <= tol


@njit(cache=True)
def _line_search(P, qa, qu, step, gu):  # type: ignore[no-untyped-def]
    """Backtracking (Armijo) along ``step`` on ``U`` (``poise.ik.statics._line_search``)."""
    merit0 = family.potential(P, _join(P.C_inv, qa, qu))
    slope = 0.0
    for r in range(gu.size):
        slope += gu[r] * step[r]
    alpha = 1.0
    while True:
        qu_try = qu + alpha * step
        merit = family.potential(P, _join(P.C_inv, qa, qu_try))
        if merit <= merit0 + 1e-4 * alpha * min(slope, 0.0) or alpha < 1e-6:
            return qu_try
        alpha *= 0.5


# ----------------------------------------------------------------------------- attempts


@njit(cache=True, inline="always")
def _clip(v, lo, hi):  # type: ignore[no-untyped-def]
    out = np.empty(v.size)
    for i in range(v.size):
        out[i] = min(max(v[i], lo[i]), hi[i])
    return out


@njit(cache=True, inline="always")
def _stop(history, it, converged, max_iter, may_stall, window, prefix_min):  # type: ignore[no-untyped-def]
    """``poise.ik.held_common.stop_rule`` with ``min(history[:-window])`` kept as a running minimum
    (``prefix_min``, updated here). Returns ``(status or -1, prefix_min)``."""
    if it >= window:
        prefix_min = min(prefix_min, history[it - window])
    if converged:
        return CONVERGED, prefix_min
    if it == max_iter:
        return ITERATION_CAP, prefix_min
    if may_stall and it >= window and history[it] > (1.0 - STALL_RATIO) * prefix_min:
        return STALLED, prefix_min
    return -1, prefix_min


@njit(cache=True)
def alg1_attempt(args, target, q0, qa_min, qa_max, update, damping, gain, dt, tol,  # type: ignore[no-untyped-def]
                 statics_tol, statics_iter, min_curvature, negative_step, max_iter, window,
                 record):
    """One attempt of Algorithm 1 from ``q0`` (``poise.ik.held_alg1._algorithm1_attempt``).

    Settles ``q0`` on E at its clipped ``qa``, then ``qa ← clip(qa + Δt · q̇a)`` by
    :func:`~poise.kernels.steps.alg1_propose` (``update``: a value of
    :data:`~poise.kernels.steps.UPDATE_CODES`), the statics re-solved after every update and
    a step that does not converge or (except ``transpose``) raises the task error halved up
    to :data:`HALVINGS` times.

    Returns:
        ``(state, status, iterations, history, σ_min(J), eig, path)``: the state at the last
        iterate, the task error per iteration [m], the held Jacobian's smallest singular
        value and the eigenvalues of ``H_uu`` there (ascending), and the iterates (k, n)
        when ``record`` (else (0, n)).
    """
    P = family.as_arrays(args)
    n, m, k = P.C.shape[0], P.m, P.task_dim
    o = offsets(n, m, k)
    qc = np.zeros(n)
    for i in range(n):
        for j in range(n):
            qc[i] += P.C[i, j] * q0[j]
    s_qa = _clip(qc[:m], qa_min, qa_max)
    state, s_qu, _, _ = _statics(P, s_qa, qc[m:].copy(), statics_tol, statics_iter,
                                 min_curvature, negative_step)
    history = np.empty(max_iter + 1)
    path = np.empty((max_iter + 1 if record else 0, n))
    steps_kept = 0
    if record:
        path[0] = state[:n]
        steps_kept = 1
    err = norm(target - family.fk(P, state[:n]))
    status = ITERATION_CAP
    iterations = 0
    prefix_min = math.inf
    monotone = update != 3
    for it in range(max_iter + 1):
        iterations = it
        history[it] = err
        stop, prefix_min = _stop(history, it, err < tol, max_iter, True, window, prefix_min)
        if stop >= 0:
            status = stop
            break
        qa_new, ok = alg1_propose(n, m, k, state, state[o[3]:o[4]], target, update, damping,
                                  gain, dt)
        if ok != 0:
            status = SINGULAR
            break
        step = qa_new - s_qa
        accepted = False
        for _ in range(HALVINGS):
            qa_try = _clip(s_qa + step, qa_min, qa_max)
            trial, qu_try, _, converged = _statics(P, qa_try, s_qu, statics_tol, statics_iter,
                                                   min_curvature, negative_step)
            err_try = norm(target - family.fk(P, trial[:n]))
            if converged and (not monotone or err_try <= err):
                state, s_qa, s_qu, err = trial, qa_try, qu_try, err_try
                accepted = True
                break
            step = 0.5 * step
        if not accepted:
            status = STALLED
            break
        if record:
            path[steps_kept] = state[:n]
            steps_kept += 1
    _, _, _, _, _, _, Ja, Ju, Hua, Huu, _ = unpack(state, n, m, k)
    jac, ok = _held_jacobian(Ja, Ju, Hua, Huu)
    sigma = smallest_singular(jac) if ok else math.nan
    return state, status, iterations, history[:iterations + 1].copy(), sigma, \
        _eigenvalues(Huu), path[:steps_kept].copy()


@njit(cache=True)
def alg2_attempt(args, target, q0, qa_min, qa_max, gamma_z, gamma_e, dt, damping, max_step,  # type: ignore[no-untyped-def]
                 tol, statics_tol, max_iter, window, record):
    """One attempt of Algorithm 2 from ``q0`` (``poise.ik.held_alg2._algorithm2_attempt``).

    ``(qa, qu) ← (qa, qu) + Δt · rates`` with the rates of
    :func:`~poise.kernels.steps.limited_rates` (a singular system retried with λ = 1e-6 when
    ``damping`` is 0), the step scaled so no joint moves more than ``max_step`` [rad] (``inf``:
    unbounded), ``qa`` clipped to the limits and ``qu`` following the statics law for the
    motion made (:func:`~poise.kernels.steps.follow_statics`).

    Returns:
        ``(state, status, iterations, history, σ_min(Ja), eig, path)`` as
        :func:`alg1_attempt`.
    """
    P = family.as_arrays(args)
    n, m, k = P.C.shape[0], P.m, P.task_dim
    state = state_at(P, q0.copy())
    history = np.empty(max_iter + 1)
    path = np.empty((max_iter + 1 if record else 0, n))
    steps_kept = 0
    if record:
        path[0] = state[:n]
        steps_kept = 1
    status = ITERATION_CAP
    iterations = 0
    prefix_min = math.inf
    for it in range(max_iter + 1):
        iterations = it
        _, qa, qu, x, _, Gu, Ja, Ju, Hua, Huu, _ = unpack(state, n, m, k)
        ex = target - x
        e_norm = norm(ex)
        g_norm = norm(Gu)
        history[it] = e_norm
        stop, prefix_min = _stop(history, it, e_norm < tol and g_norm < statics_tol, max_iter,
                                 g_norm < statics_tol, window, prefix_min)
        if stop >= 0:
            status = stop
            break
        rates, ok = limited_rates(Ja, Ju, Hua, Huu, qa, ex, -Gu, gamma_z, gamma_e, damping,
                                  qa_min, qa_max)
        if not ok:
            if damping > 0.0:
                status = SINGULAR
                break
            rates, ok = limited_rates(Ja, Ju, Hua, Huu, qa, ex, -Gu, gamma_z, gamma_e, 1e-6,
                                      qa_min, qa_max)
            if not ok:
                status = SINGULAR
                break
        delta = dt * rates
        longest = 0.0  # largest joint change [rad]
        for i in range(n):
            acc = 0.0
            for j in range(n):
                acc += P.C_inv[i, j] * delta[j]
            longest = max(longest, abs(acc))
        if longest > max_step:
            delta = delta * (max_step / longest)  # trust region: keep the direction
        qa_proposed = qa + delta[:m]
        qu_proposed = qu + delta[m:]
        qa_new = _clip(qa_proposed, qa_min, qa_max)
        qu_new = follow_statics(Hua, Huu, qa_proposed, qu_proposed, qa_new)
        state = state_at(P, _join(P.C_inv, qa_new, qu_new))
        if record:
            path[steps_kept] = state[:n]
            steps_kept += 1
    _, _, _, _, _, _, Ja, _, _, Huu, _ = unpack(state, n, m, k)
    return state, status, iterations, history[:iterations + 1].copy(), smallest_singular(Ja), \
        _eigenvalues(Huu), path[:steps_kept].copy()


@njit(cache=True)
def _eigenvalues(huu):  # type: ignore[no-untyped-def]
    """Eigenvalues of ``½ (H_uu + H_uuᵀ)``, ascending (the stability verdict's input)."""
    return eigh(0.5 * (huu + huu.T))[0]
