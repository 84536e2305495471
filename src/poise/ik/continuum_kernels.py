"""Compiled (Numba) kernels of the ``robust`` continuum method: ``cc3d`` kinematics in
curvature-vector coordinates, the pose error and one bounded, projected Levenberg–Marquardt run.

**Coordinates.** Segment i is described by its curvature vector ``b_i = κ_i (cos φ_i, sin φ_i)``
[1/m] instead of ``(κ_i, φ_i)``: the same arc (``κ = |b|``, ``φ = atan2(b_y, b_x)``), but smooth
at κ = 0, where the φ columns of the ``(κ, φ)`` Jacobian vanish and its pseudo-inverse throws
huge steps (docs/continuum.md §2). The bending limit ``|κ_i L_i| ≤ θ_max,i`` is the disc
``|b_i| ≤ θ_max,i / L_i``, and projecting onto it is a radial scaling.

**Kinematics** (:mod:`poise.models.cc3d`, rewritten in ``b``; ``θ = |b| l``)::

    R = I + sin θ ω̂' + (1 − cos θ) ω̂'²,   ω' = (−b_y, b_x, 0)/|b|
    p = l (l f2(θ) (b_x, b_y, 0) + sinc(θ) e_z)

and the spatial twists of the partial derivatives, ``V^x = c V^κ − s V^φ/κ``,
``V^y = s V^κ + c V^φ/κ`` (``c, s = cos φ, sin φ``), which work out to polynomials in ``b``
times the smooth ratios ``f2 = (1 − cos θ)/θ²``, ``f3 = (θ − sin θ)/θ³``::

    V^x = [−l³ b_x b_y f3,  l − l³ b_y² f3,  −l² b_y f2;   −l² f2,  0,  l³ b_x f3]
    V^y = [−l + l³ b_x² f3,  l³ b_x b_y f3,  l² b_x f2;    0,  −l² f2,  l³ b_y f3]

The Jacobian is seed 001's eq. (9) with these columns: ``J = [V_1^x V_1^y Ad_{T_1} V_2^x …]``,
rows ``[ω; v]`` in the base frame, the frame of the error ``V_D = log(T_D T_e⁻¹)``.

Everything here is checked against the numpy reference (:mod:`poise.models.cc3d`,
:mod:`poise.ik.se3`) to ≤ 1e-12 in ``tests/test_continuum_robust.py``; the smooth ratios use the
same series and switch points.
"""

from __future__ import annotations

import math
import sys

import numpy as np
from numba import njit

from poise.ik.se3 import _C_LOGV, LOGV_SWITCH
from poise.kernels import cache
from poise.kernels.linalg import cho_solve, cholesky
from poise.models.cc3d import _F3, _SINC, F3_SWITCH, SINC_SWITCH

# Coefficients as plain floats (Numba freezes module-level tuples as constants).
S0, S1, S2, S3, S4, S5 = _SINC
F0, F1, F2C, F3C, F4, F5 = _F3
C0, C1, C2, C3, C4 = _C_LOGV

# Attempt outcomes (``lm_attempt``'s code).
CONVERGED = 0
"""``e < tol``."""
STALLED = 1
"""The error fell by less than the stall ratio over the stall window (local minimum or crawl)."""
NO_DESCENT = 2
"""No step of any damping decreased the error (μ above its ceiling)."""
BUDGET = 3
"""The iteration budget ran out."""


# ---------------------------------------------------------------------------------------------
# Smooth ratios (same series and switch points as poise.models.cc3d / poise.ik.se3)
# ---------------------------------------------------------------------------------------------


@njit(cache=True)
def sinc(x: float) -> float:
    """``sin x / x``."""
    if abs(x) < SINC_SWITCH:
        x2 = x * x
        return S0 + x2 * (S1 + x2 * (S2 + x2 * (S3 + x2 * (S4 + x2 * S5))))
    return math.sin(x) / x


@njit(cache=True)
def f2(x: float) -> float:
    """``(1 − cos x)/x² = ½ sinc(x/2)²``."""
    s = sinc(0.5 * x)
    return 0.5 * s * s


@njit(cache=True)
def f3(x: float) -> float:
    """``(x − sin x)/x³``."""
    if abs(x) < F3_SWITCH:
        x2 = x * x
        return F0 + x2 * (F1 + x2 * (F2C + x2 * (F3C + x2 * (F4 + x2 * F5))))
    return (x - math.sin(x)) / (x * x * x)


