"""Compiled Levenberg–Marquardt IK for ``dh_chain`` models (the Panda): the whole solve, every
restart included, in one call of compiled code.

One attempt from ``q`` iterates (Sugihara's LM, as the Robotics Toolbox's ``ik_LM``)::

    e  = [p_d − p_e ;  √w_o ϑ u]              ϑ u: angle-axis of R_d R_eᵀ (ϑ ∈ [0, π])
    μ  = w_e · ½‖e‖² + w_n                    (Sugihara 2011; ErrorDamping)
    Δq = J_wᵀ (J_w J_wᵀ + μ I)⁻¹ e            (≡ (J_wᵀ J_w + μ I)⁻¹ J_wᵀ e; J_w: rows scaled
                                                like e; 6 × 6 Cholesky, 3 × 3 for positions)
    q  ← Π(q + Δq)

* Joint limits: a joint whose new value leaves ``[q_min, q_max]`` is first moved by whole
  turns (2π, the same pose) when that lands inside the limits. Otherwise the reference's
  joint clamping (one round, :func:`clamp_joints`): such joints move exactly to their limit
  and the free joints re-solve for the rest of the error. ``Π`` then clamps what is still
  outside, so every iterate lies within the limits. (On the Panda benchmark clamping halved
  the steps and restarts: a solution with a joint near its limit is reached instead of
  abandoned.)
* Stopping rules, checked before each step (those of :func:`poise.ik.clik.solve`):
  converged when the task error ``r = √(‖p_d − p_e‖² + ϑ²)`` ≤ ``tol`` [m, rad] (the
  reference's residual: ``ϑ = 2 atan2(‖ε‖, η)`` of the error quaternion, Shepperd's method;
  ``r = ‖p_d − p_e‖`` for position targets); the iteration cap ``max_iter``; stalled when
  ``r_k > (1 − stall_rtol) r_{k − stall_window}``.
* Every step is taken (no line search): an attempt that does not converge fast is cheaper to
  abandon (stall rule) and restart than to nurse along. Restarts: uniform within the limits,
  Numba's generator seeded with ``seed`` at the first restart (reproducible).
* When no attempt converged, the best one is polished: up to ``max_iter`` more steps from its
  end, each halved while it raises ``r`` (:data:`MAX_HALVINGS`), with a patient stall rule
  (the reference's), so that an unreachable target ends at the closest configuration.

The best attempt is returned: the first that converged, otherwise the one with the smallest
``r``, polished. ``tests/test_dh_kernels.py`` checks the solutions against the numpy reference's
residual definitions and the limits.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from poise.kernels.dh_chain import DHArrays, pose_jacobian_into

# Attempt outcomes (``solve``'s status code).
CONVERGED = 0
"""``r ≤ tol``."""
ITERATION_CAP = 1
"""``max_iter`` steps done."""
STALLED = 2
"""The stall rule fired (local minimum, a joint pressed on a limit, or slow crawl)."""
SINGULAR = 3
"""``J_w J_wᵀ + μ I`` was not positive definite (μ = 0 at a singularity, or a NaN)."""

MAX_HALVINGS = 10
"""Step halvings of a monotone (polish) step before it counts as stalled."""
#: Jacobi sweeps of :func:`gram_eigenvalues` (converges in ~6 for 6 × 6).
_SWEEPS = 30
#: :func:`gram_eigenvalues` stops when ``‖offdiag‖ ≤ _OFF_TOL · trace`` (quadratic convergence:
#: one more sweep would change the eigenvalues by ~``_OFF_TOL²``).
_OFF_TOL = 1e-14


@njit(cache=True)
def quaternion(r00: float, r01: float, r02: float, r10: float, r11: float, r12: float,
               r20: float, r21: float, r22: float) -> tuple[float, float, float, float]:
    """Unit quaternion ``(w, x, y, z)``, ``w ≥ 0``, of a rotation matrix by Shepperd's method.

    The one implementation: :func:`poise.ik.orientation.quat_from_matrix` (the reference) runs
    this function's Python source (``quaternion.py_func``)."""
    tr = r00 + r11 + r22
    if tr > 0.0:
        s = 2.0 * math.sqrt(1.0 + tr)
        w, x, y, z = 0.25 * s, (r21 - r12) / s, (r02 - r20) / s, (r10 - r01) / s
    elif r00 >= r11 and r00 >= r22:
        s = 2.0 * math.sqrt(1.0 + r00 - r11 - r22)
        w, x, y, z = (r21 - r12) / s, 0.25 * s, (r01 + r10) / s, (r02 + r20) / s
    elif r11 >= r22:
        s = 2.0 * math.sqrt(1.0 + r11 - r00 - r22)
        w, x, y, z = (r02 - r20) / s, (r01 + r10) / s, 0.25 * s, (r12 + r21) / s
    else:
        s = 2.0 * math.sqrt(1.0 + r22 - r00 - r11)
        w, x, y, z = (r10 - r01) / s, (r02 + r20) / s, (r12 + r21) / s, 0.25 * s
    if w < 0.0:
        w, x, y, z = -w, -x, -y, -z
    norm = math.sqrt(w * w + x * x + y * y + z * z)
    return w / norm, x / norm, y / norm, z / norm


