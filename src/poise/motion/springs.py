"""The plant's springs as its resting configurations show them: one stiffness scale ``s``.

A configuration where the plant rests satisfies the plant's own held condition ``G*_u(q) = 0``
(seed 000). At the configuration ``q̂`` where it rests after a move (the static part of the
measured ``q`` over a window, :func:`~poise.motion.retarget.static_part`), the model's passive
generalised force ``r = G_u(q̂)`` is what the model gets wrong there. Where every spring of the
plant is ``(1 + s)`` times the model's (``K* = (1 + s) K``; the named plant ``stiff10`` has
``s = 0.1``), ``G*_u(q) = G_u(q) + s [C⁻ᵀ K (q − q_rest)]_u``, so at rest

    r = −s k_u,    k_u = [C⁻ᵀ K (q̂ − q_rest)]_u

and over the windows seen the least-squares scale is ``ŝ = −Σ⟨r, k_u⟩ / Σ‖k_u‖²``
(:class:`SpringScale`). The plant's held Jacobian is then the model's with ``K (1 + ŝ)`` at
``q̂`` (:meth:`SpringScale.held_jacobian`): ``H_uu`` and ``H_ua`` grow by ``ŝ [C⁻ᵀ K C⁻¹]``.

Why it matters: on the dancer the pointe's spring ``k₀`` is nearly cancelled by gravity (net
about 145 of 550 N·m/rad), so a pointe 10 % stiffer than the model is a held map about 40 %
off, and a correction made on the model's held Jacobian left 12–15 % of a 10 cm error (the
next ones hardly contracted); on the scaled model one correction leaves under a millimetre
(:mod:`poise.motion.retarget`). Plans made once ``ŝ`` is known are aimed for it
(:func:`poise.motion.planner.for_springs`): the first move to a target then lands on it.

Where masses rather than springs are off, ``r`` holds the gravity error too, and ``ŝ`` is the
spring scale that best explains it; the measured (secant) Jacobian corrects what remains.
On the exact model ``r`` is sensor noise and only windows whose task mismatch called for a
correction count (:meth:`SpringScale.add`), so ``ŝ`` stays 0 and nothing changes.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from poise.ik.held_common import held_jacobian
from poise.models.actuation import ActuationBlocks, _c_inv, blocks, join, split
from poise.models.base import FloatArray, MechanicalModel

#: ``ŝ`` is used only once it is at least this (smaller: the model's own Jacobian).
SIGNIFICANT = 0.02
#: ... and only while it explains this fraction of the passive residuals (:attr:`SpringScale.
#: explained`).
EXPLAINED = 0.8
#: Gauss–Newton steps of a correction on the scaled model (:meth:`SpringScale.correction`).
ITERATIONS = 4
HALVINGS = 4
#: Newton on the scaled model's held configuration: at most this many steps, to this
#: ‖G_u‖ [generalised force].
NEWTON_ITER = 20
NEWTON_TOL = 1e-9
#: ``ŝ`` is kept within these (a plant whose springs seem off by more is not a spring error).
SCALE_RANGE = (-0.5, 1.0)


class SpringScale:
    """The least-squares stiffness scale ``ŝ`` of the plant over the resting windows seen
    (see the module docstring); it persists over targets (it is the plant's).

    Args:
        model: the controller's statics model (``stiffness``, ``q_rest`` (n,) each).
    """

    def __init__(self, model: MechanicalModel) -> None:
        self.model = model
        stiffness = getattr(model, "stiffness", None)
        rest = getattr(model, "q_rest", None)
        n, m = model.n, model.m
        self.enabled = stiffness is not None and rest is not None and n > m
        self._K = np.asarray(stiffness if stiffness is not None else np.zeros(n), dtype=float)
        self._rest = np.asarray(rest if rest is not None else np.zeros(n), dtype=float)
        c_inv = _c_inv(model)
        self._c_inv = c_inv
        #: ``C⁻ᵀ K C⁻¹``: the springs' Hessian in actuation coordinates.
        self._Kc = c_inv.T @ (self._K[:, None] * c_inv)
        self._num = 0.0
        self._den = 0.0
        self._total = 0.0  # Σ‖r‖²
        #: Windows that counted.
        self.samples = 0

    def add(self, q_rest_measured: FloatArray) -> None:
        """One window's resting configuration ``q̂`` (n,)."""
        if not self.enabled:
            return
        q = np.asarray(q_rest_measured, dtype=float)
        m = self.model.m
        r = (self._c_inv.T @ self.model.G(q))[m:]
        k_u = (self._c_inv.T @ (self._K * (q - self._rest)))[m:]
        den = float(k_u @ k_u)
        if not (den > 0.0 and math.isfinite(den) and np.all(np.isfinite(r))):
            return
        self._num -= float(r @ k_u)
        self._den += den
        self._total += float(r @ r)
        self.samples += 1

    @property
    def scale(self) -> float:
        """``ŝ`` (0 before any window counted), within :data:`SCALE_RANGE`."""
        if not self._den > 0.0:
            return 0.0
        lo, hi = SCALE_RANGE
        return min(max(self._num / self._den, lo), hi)

    @property
    def explained(self) -> float:
        """The fraction of ``Σ‖r‖²`` that the scale explains (1 with one passive coordinate;
        0 before any window counted)."""
        if not (self._den > 0.0 and self._total > 0.0):
            return 0.0
        return min(self._num * self._num / self._den / self._total, 1.0)

    @property
    def significant(self) -> bool:
        """``|ŝ|`` ≥ :data:`SIGNIFICANT` and the scale explains at least :data:`EXPLAINED`
        of the residuals (else the model is off in another way than its springs)."""
        return abs(self.scale) >= SIGNIFICANT and self.explained >= EXPLAINED

    @classmethod
    def fixed(cls, model: MechanicalModel, scale: float) -> SpringScale:
        """A scale known beforehand (a planner's, :func:`poise.motion.planner.for_springs`),
        not measured: ``ŝ = scale`` (within :data:`SCALE_RANGE`)."""
        out = cls(model)
        out._num, out._den, out._total = float(scale), 1.0, float(scale) ** 2
        return out

    def reach(self, qa: FloatArray, qu: FloatArray, goal: FloatArray,
              bounded: Callable[..., tuple[FloatArray, float, bool]]
              ) -> tuple[FloatArray, FloatArray, bool] | None:
        """``(qa*, x*, limited)``: Gauss–Newton on the held map of the model with springs
        ``1 + ŝ`` from the actuators ``qa`` (the held configuration solved by Newton from
        ``qu`` between steps) towards the task value ``goal``: :data:`ITERATIONS` steps, each
        ``bounded(J, error, qa)`` within the limits and halved until it reduces the error, at
        most :data:`HALVINGS` times (a 10 cm correction on the dancer is far from linear).
        ``x*`` is the scaled model's task value at ``qa*``; ``limited``: a limit held the
        last step. None where the scale is off (not :attr:`enabled`)."""
        if not self.enabled:
            return None
        return held_reach(self._held, self.jacobian_at, qa, qu, goal, bounded)

    def correction(self, q_rest: FloatArray, qa: FloatArray, shift: FloatArray,
                   bounded: Callable[..., tuple[FloatArray, float, bool]], radius: float
                   ) -> tuple[FloatArray, float, bool]:
        """``(Δqa, residual, limited)``: the actuator change from ``qa`` that moves the held
        task value of the model with springs ``1 + ŝ`` from where the plant rests (``q̂``) by
        ``shift`` (:meth:`reach`), cut to ``radius`` (toward 0); ``residual`` is what the
        scaled model says is left."""
        start = np.asarray(qa, dtype=float)
        qu = split(self.model, np.asarray(q_rest, dtype=float))[1]
        b = self._held(start, qu)
        goal = b.x + np.asarray(shift, dtype=float)
        found = self.reach(start, b.qu, goal, bounded)
        if found is None:
            return np.zeros_like(start), float(np.linalg.norm(shift)), False
        a, x, limited = found
        delta = a - start
        size = float(np.linalg.norm(delta))
        if size > radius:
            delta = delta * (radius / size)
            x = self._held(start + delta, b.qu).x
        return delta, float(np.linalg.norm(goal - x)), limited

    def resting(self, qa: FloatArray, qu: FloatArray) -> FloatArray:
        """Where a plant with springs ``1 + ŝ`` rests at the actuators ``qa`` (n,): the held
        configuration of the scaled model, by Newton from ``qu``."""
        b = self._held(np.asarray(qa, dtype=float), qu)
        return join(self.model, b.qa, b.qu)

    def rests_stably(self, qa: FloatArray, qu: FloatArray) -> bool:
        """Whether a plant with springs ``1 + ŝ`` rests stably at the actuators ``qa``:
        Newton from ``qu`` converges (:meth:`resting`) where it holds stably
        (:meth:`holds_stably`; Newton alone finds unstable equilibria too: with the dancer's
        pointe 10 % softer it "held" an upright centre of mass the pointe cannot hold)."""
        b = self._held(np.asarray(qa, dtype=float), qu)
        g = self._passive(b, join(self.model, b.qa, b.qu))
        return float(np.linalg.norm(g)) < NEWTON_TOL and self.holds_stably(b)

    def _held(self, qa: FloatArray, qu: FloatArray) -> ActuationBlocks:
        """The blocks at the held configuration of the scaled model at ``qa`` (Newton on
        ``G_u + ŝ k_u = 0`` from ``qu``)."""
        model, scale, m = self.model, self.scale, self.model.m
        Kc = self._Kc
        qu = np.asarray(qu, dtype=float).copy()
        for _ in range(NEWTON_ITER):
            q = join(model, qa, qu)
            b = blocks(model, q)
            g = self._passive(b, q)
            if float(np.linalg.norm(g)) < NEWTON_TOL:
                return b
            qu = qu - np.linalg.solve(b.Huu + scale * Kc[m:, m:], g)
        return blocks(model, join(model, qa, qu))

    def _passive(self, b: ActuationBlocks, q: FloatArray) -> FloatArray:
        """``G_u + ŝ k_u`` at ``q`` (blocks ``b``): the scaled model's unactuated force."""
        m = self.model.m
        return b.Gu + self.scale * (self._c_inv.T @ (self._K * (q - self._rest)))[m:]

    def jacobian_at(self, b: ActuationBlocks) -> FloatArray:
        """:meth:`held_jacobian` from the model's blocks ``b`` at the configuration."""
        m, scale = self.model.m, self.scale
        if scale == 0.0 or b.Huu.size == 0:
            return held_jacobian(b)
        Huu = b.Huu + scale * self._Kc[m:, m:]
        Hua = b.Hua + scale * self._Kc[m:, :m]
        return b.Ja - b.Ju @ np.linalg.solve(Huu, Hua)

    def holds_stably(self, b: ActuationBlocks) -> bool:
        """Whether the model with springs ``1 + ŝ`` would rest stably where the model's
        blocks ``b`` are, were it held there: ``H_uu + ŝ K_uu`` positive definite (no
        passive coordinates: True). The dancer's pointe 20 % softer than the model's does
        not (it falls over its pointe)."""
        if b.Huu.size == 0:
            return True
        m = self.model.m
        return bool(np.linalg.eigvalsh(b.Huu + self.scale * self._Kc[m:, m:])[0] > 0.0)

    def held_jacobian(self, q: FloatArray) -> FloatArray:
        """``J = J_a − J_u (H_uu + ŝ K_uu)⁻¹ (H_ua + ŝ K_ua)`` (task_dim, m) at ``q``: the
        held Jacobian of the model whose springs are ``1 + ŝ`` times its own."""
        return self.jacobian_at(blocks(self.model, np.asarray(q, dtype=float)))


def scaled_plant(model: MechanicalModel, scale: float) -> MechanicalModel | None:
    """``model`` with every joint spring ``1 + scale`` times its own (``K* = (1 + ŝ) K``),
    as a new model: the plant :class:`SpringScale` describes, which a move can be simulated
    on (:func:`~poise.motion.reference.choose_move`'s ``plant``). None where ``scale`` is 0
    or ``model`` cannot be rebuilt with other springs (a ``planar_tree`` can,
    :func:`~poise.models.planar_tree.with_bodies`; the soft arms' aims lie within
    :data:`~poise.motion.planner.AIM_NEAR` tolerances of their targets, so their moves are
    chosen on the model anyway)."""
    from poise.models.planar_tree import PlanarTree, with_bodies

    if not scale or not isinstance(model, PlanarTree):
        return None
    return with_bodies(model, np.asarray(model.masses, dtype=float),
                       stiffness=np.asarray(model.stiffness, dtype=float) * (1.0 + scale),
                       source=f"<springs × {1.0 + scale:.4g}>")


def held_reach(held: Callable[[FloatArray, FloatArray], ActuationBlocks],
               jacobian: Callable[[ActuationBlocks], FloatArray], qa: FloatArray,
               qu: FloatArray, goal: FloatArray,
               bounded: Callable[..., tuple[FloatArray, float, bool]],
               iterations: int = ITERATIONS) -> tuple[FloatArray, FloatArray, bool]:
    """``(qa*, x*, limited)``: Gauss–Newton on a held map from the actuators ``qa`` towards
    the task value ``goal``: ``held(qa, qu)`` the blocks at the held configuration at ``qa``
    (solved from ``qu``), ``jacobian(blocks)`` its held Jacobian; ``iterations`` steps,
    each ``bounded(J, error, qa)`` within the limits and halved until it reduces the error,
    at most :data:`HALVINGS` times (a 10 cm correction on the dancer is far from linear).
    ``x*`` is the map's task value at ``qa*``; ``limited``: a limit held the last step."""
    a = np.asarray(qa, dtype=float).copy()
    b = held(a, np.asarray(qu, dtype=float))
    goal = np.asarray(goal, dtype=float)
    error, limited = float(np.linalg.norm(goal - b.x)), False
    for _ in range(iterations):
        d, _, lim = bounded(jacobian(b), goal - b.x, a)
        for _ in range(HALVINGS + 1):  # backtracking: a step must reduce the error
            trial = held(a + d, b.qu)
            after = float(np.linalg.norm(goal - trial.x))
            if after < error:
                break
            d = 0.5 * d
        else:
            break
        limited = lim  # a bound active at the last step: it holds the result
        a, b, error = a + d, trial, after
    return a, np.asarray(b.x, dtype=float), limited


__all__ = ["EXPLAINED", "SCALE_RANGE", "SIGNIFICANT", "SpringScale", "held_reach", "scaled_plant"]