@njit(cache=True)
def coef_log(th: float) -> float:
    """``(1 − θ/2 · cot(θ/2)) / θ²``, the ``ω̂²`` coefficient of ``J_l(ω)⁻¹``."""
    if th < LOGV_SWITCH:
        t2 = th * th
        return C0 + t2 * (C1 + t2 * (C2 + t2 * (C3 + t2 * C4)))
    return (1.0 - 0.5 * th * math.cos(0.5 * th) / math.sin(0.5 * th)) / (th * th)


# ---------------------------------------------------------------------------------------------
# Kinematics
# ---------------------------------------------------------------------------------------------


@njit(cache=True)
def pose_jacobian(b: np.ndarray, L: np.ndarray, T: np.ndarray, J: np.ndarray,
                  with_jacobian: bool) -> None:
    """Tip pose ``T (4, 4)`` and spatial Jacobian ``J (6, 2N)`` (columns ``b_x1, b_y1, …``)
    of ``b (2N,)`` with lengths ``L (N,)``, written into ``T`` and ``J``."""
    n = L.shape[0]
    Rc = np.eye(3)
    pc = np.zeros(3)
    R = np.empty((3, 3))
    p = np.empty(3)
    V = np.empty((2, 6))
    for i in range(n):
        bx, by, length = b[2 * i], b[2 * i + 1], L[i]
        kappa = math.hypot(bx, by)
        th = kappa * length
        if kappa > 0.0:
            c, s = bx / kappa, by / kappa
        else:
            c, s = 1.0, 0.0
        S, C = math.sin(th), math.cos(th)
        h = math.sin(0.5 * th)
        D = 2.0 * h * h
        R[0, 0] = 1.0 - D * c * c
        R[0, 1] = -D * s * c
        R[0, 2] = S * c
        R[1, 0] = R[0, 1]
        R[1, 1] = 1.0 - D * s * s
        R[1, 2] = S * s
        R[2, 0] = -S * c
        R[2, 1] = -S * s
        R[2, 2] = C
        a = length * th * f2(th)
        p[0], p[1], p[2] = a * c, a * s, length * sinc(th)
        if with_jacobian:
            g2, g3 = f2(th), f3(th)
            l2, l3 = length * length, length * length * length
            V[0, 0] = -l3 * bx * by * g3
            V[0, 1] = length - l3 * by * by * g3
            V[0, 2] = -l2 * by * g2
            V[0, 3] = -l2 * g2
            V[0, 4] = 0.0
            V[0, 5] = l3 * bx * g3
            V[1, 0] = -length + l3 * bx * bx * g3
            V[1, 1] = l3 * bx * by * g3
            V[1, 2] = l2 * bx * g2
            V[1, 3] = 0.0
            V[1, 4] = -l2 * g2
            V[1, 5] = l3 * by * g3
            for m in range(2):  # Ad_(Rc, pc) V = [Rc ω; Rc v + pc × Rc ω]
                col = 2 * i + m
                w0 = Rc[0, 0] * V[m, 0] + Rc[0, 1] * V[m, 1] + Rc[0, 2] * V[m, 2]
                w1 = Rc[1, 0] * V[m, 0] + Rc[1, 1] * V[m, 1] + Rc[1, 2] * V[m, 2]
                w2 = Rc[2, 0] * V[m, 0] + Rc[2, 1] * V[m, 1] + Rc[2, 2] * V[m, 2]
                v0 = Rc[0, 0] * V[m, 3] + Rc[0, 1] * V[m, 4] + Rc[0, 2] * V[m, 5]
                v1 = Rc[1, 0] * V[m, 3] + Rc[1, 1] * V[m, 4] + Rc[1, 2] * V[m, 5]
                v2 = Rc[2, 0] * V[m, 3] + Rc[2, 1] * V[m, 4] + Rc[2, 2] * V[m, 5]
                J[0, col], J[1, col], J[2, col] = w0, w1, w2
                J[3, col] = v0 + pc[1] * w2 - pc[2] * w1
                J[4, col] = v1 + pc[2] * w0 - pc[0] * w2
                J[5, col] = v2 + pc[0] * w1 - pc[1] * w0
        for r in range(3):  # pc += Rc p; Rc = Rc R
            pc_r = pc[r] + Rc[r, 0] * p[0] + Rc[r, 1] * p[1] + Rc[r, 2] * p[2]
            r0 = Rc[r, 0] * R[0, 0] + Rc[r, 1] * R[1, 0] + Rc[r, 2] * R[2, 0]
            r1 = Rc[r, 0] * R[0, 1] + Rc[r, 1] * R[1, 1] + Rc[r, 2] * R[2, 1]
            r2 = Rc[r, 0] * R[0, 2] + Rc[r, 1] * R[1, 2] + Rc[r, 2] * R[2, 2]
            pc[r] = pc_r
            Rc[r, 0], Rc[r, 1], Rc[r, 2] = r0, r1, r2
    for r in range(3):
        for k in range(3):
            T[r, k] = Rc[r, k]
        T[r, 3] = pc[r]
        T[3, r] = 0.0
    T[3, 3] = 1.0


