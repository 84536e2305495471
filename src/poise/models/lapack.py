"""LAPACK's Cholesky solve (``dposv``) for the numpy reference paths, imported on first use.

``scipy.linalg`` takes 0.3–0.4 s to import on the 2-core machine (most of it its array-API
layer), and ``poise run`` starts its processes at once there. Numba imports it anyway in a
process that loads a kernel (its BLAS check), so what this spares is the processes that run
none: the first process of ``poise run``, and a numpy-only run until it solves.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from poise.models.base import FloatArray

_dposv: Callable[..., Any] | None = None


def posv(A: FloatArray, b: FloatArray) -> tuple[FloatArray, int]:
    """``(x, info)`` of LAPACK ``dposv``: ``x = A⁻¹ b`` by Cholesky when ``info == 0``; ``A``
    is not positive definite when ``info > 0`` (~1 µs against ~3 µs for
    ``numpy.linalg.solve`` at n ≤ 5)."""
    global _dposv
    if _dposv is None:
        from scipy.linalg.lapack import dposv

        _dposv = dposv
    _, x, info = _dposv(A, b)
    return x, int(info)


__all__ = ["posv"]
