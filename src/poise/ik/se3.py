"""SE(3) helpers in the twist convention of seed 001: ``V = [ω; v]`` (angular first).

All functions broadcast over leading dimensions: a rotation is ``(..., 3, 3)``, a transform
``(..., 4, 4)``, a twist ``(..., 6)``. The ratios that appear in ``exp``/``log`` are evaluated
by Taylor series below a threshold, so there is no division by a small angle anywhere.

Conventions:
    * ``hat(ω)`` is the skew matrix with ``hat(ω) @ x = ω × x`` (seed 001, appendix).
    * ``exp(V)`` with ``V = [ω; v]`` is ``[[exp(ω̂), J_l(ω) v], [0, 1]]``.
    * ``adjoint_apply(R, p, V)`` is ``Ad_T V = [R ω; R v + p × R ω]`` for ``T = (R, p)``;
      it maps a twist expressed in the frame ``T`` to the frame ``T`` is expressed in.
    * ``log`` returns the principal twist (rotation angle in ``[0, π]``).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from poise.models.cc3d import f2, f3, series, sinc  # the smooth ratios (layering: ik → models)

FloatArray = NDArray[np.float64]

__all__ = [
    "adjoint", "adjoint_apply", "exp", "f2", "f3", "hat", "inverse", "log", "log_rotation",
    "sinc", "transform", "vee",
]

# Coefficients of (1 − (θ/2) cot(θ/2))/θ² in powers of θ², through θ⁸.
_C_LOGV = (1 / 12, 1 / 720, 1 / 30240, 1 / 1209600, 1 / 47900160)
LOGV_SWITCH = 0.2
"""Angle below which the ``ω̂²`` coefficient of ``J_l(ω)⁻¹`` uses its series."""


# ---------------------------------------------------------------------------------------------
# Matrices
# ---------------------------------------------------------------------------------------------


def hat(w: FloatArray) -> FloatArray:
    """Skew matrix ``(..., 3, 3)`` of ``w (..., 3)``: ``hat(w) @ x = w × x``."""
    w = np.asarray(w, dtype=float)
    z = np.zeros_like(w[..., 0])
    return np.stack(
        [
            np.stack([z, -w[..., 2], w[..., 1]], -1),
            np.stack([w[..., 2], z, -w[..., 0]], -1),
            np.stack([-w[..., 1], w[..., 0], z], -1),
        ],
        -2,
    )


def vee(m: FloatArray) -> FloatArray:
    """Inverse of :func:`hat` (uses the skew part)."""
    return 0.5 * np.stack(
        [m[..., 2, 1] - m[..., 1, 2], m[..., 0, 2] - m[..., 2, 0], m[..., 1, 0] - m[..., 0, 1]],
        -1,
    )


def transform(R: FloatArray, p: FloatArray) -> FloatArray:
    """Homogeneous transform ``(..., 4, 4)`` from ``R (..., 3, 3)`` and ``p (..., 3)``."""
    R = np.asarray(R, dtype=float)
    T = np.zeros((*R.shape[:-2], 4, 4))
    T[..., :3, :3] = R
    T[..., :3, 3] = p
    T[..., 3, 3] = 1.0
    return T


def inverse(T: FloatArray) -> FloatArray:
    """Inverse of a rigid transform: ``(Rᵀ, −Rᵀ p)``."""
    R = T[..., :3, :3]
    Rt = np.swapaxes(R, -1, -2)
    return transform(Rt, -np.einsum("...ij,...j->...i", Rt, T[..., :3, 3]))


def exp(V: FloatArray) -> FloatArray:
    """``exp(V̂)`` for twists ``V = [ω; v] (..., 6)``: ``R = I + sinc θ ω̂ + f2 ω̂²``,
    ``p = (I + f2 ω̂ + f3 ω̂²) v`` with ``θ = |ω|``."""
    V = np.asarray(V, dtype=float)
    w, v = V[..., :3], V[..., 3:]
    th = np.sqrt(np.sum(w * w, axis=-1))
    W = hat(w)
    W2 = W @ W
    a, b, c = sinc(th)[..., None, None], f2(th)[..., None, None], f3(th)[..., None, None]
    eye = np.eye(3)
    R = eye + a * W + b * W2
    Jl = eye + b * W + c * W2
    return transform(R, np.einsum("...ij,...j->...i", Jl, v))


def log_rotation(R: FloatArray) -> FloatArray:
    """Rotation vector ``ω (..., 3)`` with ``exp(ω̂) = R``, ``|ω| ∈ [0, π]``.

    ``θ = atan2(|a|, c)`` from the skew part ``a = vee(R) = sin θ n`` and ``c = (tr R − 1)/2``
    (accurate at 0 and π). Below θ = 3π/4 ``ω = a / sinc θ``; above, the axis comes from the
    symmetric part ``(R + Rᵀ)/2 − c I = (1 − c) n nᵀ`` (largest column), its sign from ``a``.
    """
    R = np.asarray(R, dtype=float)
    a = vee(R)
    c = 0.5 * (np.trace(R, axis1=-2, axis2=-1) - 1.0)
    s = np.sqrt(np.sum(a * a, axis=-1))
    th = np.arctan2(s, c)
    w_small = a / sinc(th)[..., None]
    near_pi = th > 0.75 * np.pi
    if not np.any(near_pi):
        return w_small
    S = 0.5 * (R + np.swapaxes(R, -1, -2)) - c[..., None, None] * np.eye(3)
    diag = np.diagonal(S, axis1=-2, axis2=-1)
    k = np.argmax(diag, axis=-1)
    col = np.take_along_axis(S, k[..., None, None], axis=-1)[..., 0]
    n = col / np.sqrt(np.maximum(np.sum(col * col, axis=-1), 1e-300))[..., None]
    sign = np.where(np.sum(n * a, axis=-1) < 0.0, -1.0, 1.0)
    w_big = (sign * th)[..., None] * n
    return np.where(near_pi[..., None], w_big, w_small)


def _coef_log(th: FloatArray) -> FloatArray:
    """``(1 − θ/2 · cot(θ/2)) / θ²`` (1/12 at 0; 1/π² at π), the ``ω̂²`` coefficient of
    ``J_l(ω)⁻¹ = I − ½ ω̂ + coef · ω̂²``."""
    small = th < LOGV_SWITCH
    t = np.where(small, 1.0, th)
    closed = (1.0 - 0.5 * t * np.cos(0.5 * t) / np.sin(0.5 * t)) / (t * t)
    return np.where(small, series(th * th, _C_LOGV), closed)


def log(T: FloatArray) -> FloatArray:
    """Principal twist ``V = [ω; v] (..., 6)`` with ``exp(V̂) = T``: ``v = J_l(ω)⁻¹ p``."""
    T = np.asarray(T, dtype=float)
    w = log_rotation(T[..., :3, :3])
    th = np.sqrt(np.sum(w * w, axis=-1))
    p = T[..., :3, 3]
    wxp = np.cross(w, p)
    wxwxp = np.cross(w, wxp)
    v = p - 0.5 * wxp + _coef_log(th)[..., None] * wxwxp
    return np.concatenate([w, v], axis=-1)


def adjoint(T: FloatArray) -> FloatArray:
    """``Ad_T (..., 6, 6) = [[R, 0], [p̂ R, R]]`` for twists ``[ω; v]``."""
    R, p = T[..., :3, :3], T[..., :3, 3]
    A = np.zeros((*T.shape[:-2], 6, 6))
    A[..., :3, :3] = R
    A[..., 3:, 3:] = R
    A[..., 3:, :3] = hat(p) @ R
    return A


def adjoint_apply(R: FloatArray, p: FloatArray, V: FloatArray) -> FloatArray:
    """``Ad_(R,p) V = [R ω; R v + p × R ω]`` for ``V (..., 6)`` (broadcasting)."""
    Rw = np.einsum("...ij,...j->...i", R, V[..., :3])
    Rv = np.einsum("...ij,...j->...i", R, V[..., 3:])
    return np.concatenate([Rw, Rv + np.cross(p, Rw)], axis=-1)