@njit(cache=True)
def rotation_error(Rd: np.ndarray, R: np.ndarray, eo: np.ndarray) -> float:
    """Write the angle-axis vector ``ϑ u`` of ``R_d Rᵀ`` into ``eo`` (3,); return ``ϑ`` [rad].

    The error quaternion ``Q(R_d Rᵀ) = (η, ε)`` (:func:`quaternion`), then
    ``ϑ = 2 atan2(‖ε‖, η)`` and ``u = ε/‖ε‖``: exactly the arithmetic of
    :func:`poise.ik.orientation.orientation_error` (``ϑ`` agrees to the last bit).
    """
    w, x, y, z = quaternion(
        Rd[0, 0] * R[0, 0] + Rd[0, 1] * R[0, 1] + Rd[0, 2] * R[0, 2],
        Rd[0, 0] * R[1, 0] + Rd[0, 1] * R[1, 1] + Rd[0, 2] * R[1, 2],
        Rd[0, 0] * R[2, 0] + Rd[0, 1] * R[2, 1] + Rd[0, 2] * R[2, 2],
        Rd[1, 0] * R[0, 0] + Rd[1, 1] * R[0, 1] + Rd[1, 2] * R[0, 2],
        Rd[1, 0] * R[1, 0] + Rd[1, 1] * R[1, 1] + Rd[1, 2] * R[1, 2],
        Rd[1, 0] * R[2, 0] + Rd[1, 1] * R[2, 1] + Rd[1, 2] * R[2, 2],
        Rd[2, 0] * R[0, 0] + Rd[2, 1] * R[0, 1] + Rd[2, 2] * R[0, 2],
        Rd[2, 0] * R[1, 0] + Rd[2, 1] * R[1, 1] + Rd[2, 2] * R[1, 2],
        Rd[2, 0] * R[2, 0] + Rd[2, 1] * R[2, 1] + Rd[2, 2] * R[2, 2])
    v = math.sqrt(x * x + y * y + z * z)
    angle = 2.0 * math.atan2(v, w)
    if v > 0.0:
        f = angle / v
        eo[0] = f * x
        eo[1] = f * y
        eo[2] = f * z
    else:
        eo[0] = eo[1] = eo[2] = 0.0
    return angle


