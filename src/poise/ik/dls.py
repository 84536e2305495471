"""The damped pseudo-inverse every damped-least-squares step of :mod:`poise.ik` uses."""

from __future__ import annotations

import numpy as np

from poise.models.base import FloatArray


def damped_pinv(a: FloatArray, damping: float = 0.0) -> FloatArray:
    """Damped right pseudo-inverse ``aᵀ (a aᵀ + λ² I)⁻¹`` (the plain ``a⁺`` when λ = 0).

    Wide or square ``a`` of full row rank is inverted through the normal equations, tall ``a``
    through ``(aᵀ a + λ² I)⁻¹ aᵀ`` (the same matrix); with λ = 0 it is the SVD pseudo-inverse.
    """
    rows, cols = a.shape
    if damping == 0.0:
        return np.linalg.pinv(a)
    if rows <= cols:
        return a.T @ np.linalg.inv(a @ a.T + damping**2 * np.eye(rows))
    return np.linalg.inv(a.T @ a + damping**2 * np.eye(cols)) @ a.T


__all__ = ["damped_pinv"]