@njit(cache=True)
def error_twist(TD: np.ndarray, T: np.ndarray, V: np.ndarray) -> float:
    """``V = log(T_D T⁻¹)`` written into ``V (6,)`` (as :func:`poise.ik.se3.log`); returns
    the metric ``e = ‖V‖²`` (seed 001, eq. 21)."""
    # E = T_D T⁻¹ = (R_D Rᵀ, p_D − R_D Rᵀ p)
    E = np.empty((3, 3))
    for i in range(3):
        for j in range(3):
            E[i, j] = TD[i, 0] * T[j, 0] + TD[i, 1] * T[j, 1] + TD[i, 2] * T[j, 2]
    pe = np.empty(3)
    for i in range(3):
        pe[i] = TD[i, 3] - (E[i, 0] * T[0, 3] + E[i, 1] * T[1, 3] + E[i, 2] * T[2, 3])
    a0 = 0.5 * (E[2, 1] - E[1, 2])
    a1 = 0.5 * (E[0, 2] - E[2, 0])
    a2 = 0.5 * (E[1, 0] - E[0, 1])
    c = 0.5 * (E[0, 0] + E[1, 1] + E[2, 2] - 1.0)
    s = math.sqrt(a0 * a0 + a1 * a1 + a2 * a2)
    th = math.atan2(s, c)
    if th > 0.75 * math.pi:  # axis from the symmetric part (largest diagonal), sign from a
        k = 0
        best = E[0, 0] - c
        for j in range(1, 3):
            if E[j, j] - c > best:
                best = E[j, j] - c
                k = j
        n0 = 0.5 * (E[0, k] + E[k, 0]) - (c if k == 0 else 0.0)
        n1 = 0.5 * (E[1, k] + E[k, 1]) - (c if k == 1 else 0.0)
        n2 = 0.5 * (E[2, k] + E[k, 2]) - (c if k == 2 else 0.0)
        norm = math.sqrt(max(n0 * n0 + n1 * n1 + n2 * n2, 1e-300))
        n0, n1, n2 = n0 / norm, n1 / norm, n2 / norm
        sign = -1.0 if n0 * a0 + n1 * a1 + n2 * a2 < 0.0 else 1.0
        w0, w1, w2 = sign * th * n0, sign * th * n1, sign * th * n2
    else:
        k_inv = 1.0 / sinc(th)
        w0, w1, w2 = a0 * k_inv, a1 * k_inv, a2 * k_inv
    th = math.sqrt(w0 * w0 + w1 * w1 + w2 * w2)
    x0 = w1 * pe[2] - w2 * pe[1]  # w × p
    x1 = w2 * pe[0] - w0 * pe[2]
    x2 = w0 * pe[1] - w1 * pe[0]
    y0 = w1 * x2 - w2 * x1  # w × (w × p)
    y1 = w2 * x0 - w0 * x2
    y2 = w0 * x1 - w1 * x0
    q = coef_log(th)
    V[0], V[1], V[2] = w0, w1, w2
    V[3] = pe[0] - 0.5 * x0 + q * y0
    V[4] = pe[1] - 0.5 * x1 + q * y1
    V[5] = pe[2] - 0.5 * x2 + q * y2
    e = 0.0
    for i in range(6):
        e += V[i] * V[i]
    return e


