"""A balance controller by state feedback for a centre-of-mass task on passive joints.

The dancer balances its centre of mass (the task ``x = h(q)``) over an elastic pointe
(the passive ``q_u``) with its hips (the actuated ``q_a``). Where friction holds the pointe,
feedback through the statics alone (Algorithms 1 and 2, sampled corrections) stalls or
makes it slide: a static correction changes the force the pointe holds, and the pointe jumps
once it breaks away (issue 35; ``docs/benchmarks.md``, sessions 66–67). Held by the hips
against the pointe's own dynamics, the centre of mass sees the pointe's joint spring ``k₀``
rather than the much softer ``H_uu`` near a fold, and the hips take up what stiction
leaves.

The design, made where the controller starts and again wherever the setpoints or the
passive joints have moved :data:`REDESIGN_STEP` from there (gain scheduling; after the
cycle, :meth:`BalanceController.refresh`):

* **Plant** linearised at ``q* = (r, q̂_u)`` (the setpoints and the passive joints as
  measured or estimated; not a held configuration of the model: near a fold of the model's
  held set the plant may hold where the model holds nothing) in actuation coordinates, the
  hips kinematic (they follow
  their setpoints ``r`` within a few milliseconds), the input the setpoint rate
  ``u = ṙ`` [rad/s]. The passive rows ``M_uu q̈_u + M_ua q̈_a + D q̇ + H_uu Δq_u + H_ua Δq_a
  = 0`` written in the momenta ``ξ = M_uu Δq_u + M_ua Δq_a`` and ``w = ξ̇`` need no hip
  acceleration:

  ``ξ̇ = w``, ``ẇ = b − D_uu q̇_u − D_ua u − H_uu Δq_u − H_ua Δr``, with
  ``Δq_u = M_uu⁻¹ (ξ − M_ua Δr)`` and ``q̇_u = M_uu⁻¹ (w − M_ua u)``;
  the force ``b = −G_u(q*)`` plus what the model misses; the task error ``e = J_u Δq_u +
  J_a Δr`` and its integral ``∫e`` (of the measured task's error from the aim).

  State ``z = (ξ, w, Δr, ∫e)``, discrete (zero-order hold) at the loop period Δt.
* **Gains** by LQR (:mod:`poise.motion.balance_design`): the task error weighted
  (1 mm)⁻², its integral as 1 mm for 0.5 s, the hips' excursion (0.3 rad)⁻², the rate 100;
  ``u = −K z``: the proportional part holds the state where the design was made, the
  integral moves the task to the aim. (Feeding forward the model's own balance at the aim,
  ``u = −K (z − z_ss)``, was faster on a plant that is its model but made the dancer on
  ``real``, 14 % off in its masses, swing 10–28 mm: the model's balance is not the
  plant's.)
* **Estimator**: the hips are measured, so only ``(ξ, w)`` and the force ``b`` on the
  passive joints (a random walk: friction, hysteresis, the model's error) are estimated, by
  a steady-state Kalman filter whose inputs are the *measured* hip positions and the
  commanded rates. One that trusted a servo model of the hips would read the servos' dead
  band as a large torque (the dancer fell in 0.8 s).

:class:`~poise.motion.step.ControlStep` engages it after a move (``[loop] balance``): by
default only where sampled re-targeting has shown friction, so nothing changes on a plant
without it.
"""

from __future__ import annotations

import numpy as np

from poise.models.actuation import join, split
from poise.models.base import FloatArray, MechanicalModel
from poise.motion.balance_design import BalanceDesign, design
from poise.motion.safety import SafetyLimits

