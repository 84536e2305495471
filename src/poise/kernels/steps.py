"""One control cycle of Algorithm 1, Algorithm 2 and plain CLIK, compiled.

The same arithmetic as :mod:`poise.motion.stepper` (the numpy reference, see its module
docstring) on a stepper state vector (:mod:`poise.kernels.blocks`). The kernels called from
Python: :func:`blocks` (a state at ``q``), :func:`propose` and :func:`commit` (one cycle, any
algorithm), :func:`acceleration` (the simulator), :func:`fk` and :func:`G`; all but
:func:`propose` take the packed model's ``args`` first. One kernel per role rather than per
algorithm: each compiled kernel carries the machine code of everything it calls, so fewer,
shared kernels compile in less time (the
per-algorithm functions are inlined into them, ``inline="always"``, rather than compiled once
more on their own). Where the
reference raises ``numpy.linalg.LinAlgError`` on a singular matrix, these return a status so
that the Python side takes the same fallback (or raises the same error).

Status codes returned by the steps: :data:`OK`, :data:`SINGULAR` (a matrix the reference
would refuse to invert), :data:`FALLBACK` (Algorithm 1's Newton re-solve did not converge to a
stable equilibrium: the caller runs the full statics solver, as the reference does).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from poise.api.numerics import LIMIT_TOL as _LIMIT_TOL
from poise.kernels import family
from poise.kernels.blocks import fill, offsets, state_at, unpack
from poise.kernels.linalg import (
    cho_solve,
    cholesky,
    damped_pinv,
    is_positive_definite,
    matmul,
    matvec,
    norm,
    pinv,
    rmatvec,
    solve_mat,
    solve_vec,
)

OK = 0
SINGULAR = 1
FALLBACK = 2

#: An actuator within this distance of a limit is at it (:data:`poise.api.numerics.LIMIT_TOL`).
LIMIT_TOL = _LIMIT_TOL

#: Algorithm 1 update laws, by the names of :data:`poise.ik.held.Update`.
UPDATE_CODES = {"inverse": 0, "pinv": 1, "dls": 2, "transpose": 3}
#: The steppers, by the names of :data:`poise.motion.stepper.STEPPERS`.
ALGORITHM_CODES = {"alg1": 0, "alg2": 1, "plain": 2}


# ----------------------------------------------------------------------------- state


@njit(cache=True)
def fk(args, q):  # type: ignore[no-untyped-def]
    """Task value ``h(q)`` (k,) [m] (the measured task value of feedback mode)."""
    return family.fk(family.as_arrays(args), q)


@njit(cache=True)
def G(args, q):  # type: ignore[no-untyped-def]
    """Potential forces ``G(q)`` (n,) [N·m]."""
    return family.G(family.as_arrays(args), q)


@njit(cache=True)
def blocks(args, q):  # type: ignore[no-untyped-def]
    """The state vector at ``q`` (``q`` and the actuation blocks, :mod:`~poise.kernels.blocks`)."""
    return state_at(family.as_arrays(args), q)


@njit(cache=True)
def propose(C, C_inv, m, k, algorithm, state, x, target, update, gamma, gamma_z, gamma_e,
            damping, dt, max_step, qa_min, qa_max):  # type: ignore[no-untyped-def]
    """The IK update of one cycle (the ``propose`` of the steppers).

    It reads the model only through the state's blocks and ``C``, so one compiled kernel
    serves every family (``C``, ``C⁻¹`` (n, n), ``m`` actuators, ``k`` task rows).

    Args:
        algorithm: a value of :data:`ALGORITHM_CODES`.
        state: the stepper state; x: the task value the error uses (k,) [m]; target: x̄ (k,).
        update: Algorithm 1's update law (:data:`UPDATE_CODES`).
        gamma: Γ of Algorithm 1 and plain CLIK; gamma_z, gamma_e: ΓZ, ΓE of Algorithm 2 [1/s].
        damping: λ; dt: Δt [s]; max_step: largest joint change per cycle [rad]
            (Algorithm 2, plain CLIK).
        qa_min, qa_max: the actuator limits (m,) Algorithm 2's rates respect
            (:func:`limited_rates`).

    Returns:
        ``([qa_new; qu_next] (n,), status)``: the proposal :func:`commit` takes
        (``qu_next`` zeros for Algorithm 1, whose commit re-solves the statics).
    """
    n = C.shape[0]
    if algorithm == 0:
        qa, status = alg1_propose(n, m, k, state, x, target, update, damping, gamma, dt)
        out = np.zeros(n)
        out[:m] = qa
        return out, status
    if algorithm == 1:
        return alg2_propose(C_inv, m, k, state, x, target, gamma_z, gamma_e, damping, dt,
                            max_step, qa_min, qa_max)
    return plain_propose(C, C_inv, m, k, state, x, target, gamma, damping, dt, max_step)


@njit(cache=True)
def commit(args, algorithm, state, qa, proposed, tol, newton_iter):  # type: ignore[no-untyped-def]
    """The new state after the safety layer accepted ``qa`` (the ``commit`` of the steppers).

    ``proposed`` is :func:`propose`'s ``[qa_new; qu_next]``. Algorithm 1 re-solves the statics
    (:func:`alg1_commit`; tolerance ``tol`` [N·m], at most ``newton_iter`` Newton steps);
    Algorithm 2 takes ``q = C⁻¹ [qa; qu]`` with ``qu`` following the statics law for the
    motion really made (:func:`follow_statics`), plain CLIK ``q = C⁻¹ [qa; qu_next]``.

    Returns:
        ``(new state, status)``; :data:`FALLBACK` (Algorithm 1 only) returns the old state.
    """
    P = family.as_arrays(args)
    if algorithm == 0:
        return alg1_commit(P, state, qa, tol, newton_iter)
    m = qa.size
    qu = proposed[m:]
    if algorithm == 1:
        n, k = P.C.shape[0], P.task_dim
        _, _, _, _, _, _, _, _, Hua, Huu, _ = unpack(state, n, m, k)
        qu = follow_statics(Hua, Huu, proposed[:m], proposed[m:], qa)
    return state_at(P, _join(P.C_inv, qa, qu)), OK


@njit(cache=True, inline="always")
def _join(C_inv, qa, qu):  # type: ignore[no-untyped-def]
    """``c⁻¹(qa, qu) = C⁻¹ [qa; qu]``."""
    m = qa.size
    qc = np.empty(m + qu.size)
    qc[:m] = qa
    qc[m:] = qu
    return matvec(C_inv, qc)


@njit(cache=True, inline="always")
def _bounded(C_inv, delta_c, max_step):  # type: ignore[no-untyped-def]
    """Scale an actuation-coordinate step so no joint moves more than ``max_step`` [rad]."""
    if delta_c.size == 0:
        return delta_c
    dq = matvec(C_inv, delta_c)
    longest = 0.0
    for v in dq:
        longest = max(longest, abs(v))
        if math.isnan(v):
            longest = math.nan
            break
    if math.isfinite(longest) and longest > max_step:
        return delta_c * (max_step / longest)
    return delta_c


# ----------------------------------------------------------------------------- Algorithm 1


@njit(cache=True, inline="always")
def _held_jacobian(Ja, Ju, Hua, Huu):  # type: ignore[no-untyped-def]
    """``J = Ja − Ju Huu⁻¹ Hua`` (seed 000, Alg. 1); ``ok`` false if ``Huu`` is singular."""
    if Huu.shape[0] == 0:
        return Ja.copy(), True
    sol, ok = solve_mat(Huu, Hua)
    return Ja - matmul(Ju, sol), ok


@njit(cache=True, inline="always")
def alg1_propose(n, m, k, state, x, target, update, damping, gain, dt):  # type: ignore[no-untyped-def]
    """One Algorithm-1 update ``qa ← qa + Δt · q̇a`` (:func:`poise.ik.held.algorithm1_step`).

    Args:
        state: the stepper state (q̄ on E and its blocks).
        x: the task value the error uses (``h(q̄)`` or the measured one) (k,) [m].
        target: ``x̄`` (k,) [m].
        update: a value of :data:`UPDATE_CODES`; ``inverse`` needs a square ``J``
            (checked by the caller).
        damping: λ of ``dls``; gain: Γ [1/s]; dt: Δt [s].

    Returns:
        ``(qa_new (m,), status)``.
    """
    _, qa, _, _, _, _, Ja, Ju, Hua, Huu, _ = unpack(state, n, m, k)
    err = target - x
    jac, ok = _held_jacobian(Ja, Ju, Hua, Huu)
    if not ok:
        return qa.copy(), SINGULAR
    if update == 3:  # transpose: q̇a = Γ Jᵀ e
        qa_dot = gain * rmatvec(jac, err)
    elif update == 0:  # inverse: q̇a = Γ J⁻¹ e
        sol, ok = solve_vec(jac, err)
        qa_dot = gain * sol
    elif update == 1:  # pinv
        qa_dot = gain * matvec(pinv(jac), err)
    else:  # dls
        jinv, ok = damped_pinv(jac, damping)
        qa_dot = gain * matvec(jinv, err)
    if not ok:
        return qa.copy(), SINGULAR
    return qa + dt * qa_dot, OK


@njit(cache=True, inline="always")
def alg1_commit(P, state, qa, tol, newton_iter):  # type: ignore[no-untyped-def]
    """Accept ``qa`` and re-solve the statics ``G_u(qa, q̄u) = 0`` warm-started.

    A first-order prediction along E, ``q̄u ← q̄u − Huu⁻¹ Hua Δqa``, then up to
    ``newton_iter`` Newton steps ``q̄u ← q̄u − Huu⁻¹ G_u`` until ``‖G_u‖ ≤ tol`` [N·m]
    (``Alg1Stepper.commit``).

    Returns:
        ``(new state, status)``: :data:`OK` with ``q̄ = c⁻¹(qa, q̄u)`` and the blocks of the last
        Newton evaluation, or :data:`FALLBACK` (not converged, or ``H_uu`` not positive
        definite: the caller runs the full statics solver) with the input state.
    """
    n, m, k = P.C.shape[0], P.m, P.task_dim
    nu = n - m
    o = offsets(n, m, k)
    _, qa0, qu0, _, _, _, _, _, Hua, Huu, _ = unpack(state, n, m, k)
    qu = qu0.copy()
    if nu > 0:
        step, ok = solve_vec(Huu, matvec(Hua, qa - qa0))
        if ok:
            qu = qu0 - step
    if newton_iter < 1:
        return state, FALLBACK
    new = np.empty(state.size)
    converged = False
    for _ in range(newton_iter):
        fill(P, _join(P.C_inv, qa, qu), new)
        gu = new[o[5]:o[6]]
        if nu == 0 or norm(gu) <= tol:
            converged = True
            break
        step, ok = solve_vec(new[o[9]:o[10]].reshape(nu, nu), gu)
        if not ok:
            break
        qu = qu - step
    if not (converged and is_positive_definite(new[o[9]:o[10]].reshape(nu, nu))):
        return state, FALLBACK
    new[:n] = _join(P.C_inv, qa, new[o[2]:o[3]])  # q̄ = c⁻¹(qa, q̄u) with q̄u as evaluated
    return new, OK


# ----------------------------------------------------------------------------- Algorithm 2


@njit(cache=True, inline="always")
def _stack(a, v):  # type: ignore[no-untyped-def]
    """``[a | v]``: the matrix ``a`` with the column ``v`` appended."""
    r, c = a.shape
    out = np.empty((r, c + 1))
    out[:, :c] = a
    out[:, c] = v
    return out


@njit(cache=True, inline="always")
def alg2_rates(Ja, Ju, Hua, Huu, ex, eE, gamma_z, gamma_e, damping):  # type: ignore[no-untyped-def]
    """Rates ``(q̇a, q̇u)`` of Algorithm 2, projector form (:func:`poise.ik.held.algorithm2_rates`).

    ``PE = [I; −Huu⁻¹Hua] (I − Ja⁻¹Ju Huu⁻¹Hua)⁻¹``, ``PZ = [−Ja⁻¹Ju; I] (I − Huu⁻¹Hua Ja⁻¹Ju)⁻¹``,
    ``(q̇a, q̇u) = PE Ja⁻¹ ΓZ ex + PZ Huu⁻¹ ΓE eE``; ``Ja⁻¹`` is the (damped) right
    pseudo-inverse when ``Ja`` is not square or ``damping > 0``; with a square ``Ja`` and
    ``damping > 0`` the task part ``J⁻¹ ΓZ ex`` (``J`` the held Jacobian) is damped least
    squares, as in the reference. Returns ``(rates, ok)``.
    """
    k, m = Ja.shape
    nu = Huu.shape[0]
    gz = gamma_z * ex
    ge = gamma_e * eE
    rhs = _stack(Ju, gz)
    if k == m and damping == 0.0:
        ja_solved, ok = solve_mat(Ja, rhs)
    else:
        jinv, ok = damped_pinv(Ja, damping)
        ja_solved = matmul(jinv, rhs)
    if not ok:
        return np.zeros(m + nu), False
    huu_solved, ok = solve_mat(Huu, _stack(Hua, ge))
    if not ok:
        return np.zeros(m + nu), False
    ja_inv_ju = ja_solved[:, :nu].copy()
    ja_inv_gz = ja_solved[:, nu].copy()
    huu_inv_hua = huu_solved[:, :m].copy()
    huu_inv_ge = huu_solved[:, m].copy()
    if k == m and damping > 0.0:  # the held Jacobian's damped inverse, as the reference
        jh_inv, ok = damped_pinv(Ja - matmul(Ju, huu_inv_hua), damping)
        w = matvec(jh_inv, gz)
    else:
        w, ok = solve_vec(np.eye(m) - matmul(ja_inv_ju, huu_inv_hua), ja_inv_gz)
    if not ok:
        return np.zeros(m + nu), False
    z, ok = solve_vec(np.eye(nu) - matmul(huu_inv_hua, ja_inv_ju), huu_inv_ge)
    if not ok:
        return np.zeros(m + nu), False
    rates = np.empty(m + nu)
    rates[:m] = w - matvec(ja_inv_ju, z)
    rates[m:] = z - matvec(huu_inv_hua, w)
    return rates, True


@njit(cache=True)
def limited_rates(Ja, Ju, Hua, Huu, qa, ex, eE, gamma_z, gamma_e, damping, qa_min, qa_max):  # type: ignore[no-untyped-def]
    """Algorithm 2's rates within the actuator limits (:func:`poise.ik.held.limited_rates`):
    :func:`alg2_rates`, or where an actuator at a limit is pushed past it, the bounded
    least-squares rates of :mod:`poise.ik.held_limits`. Returns ``(rates, ok)``."""
    rates, ok = alg2_rates(Ja, Ju, Hua, Huu, ex, eE, gamma_z, gamma_e, damping)
    if not ok:
        return rates, False
    m = qa.size
    upper = np.empty(m, dtype=np.bool_)
    lower = np.empty(m, dtype=np.bool_)
    for i in range(m):
        upper[i] = qa[i] >= qa_max[i] - LIMIT_TOL
        lower[i] = qa[i] <= qa_min[i] + LIMIT_TOL
    locked = _outward(rates[:m], upper, lower)
    if not locked.any():
        return rates, True
    solved, ok = solve_mat(Huu, _stack(Hua, gamma_e * eE))
    if not ok:
        return rates, False
    s_a = solved[:, :m].copy()
    s_e = solved[:, m].copy()
    jac = Ja - matmul(Ju, s_a)
    r = gamma_z * ex - matvec(Ju, s_e)
    qa_dot, ok = bounded_least_squares(jac, r, locked, upper, lower, damping)
    if not ok:
        return rates, False
    out = np.empty(rates.size)
    out[:m] = qa_dot
    out[m:] = s_e - matvec(s_a, qa_dot)
    return out, True


@njit(cache=True, inline="always")
def _outward(qa_dot, upper, lower):  # type: ignore[no-untyped-def]
    """Actuators whose rate pushes them past the limit they are at (m,) bool."""
    out = np.empty(qa_dot.size, dtype=np.bool_)
    for i in range(qa_dot.size):
        out[i] = (upper[i] and qa_dot[i] > 0.0) or (lower[i] and qa_dot[i] < 0.0)
    return out


@njit(cache=True)
def bounded_least_squares(jac, r, locked, upper, lower, damping):  # type: ignore[no-untyped-def]
    """``min ‖J q̇a − r‖`` under the limits' sign constraints by an active set
    (:func:`poise.ik.held_limits.bounded_least_squares`). Returns ``(q̇a, ok)``."""
    k, m = jac.shape
    locked = locked.copy()
    qa_dot = np.zeros(m)
    for _ in range(3 * m):
        nfree = 0
        for i in range(m):
            if not locked[i]:
                nfree += 1
        free_idx = np.empty(nfree, dtype=np.int64)
        j = 0
        for i in range(m):
            if not locked[i]:
                free_idx[j] = i
                j += 1
        qa_dot = np.zeros(m)
        if nfree > 0:
            sub = np.empty((k, nfree))
            for c in range(nfree):
                sub[:, c] = jac[:, free_idx[c]]
            inv, ok = damped_pinv(sub, damping)
            if not ok:
                return qa_dot, False
            sol = matvec(inv, r)
            for c in range(nfree):
                qa_dot[free_idx[c]] = sol[c]
        out = _outward(qa_dot, upper, lower)
        newly = False
        for i in range(m):
            if out[i] and not locked[i]:
                locked[i] = True
                newly = True
        if newly:
            continue
        multiplier = rmatvec(jac, r - matvec(jac, qa_dot))  # −∂/∂q̇a ½‖J q̇a − r‖²
        best = -1
        big = -1.0
        for i in range(m):
            inward = (upper[i] and multiplier[i] < 0.0) or (lower[i] and multiplier[i] > 0.0)
            if locked[i] and inward and abs(multiplier[i]) > big:
                big = abs(multiplier[i])
                best = i
        if best < 0:
            return qa_dot, True
        locked[best] = False
    out = _outward(qa_dot, upper, lower)
    for i in range(m):
        if out[i]:
            qa_dot[i] = 0.0  # cap reached: stay within the constraints
    return qa_dot, True


@njit(cache=True)
def follow_statics(Hua, Huu, qa_proposed, qu_proposed, qa):  # type: ignore[no-untyped-def]
    """``q̄u`` for the actuator motion really made (:func:`poise.ik.held.follow_statics`):
    ``qu_proposed − Huu⁻¹ Hua (qa − qa_proposed)``, ``qu_proposed`` when ``qa`` is the proposal
    or ``Huu`` is singular."""
    same = True
    for i in range(qa.size):
        if qa[i] != qa_proposed[i]:
            same = False
            break
    if same or Huu.shape[0] == 0:
        return qu_proposed.copy()
    step, ok = solve_vec(Huu, matvec(Hua, qa - qa_proposed))
    if not ok:
        return qu_proposed.copy()
    return qu_proposed - step


@njit(cache=True, inline="always")
def alg2_propose(C_inv, m, k, state, x, target, gamma_z, gamma_e, damping, dt, max_step,
                 qa_min, qa_max):  # type: ignore[no-untyped-def]
    """One Algorithm-2 step (``Alg2Stepper.propose``): ``ḟ = ΓZ ex``, ``Ġu = −ΓE Gu`` within
    the actuator limits (:func:`limited_rates`).

    A singular system is retried with ``λ = max(damping, 1e-6)``, as the reference does; the
    step is bounded to ``max_step`` [rad] per joint.

    Returns:
        ``([qa_new; qu_next] (n,), status)``; the caller keeps it for the commit.
    """
    n = C_inv.shape[0]
    _, qa, qu, _, _, Gu, Ja, Ju, Hua, Huu, _ = unpack(state, n, m, k)
    ex = target - x
    rates, ok = limited_rates(Ja, Ju, Hua, Huu, qa, ex, -Gu, gamma_z, gamma_e, damping, qa_min,
                              qa_max)
    if not ok:
        rates, ok = limited_rates(Ja, Ju, Hua, Huu, qa, ex, -Gu, gamma_z, gamma_e,
                                  max(damping, 1e-6), qa_min, qa_max)
        if not ok:
            return np.zeros(n), SINGULAR
    delta = _bounded(C_inv, dt * rates, max_step)
    out = np.empty(n)
    out[:m] = qa + delta[:m]
    out[m:] = qu + delta[m:]
    return out, OK


# ----------------------------------------------------------------------------- plain CLIK


@njit(cache=True, inline="always")
def plain_propose(C, C_inv, m, k, state, x, target, gamma, damping, dt, max_step):  # type: ignore[no-untyped-def]
    """One DLS CLIK step on all of ``q`` (``PlainStepper.propose``), statics ignored:
    ``Δq = Δt Γ J⁺_λ e`` in actuation coordinates, bounded to ``max_step`` [rad] per joint.

    ``J = ∂h/∂q`` at q̄ is taken from the state, ``J = [Ja Ju] C`` (the reference evaluates
    it anew; the two differ by rounding, ~cond(C) ulps).

    Returns:
        ``([qa_new; qu_next] (n,), status)``.
    """
    n = C.shape[0]
    _, qa, qu, _, _, _, Ja, Ju, _, _, _ = unpack(state, n, m, k)
    jc = np.empty((k, n))
    jc[:, :m] = Ja
    jc[:, m:] = Ju
    jac = matmul(jc, C)
    e = target - x
    jinv, ok = damped_pinv(jac, damping)
    if not ok:
        return np.zeros(n), SINGULAR
    dq = _bounded(C_inv, matvec(C, dt * gamma * matvec(jinv, e)), max_step)
    out = np.empty(n)
    out[:m] = qa + dq[:m]
    out[m:] = qu + dq[m:]
    return out, OK


# ----------------------------------------------------------------------------- simulator


@njit(cache=True)
def acceleration(args, q, qd, tau):  # type: ignore[no-untyped-def]
    """``q̈ = M⁻¹ (Aᵀ τ − C q̇ − D q̇ − G)`` (n,) [rad/s²] (:meth:`poise.sim.Dynamics.acceleration`).

    ``A`` = the first m rows of ``C``; ``M`` is solved by Cholesky, by LU if it is not
    positive definite (as ``solve_spd``).
    """
    P = family.as_arrays(args)
    n, m = P.C.shape[0], P.m
    M, bias, g = family.dynamics_terms(P, q, qd)
    f = np.empty(n)
    for j in range(n):
        acc = 0.0
        for i in range(m):
            acc += P.C[i, j] * tau[i]
        f[j] = acc - bias[j] - P.damping[j] * qd[j] - g[j]
    low, ok = cholesky(M)
    if ok:
        return cho_solve(low, f)
    sol, _ = solve_vec(M, f)
    return sol