# ---------------------------------------------------------------------------------------------
# One bounded, projected Levenberg–Marquardt run
# ---------------------------------------------------------------------------------------------


@njit(cache=True)
def cholesky_solve(A: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, bool]:
    """``A⁻¹ y`` for a symmetric positive definite ``A`` (the control kernels' Cholesky,
    :mod:`poise.kernels.linalg`); ``ok`` false if a pivot is not > 0."""
    low, ok = cholesky(A)
    if not ok:
        return np.zeros(A.shape[0]), False
    return cho_solve(low, y), True


@njit(cache=True)
def damped_step(J: np.ndarray, V: np.ndarray, mu: float) -> tuple[np.ndarray, bool]:
    """``δ = (JᵀJ + μI)⁻¹ JᵀV``, computed as ``Jᵀ (JJᵀ + μI)⁻¹ V`` when J has more columns
    than rows (the two are identical)."""
    m, k = J.shape
    if k <= m:
        A = J.T @ J
        for i in range(k):
            A[i, i] += mu
        return cholesky_solve(A, J.T @ V)
    A = J @ J.T
    for i in range(m):
        A[i, i] += mu
    z, ok = cholesky_solve(A, V)
    return J.T @ z, ok


@njit(cache=True)
def project(b: np.ndarray, b_max: np.ndarray) -> None:
    """In place: scale every ``b_i`` with ``|b_i| > b_max,i`` back onto its disc."""
    for i in range(b_max.shape[0]):
        r = math.hypot(b[2 * i], b[2 * i + 1])
        if r > b_max[i]:
            f = b_max[i] / r
            b[2 * i] *= f
            b[2 * i + 1] *= f


@njit(cache=True)
def lm_attempt(b: np.ndarray, TD: np.ndarray, L: np.ndarray, b_max: np.ndarray, tol: float,
               budget: int, max_step: float, window: int, ratio: float, mu0: float,
               history: np.ndarray, offset: int) -> tuple[int, float, int]:
    """Minimise ``e(b) = ‖log(T_D T_e(b)⁻¹)‖²`` from ``b`` (updated in place) over the discs
    ``|b_i| ≤ b_max,i``.

    Each iteration evaluates one trial point ``b' = P(b + δ)``: ``δ`` the damped step
    (:func:`damped_step`), scaled down so that no segment's bending angle changes by more than
    ``max_step`` [rad] (``max_i |δ_i| L_i ≤ max_step``), ``P`` the projection onto the discs.
    The trial is accepted if it lowers ``e``; the damping μ follows Nielsen's rule (gain ratio
    ρ of actual to predicted decrease: accept → ``μ·max(1/3, 1 − (2ρ − 1)³)``, reject →
    ``μ·ν``, ``ν ← 2ν``). Stops at ``e < tol`` (:data:`CONVERGED`), when ``e`` fell by less than
    the factor ``ratio`` over the last ``window`` iterations (:data:`STALLED`), when μ exceeds
    ``1e12 μ0`` (:data:`NO_DESCENT`) or after ``budget`` iterations (:data:`BUDGET`).
    ``history[offset + k]`` receives ``e`` after iteration k (k = 0: the start). Returns
    ``(iterations, e, outcome)``.
    """
    n2 = b.shape[0]
    T = np.empty((4, 4))
    J = np.empty((6, n2))
    V = np.empty(6)
    pose_jacobian(b, L, T, J, True)
    e = error_twist(TD, T, V)
    Tn = np.empty((4, 4))
    Jn = np.empty((6, n2))
    Vn = np.empty(6)
    bn = np.empty(n2)
    mu, nu = mu0, 2.0
    window_e = np.empty(window + 1)  # e at the last window + 1 iterations (ring buffer)
    window_e[0] = e
    history[offset] = e
    k = 0
    while True:
        if e < tol:
            return k, e, CONVERGED
        if k >= budget:
            return k, e, BUDGET
        if mu > 1e12 * mu0:
            return k, e, NO_DESCENT
        if k >= window and e > ratio * window_e[(k - window) % (window + 1)]:
            return k, e, STALLED
        d, ok = damped_step(J, V, mu)
        biggest = 0.0
        for i in range(L.shape[0]):
            biggest = max(biggest, math.hypot(d[2 * i], d[2 * i + 1]) * L[i])
        if ok and biggest > max_step:
            d *= max_step / biggest
        for i in range(n2):
            bn[i] = b[i] + d[i]
        project(bn, b_max)
        for i in range(n2):
            d[i] = bn[i] - b[i]
        pose_jacobian(bn, L, Tn, Jn, True)
        en = error_twist(TD, Tn, Vn)
        k += 1
        r = J @ d  # predicted e after the step: ‖V − J δ‖²
        pred = 0.0
        for i in range(6):
            pred += (V[i] - r[i]) * (V[i] - r[i])
        gain = (e - en) / max(e - pred, 1e-300)
        if ok and en < e:
            b[:] = bn
            T[:, :], J[:, :], V[:] = Tn, Jn, Vn
            e = en
            mu *= max(1.0 / 3.0, 1.0 - (2.0 * gain - 1.0) ** 3)
            nu = 2.0
        else:
            mu *= nu
            nu *= 2.0
        history[offset + k] = e
        window_e[k % (window + 1)] = e