#: The aim moves from where the task was at the start to the target at this speed [task
#: units/s] (a bumpless start).
AIM_SPEED = 0.01
#: The controller engages only where the task is within this distance of its aim [task
#: units], and gives up where it is this far beyond it (:data:`LEAVE_RADIUS`): the design
#: is linear, made where it starts, and made again on the way (:data:`REDESIGN_STEP`); the
#: aim starts where the task is and moves at :data:`AIM_SPEED`, so the radius bounds how far
#: the aim must travel, not how far from it the task may start. (Within 20 mm, the sampled
#: corrections had to bring the dancer on ``real`` there through the pointe's stiction,
#: which ate them: seed 16's first target stalled 22 mm off for 25 s. With the start made
#: only where the pointe is still, :mod:`poise.motion.balance_hold`, 16 bench cases on
#: ``real`` within 50 mm gave the target back 3 times in all.)
ENGAGE_RADIUS = 0.05
LEAVE_RADIUS = 0.07
#: ... and gives up where a setpoint comes within this distance of its position limit
#: [rad] (the design knows no limits: a hip held at one left the dancer swinging).
LIMIT_MARGIN = 0.02
#: The design is made again where the setpoints have moved this far from the ones it was
#: made at [rad] (gain scheduling).
REDESIGN_STEP = 0.05
#: A start or a redesign is bumpless: the rate the integral cannot give (m rates, task_dim
#: integrals) is added and fades with this time constant [s].
BUMP_S = 0.2


def balances(model: MechanicalModel) -> bool:
    """Whether ``model`` is one the balance controller serves: its task the centre of
    mass, with passive joints."""
    return getattr(model, "task_name", "") == "com_xy" and model.n > model.m


