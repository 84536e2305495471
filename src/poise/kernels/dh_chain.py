"""Compiled kernels of the ``dh_chain`` family (the Panda and other serial revolute chains):
the kinematics of :mod:`poise.models.dh` on plain arrays.

Joint ``i`` applies Craig's modified DH row ``RotX(α_{i-1}) · TransX(a_{i-1}) · RotZ(θ_i) ·
TransZ(d_i)`` with ``θ_i = q_i + θ_offset_i``; the constant ``flange`` transform ``F`` follows
the last joint. As in :meth:`poise.models.dh.DHChain.pose_jacobian_rows_reference`, the running
rotation is kept as its three columns ``x, y, z`` and the running origin as ``p``:

* ``TransX(a)``: ``p += a x``; ``RotX(α)``: ``(y, z) ← (cα y + sα z, cα z − sα y)``;
* ``RotZ(θ)``: ``(x, y) ← (cθ x + sθ y, cθ y − sθ x)``; ``TransZ(d)``: ``p += d z``;

then the end effector ``T_e = T_n F`` and the geometric Jacobian in the base frame, column
``i`` = ``[z_i × (p_e − p_i); z_i]`` [m/rad; 1] with ``z_i``, ``p_i`` the axis and origin of
joint ``i``.

``tests/test_dh_kernels.py`` compares every kernel with the numpy reference
(:class:`~poise.models.dh.DHChain`) at random configurations (≤ 1e-12 relative) and the
Jacobian with finite differences of the pose.

The family has no statics (no actuation split, no ``G``), so it is not registered in
:mod:`poise.kernels.family` or :data:`poise.kernels.packed.PACKERS` (the held-configuration
steppers do not apply to it); its IK solver is :mod:`poise.kernels.dh_ik`.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
from numba import njit

from poise.models.dh import _dh_matrix


class DHArrays(NamedTuple):
    """A :class:`~poise.models.dh.DHChain` as arrays (the kernels' view of it)."""

    a: np.ndarray  # (n,) a_{i-1} [m]
    d: np.ndarray  # (n,) d_i [m]
    cos_alpha: np.ndarray  # (n,) cos α_{i-1}
    sin_alpha: np.ndarray  # (n,) sin α_{i-1}
    theta_offset: np.ndarray  # (n,) θ_i = q_i + theta_offset_i [rad]
    flange: np.ndarray  # (4, 4) last joint frame → end effector
    q_min: np.ndarray  # (n,) [rad]
    q_max: np.ndarray  # (n,) [rad]


def pack_dh(model: Any) -> DHArrays:
    """The arrays of a :class:`~poise.models.dh.DHChain` (copies, C-contiguous float64)."""

    def f(values: Any) -> np.ndarray:
        return np.ascontiguousarray(values, dtype=np.float64).copy()

    alpha = f(model.alpha)
    return DHArrays(
        a=f(model.a), d=f(model.d), cos_alpha=np.cos(alpha), sin_alpha=np.sin(alpha),
        theta_offset=f(model.theta_offset),
        flange=f(_dh_matrix(*model.flange)),
        q_min=f(model.q_min), q_max=f(model.q_max),
    )


@njit(cache=True)
def pose_jacobian_into(P: DHArrays, q: np.ndarray, R: np.ndarray, p: np.ndarray,
                       J: np.ndarray) -> None:
    """Write the end-effector rotation ``R`` (3, 3), position ``p`` (3,) [m] and the geometric
    Jacobian ``J`` (6, n) ``[v; ω]`` at ``q`` (n,) [rad] into the given arrays (no allocation:
    the inner loop of :mod:`poise.kernels.dh_ik`)."""
    n = q.size
    x0, x1, x2 = 1.0, 0.0, 0.0
    y0, y1, y2 = 0.0, 1.0, 0.0
    z0, z1, z2 = 0.0, 0.0, 1.0
    p0 = p1 = p2 = 0.0
    for i in range(n):
        a = P.a[i]
        p0 += a * x0
        p1 += a * x1
        p2 += a * x2
        ca = P.cos_alpha[i]
        sa = P.sin_alpha[i]
        y0, z0 = ca * y0 + sa * z0, ca * z0 - sa * y0
        y1, z1 = ca * y1 + sa * z1, ca * z1 - sa * y1
        y2, z2 = ca * y2 + sa * z2, ca * z2 - sa * y2
        th = q[i] + P.theta_offset[i]
        c = math.cos(th)
        s = math.sin(th)
        x0, y0 = c * x0 + s * y0, c * y0 - s * x0
        x1, y1 = c * x1 + s * y1, c * y1 - s * x1
        x2, y2 = c * x2 + s * y2, c * y2 - s * x2
        d = P.d[i]
        p0 += d * z0
        p1 += d * z1
        p2 += d * z2
        # axis z_i in the ω rows; the origin p_i parked in the v rows until p_e is known
        J[0, i] = p0
        J[1, i] = p1
        J[2, i] = p2
        J[3, i] = z0
        J[4, i] = z1
        J[5, i] = z2
    F = P.flange  # T_e = T_n F
    for j in range(3):
        R[0, j] = x0 * F[0, j] + y0 * F[1, j] + z0 * F[2, j]
        R[1, j] = x1 * F[0, j] + y1 * F[1, j] + z1 * F[2, j]
        R[2, j] = x2 * F[0, j] + y2 * F[1, j] + z2 * F[2, j]
    p[0] = p0 + x0 * F[0, 3] + y0 * F[1, 3] + z0 * F[2, 3]
    p[1] = p1 + x1 * F[0, 3] + y1 * F[1, 3] + z1 * F[2, 3]
    p[2] = p2 + x2 * F[0, 3] + y2 * F[1, 3] + z2 * F[2, 3]
    e0, e1, e2 = p[0], p[1], p[2]
    for i in range(n):
        d0 = e0 - J[0, i]
        d1 = e1 - J[1, i]
        d2 = e2 - J[2, i]
        a0, a1, a2 = J[3, i], J[4, i], J[5, i]
        J[0, i] = a1 * d2 - a2 * d1
        J[1, i] = a2 * d0 - a0 * d2
        J[2, i] = a0 * d1 - a1 * d0


@njit(cache=True)
def pose_jacobian(P: DHArrays, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(T_e (4, 4), J (6, n))``: the end-effector transform [m] and the geometric Jacobian
    ``[v; ω]`` [m/rad; 1] in the base frame, from one pass along the chain."""
    n = q.size
    R = np.empty((3, 3))
    p = np.empty(3)
    J = np.empty((6, n))
    pose_jacobian_into(P, q, R, p, J)
    T = np.zeros((4, 4))
    T[:3, :3] = R
    T[:3, 3] = p
    T[3, 3] = 1.0
    return T, J


@njit(cache=True)
def pose(P: DHArrays, q: np.ndarray) -> np.ndarray:
    """End-effector transform ``T_e`` (4, 4) in the base frame [m]."""
    return pose_jacobian(P, q)[0]


@njit(cache=True)
def task_jacobian(P: DHArrays, q: np.ndarray) -> np.ndarray:
    """Geometric Jacobian ``[v; ω]`` (6, n) of the end effector in the base frame."""
    return pose_jacobian(P, q)[1]
