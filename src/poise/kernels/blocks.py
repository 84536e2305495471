"""The actuation blocks of :mod:`poise.models.actuation` in one flat state vector.

With ``[qa; qu] = C q``: ``G_c = C⁻ᵀ G``, ``H_c = C⁻ᵀ (∂G/∂q) C⁻¹``, ``J_c = (∂h/∂q) C⁻¹``, and
``G_a, G_u, J_a, J_u, H_ua, H_uu, H_aa`` their blocks (seed 000). A stepper's state is one
float64 vector (n, m actuators, k task rows, ν = n − m)::

    q (n) | qa (m) | qu (ν) | x (k) | Ga (m) | Gu (ν) | Ja (k·m) | Ju (k·ν) | Hua (ν·m) |
    Huu (ν·ν) | Haa (m·m)

matrices row-major. One vector crosses the Python boundary instead of eleven arrays (each
array returned from compiled code costs ~0.5 µs to box). ``q`` is the configuration the
stepper reports as ``q̄``; the blocks are evaluated there, except after an Algorithm-1 commit
(see :func:`poise.kernels.steps.alg1_commit`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from poise.kernels import family


@njit(cache=True)
def offsets(n: int, m: int, k: int) -> tuple[int, ...]:
    """Start of each field in the state vector, then its length (12 numbers)."""
    nu = n - m
    o1 = n  # q
    o2 = o1 + m  # qa
    o3 = o2 + nu  # qu
    o4 = o3 + k  # x
    o5 = o4 + m  # Ga
    o6 = o5 + nu  # Gu
    o7 = o6 + k * m  # Ja
    o8 = o7 + k * nu  # Ju
    o9 = o8 + nu * m  # Hua
    o10 = o9 + nu * nu  # Huu
    o11 = o10 + m * m  # Haa
    return (0, o1, o2, o3, o4, o5, o6, o7, o8, o9, o10, o11)


@njit(cache=True, inline="always")  # inlined: the views a caller does not use cost nothing
def unpack(state: np.ndarray, n: int, m: int, k: int):  # type: ignore[no-untyped-def]
    """Views ``(q, qa, qu, x, Ga, Gu, Ja, Ju, Hua, Huu, Haa)`` into ``state``."""
    o = offsets(n, m, k)
    nu = n - m
    return (state[o[0]:o[1]], state[o[1]:o[2]], state[o[2]:o[3]], state[o[3]:o[4]],
            state[o[4]:o[5]], state[o[5]:o[6]],
            state[o[6]:o[7]].reshape(k, m), state[o[7]:o[8]].reshape(k, nu),
            state[o[8]:o[9]].reshape(nu, m), state[o[9]:o[10]].reshape(nu, nu),
            state[o[10]:o[11]].reshape(m, m))


@njit(cache=True)
def fill(P, q: np.ndarray, state: np.ndarray) -> None:  # type: ignore[no-untyped-def]
    """Write ``q`` and the blocks at ``q`` into ``state`` (by offset: no views to make)."""
    n = q.size
    m, k = P.m, P.task_dim
    nu = n - m
    o = offsets(n, m, k)
    x, jac, g, dg = family.statics_terms(P, q)
    C, Ci = P.C, P.C_inv
    for i in range(n):
        state[o[0] + i] = q[i]
        acc = 0.0  # (C q)_i
        for p in range(n):
            acc += C[i, p] * q[p]
        state[o[1] + i] = acc  # qa then qu: contiguous
        acc = 0.0  # (C⁻ᵀ G)_i
        for p in range(n):
            acc += Ci[p, i] * g[p]
        state[o[4] + i if i < m else o[5] + i - m] = acc
    for r in range(k):
        state[o[3] + r] = x[r]
        for j in range(n):  # (J C⁻¹)_rj
            acc = 0.0
            for p in range(n):
                acc += jac[r, p] * Ci[p, j]
            state[o[6] + r * m + j if j < m else o[7] + r * nu + j - m] = acc
    left = np.zeros((n, n))  # C⁻ᵀ ∂G/∂q
    for i in range(n):
        for p in range(n):
            c = Ci[p, i]
            if c != 0.0:
                for j in range(n):
                    left[i, j] += c * dg[p, j]
    for i in range(n):
        for j in range(n):
            if i < m and j >= m:
                continue  # H_au is not kept
            acc = 0.0  # (C⁻ᵀ ∂G/∂q C⁻¹)_ij
            for p in range(n):
                acc += left[i, p] * Ci[p, j]
            if i >= m and j < m:
                state[o[8] + (i - m) * m + j] = acc  # H_ua
            elif i >= m:
                state[o[9] + (i - m) * nu + j - m] = acc  # H_uu
            else:
                state[o[10] + i * m + j] = acc  # H_aa


@njit(cache=True)
def state_size(n: int, m: int, k: int) -> int:
    """Length of the state vector."""
    return offsets(n, m, k)[11]


@njit(cache=True, inline="always")
def state_at(P, q: np.ndarray) -> np.ndarray:  # type: ignore[no-untyped-def]
    """A new state vector: ``q`` and the blocks at ``q``."""
    state = np.empty(state_size(q.size, P.m, P.task_dim))
    fill(P, q, state)
    return state


@dataclass(frozen=True)
class Layout:
    """The state layout as Python slices (for the steppers' properties and the tests)."""

    n: int
    m: int
    k: int

    def _cut(self, i: int) -> slice:
        o = offsets(self.n, self.m, self.k)
        return slice(o[i], o[i + 1])

    @property
    def size(self) -> int:
        return int(state_size(self.n, self.m, self.k))

    def fields(self, state: np.ndarray) -> dict[str, np.ndarray]:
        """Every field of ``state`` as a view with its shape, by the names of
        :class:`~poise.models.actuation.ActuationBlocks` (plus ``q``)."""
        n, m, k = self.n, self.m, self.k
        nu = n - m
        shapes = {"q": (n,), "qa": (m,), "qu": (nu,), "x": (k,), "Ga": (m,), "Gu": (nu,),
                  "Ja": (k, m), "Ju": (k, nu), "Hua": (nu, m), "Huu": (nu, nu), "Haa": (m, m)}
        return {name: state[self._cut(i)].reshape(shape)
                for i, (name, shape) in enumerate(shapes.items())}

    def slices(self) -> dict[str, slice]:
        """The 1-D slices of the vector fields (q, qa, qu, x, Ga, Gu)."""
        return {name: self._cut(i) for i, name in enumerate(("q", "qa", "qu", "x", "Ga", "Gu"))}