@njit(cache=True)
def evaluate(P: DHArrays, Rd: np.ndarray, pd: np.ndarray, full: bool, sw: float,
             q: np.ndarray, R: np.ndarray, p: np.ndarray, J: np.ndarray,
             e: np.ndarray) -> tuple[float, float]:
    """Pose, Jacobian and error at ``q`` into ``R, p, J, e``; returns ``(‖p_d − p_e‖ [m],
    ϑ [rad])``. ``e = [p_d − p_e; sw ϑ u]`` and ``J``'s ω rows are scaled by ``sw = √w_o``
    (``full``: a pose target; otherwise only the first three rows are meaningful)."""
    pose_jacobian_into(P, q, R, p, J)
    e[0] = pd[0] - p[0]
    e[1] = pd[1] - p[1]
    e[2] = pd[2] - p[2]
    pe = math.sqrt(e[0] * e[0] + e[1] * e[1] + e[2] * e[2])
    if not full:
        return pe, 0.0
    oe = rotation_error(Rd, R, e[3:])
    if sw != 1.0:
        for i in range(3, 6):
            e[i] *= sw
            for j in range(q.size):
                J[i, j] *= sw
    return pe, oe


@njit(cache=True)
def lm_step(J: np.ndarray, e: np.ndarray, rows: int, mu: float, A: np.ndarray,
            y: np.ndarray, dq: np.ndarray) -> bool:
    """``Δq = Jᵀ (J Jᵀ + μ I)⁻¹ e`` over the first ``rows`` rows, into ``dq`` (workspaces
    ``A`` (6, 6) and ``y`` (6,)); false when ``J Jᵀ + μ I`` is not positive definite.

    In-place Cholesky of the lower triangle of ``A`` (the algorithm of
    :func:`poise.kernels.linalg.cholesky`, without its allocations: this runs every
    iteration)."""
    n = J.shape[1]
    for i in range(rows):
        for j in range(i + 1):
            acc = 0.0
            for k in range(n):
                acc += J[i, k] * J[j, k]
            A[i, j] = acc
        A[i, i] += mu
    for j in range(rows):
        d = A[j, j]
        for k in range(j):
            d -= A[j, k] * A[j, k]
        if not d > 0.0:
            return False
        d = math.sqrt(d)
        A[j, j] = d
        for i in range(j + 1, rows):
            s = A[i, j]
            for k in range(j):
                s -= A[i, k] * A[j, k]
            A[i, j] = s / d
    for i in range(rows):
        s = e[i]
        for k in range(i):
            s -= A[i, k] * y[k]
        y[i] = s / A[i, i]
    for i in range(rows - 1, -1, -1):
        s = y[i]
        for k in range(i + 1, rows):
            s -= A[k, i] * y[k]
        y[i] = s / A[i, i]
    for k in range(n):
        acc = 0.0
        for i in range(rows):
            acc += J[i, k] * y[i]
        dq[k] = acc
    return True


@njit(cache=True)
def into_limits(v: float, lo: float, hi: float) -> tuple[float, bool]:
    """``(v', clamped)``: ``v`` itself within ``[lo, hi]``; else ``v`` moved by whole turns
    (2π, the same joint pose) when that lands inside; else the limit it left by
    (``clamped``)."""
    two_pi = 2.0 * math.pi
    if v < lo:
        w = v + two_pi * math.ceil((lo - v) / two_pi)
        return (w, False) if w <= hi else (lo, True)
    if v > hi:
        w = v - two_pi * math.ceil((v - hi) / two_pi)
        return (w, False) if w >= lo else (hi, True)
    return v, False


@njit(cache=True)
def project(q: np.ndarray, dq: np.ndarray, q_min: np.ndarray, q_max: np.ndarray,
            out: np.ndarray) -> None:
    """``Π(q + Δq)`` into ``out`` (:func:`into_limits` per joint)."""
    for j in range(q.size):
        out[j] = into_limits(q[j] + dq[j], q_min[j], q_max[j])[0]


