"""Damping rules for damped least squares and Levenberg–Marquardt steps.

A rule returns the term ``μ = λ²`` added to the diagonal of ``J Jᵀ`` in the damped step

    Δq = Jᵀ (J Jᵀ + μ I)⁻¹ e        (≡ (JᵀJ + μ I)⁻¹ Jᵀ e)

from the smallest singular value ``σ_min`` of ``J`` and the squared error norm ``‖e‖²``.

* :class:`FixedDamping` — constant λ (seed 002: λ = 0.05).
* :class:`SingularityDamping` — no damping away from singularities, growing smoothly as the
  arm approaches one (Nakamura & Hanafusa 1986; Chiaverini 1997)::

      λ² = λ_max² (1 − (σ_min/ε)²)   if σ_min < ε,   else 0

  so the step equals the pseudo-inverse step when ``σ_min ≥ ε`` and is damped by up to λ_max at
  the singularity. Needs ``σ_min`` (one SVD per iteration).
* :class:`ErrorDamping` — Sugihara's Levenberg–Marquardt rule (IEEE T-RO 2011):
  ``μ = w_e · E + w_n`` with ``E = ½ eᵀ W e``; large steps far from the target become
  gradient-like, near it Gauss–Newton-like (quadratic convergence), and ``w_n > 0`` keeps the
  system regular at singularities. No SVD needed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from poise.ik.result import InvalidInputError


class DampingRule(Protocol):
    """``μ = λ²`` from ``σ_min`` and ``‖e‖²``; ``needs_sigma`` says whether σ_min is used."""

    needs_sigma: bool

    def mu(self, sigma_min: float, error_sq: float) -> float:
        """The diagonal term ``λ²`` [task units²]."""
        ...


def _check(name: str, value: float, *, positive: bool = False) -> None:
    if not (value == value and abs(value) != float("inf")) or value < 0 or (
            positive and value == 0):
        rule = "> 0" if positive else ">= 0"
        raise InvalidInputError(f"damping: {name} = {value!r}: must be a finite number {rule}")


@dataclass(frozen=True)
class FixedDamping:
    """Constant damping ``λ`` [task units]."""

    lam: float
    needs_sigma: bool = False

    def __post_init__(self) -> None:
        _check("lambda", self.lam)

    def mu(self, sigma_min: float, error_sq: float) -> float:
        return self.lam * self.lam


@dataclass(frozen=True)
class SingularityDamping:
    """``λ² = λ_max² (1 − (σ_min/ε)²)`` for ``σ_min < ε``, else 0 [task units]."""

    lambda_max: float = 0.1
    epsilon: float = 0.05
    needs_sigma: bool = True

    def __post_init__(self) -> None:
        _check("lambda_max", self.lambda_max)
        _check("epsilon", self.epsilon, positive=True)

    def mu(self, sigma_min: float, error_sq: float) -> float:
        if sigma_min >= self.epsilon:
            return 0.0
        ratio = sigma_min / self.epsilon
        return self.lambda_max * self.lambda_max * (1.0 - ratio * ratio)


@dataclass(frozen=True)
class ErrorDamping:
    """Sugihara's rule ``μ = w_e · ½‖e‖²_W + w_n`` (``w_n`` > 0 keeps the step regular)."""

    w_e: float = 0.1
    w_n: float = 1e-5
    needs_sigma: bool = False

    def __post_init__(self) -> None:
        _check("w_e", self.w_e)
        _check("w_n", self.w_n, positive=True)

    def mu(self, sigma_min: float, error_sq: float) -> float:
        return self.w_e * 0.5 * error_sq + self.w_n
