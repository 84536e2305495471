"""Unit quaternions and the quaternion orientation error of CLIK (seed 003, eqs. 19–20).

Quaternions are ``Q = (η, ε)`` = ``(w, x, y, z)``, scalar first, unit norm. The orientation
error between the desired rotation ``R_d`` and the current one ``R_e`` is the error quaternion

    Q_de = Q_d * Q_e⁻¹            (rotation R_d R_eᵀ, expressed in the base frame)
    ε_de = η_e ε_d − η_d ε_e − S(ε_d) ε_e      (its vector part)

with the sign of ``Q_de`` chosen so that ``η_de ≥ 0`` (the shorter of the two rotations).
``ε_de = sin(ϑ/2) u`` for a rotation by ``ϑ`` about ``u``; the orientation error *angle*
``ϑ = 2 atan2(‖ε_de‖, η_de)`` ∈ [0, π] [rad] is what results report and tolerances test.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike

from poise.ik.result import FloatArray, InvalidInputError

#: Shepperd's method, interpreted: the Python source of the compiled kernel
#: :func:`poise.kernels.dh_ik.quaternion`, fetched at the first use (importing the kernels
#: loads Numba and SciPy, which a process spares until it needs them).
_shepperd: Callable[..., tuple[float, float, float, float]] | None = None


def quat_from_matrix(R: ArrayLike) -> FloatArray:
    """Unit quaternion ``(w, x, y, z)`` with ``w ≥ 0`` of a rotation matrix (Shepperd's method)."""
    r = np.asarray(R, dtype=float).reshape(3, 3).ravel().tolist()
    return np.array(_quat_from_rows(r))


def _quat_from_rows(r: list[float]) -> tuple[float, float, float, float]:
    """Shepperd's method on a row-major rotation (9 floats); result has ``w ≥ 0``.

    The one implementation of the arithmetic is the kernel :func:`poise.kernels.dh_ik.quaternion`;
    the reference runs its Python source (``py_func``: nothing is compiled on this path), so the
    reference and the compiled solver agree to the last bit by construction.
    """
    global _shepperd
    if _shepperd is None:
        from poise.kernels.dh_ik import quaternion

        _shepperd = quaternion.py_func
    return _shepperd(*r[:9])


def matrix_from_quat(quat: ArrayLike) -> FloatArray:
    """Rotation matrix (3, 3) of a quaternion ``(w, x, y, z)`` (normalised first)."""
    w, x, y, z = np.asarray(quat, dtype=float).reshape(4) / np.linalg.norm(quat)
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ])


def quat_multiply(q1: ArrayLike, q2: ArrayLike) -> FloatArray:
    """Hamilton product ``q1 * q2`` of quaternions ``(w, x, y, z)``."""
    w1, x1, y1, z1 = np.asarray(q1, dtype=float).reshape(4)
    w2, x2, y2, z2 = np.asarray(q2, dtype=float).reshape(4)
    return np.array([w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
                     w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
                     w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
                     w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2])


def quaternion_error(quat_d: ArrayLike, quat_e: ArrayLike) -> FloatArray:
    """``ε_de = η_e ε_d − η_d ε_e − S(ε_d) ε_e`` (3,), sign chosen so that ``η_de ≥ 0``.

    Args:
        quat_d: desired orientation ``(η_d, ε_d)``.
        quat_e: current orientation ``(η_e, ε_e)``.
    """
    eta_d, *eps_d = np.asarray(quat_d, dtype=float).reshape(4)
    eta_e, *eps_e = np.asarray(quat_e, dtype=float).reshape(4)
    ed, ee = np.array(eps_d), np.array(eps_e)
    eta_de = eta_e * eta_d + ed @ ee
    eps_de = eta_e * ed - eta_d * ee - np.cross(ed, ee)
    return -eps_de if eta_de < 0.0 else eps_de


def orientation_error(R_d: ArrayLike, R_e: ArrayLike) -> tuple[FloatArray, float]:
    """``(ε_de (3,), ϑ [rad])`` of ``R_d R_eᵀ`` (see the module docstring)."""
    rd = np.asarray(R_d, dtype=float).reshape(3, 3).ravel().tolist()
    re = np.asarray(R_e, dtype=float).reshape(3, 3).ravel().tolist()
    ex, ey, ez, angle = _orientation_error_rows(rd, re)
    return np.array([ex, ey, ez]), angle


def _orientation_error_rows(rd: list[float], re: list[float]) -> tuple[float, float, float, float]:
    """Fast scalar version of :func:`orientation_error` on row-major rotations (9 floats)."""
    d00, d01, d02, d10, d11, d12, d20, d21, d22 = rd[:9]
    e00, e01, e02, e10, e11, e12, e20, e21, e22 = re[:9]
    # R_err = R_d R_eᵀ
    r = [d00 * e00 + d01 * e01 + d02 * e02, d00 * e10 + d01 * e11 + d02 * e12,
         d00 * e20 + d01 * e21 + d02 * e22,
         d10 * e00 + d11 * e01 + d12 * e02, d10 * e10 + d11 * e11 + d12 * e12,
         d10 * e20 + d11 * e21 + d12 * e22,
         d20 * e00 + d21 * e01 + d22 * e02, d20 * e10 + d21 * e11 + d22 * e12,
         d20 * e20 + d21 * e21 + d22 * e22]
    w, x, y, z = _quat_from_rows(r)
    angle = 2.0 * math.atan2(math.sqrt(x * x + y * y + z * z), w)
    return x, y, z, angle


def rotation_angle(R: ArrayLike) -> float:
    """Rotation angle ϑ ∈ [0, π] of a rotation matrix [rad]."""
    return orientation_error(np.eye(3), np.asarray(R, dtype=float).reshape(3, 3).T)[1]


def as_rotation(R: ArrayLike, name: str = "target", tol: float = 1e-6) -> FloatArray:
    """Validate a rotation matrix (orthonormal, det +1 within ``tol``), else InvalidInputError."""
    arr = np.asarray(R, dtype=float).reshape(3, 3)
    r = arr.ravel().tolist()
    if not all(map(math.isfinite, r)):
        raise InvalidInputError(f"{name}: rotation has non-finite entries")
    det = (r[0] * (r[4] * r[8] - r[5] * r[7]) - r[1] * (r[3] * r[8] - r[5] * r[6])
           + r[2] * (r[3] * r[7] - r[4] * r[6]))
    if det < 0 or float(np.abs(arr @ arr.T - _I3).max()) > tol:
        raise InvalidInputError(f"{name}: the 3 × 3 block is not a rotation matrix "
                                f"(RRᵀ ≠ I or det < 0 beyond {tol:g})")
    return arr


_I3 = np.eye(3)
