"""Compiled kernels of the ``planar_pcc`` family (soft_arm_stiff, soft_arm_soft): the equations
of :mod:`poise.models.planar_pcc` on plain arrays.

Segment k (bending angle ``θ_k``, length ``L_k``) starts in direction
``ψ_k = ψ_base + Σ_{j<k} θ_j``; in complex notation its point at arc fraction ``s`` is
``T_k(s) = L_k s e^{iψ_k} f₀(iθ_k s)`` from the segment's start, with
``f_d(z) = ∫₀¹ tᵈ e^{zt} dt`` (:func:`f_funcs`: Taylor series for ``|z| < 1``, recurrence
otherwise, as in :func:`poise.models.planar_pcc.f_funcs`), and

    D_k(s) = ∂T_k/∂θ_k = i L s² e^{iψ} f₁(iθs),    D2_k(s) = ∂²T_k/∂θ_k² = −L s³ e^{iψ} f₂(iθs).

A mass point of segment i at fraction s sits at ``base + Σ_{k<i} T_k(1) + T_i(s)``; its complex
Jacobian is ``J_j = i Σ_{j<k≤i} T_k + D_j``. With the mass-weighted sums per segment
``t_k = Σ_p m_p T_pk`` (likewise ``d_k``, ``d2_k``):

* ``U = g (M y_base + Im Σ_k t_k) + ½ Σ_j K_j (θ_j − θ_rest,j)²`` (M the total mass);
* ``G_j = g Im(i Σ_{k>j} t_k + d_j) + K_j (θ_j − θ_rest,j)``;
* ``∂G_j/∂θ_l = g Im(−Σ_{k>max(j,l)} t_k + i d_j [l<j] + i d_l [j<l] + d2_j [j=l]) + K_j [j=l]``;
* ``M = Σ_p m_p Re(J_pᴴ J_p)``, ``C(q, q̇) q̇ = Σ_p m_p Re(J_pᴴ a_p)`` with
  ``a_p = Σ_k −T_pk ω_k² + 2i D_pk ω_k θ̇_k + D2_pk θ̇_k²``, ``ω_k = Σ_{j<k} θ̇_j``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import njit

from poise.kernels.family import FamilyKernels, register
from poise.models.planar_pcc import _SERIES_RADIUS, _SERIES_TERMS, PlanarPCC


class PCCArrays(NamedTuple):
    """A :class:`~poise.models.planar_pcc.PlanarPCC` as arrays (the kernels' view of it)."""

    C: np.ndarray  # (n, n) change of coordinates [qa; qu] = C q
    C_inv: np.ndarray  # (n, n)
    m: int  # actuators
    task_dim: int  # 2: tip (x, y)
    lengths: np.ndarray  # (n,) L_k [m]
    base: np.ndarray  # (2,) [m]
    base_angle: float  # ψ_base [rad from +x]
    gravity: float  # g [m/s²]
    stiffness: np.ndarray  # (n,) [N·m/rad]
    q_rest: np.ndarray  # (n,) [rad]
    point_mass: np.ndarray  # (n,) mass of each of segment k's points [kg]
    fractions: np.ndarray  # (P,) arc fractions s of the mass points in a segment
    mass_after: np.ndarray  # (n,) total point mass of the segments after k [kg]
    damping: np.ndarray  # (n,) joint viscous damping D [N·m·s/rad]


def pack_pcc(model: PlanarPCC) -> PCCArrays:
    """The arrays of ``model`` (copies, C-contiguous float64)."""
    n, P = model.n, model.spec.points_per_segment
    masses = np.asarray(model.masses, dtype=np.float64)  # (n P,), segment-major
    seg = np.repeat(np.arange(n), P)
    return PCCArrays(
        C=np.ascontiguousarray(model.C, dtype=np.float64).copy(),
        C_inv=np.ascontiguousarray(model.C_inv, dtype=np.float64).copy(),
        m=int(model.m), task_dim=2,
        lengths=np.array(model.lengths, dtype=np.float64),
        base=np.array([model.base.real, model.base.imag]),
        base_angle=float(model.base_angle), gravity=float(model.gravity),
        stiffness=np.array(model.stiffness, dtype=np.float64),
        q_rest=np.array(model.q_rest, dtype=np.float64),
        point_mass=masses[::P].copy(),
        fractions=(2 * np.arange(P) + 1) / (2 * P),
        mass_after=np.array([masses[seg > k].sum() for k in range(n)]),
        damping=np.array(model.damping, dtype=np.float64),
    )


#: 1/j for j = 0…_SERIES_TERMS + 3 (entry 0 unused): the series' divisions as products.
_RECIPROCALS = (0.0, *(1.0 / j for j in range(1, _SERIES_TERMS + 4)))


@njit(cache=True)
def f_funcs(y: float) -> tuple[complex, complex, complex]:
    """``f₀, f₁, f₂`` at the imaginary point ``z = i y``: ``f_d(iy) = ∫₀¹ tᵈ e^{iyt} dt``.

    Every argument of the kinematics is imaginary (``z = iθs``), so the evaluation is real:
    for ``|y| < 1`` the Taylor series ``Σ_k (iy)ᵏ / (k! (k + d + 1))`` (k ≤ 22, the terms
    ``yᵏ/k!`` real, ``iᵏ`` sorting them into real and imaginary parts; it stops once a term is
    below 1e-20, far under the last bit of ``|f_d| ≥ 0.45/(d + 1)``); otherwise the
    recurrence ``f₀ = (e^{iy} − 1)/(iy)``, ``f_d = (e^{iy} − d f_{d−1})/(iy)`` with
    ``w/(iy) = (Im w − i Re w)/y``. Same rules as :func:`poise.models.planar_pcc.f_funcs`.
    """
    if abs(y) < _SERIES_RADIUS:
        r0 = i0 = r1 = i1 = r2 = i2 = 0.0
        t = 1.0  # yᵏ / k!
        k = 0
        while True:  # four terms per pass, one per phase iᵏ = 1, i, −1, −i (no branch on k)
            r0 += t * _RECIPROCALS[k + 1]
            r1 += t * _RECIPROCALS[k + 2]
            r2 += t * _RECIPROCALS[k + 3]
            t = t * y * _RECIPROCALS[k + 1]
            if abs(t) < 1e-20 or k + 1 > _SERIES_TERMS:
                break
            i0 += t * _RECIPROCALS[k + 2]
            i1 += t * _RECIPROCALS[k + 3]
            i2 += t * _RECIPROCALS[k + 4]
            t = t * y * _RECIPROCALS[k + 2]
            if abs(t) < 1e-20 or k + 2 > _SERIES_TERMS:
                break
            r0 -= t * _RECIPROCALS[k + 3]
            r1 -= t * _RECIPROCALS[k + 4]
            r2 -= t * _RECIPROCALS[k + 5]
            t = t * y * _RECIPROCALS[k + 3]
            if abs(t) < 1e-20 or k + 3 > _SERIES_TERMS:
                break
            i0 -= t * _RECIPROCALS[k + 4]
            i1 -= t * _RECIPROCALS[k + 5]
            i2 -= t * _RECIPROCALS[k + 6]
            t = t * y * _RECIPROCALS[k + 4]
            if abs(t) < 1e-20 or k + 4 > _SERIES_TERMS:
                break
            k += 4
        return complex(r0, i0), complex(r1, i1), complex(r2, i2)
    c = math.cos(y)
    s = math.sin(y)
    inv = 1.0 / y
    # f₀ = (e^{iy} − 1)/(iy): w = (c − 1) + i s → (s − i (c − 1))/y
    r0 = s * inv
    i0 = -(c - 1.0) * inv
    # f₁ = (e^{iy} − f₀)/(iy)
    r1 = (s - i0) * inv
    i1 = -(c - r0) * inv
    # f₂ = (e^{iy} − 2 f₁)/(iy)
    r2 = (s - 2.0 * i1) * inv
    i2 = -(c - 2.0 * r1) * inv
    return complex(r0, i0), complex(r1, i1), complex(r2, i2)


@njit(cache=True)
def _rotations(P: PCCArrays, q: np.ndarray) -> np.ndarray:
    """``L_k e^{iψ_k}`` (n,) complex, ``ψ_k = ψ_base + Σ_{j<k} θ_j``."""
    n = q.size
    rot = np.empty(n, dtype=np.complex128)
    psi = P.base_angle
    for k in range(n):
        rot[k] = P.lengths[k] * complex(math.cos(psi), math.sin(psi))
        psi += q[k]
    return rot


@njit(cache=True)
def _segment_terms(P: PCCArrays, q: np.ndarray, rot: np.ndarray):
    """Whole-segment terms ``T_k(1), D_k(1), D2_k(1)`` and their mass-weighted sums over the
    mass points ``t_k, d_k, d2_k`` (n,) complex each."""
    n = q.size
    T1 = np.empty(n, dtype=np.complex128)
    D1 = np.empty(n, dtype=np.complex128)
    D21 = np.empty(n, dtype=np.complex128)
    t = np.empty(n, dtype=np.complex128)
    d = np.empty(n, dtype=np.complex128)
    d2 = np.empty(n, dtype=np.complex128)
    for k in range(n):
        f0, f1, f2 = f_funcs(q[k])
        T1[k] = rot[k] * f0
        D1[k] = 1j * rot[k] * f1
        D21[k] = -rot[k] * f2
        ts = 0j
        ds = 0j
        d2s = 0j
        for s in P.fractions:
            g0, g1, g2 = f_funcs(s * q[k])
            ts += rot[k] * s * g0
            ds += 1j * rot[k] * (s * s) * g1
            d2s += -rot[k] * (s * s * s) * g2
        w = P.point_mass[k]
        t[k] = P.mass_after[k] * T1[k] + w * ts
        d[k] = P.mass_after[k] * D1[k] + w * ds
        d2[k] = P.mass_after[k] * D21[k] + w * d2s
    return T1, D1, D21, t, d, d2


@njit(cache=True)
def _tip(P: PCCArrays, T1: np.ndarray, D1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = T1.size
    tip = complex(P.base[0], P.base[1])
    for k in range(n):
        tip += T1[k]
    x = np.array([tip.real, tip.imag])
    jac = np.empty((2, n))
    after = 0j  # Σ_{k>j} T_k(1)
    for j in range(n - 1, -1, -1):
        jj = 1j * after + D1[j]
        jac[0, j] = jj.real
        jac[1, j] = jj.imag
        after += T1[j]
    return x, jac


@njit(cache=True)
def _G(P: PCCArrays, q: np.ndarray, t: np.ndarray, d: np.ndarray) -> np.ndarray:
    n = q.size
    g = np.empty(n)
    after = 0j  # Σ_{k>j} t_k
    for j in range(n - 1, -1, -1):
        g[j] = P.gravity * (1j * after + d[j]).imag + P.stiffness[j] * (q[j] - P.q_rest[j])
        after += t[j]
    return g


@njit(cache=True)
def _dG(P: PCCArrays, t: np.ndarray, d: np.ndarray, d2: np.ndarray) -> np.ndarray:
    n = t.size
    suffix = np.zeros(n + 1, dtype=np.complex128)  # suffix[i] = Σ_{k≥i} t_k
    for k in range(n - 1, -1, -1):
        suffix[k] = suffix[k + 1] + t[k]
    dg = np.empty((n, n))
    for j in range(n):
        for l in range(n):
            h = -suffix[max(j, l) + 1]
            if l < j:
                h += 1j * d[j]
            elif j < l:
                h += 1j * d[l]
            else:
                h += d2[j]
            dg[j, l] = P.gravity * h.imag
        dg[j, j] += P.stiffness[j]
    return dg


@njit(cache=True)
def fk(P: PCCArrays, q: np.ndarray) -> np.ndarray:
    """Tip position (2,) [m]."""
    rot = _rotations(P, q)
    tip = complex(P.base[0], P.base[1])
    for k in range(q.size):
        f0, _, _ = f_funcs(q[k])
        tip += rot[k] * f0
    return np.array([tip.real, tip.imag])


@njit(cache=True)
def task_jacobian(P: PCCArrays, q: np.ndarray) -> np.ndarray:
    """``∂(tip)/∂θ`` (2, n) [m/rad]."""
    rot = _rotations(P, q)
    n = q.size
    T1 = np.empty(n, dtype=np.complex128)
    D1 = np.empty(n, dtype=np.complex128)
    for k in range(n):
        f0, f1, _ = f_funcs(q[k])
        T1[k] = rot[k] * f0
        D1[k] = 1j * rot[k] * f1
    return _tip(P, T1, D1)[1]


@njit(cache=True)
def G(P: PCCArrays, q: np.ndarray) -> np.ndarray:
    """Potential forces ``G(q)`` (n,) [N·m]."""
    _, _, _, t, d, _ = _segment_terms(P, q, _rotations(P, q))
    return _G(P, q, t, d)


@njit(cache=True)
def dG(P: PCCArrays, q: np.ndarray) -> np.ndarray:
    """Stiffness ``∂G/∂q`` (n, n) [N·m/rad]."""
    _, _, _, t, d, d2 = _segment_terms(P, q, _rotations(P, q))
    return _dG(P, t, d, d2)


@njit(cache=True)
def potential(P: PCCArrays, q: np.ndarray) -> float:
    """``U = g Σ_p m_p y_p + ½ Σ K (θ − θ_rest)²`` [J], with ``Σ_p m_p p_p = M base + Σ_k t_k``
    (``t_k`` the mass-weighted segment sums of the module docstring)."""
    rot = _rotations(P, q)
    heights = 0.0  # Σ_k Im t_k
    elastic = 0.0
    total = 0.0  # M [kg]
    for k in range(q.size):
        f0, _, _ = f_funcs(q[k])
        ts = 0j
        for s in P.fractions:
            g0, _, _ = f_funcs(s * q[k])
            ts += rot[k] * s * g0
        heights += (P.mass_after[k] * rot[k] * f0 + P.point_mass[k] * ts).imag
        total += P.point_mass[k] * P.fractions.size
        dq = q[k] - P.q_rest[k]
        elastic += dq * (P.stiffness[k] * dq)
    return P.gravity * (total * P.base[1] + heights) + 0.5 * elastic


@njit(cache=True)
def statics_terms(
    P: PCCArrays, q: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(h(q), ∂h/∂q, G(q), ∂G/∂q)`` from one evaluation of the segment terms."""
    T1, D1, _, t, d, d2 = _segment_terms(P, q, _rotations(P, q))
    x, jac = _tip(P, T1, D1)
    return x, jac, _G(P, q, t, d), _dG(P, t, d, d2)


@njit(cache=True)
def dynamics_terms(
    P: PCCArrays, q: np.ndarray, qd: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(M(q) [kg·m²], C(q, q̇) q̇ [N·m], G(q) [N·m])`` over the mass points."""
    n = q.size
    rot = _rotations(P, q)
    T1 = np.empty(n, dtype=np.complex128)
    D1 = np.empty(n, dtype=np.complex128)
    D21 = np.empty(n, dtype=np.complex128)
    for k in range(n):
        f0, f1, f2 = f_funcs(q[k])
        T1[k] = rot[k] * f0
        D1[k] = 1j * rot[k] * f1
        D21[k] = -rot[k] * f2
    omega = np.empty(n)  # ω_k = Σ_{j<k} θ̇_j [rad/s]
    acc = 0.0
    for k in range(n):
        omega[k] = acc
        acc += qd[k]
    # a_k(1) of the whole segments: −T ω² + 2i D ω θ̇ + D2 θ̇²
    a1 = np.empty(n, dtype=np.complex128)
    for k in range(n):
        a1[k] = -T1[k] * omega[k] ** 2 + 2j * D1[k] * omega[k] * qd[k] + D21[k] * qd[k] ** 2
    M = np.zeros((n, n))
    bias = np.zeros(n)
    gsum = np.zeros(n, dtype=np.complex128)
    J = np.empty(n, dtype=np.complex128)
    for i in range(n):  # segment of the point
        a_before = 0j  # Σ_{k<i} a_k(1)
        for k in range(i):
            a_before += a1[k]
        for s in P.fractions:
            g0, g1, g2 = f_funcs(s * q[i])
            Ts = rot[i] * s * g0
            Ds = 1j * rot[i] * (s * s) * g1
            D2s = -rot[i] * (s * s * s) * g2
            a = -Ts * omega[i] ** 2 + 2j * Ds * omega[i] * qd[i] + D2s * qd[i] ** 2 + a_before
            # J_j = i Σ_{j<k≤i} T_k + D_j for j ≤ i (T_i, D_i at fraction s), 0 beyond
            after = Ts
            J[i] = Ds
            for j in range(i - 1, -1, -1):
                J[j] = 1j * after + D1[j]
                after += T1[j]
            w = P.point_mass[i]
            for j in range(i + 1):  # Re(J̄_j z) = Re J_j Re z + Im J_j Im z; M symmetric
                jr, ji = J[j].real, J[j].imag
                gsum[j] += w * J[j]
                bias[j] += w * (jr * a.real + ji * a.imag)
                for l in range(j + 1):
                    M[j, l] += w * (jr * J[l].real + ji * J[l].imag)
    for j in range(n):
        for l in range(j):
            M[l, j] = M[j, l]
    G = np.empty(n)
    for j in range(n):
        G[j] = P.gravity * gsum[j].imag + P.stiffness[j] * (q[j] - P.q_rest[j])
    return M, bias, G


register(FamilyKernels("planar_pcc", PCCArrays, fk=fk, task_jacobian=task_jacobian, G=G, dG=dG,
                       statics_terms=statics_terms, dynamics_terms=dynamics_terms,
                       potential=potential))
