"""Rigid-body (and point-mass) dynamics of a :class:`~poise.models.base.MechanicalModel`.

    M(q) q̈ + C(q, q̇) q̇ + D q̇ + G(q) = Aᵀ τ,        Aᵀ τ = Cᵀ [τ; 0]

``M`` comes from the model's mass points / bodies, ``C(q, q̇) q̇`` from ``model.bias_forces``
(consistent with ``M``: both from the same point Jacobians), ``D = diag(model.damping)``, ``G``
from the model, and ``A`` is the first ``m`` rows of the model's change of coordinates ``C``.
Models that provide ``dynamics_terms(q, q̇) -> (M, C q̇, G)`` (both built-in families) are
evaluated in one fused call, which shares the kinematics between the three terms.

Families with compiled kernels (:mod:`poise.kernels`: planar_tree, planar_pcc) evaluate
:meth:`Dynamics.acceleration` with the compiled right-hand side by default; it is compiled (or
loaded from Numba's cache) when the :class:`Dynamics` is made, never in a step. The numpy
implementation here stays the reference (``compiled=False``; ``tests/test_kernels.py``
compares the two). The :class:`~poise.sim.Simulator` uses the numpy terms here for its
reference loops and energy; its compiled step (:mod:`poise.sim.compiled`) calls the same
compiled right-hand side inside the integrator.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from poise.models.base import FloatArray, MechanicalModel
from poise.models.lapack import posv

Terms = Callable[[FloatArray, FloatArray], tuple[FloatArray, FloatArray, FloatArray]]


def terms_function(model: MechanicalModel) -> Terms:
    """``(q, q̇) -> (M, C(q, q̇) q̇, G)``: the model's fused evaluation when it has one."""
    fused = getattr(model, "dynamics_terms", None)
    if callable(fused):
        return fused

    def separate(q: FloatArray, qd: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
        return model.mass_matrix(q), model.bias_forces(q, qd), model.G(q)

    return separate


def _f64(a: FloatArray) -> FloatArray:
    """``a`` as C-contiguous float64, the one type the kernel is compiled for."""
    return np.ascontiguousarray(a, dtype=np.float64)


def solve_spd(M: FloatArray, f: FloatArray) -> FloatArray:
    """``M⁻¹ f`` for the symmetric positive definite mass matrix (LAPACK ``dposv``, Cholesky:
    ~1 µs against ~3 µs for ``numpy.linalg.solve`` at n ≤ 5); LU if ``M`` is not PD."""
    x, info = posv(M, f)
    return x if info == 0 else np.linalg.solve(M, f)


class Dynamics:
    """The equations of motion of one model (no state; the :class:`~poise.sim.Simulator` owns it).

    Args:
        model: the robot.
        compiled: use the compiled right-hand side when the model's family has kernels.

    Attributes:
        model: the robot.
        A: actuation matrix (m, n); ``qa = A q`` and the actuators' generalised force is ``Aᵀ τ``.
        damping: joint viscous damping ``D`` (n,) [N·m·s/rad].
        compiled: whether :meth:`acceleration` runs the compiled kernel.
    """

    def __init__(self, model: MechanicalModel, *, compiled: bool = True) -> None:
        self.model = model
        self.n = int(model.n)
        self.m = int(model.m)
        self.A = np.array(model.C[: self.m], dtype=float)
        self.AT = self.A.T.copy()
        self.damping = np.array(model.damping, dtype=float)
        self.terms = terms_function(model)
        self._kernel_args: object = None
        if compiled:
            from poise.kernels import has_kernels, pack, steps

            if has_kernels(model):
                self._kernel_args = pack(model).args
                self._kernel = steps.acceleration
                zeros = np.zeros(self.n)
                self._kernel(self._kernel_args, zeros, zeros, np.zeros(self.m))  # compile now
        self.compiled = self._kernel_args is not None

    def acceleration(self, q: FloatArray, qd: FloatArray, tau: FloatArray) -> FloatArray:
        """``q̈ = M⁻¹ (Aᵀ τ − C q̇ − D q̇ − G)`` (n,) [rad/s²] for actuator efforts ``tau`` (m,)."""
        if self._kernel_args is not None:
            return self._kernel(self._kernel_args, _f64(q), _f64(qd), _f64(tau))
        M, bias, G = self.terms(q, qd)
        return solve_spd(M, self.AT @ tau - bias - self.damping * qd - G)

    def kinetic_energy(self, q: FloatArray, qd: FloatArray) -> float:
        """``½ q̇ᵀ M(q) q̇`` [J]."""
        return float(0.5 * qd @ self.model.mass_matrix(q) @ qd)

    def energy(self, q: FloatArray, qd: FloatArray) -> float:
        """Total mechanical energy ``½ q̇ᵀ M q̇ + U(q)`` [J] (conserved with ``D = 0``, ``τ = 0``)."""
        return self.kinetic_energy(q, qd) + float(self.model.potential(q))


__all__ = ["Dynamics", "Terms", "solve_spd", "terms_function"]
