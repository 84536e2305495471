"""When the balance controller holds a plan's target in place of the IK.

:class:`~poise.motion.balance.BalanceController` is the controller itself (its design, its
estimator, one setpoint per cycle). :class:`BalanceHold` is the rule around it that
:class:`~poise.motion.step.ControlStep` asks each cycle (``[loop] balance``,
:data:`~poise.api.rules.BALANCE_MODES`):

* it may hold a plan at rest in feedback (its move arrived, no reference followed, the live
  parameters aiming at its target, a held algorithm), with ``"auto"`` only once the resting
  windows showed friction (:mod:`poise.motion.dither`), with ``"on"`` always, and never a
  plan it gave up on (the IK holds that one from then on);
* it starts where the task is within :data:`~poise.motion.balance.ENGAGE_RADIUS` of its aim
  and the passive joints are still (:data:`REST_RANGE` over half the slowest mode's
  period, :func:`rest_span`: the controller's estimator starts them at rest), with
  ``"auto"`` also once the masses' estimate pins the centre of mass down to the tolerance
  (:mod:`poise.motion.masses`: its aim is the plant's, and the controller learns no more
  about it at rest in one place), or, where friction ate the IK's last correction and a
  task bias is in use, to a fraction of the distance left (:func:`pinned_down`); the start
  (a design, a few milliseconds) is made after the cycle's setpoint went out
  (:meth:`BalanceHold.design`);
* it stops as soon as this no longer holds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from poise.models.actuation import split
from poise.models.base import FloatArray, MechanicalModel
from poise.motion.balance import ENGAGE_RADIUS, BalanceController
from poise.motion.safety import SafetyLimits

if TYPE_CHECKING:
    from poise.motion.planner import TargetPlan

#: The passive joints are still where the range of each over the last :func:`rest_span` is
#: at most this [rad]: a sway of at most this amplitude (the dancer's pointe: about 10 mm of
#: its centre of mass, at 2π × this / T_d ≈ 10–20 mrad/s). The controller's estimator starts
#: the passive joints at rest; on ``real``, seed 16, a start while the pointe swung at
#: 0.135 rad/s through the engage radius gave up 0.27 s later 40 mm off, and the arm fell
#: 180 mm away.
REST_RANGE = 0.01
#: The span is this fraction of the damped period ``T_d`` of the plan's slowest structural
#: mode: a sway's range over half its period is at least its amplitude, wherever the span
#: falls (over 0.5 s the pointe turning at the end of its swing ranged over 5 mrad, and
#: passed at 0.042 rad/s a moment later).
REST_PERIODS = 0.5
#: ... and at least this long [s].
REST_S = 0.5
#: Where friction ate the IK's last correction (:attr:`Retargeting.eaten
#: <poise.motion.retarget.Retargeting.eaten>`) and a task bias is in use, a start needs the
#: estimate of the masses to pin the centre of mass down only to this fraction of the task's
#: distance from the aim: the controller leaves about a sigma where the IK's corrections
#: leave most of the distance (the dancer on ``real``, seeds 16 and 18, first target: the
#: bias known within 0.4–2 mm at sigmas of 2.6–5.9 mm, the IK's corrections ending 16–21 mm
#: off).
EATEN_LEAD = 4.0


def pinned_down(sigma: float, limit: float, distance: float, eaten: bool) -> bool:
    """Whether the estimate of the masses, pinning the centre of mass down to ``sigma`` [m],
    is good enough for a start with the task ``distance`` [m] from the aim: ``sigma`` within
    ``limit`` [m], or, where friction ate the IK's last correction (``eaten``), within
    1/:data:`EATEN_LEAD` of ``distance``."""
    return sigma <= limit or (eaten and EATEN_LEAD * sigma <= distance)


def rest_span(plan: TargetPlan) -> float:
    """The span [s] over which the passive joints must be still for a start on ``plan``:
    :data:`REST_PERIODS` of its slowest structural mode's damped period, at least
    :data:`REST_S`."""
    slow = plan.slowest_mode()
    damped = slow.damped_period if slow is not None else math.nan
    return max(REST_S, REST_PERIODS * damped) if math.isfinite(damped) else REST_S


class BalanceHold:
    """The balance controller and when it holds a plan (see the module docstring).

    Args:
        model: the controller's statics model (its task the centre of mass, with passive
            joints: :func:`~poise.motion.balance.balances`).
        period: the loop period Δt [s].
        mode: ``[loop] balance``: ``"auto"`` (once friction is shown) or ``"on"``.
    """

    def __init__(self, model: MechanicalModel, period: float, mode: str = "auto") -> None:
        self.model = model
        #: The controller by state feedback (:mod:`poise.motion.balance`).
        self.controller = BalanceController(model, period)
        #: ``[loop] balance = "on"``: at every plan, friction shown or not.
        self.always = mode == "on"
        #: The plan the controller gave up on last (the IK holds it from then on).
        self.left: TargetPlan | None = None
        #: A start found due by :meth:`engage`, made by :meth:`design`: the plan, the
        #: measured q (n,) and the aim (task_dim,).
        self._due: tuple[TargetPlan, FloatArray, FloatArray] | None = None
        self.period = period
        #: The passive joints' least and greatest values (n − m,) [rad] over the samples at
        #: rest on a plan since they last left :data:`REST_RANGE`, and how many
        #: (:meth:`still`).
        self._still: tuple[FloatArray, FloatArray] = (np.zeros(0), np.zeros(0))
        self._still_samples = 0
        #: The plan last asked about and its :func:`rest_span` [s] (made once per plan).
        self._span: tuple[TargetPlan | None, float] = (None, REST_S)

    @property
    def active(self) -> bool:
        """Whether the controller holds the target now."""
        return self.controller.active

    def allowed(self, plan: TargetPlan | None, friction: bool) -> bool:
        """Whether it may hold ``plan`` at all: one it has not given up on, with the
        resting windows having shown ``friction`` or with ``mode = "on"``."""
        return plan is not None and plan is not self.left and (friction or self.always)

    def engage(self, plan: TargetPlan, q: FloatArray, aim: FloatArray,
               pinned: Callable[[float], bool], rest_s: float | None = None) -> bool:
        """This cycle, at rest on ``plan`` where it is :meth:`allowed` (the caller checks
        both): whether the controller takes it, aiming at ``aim`` (task_dim,) [task units].
        Not yet active, it is due to start where the measured task ``h(q)`` is within
        :data:`~poise.motion.balance.ENGAGE_RADIUS` of ``aim``, the passive joints are
        :meth:`still` over ``rest_s`` [s] (None: :func:`rest_span` of the plan), and (with
        ``"auto"``) ``pinned(distance)`` says the masses' estimate pins the centre of mass
        down well enough with ``h(q)`` that ``distance`` [task units] from ``aim``
        (:func:`pinned_down`);
        the start is made by :meth:`design`, and this cycle stays the IK's."""
        controller = self.controller
        if controller.active:
            controller.retarget(aim)
            return True
        if rest_s is None:
            if self._span[0] is not plan:
                self._span = (plan, rest_span(plan))
            rest_s = self._span[1]
        distance = float(np.linalg.norm(self.model.fk(q) - aim))
        if self.still(q, rest_s) and distance <= ENGAGE_RADIUS and \
                (self.always or pinned(distance)):
            self._due = (plan, np.array(q, dtype=float), aim)
        return False

    def still(self, q: FloatArray, rest_s: float) -> bool:
        """With the measured ``q`` (n,) of this cycle at rest on a plan: whether each passive
        joint has stayed within a range of :data:`REST_RANGE` [rad] over the last ``rest_s``
        [s] (the samples since the range was last exceeded, counted from the one that
        exceeded it; :meth:`stop` forgets them). O(1) per cycle."""
        qu = split(self.model, np.asarray(q, dtype=float))[1]
        lo, hi = self._still
        if self._still_samples == 0 or \
                float(np.max(np.maximum(hi, qu) - np.minimum(lo, qu))) > REST_RANGE:
            self._still, self._still_samples = (qu.copy(), qu.copy()), 1
        else:
            np.minimum(lo, qu, out=lo)
            np.maximum(hi, qu, out=hi)
            self._still_samples += 1
        return self._still_samples > math.ceil(rest_s / self.period)

    def setpoint(self, plan: TargetPlan | None, q: FloatArray, x: FloatArray
                 ) -> FloatArray | None:
        """The controller's next setpoints (m,) from the measured ``q`` and ``x = h(q)``; None
        where it gave up (``plan`` is then :attr:`left` to the IK)."""
        proposed = self.controller.cycle(q, x)
        if proposed is None:
            self.left = plan
        return proposed

    def hold(self, setpoint: FloatArray) -> None:
        """The setpoints (m,) the safety layer let through: the controller's own follow."""
        self.controller.hold(setpoint)

    def design(self, plan: TargetPlan | None, setpoint: FloatArray, resting: bool,
               limits: SafetyLimits) -> None:
        """After the cycle's setpoint went out (a few milliseconds): the start
        :meth:`engage` found due, from ``setpoint`` (m,), where ``plan`` is still the one it
        was due on and the arm still ``resting`` on it; else the design made again where the
        controller's cycle asked (:meth:`~poise.motion.balance.BalanceController.refresh`)."""
        due, self._due = self._due, None
        controller = self.controller
        if due is not None and not controller.active and due[0] is plan and resting:
            controller.start(due[1], setpoint, due[2], limits)
        elif controller.active:
            controller.refresh()

    def stop(self) -> None:
        """Disengage, if engaged (a new plan, a followed reference, a restart), and forget
        the passive joints seen at rest (:meth:`still`)."""
        self._still_samples = 0
        if self.controller.active:
            self.controller.stop()


__all__ = ["EATEN_LEAD", "REST_PERIODS", "REST_RANGE", "REST_S", "BalanceHold", "pinned_down",
           "rest_span"]
