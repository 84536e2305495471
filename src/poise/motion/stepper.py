"""One IK step per control cycle: Algorithm 1, Algorithm 2 or plain CLIK, as a small object.

Each stepper keeps the algorithm's predicted configuration ``q̄`` and advances it by one
integration step ``Δt`` (= the loop period) per cycle, in two halves so that the safety
layer sits between them::

    qa_proposed = stepper.propose(params, x, dt)   # IK update of q̄a (x: the task value
                                                   # the error uses, measured in fb mode)
    qa_safe = limit_setpoint(limits, stepper.qa, qa_proposed, dt)
    stepper.commit(qa_safe)                        # q̄ consistent with the clipped q̄a
    setpoint = (stepper.qa, stepper.tau)           # τ_ff = G_a(q̄)

* :class:`Alg1Stepper` — seed 000, Algorithm 1: ``q̄a ← q̄a + Δt · Γ J⁺ e`` by
  :func:`~poise.ik.held.algorithm1_step` (``J = Ja − Ju Huu⁻¹ Hua``), then the statics
  ``G_u(q̄a, q̄u) = 0`` re-solved warm-started: a first-order prediction along E
  (``Δq̄u = −Huu⁻¹ Hua Δq̄a``) and Newton steps, falling back to
  :func:`~poise.ik.statics.solve_statics` (stable branch) if Newton does not converge or
  ``H_uu`` is not positive definite. Every q̄ lies on E.
* :class:`Alg2Stepper` — Algorithm 2: ``(q̄a, q̄u) ← (q̄a, q̄u) + Δt · rates`` by
  :func:`~poise.ik.held.limited_rates` (``ḟ = ΓZ ex``, ``Ġu = −ΓE Gu``, within the actuator
  limits given to ``reset``: an actuator at its limit that the rates push further is held
  while the others go on, so none is parked at a limit while another could still reduce the
  error); ``commit`` keeps the statics law for the actuator motion the safety layer let
  through (:func:`~poise.ik.held.follow_statics`).
* :class:`PlainStepper` — classic DLS CLIK on the full ``q`` (ignores statics: the baseline
  that sags when released; for fully actuated robots it is the right law).
"""

from __future__ import annotations

import math

import numpy as np

from poise.ik.branch import positive_definite
from poise.ik.held import algorithm1_step, damped_pinv, follow_statics, limited_rates
from poise.ik.statics import StaticsSolution, solve_statics
from poise.models.actuation import ActuationBlocks, blocks, join, split
from poise.models.base import FloatArray, MechanicalModel
from poise.motion.params import LiveParams

#: Statics tolerance of the per-cycle re-solve [N·m].
STATICS_TOL = 1e-8
#: Newton iterations of the per-cycle re-solve before falling back to the full solver.
NEWTON_ITER = 4
#: Largest change of any configuration coordinate in one cycle (Alg. 2, plain) [rad].
MAX_STEP = 0.05
#: A change of q̄u in one commit above this is a snap to another branch of held
#: configurations (:func:`snaps_through`) [unactuated units].
FOLD_JUMP = 0.05
#: A failed re-solve this close to the actuators last held at a fold is held again without
#: the full solve (:class:`FoldHold`) [actuator units].
REFUSED_NEAR = 1e-3


class Stepper:
    """Common state: ``q_bar``, its blocks, ``qa`` (= q̄a), ``tau`` (= G_a(q̄)), ``residual``."""

    name = ""
    #: A planned move sets the actuators this cycle (the owner sets it before ``commit``):
    #: Algorithm 1 may then snap through a fold onto another branch of held configurations,
    #: as the plan's move does; otherwise it holds at the fold (:func:`snaps_through`).
    moving = False

    def __init__(self, model: MechanicalModel) -> None:
        self.model = model
        self.q_bar = np.zeros(model.n)
        self.b: ActuationBlocks = blocks(model, self.q_bar)

    @property
    def qa(self) -> FloatArray:
        return self.b.qa

    @property
    def tau(self) -> FloatArray:
        """Effort feed-forward ``τ_ff = G_a(q̄)`` (m,)."""
        return self.b.Ga

    @property
    def x_bar(self) -> FloatArray:
        """Predicted task value ``h(q̄)``."""
        return self.b.x

    @property
    def residual(self) -> float:
        """Statics residual ``‖G_u(q̄)‖``."""
        return float(np.linalg.norm(self.b.Gu))

    def _set(self, q: FloatArray) -> None:
        self.q_bar = q
        self.b = blocks(self.model, q)

    def reset(self, q: FloatArray, qa_min: FloatArray, qa_max: FloatArray) -> None:
        """Start from the measured configuration ``q`` (bumpless start / algorithm switch)."""
        qa, qu = split(self.model, q)
        self._set(join(self.model, np.clip(qa, qa_min, qa_max), qu))

    def propose(self, p: LiveParams, x: FloatArray | None, dt: float) -> FloatArray:
        """The IK update of q̄a; ``x`` is the task value the error uses (``None``: h(q̄))."""
        raise NotImplementedError

    def commit(self, qa: FloatArray) -> None:
        """Accept ``qa`` (after the safety layer) and make q̄ consistent with it."""
        raise NotImplementedError


