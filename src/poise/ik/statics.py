"""Solving the statics ``G_u(qa, qu) = 0`` for ``qu`` at fixed actuators (seed 000).

With the actuators locked at ``qa`` the robot settles where nothing pushes along ``qu``:
``G_u(qa, qu) = 0``. In actuation coordinates ``G_u = ∂U/∂qu`` (the potential restricted to the
fibre of constant ``qa``), so **stable** held configurations are the local minima of ``U`` over
``qu`` (``H_uu ≻ 0``) and unstable ones are its saddles and maxima.

Branch choice, documented: by default (``branch="stable"``) the solver *minimises* ``U`` along
the fibre with a Newton method whose Hessian is made positive definite (eigenvalue
modification) and a backtracking line search, started from the warm start. It therefore lands
on a stable equilibrium, in practice the one in whose basin the warm start lies (the stable one
nearest the warm start). With ``branch="nearest"`` it runs damped Newton on ``G_u = 0`` with a
line search on ``½‖G_u‖²``: the equilibrium nearest the warm start whatever its stability,
which is what continuation along an unstable branch needs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from poise.api.numerics import MAX_ITER, MIN_CURVATURE, NEGATIVE_CURVATURE_STEP, SINGULAR_EIG
from poise.models.actuation import blocks, join, split
from poise.models.base import FloatArray, MechanicalModel

Verdict = Literal["stable", "unstable", "singular"]

# SINGULAR_EIG and the defaults of :func:`solve_statics` (MAX_ITER, MIN_CURVATURE,
# NEGATIVE_CURVATURE_STEP) are shared with the compiled solver: :mod:`poise.api.numerics`.


@dataclass(frozen=True)
class StaticsSolution:
    """A (possibly unconverged) solution of ``G_u(qa, qu) = 0``.

    Attributes:
        q: configuration ``c⁻¹(qa, qu)`` (n,).
        qa: the fixed actuated coordinates (m,).
        qu: the unactuated coordinates found (n − m,).
        residual: ``‖G_u(q)‖`` at the end.
        converged: ``residual ≤ tol``.
        iterations: Newton iterations used.
        eig_Huu: eigenvalues of ``H_uu`` at ``q``, ascending.
        verdict: ``stable`` (``H_uu ≻ 0``), ``unstable`` (an eigenvalue < 0) or ``singular``.
    """

    q: FloatArray
    qa: FloatArray
    qu: FloatArray
    residual: float
    converged: bool
    iterations: int
    eig_Huu: FloatArray
    verdict: Verdict

    @property
    def stable(self) -> bool:
        """``H_uu ≻ 0``: the equilibrium is stable with the actuators locked."""
        return self.verdict == "stable"

    @property
    def min_eig(self) -> float:
        """Smallest eigenvalue of ``H_uu`` (+inf when there is no ``qu``)."""
        return float(self.eig_Huu[0]) if self.eig_Huu.size else math.inf


def classify(eig_Huu: FloatArray) -> Verdict:
    """Stability verdict from the eigenvalues of ``H_uu`` (ascending)."""
    values = eig_Huu.tolist()  # a few floats: plain Python is quicker than numpy here
    if not values:
        return "stable"
    if min(abs(v) for v in values) < SINGULAR_EIG:
        return "singular"
    return "stable" if values[0] > 0 else "unstable"


def _fibre_potential(model: MechanicalModel, qa: FloatArray, qu: FloatArray) -> float:
    return float(model.potential(join(model, qa, qu)))


def solve_statics(
    model: MechanicalModel,
    qa: FloatArray,
    qu0: FloatArray,
    *,
    tol: float = 1e-10,
    max_iter: int = MAX_ITER,
    branch: Literal["stable", "nearest"] = "stable",
    min_curvature: float = MIN_CURVATURE,
    negative_curvature_step: float = NEGATIVE_CURVATURE_STEP,
) -> StaticsSolution:
    """Solve ``G_u(qa, qu) = 0`` for ``qu`` by damped Newton with a line search.

    Args:
        model: the robot.
        qa: actuated coordinates held fixed (m,).
        qu0: warm start for ``qu`` (n − m,), e.g. the previous solution.
        tol: stop when ``‖G_u‖ ≤ tol`` [generalised force].
        max_iter: Newton iteration cap.
        branch: ``"stable"`` minimises ``U`` along the fibre (lands on a stable equilibrium);
            ``"nearest"`` solves ``G_u = 0`` for the nearest equilibrium of any stability.
        min_curvature: eigenvalue floor of the modified Hessian (``branch="stable"``).
        negative_curvature_step: length of the extra step along the most negative curvature
            direction of ``H_uu`` when there is one (``branch="stable"``) [units of ``qu``].
    """
    qa = np.asarray(qa, dtype=float)
    qu = np.array(qu0, dtype=float)
    iterations = 0
    b = blocks(model, join(model, qa, qu))
    for iterations in range(1, max_iter + 1):
        g_norm = float(np.linalg.norm(b.Gu))
        convex = True
        if branch == "stable":
            eig, vec = np.linalg.eigh(0.5 * (b.Huu + b.Huu.T))
            convex = eig.size == 0 or eig[0] > 0.0
            if g_norm <= tol and (eig.size == 0 or eig[0] > -SINGULAR_EIG):
                iterations -= 1
                break
            eig_mod = np.maximum(np.abs(eig), min_curvature)
            step = -vec @ ((vec.T @ b.Gu) / eig_mod)
            if not convex:
                # Negative curvature: also move down along it, which leaves a saddle or a
                # maximum (where G_u may be 0) towards a minimum.
                direction = vec[:, 0] * (-1.0 if float(vec[:, 0] @ b.Gu) > 0 else 1.0)
                step = step + negative_curvature_step * direction
        else:
            if g_norm <= tol:
                iterations -= 1
                break
            step = -_damped_solve(b.Huu, b.Gu)
        # Fast path: a full Newton step that reduces ‖G_u‖ (where U is locally convex) is
        # accepted at the cost of the one evaluation the next iteration needs anyway.
        b_try = blocks(model, join(model, qa, qu + step))
        if convex and float(np.linalg.norm(b_try.Gu)) <= (1.0 - 1e-4) * g_norm:
            qu, b = qu + step, b_try
            continue
        qu = _line_search(model, qa, qu, step, b.Gu, branch)
        b = blocks(model, join(model, qa, qu))
    residual = float(np.linalg.norm(b.Gu))
    eig_huu = np.linalg.eigvalsh(0.5 * (b.Huu + b.Huu.T)) if b.Huu.size else np.zeros(0)
    return StaticsSolution(
        q=join(model, qa, qu), qa=qa.copy(), qu=qu, residual=residual,
        converged=residual <= tol, iterations=iterations, eig_Huu=eig_huu,
        verdict=classify(eig_huu),
    )


def _line_search(
    model: MechanicalModel, qa: FloatArray, qu: FloatArray, step: FloatArray, gu: FloatArray,
    branch: str,
) -> FloatArray:
    """Backtracking (Armijo) along ``step`` on ``U`` (stable branch) or ``½‖G_u‖²``."""
    if branch == "stable":
        merit0, slope = _fibre_potential(model, qa, qu), float(gu @ step)
    else:
        merit0 = 0.5 * float(gu @ gu)
        slope = -2.0 * merit0
    alpha = 1.0
    while True:
        qu_try = qu + alpha * step
        q_try = join(model, qa, qu_try)
        if branch == "stable":
            merit = float(model.potential(q_try))
        else:
            gu_try = blocks(model, q_try).Gu
            merit = 0.5 * float(gu_try @ gu_try)
        if merit <= merit0 + 1e-4 * alpha * min(slope, 0.0) or alpha < 1e-6:
            return qu_try
        alpha *= 0.5


def _damped_solve(a: FloatArray, b: FloatArray, damping: float = 1e-10) -> FloatArray:
    """``a⁻¹ b``, falling back to damped least squares when ``a`` is (nearly) singular."""
    try:
        x = np.linalg.solve(a, b)
        if np.all(np.isfinite(x)):
            return x
    except np.linalg.LinAlgError:
        pass
    return a.T @ np.linalg.solve(a @ a.T + damping * np.eye(a.shape[0]), b)


def release(model: MechanicalModel, q: FloatArray, **kwargs: object) -> StaticsSolution:
    """Where the robot settles from ``q`` when its actuators are locked at ``qa(q)``."""
    qa, qu = split(model, np.asarray(q, dtype=float))
    return solve_statics(model, qa, qu, **kwargs)  # type: ignore[arg-type]


def continuation(
    model: MechanicalModel,
    qa_path: Iterable[FloatArray],
    qu0: FloatArray,
    **kwargs: object,
) -> list[StaticsSolution]:
    """Follow a branch of held configurations along a path of actuator positions.

    Each solve is warm-started from the previous solution, so a fine enough path stays on the
    branch the first solve lands on.
    """
    out: list[StaticsSolution] = []
    qu = np.asarray(qu0, dtype=float)
    for qa in qa_path:
        sol = solve_statics(model, np.asarray(qa, dtype=float), qu, **kwargs)  # type: ignore[arg-type]
        out.append(sol)
        qu = sol.qu
    return out