class BalanceController:
    """The balance controller at run time: :meth:`start` at the hand-over, then one
    :meth:`cycle` per loop period returning the next setpoints.

    Args:
        model: the controller's statics model (its task the centre of mass).
        period: the loop period Δt [s].
    """

    def __init__(self, model: MechanicalModel, period: float) -> None:
        self.model = model
        self.period = period
        #: The limits the setpoints keep (``u`` is clipped to the rate limit).
        self.limits: SafetyLimits | None = None
        self._rate = np.full(model.m, np.inf)
        #: Why the controller gave up last (``""``: it has not).
        self.gave_up = ""
        #: Designs made since :meth:`start` (1 + the redesigns).
        self.designs = 0
        #: The setpoints or the passive joints moved :data:`REDESIGN_STEP` from where the
        #: design was made: :meth:`refresh` makes it again.
        self.redesign_due = False
        self._qa_m = np.zeros(model.m)  # the hips measured last
        self._bump = np.zeros(model.m)  # what a bumpless switch left [rad/s]
        self._fade = float(np.exp(-period / BUMP_S))
        self.design: BalanceDesign | None = None
        self._s = np.zeros(0)  # the estimator's (ξ, w, b)
        self._r = np.zeros(model.m)  # the setpoints
        self._u = np.zeros(model.m)  # the last rate
        self._integral = np.zeros(model.task_dim)
        self._aim = np.zeros(model.task_dim)
        self._target = np.zeros(model.task_dim)
        #: Cycles run since :meth:`start`.
        self.cycles = 0
        #: Over the controller's life: starts, cycles, designs and give-ups.
        self.totals = {"starts": 0, "cycles": 0, "designs": 0, "gave_up": 0}

    @property
    def active(self) -> bool:
        """Whether a design is in use (:meth:`start` called, :meth:`stop` not since)."""
        return self.design is not None

    def start(self, q: FloatArray, setpoint: FloatArray, target: FloatArray,
              limits: SafetyLimits) -> None:
        """Engage at the measured ``q`` and the current ``setpoint`` (m,), aiming the model's
        task at ``target``, the setpoints within ``limits``: design at the
        setpoint and the measured passive joints, the estimator started there at rest with
        the model's force there, and ``∫e`` chosen so that the first rate is zero
        (bumpless); the aim moves from the measured task value to ``target`` at
        :data:`AIM_SPEED`."""
        model = self.model
        self.limits = limits
        self._rate = np.broadcast_to(np.asarray(limits.qa_rate, dtype=float),
                                     (model.m,)).copy()
        self.gave_up = ""
        qa_m, qu_m = split(model, np.asarray(q, dtype=float))
        d = self.design = design(model, join(model, np.asarray(setpoint, dtype=float), qu_m),
                                 self.period)
        self.designs = 1
        self.totals["starts"] += 1
        self.totals["designs"] += 1
        self.redesign_due = False
        self._qa_m = qa_m
        nu = model.n - model.m
        self._s = np.zeros(3 * nu)
        self._s[:nu] = self._xi(d, qa_m, qu_m)
        self._s[2 * nu:] = -d.Gu  # the model's force at q* (its linear terms vanish there)
        self._r = np.array(setpoint, dtype=float)
        self._u = np.zeros(model.m)
        self._aim = np.asarray(model.fk(q), dtype=float).copy()
        self._target = np.array(target, dtype=float)
        self._bumpless(d, np.zeros(model.m))
        self.cycles = 0

    def retarget(self, target: FloatArray) -> None:
        """Aim at ``target`` from now on (reached at :data:`AIM_SPEED`)."""
        self._target = np.array(target, dtype=float)

    def stop(self) -> None:
        """Disengage (a new plan, a followed reference, a restart)."""
        self.design = None

    @staticmethod
    def _xi(d: BalanceDesign, qa: FloatArray, qu: FloatArray) -> FloatArray:
        """``ξ = M_uu Δq_u + M_ua Δq_a`` from ``q*``."""
        return d.Muu @ (qu - d.qu_star) + d.Mua @ (qa - d.qa_star)

    def cycle(self, q: FloatArray, x: FloatArray | None = None) -> FloatArray | None:
        """One period from the measured ``q`` (and its task value ``x = h(q)`` where the
        caller has it; None: computed here): the estimator's correction, the aim and the
        integral, the rate ``u = −K z`` (clipped to the rate limit; the integral holds
        while it is) and the estimator's prediction. Returns the next setpoints (m,), or
        None where it gives up (:attr:`gave_up` says why; then it has stopped): the task
        :data:`LEAVE_RADIUS` from its aim, or a setpoint within :data:`LIMIT_MARGIN` of
        its limit. Where the setpoints or the passive joints moved :data:`REDESIGN_STEP`
        from where the design was made, :attr:`redesign_due` asks for :meth:`refresh`."""
        d = self.design
        if d is None:
            raise RuntimeError("balance controller not started")
        model, dt = self.model, self.period
        nu = model.n - model.m
        q = np.asarray(q, dtype=float)
        qa_m, qu_m = split(model, q)
        s = self._s
        s += d.L @ (self._xi(d, qa_m, qu_m) - s[:nu])
        step = AIM_SPEED * dt
        gap = self._target - self._aim
        dist = float(np.linalg.norm(gap))
        self._aim = self._target.copy() if dist <= step else self._aim + gap * (step / dist)
        error = np.asarray(model.fk(q) if x is None else x, dtype=float) - self._aim
        reason = self._outside(error)
        if reason:
            self.gave_up = reason
            self.totals["gave_up"] += 1
            self.stop()
            return None
        u = self.rate()
        self.redesign_due = max(float(np.max(np.abs(self._r - d.qa_star))), float(np.max(
            np.abs(self._qu(d, qa_m) - d.qu_star)))) > REDESIGN_STEP
        clipped = np.clip(u, -self._rate, self._rate)
        if np.array_equal(clipped, u):
            self._integral = self._integral + dt * error
        self._u = clipped
        self._bump *= self._fade
        self._r = self._r + dt * clipped
        self._s = d.F @ s + d.G @ np.concatenate([qa_m - d.qa_star, clipped])
        self._qa_m = qa_m
        self.cycles += 1
        self.totals["cycles"] += 1
        return self._r.copy()

    def rate(self) -> FloatArray:
        """The setpoint rate ``u = −K z`` (m,) [rad/s] the design asks for in the present
        state ``z = (ξ̂, ŵ, Δr, ∫e)`` (before the rate limit), plus the fading bump of a
        bumpless start or redesign (:meth:`_bumpless`)."""
        d = self.design
        if d is None:
            raise RuntimeError("balance controller not started")
        nu = self.model.n - self.model.m
        return self._bump - d.K @ np.concatenate([self._s[:2 * nu], self._r - d.qa_star,
                                                  self._integral])

    def refresh(self) -> None:
        """Make the design again where :meth:`cycle` found it due (:attr:`redesign_due`);
        a few milliseconds, for after a cycle's setpoint went out."""
        d = self.design
        if d is None or not self.redesign_due:
            return
        self._redesign(d, self._qa_m, self.rate())
        self.redesign_due = False

    def _outside(self, error: FloatArray) -> str:
        """Why the controller must give up now (``""``: it need not)."""
        if float(np.linalg.norm(error)) > LEAVE_RADIUS:
            return f"task {1e3 * float(np.linalg.norm(error)):.1f} mm from its aim"
        lim = self.limits
        if lim is not None:
            near = (self._r < lim.qa_min + LIMIT_MARGIN) | (self._r > lim.qa_max - LIMIT_MARGIN)
            if near.any():
                return f"actuator {int(np.argmax(near))} at its position limit"
        return ""

    def _qu(self, d: BalanceDesign, qa_m: FloatArray) -> FloatArray:
        """The estimated passive joints ``q_u = q_u* + M_uu⁻¹ (ξ − M_ua Δq_a)`` [rad]."""
        nu = self.model.n - self.model.m
        return d.qu_star + np.linalg.solve(d.Muu, self._s[:nu] - d.Mua @ (qa_m - d.qa_star))

    def _redesign(self, d: BalanceDesign, qa_m: FloatArray, u: FloatArray) -> BalanceDesign:
        """The design made again at the present setpoints and estimated passive joints, the
        estimator's state carried over (its ``q_u``, ``q̇_u`` and what its force ``b``
        found beyond the model's ``−G_u(q*)``) and ``∫e`` chosen so that the new gains ask
        for the rate ``u`` the old ones did (bumpless, :meth:`_bumpless`)."""
        model, nu = self.model, self.model.n - self.model.m
        s = self._s
        qu = self._qu(d, qa_m)
        qu_rate = np.linalg.solve(d.Muu, s[nu:2 * nu] - d.Mua @ self._u)
        error = s[2 * nu:] + d.Gu  # what the estimator found beyond the model's force
        new = self.design = design(model, join(model, self._r, qu), self.period)
        self.designs += 1
        self.totals["designs"] += 1
        s = s.copy()
        s[:nu] = self._xi(new, qa_m, qu)
        s[nu:2 * nu] = new.Muu @ qu_rate + new.Mua @ self._u
        s[2 * nu:] = error - new.Gu
        self._s = s
        self._bumpless(new, u)
        return new

    def _bumpless(self, d: BalanceDesign, u: FloatArray) -> None:
        """``∫e`` such that ``−K z`` is nearest ``u`` (least squares: m rates, task_dim
        integrals), and what it leaves as a bump that fades with :data:`BUMP_S`
        (:meth:`rate` is then ``u``)."""
        nu, m = self.model.n - self.model.m, self.model.m
        k = d.K
        rest = k[:, :2 * nu] @ self._s[:2 * nu] + k[:, 2 * nu:2 * nu + m] @ (
            self._r - d.qa_star)
        self._integral = np.linalg.lstsq(k[:, 2 * nu + m:], -u - rest, rcond=None)[0]
        self._bump = np.zeros(m)
        self._bump = u - self.rate()

    def summary(self) -> dict[str, object]:
        """JSON-ready: ``active``, the ``totals`` (starts, cycles, designs, give-ups), the
        last give-up's ``reason`` (``""``: none) and, while active, the ``aim`` [task units]
        and the largest gain (``max_gain``, (rad/s) per state unit)."""
        d = self.design
        out: dict[str, object] = {"active": d is not None, "totals": dict(self.totals),
                                  "reason": self.gave_up}
        if d is not None:
            out["aim"] = self._aim.tolist()
            out["max_gain"] = float(np.max(np.abs(d.K)))
        return out

    def hold(self, setpoint: FloatArray) -> None:
        """The setpoints the safety layer let through (m,): the controller's own follow."""
        self._r = np.array(setpoint, dtype=float)


__all__ = ["AIM_SPEED", "BUMP_S", "ENGAGE_RADIUS", "LEAVE_RADIUS", "LIMIT_MARGIN",
           "REDESIGN_STEP", "BalanceController", "balances"]
