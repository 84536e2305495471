"""The linear design of the balance controller (:mod:`poise.motion.balance`): the plant
linearised in the passive momenta, its LQR gains and the estimator of the passive joints.
The equations are in :mod:`poise.motion.balance`'s docstring."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.linalg import expm, solve_discrete_are

from poise.models.actuation import Gu, split
from poise.models.base import FloatArray, MechanicalModel

#: The task error that costs as much as :data:`RATE_WEIGHT` × (1 rad/s)² [task units].
TASK_SCALE = 1e-3
#: The integral's time scale [s]: ``∫e`` is weighted as an error of :data:`TASK_SCALE`
#: lasting this long.
INTEGRAL_S = 0.5
#: The hips' excursion from where the design was made that costs as much as
#: :data:`TASK_SCALE` of task error [rad].
HIP_SCALE = 0.3
#: The weight of the setpoint rate ``u`` [1/(rad/s)²] (100 keeps the dancer's hips within
#: their 1 rad/s limit for errors of several millimetres).
RATE_WEIGHT = 100.0
#: The estimator's process noise: impulses on ``w`` [N·m·s per √s] and the wander of the
#: torque bias ``b`` [N·m per √s].
MOMENTUM_NOISE = 2.0
BIAS_NOISE = 1.0
#: The estimator's measurement noise of the passive joint angles [rad] (the dancer's pointe
#: encoder resolves 1.53 mrad).
ANGLE_NOISE = 1e-3


@dataclass(frozen=True)
class BalanceDesign:
    """The linear design at one configuration (see the module docstring).

    Attributes:
        q_star: the model's configuration linearised at (n,).
        qa_star: its actuator positions ``r*`` (m,) [rad].
        qu_star: its passive joint positions (n − m,) [rad].
        x_star: its task value ``h(q*)`` (task_dim,) [task units].
        Muu, Mua: the mass matrix blocks in actuation coordinates.
        Huu, Hua: the stiffness blocks ``∂G_u/∂(q_u, q_a)`` there.
        Gu: the model's passive force ``G_u(q*)`` there (not 0 away from its held set).
        A, B: the discrete plant ``z⁺ = A z + B u`` (state ``(ξ, w, Δr, ∫e)``).
        K: the LQR gain (m, nz): ``u = −K z``.
        F, G, L: the estimator ``s⁺ = F s + G (Δq_a, u)``, corrected by ``L (ξ_meas − ξ̂)``
            (state ``(ξ, w, b)``).
        period: Δt [s].
    """

    q_star: FloatArray
    qa_star: FloatArray
    qu_star: FloatArray
    x_star: FloatArray
    Muu: FloatArray
    Mua: FloatArray
    Huu: FloatArray
    Hua: FloatArray
    Gu: FloatArray
    A: FloatArray
    B: FloatArray
    K: FloatArray
    F: FloatArray
    G: FloatArray
    L: FloatArray
    period: float


def coordinate_blocks(model: MechanicalModel, q: FloatArray
                      ) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """The mass, damping, stiffness and task Jacobian in actuation coordinates at ``q``:
    ``M_c = C⁻ᵀ M C⁻¹``, ``D_c = C⁻ᵀ D C⁻¹``, ``H_c = C⁻ᵀ (∂G/∂q) C⁻¹``, ``J_c = J C⁻¹``."""
    c_inv = np.asarray(model.C_inv, dtype=float)
    mass = c_inv.T @ model.mass_matrix(q) @ c_inv
    damping = c_inv.T @ np.diag(np.asarray(model.damping, dtype=float)) @ c_inv
    stiffness = c_inv.T @ model.dG(q) @ c_inv
    return mass, damping, stiffness, model.task_jacobian(q) @ c_inv


def continuous_plant(model: MechanicalModel, q: FloatArray
                     ) -> tuple[FloatArray, FloatArray, FloatArray]:
    """``(A_c, B_c, C_e)``: ``ż = A_c z + B_c u`` and the task error ``e = C_e z`` of the
    module docstring's plant at ``q``."""
    return _linear_plant(model, *coordinate_blocks(model, q))


def _linear_plant(model: MechanicalModel, mass: FloatArray, damping: FloatArray,
                  stiffness: FloatArray, jac: FloatArray
                  ) -> tuple[FloatArray, FloatArray, FloatArray]:
    """:func:`continuous_plant` from the blocks of :func:`coordinate_blocks`."""
    m, n, t = model.m, model.n, model.task_dim
    nu = n - m
    a, u_ = slice(0, m), slice(m, n)
    m_inv = np.linalg.inv(mass[u_, u_])
    mua = mass[u_, a]
    huu, hua, duu, dua = stiffness[u_, u_], stiffness[u_, a], damping[u_, u_], damping[u_, a]
    ju, ja = jac[:, u_], jac[:, a]
    nz = 2 * nu + m + t
    xi, w, r, ie = (slice(0, nu), slice(nu, 2 * nu), slice(2 * nu, 2 * nu + m),
                    slice(2 * nu + m, nz))
    ac = np.zeros((nz, nz))
    bc = np.zeros((nz, m))
    ac[xi, w] = np.eye(nu)
    ac[w, xi] = -huu @ m_inv
    ac[w, w] = -duu @ m_inv
    ac[w, r] = huu @ m_inv @ mua - hua
    bc[w] = duu @ m_inv @ mua - dua
    bc[r] = np.eye(m)
    ce = np.zeros((t, nz))
    ce[:, xi] = ju @ m_inv
    ce[:, r] = ja - ju @ m_inv @ mua
    ac[ie] = ce
    return ac, bc, ce


