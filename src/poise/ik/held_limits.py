"""Actuator limits in held-configuration IK: Algorithm 2's limit-aware rates, and restarts.

Seed 000's Algorithm 2 asks for ``ḟ = ΓZ ex`` and ``Ġu = ΓE eE`` with every actuator free. An
actuator at its limit that these rates push further out cannot follow; clipping it alone leaves
the other actuators on rates computed as if it moved, so the transient parks at the limit while
they could still reduce the task error. :func:`limited_rates` holds such actuators still and
asks the free ones for the task law in least squares, keeping the statics law exact.

**Bounded least squares.** Eliminating ``q̇u = Huu⁻¹(ΓE eE − Hua q̇a)`` (the statics law) turns
the task law into ``J q̇a = r`` with the held Jacobian of Algorithm 1, ``J = Ja − Ju Huu⁻¹ Hua``,
and ``r = ΓZ ex − Ju Huu⁻¹ ΓE eE``. With ``U`` the actuators at their upper limit and ``L``
those at their lower limit, the rates solve

    min ‖J q̇a − r‖   subject to   q̇a_i ≤ 0 (i ∈ U),   q̇a_i ≥ 0 (i ∈ L)

by an active set (Lawson–Hanson): start with the actuators the unconstrained rates push out
locked (``q̇a_i = 0``); solve the free ones by ``J_F⁺ r`` (damped ``J_F⁺`` with λ > 0; the
least-norm solution when several fit); lock a free actuator at a limit whose rate points out;
release the locked actuator whose multiplier ``J_iᵀ (r − J q̇a)`` points most inward; stop
when neither applies. When no actuator at a limit is pushed out, the rates are exactly those
of :func:`~poise.ik.held.algorithm2_rates` (the paper's); otherwise the statics law still holds
exactly, and the task law holds whenever the free actuators can meet it.

**Restarts.** Within the limits ``f(qa)`` can have local minima of ``‖x̄ − f‖`` on the boundary
of the actuator box: the straight task-space path the transient follows leaves the box, the
transient slides along it to a corner where every free direction increases the error, and no
local method gets out. :func:`restart_starts` gives the starts of further attempts: held
configurations on a coarse grid of actuator positions (each actuator at ¼, ½ and ¾ of its
range), nearest the target first.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import numpy as np

from poise.api.numerics import LIMIT_TOL
from poise.ik.dls import damped_pinv
from poise.models.base import FloatArray, MechanicalModel

#: Grid of :func:`restart_starts`: fractions of each actuator's range.
GRID_FRACTIONS = (0.25, 0.5, 0.75)
#: Largest full grid (3^m points); more actuators get the centre and the 2m axis points.
MAX_GRID = 81
#: Stand-in range of an actuator without finite limits [actuator units].
UNBOUNDED_SPAN = 1.0


def at_limits(qa: FloatArray, qa_min: FloatArray, qa_max: FloatArray
              ) -> tuple[FloatArray, FloatArray]:
    """``(at_upper, at_lower)`` (m,) bool: actuators within :data:`LIMIT_TOL` of a limit."""
    return qa >= qa_max - LIMIT_TOL, qa <= qa_min + LIMIT_TOL


def outward(qa_dot: FloatArray, upper: FloatArray, lower: FloatArray) -> FloatArray:
    """Actuators whose rate pushes them past the limit they are at (m,) bool."""
    return (upper & (qa_dot > 0.0)) | (lower & (qa_dot < 0.0))


def bounded_least_squares(jac: FloatArray, r: FloatArray, locked: FloatArray,
                          upper: FloatArray, lower: FloatArray,
                          damping: float = 0.0) -> FloatArray:
    """``q̇a`` minimising ``‖J q̇a − r‖`` with the sign constraints of the actuators at their
    limits (see the module docstring), starting from the locked set ``locked`` (m,) bool.

    At most ``3 m`` active-set changes (Lawson–Hanson needs at most a few here; the cap only
    guards against cycling on exact ties); the result always respects the constraints.
    """
    m = jac.shape[1]
    locked = locked.copy()
    qa_dot = np.zeros(m)
    for _ in range(3 * m):
        free = ~locked
        qa_dot = np.zeros(m)
        if free.any():
            qa_dot[free] = damped_pinv(jac[:, free], damping) @ r
        newly = free & outward(qa_dot, upper, lower)
        if newly.any():
            locked |= newly
            continue
        multiplier = jac.T @ (r - jac @ qa_dot)  # −∂/∂q̇a ½‖J q̇a − r‖²
        release = locked & ((upper & (multiplier < 0.0)) | (lower & (multiplier > 0.0)))
        if not release.any():
            return qa_dot
        locked[int(np.argmax(np.where(release, np.abs(multiplier), -1.0)))] = False
    qa_dot[outward(qa_dot, upper, lower)] = 0.0  # cap reached: stay within the constraints
    return qa_dot


def grid_points(model: MechanicalModel) -> list[FloatArray]:
    """Actuator positions of the restart grid: every actuator at :data:`GRID_FRACTIONS` of its
    range (3^m points), or for more than :data:`MAX_GRID` points the centre and one actuator
    at a time at ¼ and ¾ (2m + 1 points). An actuator without finite limits spans
    ±:data:`UNBOUNDED_SPAN`."""
    lo = np.where(np.isfinite(model.qa_min), model.qa_min, -UNBOUNDED_SPAN)
    hi = np.where(np.isfinite(model.qa_max), model.qa_max, UNBOUNDED_SPAN)
    m = int(model.m)
    if len(GRID_FRACTIONS) ** m <= MAX_GRID:
        fractions = [np.array(f) for f in itertools.product(GRID_FRACTIONS, repeat=m)]
    else:
        centre = np.full(m, 0.5)
        fractions = [centre]
        for i, f in itertools.product(range(m), (GRID_FRACTIONS[0], GRID_FRACTIONS[-1])):
            point = centre.copy()
            point[i] = f
            fractions.append(point)
    return [lo + (hi - lo) * f for f in fractions]


#: ``statics(qa, qu0) -> (q, h(q), converged)``: a held configuration at ``qa``.
StaticsFn = Callable[[FloatArray, FloatArray], tuple[FloatArray, FloatArray, bool]]


def restart_starts(model: MechanicalModel, target: FloatArray, statics: StaticsFn
                   ) -> Iterator[FloatArray]:
    """Starts for further attempts: the held configurations at :func:`grid_points` (statics
    converged), nearest ``target`` in task space first (ties: grid order)."""
    qu0 = np.zeros(model.n - model.m)
    found = []
    for qa in grid_points(model):
        q, x, converged = statics(qa, qu0)
        if converged:
            found.append((float(np.linalg.norm(np.asarray(target) - x)), q))
    found.sort(key=lambda item: item[0])
    for _, q in found:
        yield q


__all__ = ["LIMIT_TOL", "at_limits", "bounded_least_squares", "grid_points", "outward",
           "restart_starts"]