class Alg1Stepper(Stepper):
    """Algorithm 1 (statics solved beforehand), see the module docstring."""

    name = "alg1"

    def __init__(self, model: MechanicalModel) -> None:
        super().__init__(model)
        self.statics: StaticsSolution | None = None
        self.fallbacks = 0
        #: Commits held at a fold of the model's held configurations (:class:`FoldHold`).
        self.fold_holds = 0
        self.fold = FoldHold()

    def reset(self, q: FloatArray, qa_min: FloatArray, qa_max: FloatArray) -> None:
        qa, qu = split(self.model, q)
        self.fold = FoldHold()
        sol = solve_statics(self.model, np.clip(qa, qa_min, qa_max), qu, tol=STATICS_TOL)
        self.statics = sol
        self._set(sol.q)

    def propose(self, p: LiveParams, x: FloatArray | None, dt: float) -> FloatArray:
        assert self.statics is not None
        e = None if x is None else p.target - x
        qa_new, _, _ = algorithm1_step(self.model, self.statics, p.target, update=p.update,
                                       damping=p.damping, gain=p.gamma, dt=dt, e=e)
        return qa_new

    def commit(self, qa: FloatArray) -> None:
        model, b = self.model, self.b
        dqa = qa - b.qa
        try:
            qu = b.qu - np.linalg.solve(b.Huu, b.Hua @ dqa) if b.Huu.size else b.qu
        except np.linalg.LinAlgError:
            qu = b.qu
        converged = False
        for _ in range(NEWTON_ITER):
            nb = blocks(model, join(model, qa, qu))
            if not nb.Gu.size or float(np.linalg.norm(nb.Gu)) <= STATICS_TOL:
                converged = True
                break
            try:
                qu = qu - np.linalg.solve(nb.Huu, nb.Gu)
            except np.linalg.LinAlgError:
                break
        stable = converged and positive_definite(nb.Huu)
        if not stable:
            self.fallbacks += 1
            assert self.statics is not None
            sol = self.fold.fallback(model, qa, self.statics.qu, self.moving, STATICS_TOL)
            if sol is None:
                self.fold_holds += 1  # q̄, and the setpoint q̄a, stay at the fold's edge
                return
            self.statics = sol
            self._set(sol.q)
            return
        q = join(model, qa, nb.qu)
        self.q_bar, self.b = q, nb
        self.statics = StaticsSolution(q=q, qa=nb.qa, qu=nb.qu,
                                       residual=float(np.linalg.norm(nb.Gu)), converged=True,
                                       iterations=0, eig_Huu=np.zeros(0), verdict="stable")


class FoldHold:
    """Algorithm 1 held at a fold (:func:`snaps_through`), and the actuators it refused last:
    the integrator pushes on into the fold cycle after cycle, and a commit whose Newton
    re-solve fails again within :data:`REFUSED_NEAR` of them is held without the full
    statics solve (0.6 ms on the dancer, each cycle)."""

    def __init__(self) -> None:
        self.refused: FloatArray | None = None

    def again(self, qa: FloatArray, moving: bool) -> bool:
        """Whether ``qa``, past the branch's end again, is held without a solve."""
        refused = self.refused
        return not moving and refused is not None and \
            bool(np.max(np.abs(np.asarray(qa) - refused)) < REFUSED_NEAR)

    def fallback(self, model: MechanicalModel, qa: FloatArray, qu_old: FloatArray,
                 moving: bool, tol: float) -> StaticsSolution | None:
        """The statics at ``qa`` solved in full from ``qu_old`` (the last converged q̄u), the
        fallback of a commit whose Newton re-solve failed; None where the commit is held at
        the fold instead (:meth:`again`, :meth:`holds`)."""
        if self.again(qa, moving):
            return None
        sol = solve_statics(model, qa, qu_old, tol=tol)
        return None if self.holds(qa, sol.qu, qu_old, moving) else sol

    def holds(self, qa: FloatArray, qu_new: FloatArray, qu_old: FloatArray,
              moving: bool) -> bool:
        """:func:`snaps_through`, remembering ``qa`` when it holds (forgetting it when not)."""
        held = snaps_through(qu_new, qu_old, moving)
        self.refused = np.array(qa, dtype=float) if held else None
        return held


