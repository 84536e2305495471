"""Numeric conventions shared by the reference solvers (:mod:`poise.ik`) and the compiled
kernels (:mod:`poise.kernels`), owned here so that neither imports the other for a constant."""

from __future__ import annotations

#: |eigenvalue| of ``H_uu`` below which the equilibrium is called singular [N·m/rad].
SINGULAR_EIG = 1e-9
#: Defaults of the statics solve (:func:`poise.ik.statics.solve_statics` and its compiled
#: twin :func:`poise.kernels.held_solve.statics_solve`): Newton iteration cap, eigenvalue
#: floor of the modified Hessian [N·m/rad], step along negative curvature [units of ``qu``].
MAX_ITER = 60
MIN_CURVATURE = 1e-6
NEGATIVE_CURVATURE_STEP = 0.1
#: An actuator within this distance of a limit is at it [actuator units, m or rad].
LIMIT_TOL = 1e-10

__all__ = ["LIMIT_TOL", "MAX_ITER", "MIN_CURVATURE", "NEGATIVE_CURVATURE_STEP", "SINGULAR_EIG"]
