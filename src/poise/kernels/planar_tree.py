"""Compiled kernels of the ``planar_tree`` family (planar_2link, double_pendulum, tendon_3link,
dancer): the equations of :mod:`poise.models.planar_tree` on plain arrays.

Body directions ``ψ = S q + ψ₀`` [rad from +x]; every point is ``base + Σ_b w_b u(ψ_b)`` with
``u(ψ) = (cos ψ, sin ψ)``, so (with ``a_w = Wᵀ m`` the gravity moment weights [kg·m]):

* task ``h_r = base + Σ_b rows_rb u(ψ_b)`` (x or y component per row), Jacobian
  ``∂h_r/∂q_j = Σ_b rows_rb u⊥(ψ_b) S_bj`` with ``u⊥ = (−sin ψ, cos ψ)``;
* ``U = g (a_wᵀ sin ψ + M y_base) + ½ (q − q_rest)ᵀ K (q − q_rest)``,
  ``G = g Sᵀ (a_w ∘ cos ψ) + K (q − q_rest)``, ``∂G/∂q = −g Sᵀ diag(a_w ∘ sin ψ) S + K``;
* ``M = Sᵀ (cos(ψ_a − ψ_b) ∘ M_w + diag(I)) S``, ``C(q, q̇) q̇ = Sᵀ (sin(ψ_a − ψ_b) ∘ M_w) ψ̇²``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from poise.kernels.family import FamilyKernels, register
from poise.models.planar_tree import PlanarTree


class TreeArrays(NamedTuple):
    """A :class:`~poise.models.planar_tree.PlanarTree` as arrays (the kernels' view of it)."""

    C: np.ndarray  # (n, n) change of coordinates [qa; qu] = C q
    C_inv: np.ndarray  # (n, n)
    m: int  # actuators
    task_dim: int  # task rows k
    S: np.ndarray  # (n, n) signs: ψ = S q + ψ₀
    psi0: np.ndarray  # (n,) [rad]
    base: np.ndarray  # (2,) [m]
    rows: np.ndarray  # (k, n) task weights [m]
    is_y: np.ndarray  # (k,) bool: row r is a y component
    gravity: float  # g [m/s²]
    a_w: np.ndarray  # (n,) gravity moment weights Wᵀ m [kg·m]
    stiffness: np.ndarray  # (n,) [N·m/rad]
    q_rest: np.ndarray  # (n,) [rad]
    M_w: np.ndarray  # (n, n) Wᵀ diag(m) W over the centres of mass [kg·m²]
    inertias: np.ndarray  # (n,) about the centres of mass [kg·m²]
    damping: np.ndarray  # (n,) joint viscous damping D [N·m·s/rad]
    total_mass: float  # Σ m [kg]


def pack_tree(model: PlanarTree) -> TreeArrays:
    """The arrays of ``model`` (copies, C-contiguous float64)."""

    def f(a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(a, dtype=np.float64).copy()

    return TreeArrays(
        C=f(model.C), C_inv=f(model.C_inv), m=int(model.m), task_dim=int(model.task_dim),
        S=f(model.S), psi0=f(model.psi0), base=f(model.base), rows=f(model._task_rows),
        is_y=np.array(model._task_is_y, dtype=np.bool_), gravity=float(model.gravity),
        a_w=f(model.a_w), stiffness=f(model.stiffness), q_rest=f(model.q_rest),
        M_w=f(model.M_w), inertias=f(model.inertias), damping=f(model.damping),
        total_mass=float(model.total_mass),
    )


@njit(cache=True)
def _cos_sin(P: TreeArrays, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(cos ψ, sin ψ)`` with ``ψ = S q + ψ₀``."""
    n = q.size
    c = np.empty(n)
    s = np.empty(n)
    for b in range(n):
        psi = P.psi0[b]
        for j in range(n):
            psi += P.S[b, j] * q[j]
        c[b] = np.cos(psi)
        s[b] = np.sin(psi)
    return c, s


@njit(cache=True)
def fk(P: TreeArrays, q: np.ndarray) -> np.ndarray:
    """Task value ``h(q)`` (k,) [m]."""
    c, s = _cos_sin(P, q)
    k, n = P.rows.shape
    x = np.empty(k)
    for r in range(k):
        u = s if P.is_y[r] else c
        acc = 0.0
        for b in range(n):
            acc += P.rows[r, b] * u[b]
        x[r] = P.base[1 if P.is_y[r] else 0] + acc
    return x


@njit(cache=True)
def _jacobian(P: TreeArrays, c: np.ndarray, s: np.ndarray) -> np.ndarray:
    k, n = P.rows.shape
    jac = np.zeros((k, n))
    for r in range(k):
        for b in range(n):
            w = P.rows[r, b] * (c[b] if P.is_y[r] else -s[b])
            if w != 0.0:
                for j in range(n):
                    jac[r, j] += w * P.S[b, j]
    return jac


@njit(cache=True)
def task_jacobian(P: TreeArrays, q: np.ndarray) -> np.ndarray:
    """``∂h/∂q`` (k, n) [m/rad]."""
    c, s = _cos_sin(P, q)
    return _jacobian(P, c, s)


@njit(cache=True)
def _G(P: TreeArrays, q: np.ndarray, c: np.ndarray) -> np.ndarray:
    n = q.size
    g = np.empty(n)
    for j in range(n):
        acc = 0.0
        for b in range(n):
            acc += P.S[b, j] * (P.a_w[b] * c[b])
        g[j] = P.gravity * acc + P.stiffness[j] * (q[j] - P.q_rest[j])
    return g


@njit(cache=True)
def _dG(P: TreeArrays, s: np.ndarray) -> np.ndarray:
    n = s.size
    dg = np.zeros((n, n))
    for b in range(n):
        w = P.a_w[b] * s[b]
        for j in range(n):
            sj = P.S[b, j] * w
            if sj != 0.0:
                for i in range(n):
                    dg[j, i] += sj * P.S[b, i]
    for j in range(n):
        for i in range(n):
            dg[j, i] *= -P.gravity
        dg[j, j] += P.stiffness[j]
    return dg


@njit(cache=True)
def G(P: TreeArrays, q: np.ndarray) -> np.ndarray:
    """Potential forces ``G(q)`` (n,) [N·m]."""
    c, _ = _cos_sin(P, q)
    return _G(P, q, c)


@njit(cache=True)
def dG(P: TreeArrays, q: np.ndarray) -> np.ndarray:
    """Stiffness ``∂G/∂q`` (n, n) [N·m/rad]."""
    _, s = _cos_sin(P, q)
    return _dG(P, s)


@njit(cache=True)
def statics_terms(
    P: TreeArrays, q: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(h(q), ∂h/∂q, G(q), ∂G/∂q)`` from one evaluation of ``cos ψ, sin ψ``."""
    c, s = _cos_sin(P, q)
    k, n = P.rows.shape
    x = np.empty(k)
    for r in range(k):
        u = s if P.is_y[r] else c
        acc = 0.0
        for b in range(n):
            acc += P.rows[r, b] * u[b]
        x[r] = P.base[1 if P.is_y[r] else 0] + acc
    return x, _jacobian(P, c, s), _G(P, q, c), _dG(P, s)


@njit(cache=True)
def potential(P: TreeArrays, q: np.ndarray) -> float:
    """``U = g (a_wᵀ sin ψ + M y_base) + ½ (q − q_rest)ᵀ K (q − q_rest)`` [J]."""
    _, s = _cos_sin(P, q)
    grav = 0.0
    elastic = 0.0
    for b in range(q.size):
        grav += P.a_w[b] * s[b]
        dq = q[b] - P.q_rest[b]
        elastic += dq * (P.stiffness[b] * dq)
    return P.gravity * (grav + P.total_mass * P.base[1]) + 0.5 * elastic


@njit(cache=True)
def dynamics_terms(
    P: TreeArrays, q: np.ndarray, qd: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(M(q) [kg·m²], C(q, q̇) q̇ [N·m], G(q) [N·m])``."""
    c, s = _cos_sin(P, q)
    n = q.size
    psid2 = np.empty(n)  # ψ̇² [rad²/s²]
    for b in range(n):
        acc = 0.0
        for j in range(n):
            acc += P.S[b, j] * qd[j]
        psid2[b] = acc * acc
    inner = np.empty((n, n))  # cos(ψ_a − ψ_b) M_w + diag(I)
    bias_psi = np.zeros(n)  # (sin(ψ_a − ψ_b) ∘ M_w) ψ̇²
    for a in range(n):
        for b in range(n):
            inner[a, b] = (c[a] * c[b] + s[a] * s[b]) * P.M_w[a, b]
            bias_psi[a] += (s[a] * c[b] - c[a] * s[b]) * P.M_w[a, b] * psid2[b]
        inner[a, a] += P.inertias[a]
    tmp = np.zeros((n, n))  # inner S
    for a in range(n):
        for b in range(n):
            w = inner[a, b]
            for j in range(n):
                tmp[a, j] += w * P.S[b, j]
    M = np.zeros((n, n))  # Sᵀ inner S
    bias = np.zeros(n)
    for a in range(n):
        for i in range(n):
            sai = P.S[a, i]
            if sai != 0.0:
                bias[i] += sai * bias_psi[a]
                for j in range(n):
                    M[i, j] += sai * tmp[a, j]
    return M, bias, _G(P, q, c)


register(FamilyKernels("planar_tree", TreeArrays, fk=fk, task_jacobian=task_jacobian, G=G, dG=dG,
                       statics_terms=statics_terms, dynamics_terms=dynamics_terms,
                       potential=potential))