@njit(cache=True)
def run_starts(TD: np.ndarray, L: np.ndarray, b_max: np.ndarray, groups: np.ndarray,
               sizes: np.ndarray, tol: float, max_iter: int, done: int, max_step: float,
               window: int, ratio: float, mu0: float, history: np.ndarray,
               b_best: np.ndarray, best_e: float,
               attempts: np.ndarray) -> tuple[int, float, int, bool]:
    """Run :func:`lm_attempt` from one start per group until an attempt meets ``tol`` or the
    iterations reach ``max_iter``.

    Group j holds ``sizes[j]`` candidate starts ``groups[j, :sizes[j]]`` (each projected onto
    the discs); all are evaluated and the attempt starts from the one with the smallest ``e``.
    **Every evaluation counts as one iteration** — candidates, and every trial point of every
    attempt — except the very first evaluation of a solve, which is iterate 0 (``done`` is the
    number of iterations spent by earlier calls of the same solve). ``history[k]`` receives
    ``e`` of the current iterate after iteration k (while a group is evaluated: its best
    candidate so far). The best iterate over all attempts is kept in ``b_best`` / ``best_e``;
    ``attempts[i] = (group, candidate, iterations, final e, outcome)`` for each attempt run.
    Returns ``(iterations done, best e, attempts run, converged)``.
    """
    n2 = b_best.shape[0]
    T = np.empty((4, 4))
    J = np.empty((6, n2))
    V = np.empty(6)
    b = np.empty(n2)
    total = done
    count = 0
    first = done == 0
    for j in range(groups.shape[0]):
        group_best = np.inf
        pick = 0
        for m in range(sizes[j]):
            if first:
                first = False
            elif total >= max_iter:
                return total, best_e, count, False
            else:
                total += 1
            b[:] = groups[j, m]
            project(b, b_max)
            pose_jacobian(b, L, T, J, False)
            e = error_twist(TD, T, V)
            if e < group_best:
                group_best = e
                pick = m
            history[total] = group_best
        b[:] = groups[j, pick]
        project(b, b_max)
        it, e, outcome = lm_attempt(b, TD, L, b_max, tol, max_iter - total, max_step, window,
                                    ratio, mu0, history, total)
        total += it
        attempts[count, 0] = j
        attempts[count, 1] = pick
        attempts[count, 2] = it
        attempts[count, 3] = e
        attempts[count, 4] = outcome
        count += 1
        if e < best_e:
            best_e = e
            b_best[:] = b
        if outcome == CONVERGED:
            return total, best_e, count, True
    return total, best_e, count, False


@njit(cache=True)
def evaluate(b: np.ndarray, L: np.ndarray, TD: np.ndarray, T: np.ndarray,
             V: np.ndarray) -> tuple[float, float]:
    """At ``b``: tip pose into ``T``, error twist into ``V``; returns ``(e, σ_min)``, σ_min the
    smallest singular value of the Jacobian in ``b`` (6, 2N)."""
    J = np.empty((6, b.shape[0]))
    pose_jacobian(b, L, T, J, True)
    e = error_twist(TD, T, V)
    return e, np.linalg.svd(J)[1][-1]


# These cached kernels call poise.kernels.linalg: drop them when the kernel sources change.
cache.ensure_fresh(cache.dispatchers([sys.modules[__name__]]))