def discretise(ac: FloatArray, bc: FloatArray, period: float) -> tuple[FloatArray, FloatArray]:
    """Zero-order hold: ``(A, B)`` with ``z⁺ = A z + B u`` for ``u`` held over ``period``."""
    nz, nu = bc.shape
    block = np.zeros((nz + nu, nz + nu))
    block[:nz, :nz], block[:nz, nz:] = ac, bc
    e = expm(block * period)
    return e[:nz, :nz], e[:nz, nz:]


def lqr_gain(a: FloatArray, b: FloatArray, q: FloatArray, r: FloatArray) -> FloatArray:
    """The discrete LQR gain ``K = (R + Bᵀ P B)⁻¹ Bᵀ P A`` of the Riccati solution ``P``."""
    p = solve_discrete_are(a, b, q, r)
    return np.linalg.solve(r + b.T @ p @ b, b.T @ p @ a)


def design(model: MechanicalModel, q_star: FloatArray, period: float, *,
           rate_weight: float = RATE_WEIGHT) -> BalanceDesign:
    """The gains and the estimator at the model's configuration ``q_star`` (module
    docstring) for the loop period ``period`` [s]. ``q_star`` need not be held on the
    model: the estimator's force ``b`` carries ``−G_u(q*)`` (near a fold of the model's
    held set, where the plant still holds, its held configuration is not there to be
    linearised at)."""
    m, n, t = model.m, model.n, model.task_dim
    nu = n - m
    q_star = np.asarray(q_star, dtype=float)
    blocks = coordinate_blocks(model, q_star)
    ac, bc, ce = _linear_plant(model, *blocks)
    a, b = discretise(ac, bc, period)
    nz = ac.shape[0]
    weight = ce.T @ ce / TASK_SCALE**2
    r_ = slice(2 * nu, 2 * nu + m)
    weight[r_, r_] += np.eye(m) / HIP_SCALE**2
    ie = slice(2 * nu + m, nz)
    weight[ie, ie] += np.eye(t) / (TASK_SCALE * INTEGRAL_S) ** 2
    gain = lqr_gain(a, b, weight * period, rate_weight * np.eye(m) * period)
    mass, _, stiffness, _ = blocks
    u_, a_ = slice(m, n), slice(0, m)
    f, g, l_ = _estimator(ac, bc, nu, m, period, mass[u_, u_])
    qa, qu = split(model, q_star)
    return BalanceDesign(q_star, qa, qu, np.asarray(model.fk(q_star), dtype=float),
                         mass[u_, u_], mass[u_, a_], stiffness[u_, u_], stiffness[u_, a_],
                         Gu(model, q_star), a, b, gain, f, g, l_, period)


def _estimator(ac: FloatArray, bc: FloatArray, nu: int, m: int, period: float,
               muu: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
    """The discrete estimator of ``s = (ξ, w, b)`` with inputs ``(Δq_a, u)`` and its
    steady-state Kalman gain for the measurement ``ξ``."""
    ns = 3 * nu
    acs = np.zeros((ns, ns))
    bcs = np.zeros((ns, 2 * m))
    xi, w, bias = slice(0, nu), slice(nu, 2 * nu), slice(2 * nu, 3 * nu)
    acs[:2 * nu, :2 * nu] = ac[:2 * nu, :2 * nu]
    acs[w, bias] = np.eye(nu)
    bcs[:2 * nu, :m] = ac[:2 * nu, 2 * nu:2 * nu + m]  # the measured hips: Δq_a as Δr
    bcs[:2 * nu, m:] = bc[:2 * nu]
    f, g = discretise(acs, bcs, period)
    noise = np.zeros((ns, ns))
    noise[w, w] = np.eye(nu) * MOMENTUM_NOISE**2 * period
    noise[bias, bias] = np.eye(nu) * BIAS_NOISE**2 * period
    h = np.zeros((nu, ns))
    h[:, xi] = np.eye(nu)
    meas = (muu * ANGLE_NOISE) @ (muu * ANGLE_NOISE).T
    p = solve_discrete_are(f.T, h.T, noise, meas)  # the predicted covariance
    gain = p @ h.T @ np.linalg.inv(h @ p @ h.T + meas)
    return f, g, gain


__all__ = ["ANGLE_NOISE", "BIAS_NOISE", "HIP_SCALE", "INTEGRAL_S", "MOMENTUM_NOISE",
           "RATE_WEIGHT", "TASK_SCALE", "BalanceDesign", "continuous_plant",
           "coordinate_blocks", "design", "discretise", "lqr_gain"]
