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
  (with ``"auto"`` also once the masses' estimate pins the centre of mass down to the
  tolerance, :mod:`poise.motion.masses`), and the start (a design, a few milliseconds) is
  made after the cycle's setpoint went out (:meth:`BalanceHold.design`);
* it stops as soon as this no longer holds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from poise.models.base import FloatArray, MechanicalModel
from poise.motion.balance import ENGAGE_RADIUS, BalanceController
from poise.motion.safety import SafetyLimits

if TYPE_CHECKING:
    from poise.motion.planner import TargetPlan


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

    @property
    def active(self) -> bool:
        """Whether the controller holds the target now."""
        return self.controller.active

    def allowed(self, plan: TargetPlan | None, friction: bool) -> bool:
        """Whether it may hold ``plan`` at all: one it has not given up on, with the
        resting windows having shown ``friction`` or with ``mode = "on"``."""
        return plan is not None and plan is not self.left and (friction or self.always)

    def engage(self, plan: TargetPlan, q: FloatArray, aim: FloatArray,
               pinned: Callable[[], bool]) -> bool:
        """This cycle, at rest on ``plan`` where it is :meth:`allowed` (the caller checks
        both): whether the controller takes it, aiming at ``aim`` (task_dim,) [task units].
        Not yet active, it is due to start where the measured task ``h(q)`` is within
        :data:`~poise.motion.balance.ENGAGE_RADIUS` of ``aim`` and (with ``"auto"``)
        ``pinned()`` says the masses' estimate pins the centre of mass down; the start is
        made by :meth:`design`, and this cycle stays the IK's."""
        controller = self.controller
        if controller.active:
            controller.retarget(aim)
            return True
        if float(np.linalg.norm(self.model.fk(q) - aim)) <= ENGAGE_RADIUS and \
                (self.always or pinned()):
            self._due = (plan, np.array(q, dtype=float), aim)
        return False

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
        """Disengage, if engaged (a new plan, a followed reference, a restart)."""
        if self.controller.active:
            self.controller.stop()


__all__ = ["BalanceHold"]