def snaps_through(qu_new: FloatArray, qu_old: FloatArray, moving: bool) -> bool:
    """Whether Algorithm 1's re-solve of the statics, falling back to the stable
    configuration nearest the last (the Newton re-solve failed: past a fold of the held
    configurations, the branch q̄ was on ends), left that branch (a change of ``qu`` above
    :data:`FOLD_JUMP`) while the IK integrates rather than a planned move runs (``moving``).
    Then the commit is not taken: the model would lean the other way while the robot, which
    differs from it, may not (the dancer on ``real``: past its model's fold the integrator
    fed the plant a Jacobian of the other branch and it toppled, ``poise bench control``
    target 16). A planned move snaps through as planned (the exact dancer swings its weight
    over the pointe that way)."""
    return not moving and bool(np.max(np.abs(np.asarray(qu_new) - np.asarray(qu_old)),
                                      initial=0.0) > FOLD_JUMP)


class Alg2Stepper(Stepper):
    """Algorithm 2 (statics solved online), see the module docstring."""

    name = "alg2"

    def __init__(self, model: MechanicalModel) -> None:
        super().__init__(model)
        self.qa_min, self.qa_max = model.qa_min, model.qa_max
        self._qa_next, self._qu_next = self.b.qa, self.b.qu

    def reset(self, q: FloatArray, qa_min: FloatArray, qa_max: FloatArray) -> None:
        super().reset(q, qa_min, qa_max)
        self.qa_min = np.asarray(qa_min, dtype=float)
        self.qa_max = np.asarray(qa_max, dtype=float)
        self._qa_next, self._qu_next = self.b.qa, self.b.qu

    def propose(self, p: LiveParams, x: FloatArray | None, dt: float) -> FloatArray:
        b = self.b
        ex = p.target - (b.x if x is None else x)
        try:
            rates = limited_rates(b, ex, -b.Gu, p.gamma_z, p.gamma_e, self.qa_min,
                                  self.qa_max, damping=p.damping)
        except np.linalg.LinAlgError:
            rates = limited_rates(b, ex, -b.Gu, p.gamma_z, p.gamma_e, self.qa_min,
                                  self.qa_max, damping=max(p.damping, 1e-6))
        delta = _bounded(self.model, dt * rates)
        m = self.model.m
        self._qa_next, self._qu_next = b.qa + delta[:m], b.qu + delta[m:]
        return self._qa_next

    def commit(self, qa: FloatArray) -> None:
        qu = follow_statics(self.b, self._qa_next, self._qu_next, qa)
        self._set(join(self.model, qa, qu))


class PlainStepper(Stepper):
    """Classic DLS CLIK on all of ``q`` (statics ignored), see the module docstring."""

    name = "plain"

    def __init__(self, model: MechanicalModel) -> None:
        super().__init__(model)
        self._qu_next = self.b.qu

    def propose(self, p: LiveParams, x: FloatArray | None, dt: float) -> FloatArray:
        model = self.model
        e = p.target - (self.b.x if x is None else x)
        jac = model.task_jacobian(self.q_bar)
        dq = _bounded(model, model.C @ (dt * p.gamma * (damped_pinv(jac, p.damping) @ e)))
        qa, qu = split(model, self.q_bar)
        self._qu_next = qu + dq[model.m:]
        return qa + dq[:model.m]

    def commit(self, qa: FloatArray) -> None:
        self._set(join(self.model, qa, self._qu_next))


def _bounded(model: MechanicalModel, delta_c: FloatArray) -> FloatArray:
    """Scale an actuation-coordinate step so no joint moves more than :data:`MAX_STEP`."""
    longest = float(np.max(np.abs(model.C_inv @ delta_c))) if delta_c.size else 0.0
    if math.isfinite(longest) and longest > MAX_STEP:
        return delta_c * (MAX_STEP / longest)
    return delta_c


STEPPERS: dict[str, type[Stepper]] = {"alg1": Alg1Stepper, "alg2": Alg2Stepper,
                                      "plain": PlainStepper}


def make_stepper(name: str, model: MechanicalModel) -> Stepper:
    """A fresh stepper for algorithm ``name`` (``alg1``, ``alg2``, ``plain``)."""
    return STEPPERS[name](model)