@njit(cache=True)
def clamp_joints(q: np.ndarray, dq: np.ndarray, J: np.ndarray, e: np.ndarray, rows: int,
                 mu: float, q_min: np.ndarray, q_max: np.ndarray, Jc: np.ndarray,
                 ec: np.ndarray, A: np.ndarray, y: np.ndarray, dq_free: np.ndarray,
                 held: np.ndarray) -> bool:
    """Joint clamping (as the reference's :func:`poise.ik.clik._clamped_step`, one round):
    joints whose step ``dq`` leaves the limits (no whole turn lands inside) move exactly to
    their limit, ``Δq_b``, and the others solve for the rest of the error,
    ``Δq_f = J_fᵀ (J_f J_fᵀ + μ I)⁻¹ (e − J_b Δq_b)``; the result replaces ``dq``. False when
    that system is not positive definite (``dq`` unchanged). Workspaces: ``Jc`` (6, n),
    ``ec`` (6,), ``dq_free`` (n,), ``held`` (n,) bool."""
    n = q.size
    any_held = False
    for j in range(n):
        held[j] = into_limits(q[j] + dq[j], q_min[j], q_max[j])[1]
        any_held = any_held or held[j]
    if not any_held:
        return True
    for i in range(rows):
        ec[i] = e[i]
    for j in range(n):
        if held[j]:
            step = into_limits(q[j] + dq[j], q_min[j], q_max[j])[0] - q[j]
            for i in range(rows):
                ec[i] -= J[i, j] * step
                Jc[i, j] = 0.0  # a frozen joint: no column
            dq[j] = step
        else:
            for i in range(rows):
                Jc[i, j] = J[i, j]
    if not lm_step(Jc, ec, rows, mu, A, y, dq_free):
        return False
    for j in range(n):
        if not held[j]:
            dq[j] = dq_free[j]
    return True


@njit(cache=True)
def gram_eigenvalues(J: np.ndarray, rows: int) -> np.ndarray:
    """Eigenvalues of ``J Jᵀ`` over the first ``rows`` rows (ascending) by cyclic Jacobi
    rotations: ``σ_i(J)²``. (From the Gram matrix, ``σ_min`` is exact to about
    ``ε σ_max² / σ_min``: ~1e-8 σ_max at a singularity, ample for a reported figure.)"""
    n = J.shape[1]
    A = np.empty((rows, rows))
    for i in range(rows):
        for j in range(i + 1):
            acc = 0.0
            for k in range(n):
                acc += J[i, k] * J[j, k]
            A[i, j] = acc
            A[j, i] = acc
    scale = 0.0
    for i in range(rows):
        scale += A[i, i]
    for _ in range(_SWEEPS):
        off = 0.0
        for i in range(rows):
            for j in range(i + 1, rows):
                off += A[i, j] * A[i, j]
        if off <= (_OFF_TOL * scale) ** 2:
            break
        for i in range(rows - 1):
            for j in range(i + 1, rows):
                aij = A[i, j]
                if aij == 0.0:
                    continue
                theta = 0.5 * (A[j, j] - A[i, i]) / aij
                t = (1.0 if theta >= 0.0 else -1.0) / (abs(theta) + math.sqrt(theta * theta + 1.0))
                c = 1.0 / math.sqrt(t * t + 1.0)
                s = t * c
                for k in range(rows):  # A ← Gᵀ A G on columns, then rows
                    aki = A[k, i]
                    akj = A[k, j]
                    A[k, i] = c * aki - s * akj
                    A[k, j] = s * aki + c * akj
                for k in range(rows):
                    aik = A[i, k]
                    ajk = A[j, k]
                    A[i, k] = c * aik - s * ajk
                    A[j, k] = s * aik + c * ajk
    out = np.empty(rows)
    for i in range(rows):
        out[i] = max(A[i, i], 0.0)
    out.sort()
    return out


