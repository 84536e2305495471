"""Secondary objectives resolved in the null space of the primary task (task priority).

With the primary step ``Δq₁`` (pseudo-inverse, DLS, …) the update is (seed 003, eq. 21;
seed 002, redundancy resolution)

    Δq = Δq₁ + (I − J⁺ J) z,        z = −k ∇w(q)

where ``w(q)`` is a cost to lower and ``k`` the objective's gain. The projector uses the exact
(undamped, rank-truncated) pseudo-inverse even when the primary step is damped, so the
secondary motion does not move the task to first order: ``J (I − J⁺J) z = 0``.

Objectives (all costs: lower is better):

* :class:`JointLimitAvoidance` — Liégeois (1977):
  ``w = 1/(2n) Σ ((q_i − q̄_i)/(q_max,i − q_min,i))²`` with ``q̄`` the middle of the range
  (joints without finite limits are left out).
* :class:`Manipulability` — ``w = −√det(J Jᵀ)`` (Yoshikawa), gradient by central differences.
* :class:`Posture` — ``w = ½ ‖q − q_ref‖²``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from numpy.typing import ArrayLike

from poise.ik.result import FloatArray, InvalidInputError


class SecondaryObjective(Protocol):
    """A cost ``w(q)`` with gradient and a gain ``k`` (``z = −k ∇w``)."""

    gain: float

    def cost(self, model: Any, q: FloatArray) -> float:
        """``w(q)`` (lower is better)."""
        ...

    def gradient(self, model: Any, q: FloatArray) -> FloatArray:
        """``∇w(q)`` (n,)."""
        ...


def nullspace_projector(J: FloatArray, rcond: float = 1e-10) -> FloatArray:
    """``I − J⁺ J`` (n, n) from the SVD of ``J``; singular values below ``rcond·σ_max`` are
    treated as zero (their directions belong to the null space)."""
    _, s, vt = np.linalg.svd(J)
    rank = int(np.sum(s > rcond * (s[0] if s.size else 0.0)))
    v_r = vt[:rank]
    return np.eye(J.shape[1]) - v_r.T @ v_r


def nullspace_step(model: Any, q: FloatArray, J: FloatArray,
                   objective: SecondaryObjective) -> FloatArray:
    """``(I − J⁺J) z`` with ``z = −k ∇w(q)`` (n,) [rad per iteration]."""
    z = -objective.gain * objective.gradient(model, q)
    return nullspace_projector(J) @ z


def _gain(value: float) -> float:
    if not np.isfinite(value) or value < 0:
        raise InvalidInputError(f"secondary: gain = {value!r}: must be a finite number >= 0")
    return float(value)


@dataclass(frozen=True)
class JointLimitAvoidance:
    """Distance from the middle of the joint ranges (Liégeois); ``gain`` [rad² per iteration]."""

    gain: float = 1.0

    def __post_init__(self) -> None:
        _gain(self.gain)

    @staticmethod
    def _terms(model: Any, q: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
        lo, hi = np.asarray(model.q_min, float), np.asarray(model.q_max, float)
        finite = np.isfinite(lo) & np.isfinite(hi) & (hi > lo)
        mid = np.where(finite, 0.5 * (lo + hi), 0.0)
        span = np.where(finite, hi - lo, 1.0)
        return finite, mid, span

    def cost(self, model: Any, q: FloatArray) -> float:
        finite, mid, span = self._terms(model, q)
        r = np.where(finite, (q - mid) / span, 0.0)
        return float(0.5 * np.sum(r * r) / q.size)

    def gradient(self, model: Any, q: FloatArray) -> FloatArray:
        finite, mid, span = self._terms(model, q)
        return np.where(finite, (q - mid) / (span * span), 0.0) / q.size


@dataclass(frozen=True)
class Manipulability:
    """``w = −√det(J Jᵀ)``; ``gain`` [rad per unit manipulability gradient]; ``h`` [rad]."""

    gain: float = 1.0
    h: float = 1e-6

    def __post_init__(self) -> None:
        _gain(self.gain)

    @staticmethod
    def value(model: Any, q: FloatArray) -> float:
        """Yoshikawa's manipulability ``√det(J Jᵀ)``."""
        J = model.task_jacobian(q)
        return float(np.sqrt(max(np.linalg.det(J @ J.T), 0.0)))

    def cost(self, model: Any, q: FloatArray) -> float:
        return -self.value(model, q)

    def gradient(self, model: Any, q: FloatArray) -> FloatArray:
        grad = np.empty(q.size)
        for i in range(q.size):
            dq = np.zeros(q.size)
            dq[i] = self.h
            grad[i] = (self.cost(model, q + dq) - self.cost(model, q - dq)) / (2 * self.h)
        return grad


@dataclass(frozen=True)
class Posture:
    """``w = ½‖q − q_ref‖²``; ``gain`` [1/iteration] (0.1 moves 10 % of the way per step)."""

    q_ref: ArrayLike
    gain: float = 0.1

    def __post_init__(self) -> None:
        _gain(self.gain)
        ref = np.asarray(self.q_ref, dtype=float).reshape(-1)
        if not np.all(np.isfinite(ref)):
            raise InvalidInputError(f"secondary: q_ref = {ref.tolist()}: must be finite")
        object.__setattr__(self, "q_ref", ref)

    def cost(self, model: Any, q: FloatArray) -> float:
        d = q - np.asarray(self.q_ref)
        return float(0.5 * d @ d)

    def gradient(self, model: Any, q: FloatArray) -> FloatArray:
        return q - np.asarray(self.q_ref)