@njit(cache=True)
def attempt(P: DHArrays, Rd: np.ndarray, pd: np.ndarray, full: bool, sw: float,
            q: np.ndarray, tol: float, w_e: float, w_n: float, max_iter: int,
            stall_window: int, stall_rtol: float, monotone: bool, hist: np.ndarray, it: int,
            work: tuple) -> tuple[int, int, float, float]:  # type: ignore[type-arg]
    """Iterate from ``q`` (updated in place) until a stopping rule fires; ``r`` per iterate
    goes to ``hist[it:]`` (``it`` steps already made). ``monotone``: halve a step that raises
    ``r`` (up to :data:`MAX_HALVINGS` times; stalled when none lowers it), as the reference's
    line search. ``work``: the workspaces (:func:`solve`); ``R, p, J, e`` hold the pose,
    Jacobian and error at ``q`` on return. Returns ``(status, steps in all, ‖p_d − p_e‖, ϑ)``."""
    R, p, J, e, A, y, dq, q_new, Jc, ec, dq_free, held = work
    rows = 6 if full else 3
    lo = P.q_min
    hi = P.q_max
    pe, oe = evaluate(P, Rd, pd, full, sw, q, R, p, J, e)
    r = math.sqrt(pe * pe + oe * oe)
    hist[it] = r
    start = it
    while True:
        if r <= tol:
            return CONVERGED, it, pe, oe
        if it - start >= max_iter:
            return ITERATION_CAP, it, pe, oe
        if it - start >= stall_window and r > (1.0 - stall_rtol) * hist[it - stall_window]:
            return STALLED, it, pe, oe
        err_sq = 0.0
        for i in range(rows):
            err_sq += e[i] * e[i]
        mu = w_e * 0.5 * err_sq + w_n
        if not lm_step(J, e, rows, mu, A, y, dq):
            return SINGULAR, it, pe, oe
        if not clamp_joints(q, dq, J, e, rows, mu, lo, hi, Jc, ec, A, y, dq_free, held):
            return SINGULAR, it, pe, oe
        project(q, dq, lo, hi, q_new)
        pe_n, oe_n = evaluate(P, Rd, pd, full, sw, q_new, R, p, J, e)
        r_n = math.sqrt(pe_n * pe_n + oe_n * oe_n)
        halvings = 0
        while monotone and r_n > r and halvings < MAX_HALVINGS:
            for j in range(q.size):
                dq[j] *= 0.5
            project(q, dq, lo, hi, q_new)
            pe_n, oe_n = evaluate(P, Rd, pd, full, sw, q_new, R, p, J, e)
            r_n = math.sqrt(pe_n * pe_n + oe_n * oe_n)
            halvings += 1
        if monotone and r_n > r:  # no decrease along a descent direction: stationary
            evaluate(P, Rd, pd, full, sw, q, R, p, J, e)
            return STALLED, it, pe, oe
        q[:] = q_new
        pe, oe, r = pe_n, oe_n, r_n
        it += 1
        hist[it] = r


@njit(cache=True)
def solve(args: tuple, Rd: np.ndarray, pd: np.ndarray, full: bool,  # type: ignore[type-arg]
          q0: np.ndarray, tol: float, sw: float, w_e: float, w_n: float, max_iter: int,
          restarts: int, seed: int, stall_window: int, stall_rtol: float, polish_window: int,
          polish_rtol: float):  # type: ignore[no-untyped-def]
    """The whole solve (module docstring) toward the pose ``(R_d, p_d)``.

    Args:
        args: ``tuple(pack_dh(model))``.
        Rd: desired rotation (3, 3) (ignored unless ``full``); pd: desired position (3,) [m].
        full: a pose target (6 rows); false: position only (3 rows).
        q0: first start (n,) [rad] (clamped into the limits).
        tol: tolerance on ``r`` [m, rad]; sw: ``√w_o`` [m/rad].
        w_e, w_n: the damping ``μ = w_e ½‖e‖² + w_n``.
        max_iter: steps per attempt; restarts: extra attempts; seed: of the restarts.
        stall_window, stall_rtol: the stall rule of the attempts.
        polish_window, polish_rtol: the stall rule of the polish (monotone steps from the best
            attempt's end, up to ``max_iter`` more) made when no attempt converged.

    Returns:
        ``(q, status, iterations, attempts, total, pe, oe, sigma_min, history, x)``: the best
        attempt's configuration, outcome code and steps (its polish included); the attempts
        and steps made in all; the best attempt's position and orientation errors [m, rad],
        the smallest singular value of its Jacobian (unscaled rows used), ``r`` per iterate,
        and its task value ``x = (p_e, Q(R_e))`` (7,) (``p_e`` (3,) for position targets).

    The restarts and the polish stay in this one compiled function: they share the work
    arrays and the best attempt's state, which a split would pass through tuples (each call
    boundary boxes them in Numba); the per-step work is in :func:`attempt`.
    """
    P = DHArrays(*args)
    n = q0.size
    lo, hi = P.q_min, P.q_max
    R = np.empty((3, 3))
    p = np.empty(3)
    J = np.empty((6, n))
    work = (R, p, J, np.zeros(6), np.empty((6, 6)), np.empty(6), np.empty(n), np.empty(n),
            np.empty((6, n)), np.empty(6), np.empty(n), np.zeros(n, dtype=np.bool_))
    q = np.empty(n)
    hist = np.empty(2 * max_iter + 1)
    best_hist = np.empty(2 * max_iter + 1)
    best_q = np.empty(n)
    best_r = np.inf
    best_pe = best_oe = np.inf
    best_status = ITERATION_CAP
    best_it = 0
    attempts = 0
    total = 0
    for k in range(restarts + 1):
        attempts = k + 1
        if k == 0:
            for j in range(n):
                q[j] = min(max(q0[j], lo[j]), hi[j])
        else:
            if k == 1:
                np.random.seed(seed)
            for j in range(n):
                q[j] = np.random.uniform(lo[j], hi[j])
        status, it, pe, oe = attempt(P, Rd, pd, full, sw, q, tol, w_e, w_n, max_iter,
                                     stall_window, stall_rtol, False, hist, 0, work)
        total += it
        r = math.sqrt(pe * pe + oe * oe)
        if status == CONVERGED or r < best_r:
            best_r, best_pe, best_oe, best_status, best_it = r, pe, oe, status, it
            best_q[:] = q
            best_hist[: it + 1] = hist[: it + 1]
        if status == CONVERGED:
            break
    # R, p, J hold the pose at the last attempt's end: the best one when it converged
    if best_status != CONVERGED:  # polish the closest configuration found
        q[:] = best_q
        best_status, it, best_pe, best_oe = attempt(
            P, Rd, pd, full, sw, q, tol, w_e, w_n, max_iter, polish_window, polish_rtol, True,
            best_hist, best_it, work)
        total += it - best_it
        best_it = it
        best_q[:] = q
    x, sigma_min = task_value(R, p, J, full, sw)
    return (best_q, best_status, best_it, attempts, total, best_pe, best_oe, sigma_min,
            best_hist[: best_it + 1].copy(), x)


@njit(cache=True)
def task_value(R: np.ndarray, p: np.ndarray, J: np.ndarray, full: bool,
               sw: float) -> tuple[np.ndarray, float]:
    """``(x, σ_min)`` at the pose ``(R, p)`` with Jacobian ``J`` (orientation rows scaled by
    ``sw``, unscaled here in place): the task value ``x = (p_e, Q(R_e))`` (7,) (``p_e`` (3,)
    for position targets) and the smallest singular value of the unscaled rows used."""
    if full and sw != 1.0:
        for i in range(3, 6):
            for j in range(J.shape[1]):
                J[i, j] /= sw
    x = np.empty(7 if full else 3)
    x[:3] = p
    if full:
        x[3], x[4], x[5], x[6] = quaternion(R[0, 0], R[0, 1], R[0, 2], R[1, 0], R[1, 1],
                                            R[1, 2], R[2, 0], R[2, 1], R[2, 2])
    return x, math.sqrt(gram_eigenvalues(J, 6 if full else 3)[0])
