"""Targets planned in the parent of the real-time process, not beside its loop.

:class:`ParentPlanner` makes a target command's offline plan (statics solves, the move's
reference) in this process while the loop runs, so that the solves never compete with the
loop for the real-time process's CPU; the child applies the plan it is handed
(``Controller.submit(command, prepared=plan)``). It reads the child's state from the
:class:`~poise.controller.realtime.mirror.ChildMirror` (the newest cycle record, the current
plan's goal, the live parameters, the safety limits). All planning of the parent is here.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from poise.api.bus import Command
from poise.api.state import State
from poise.controller.config import Config
from poise.controller.realtime.messages import PlanChanged

if TYPE_CHECKING:
    from poise.controller.realtime.mirror import ChildMirror
    from poise.models.base import MechanicalModel
    from poise.motion.params import ParamError
    from poise.motion.planner import TargetPlan
    from poise.motion.stepper import Stepper


class ParentPlanner:
    """A target command's plan made in the parent (see the module docstring).

    Args:
        mirror: the child's state as reported (read, never changed).
        config: the configuration (``algorithm.tolerance``, ``loop`` shaping and steppers).
        model: the robot's model; ``reach``: its reach [m] (targets beyond it are refused).
    """

    def __init__(self, mirror: ChildMirror, config: Config, model: MechanicalModel,
                 reach: float | None) -> None:
        self._mirror = mirror
        self._config, self._model, self._reach = config, model, reach
        self._period = 1.0 / config.loop.rate
        #: The steppers of the references made here (:meth:`_choose_move`), made once.
        self._factory: Callable[[str, MechanicalModel], Stepper] | None = None
        self._factory_lock = threading.Lock()
        #: The thread of :meth:`_warm` (started once), and whether it or a plan planned.
        self.warmer: threading.Thread | None = None
        self.warm = False

    @property
    def steppers_loaded(self) -> bool:
        return self._factory is not None

    def prepare(self, command: Command) -> TargetPlan | ParamError | None:
        """A target's offline plan, from the newest cycle record's q̄ and q and the current
        plan's goal (as ``ControlStep.make_plan`` does in the child). None (the child plans)
        for other commands, or before the loop runs (nothing to disturb yet). A bad or
        unstable target: the :class:`ParamError` the child answers with."""
        mirror = self._mirror
        s = mirror._last_sample
        if command.name != "target" or mirror.state != State.RUNNING or s is None:
            return None
        from poise.motion.params import ParamError, parse_target
        from poise.motion.planner import UnstableTarget

        try:
            target = parse_target(command.value, self._model.task_dim, self._reach)
            starts = [np.asarray(s.q_bar, dtype=float), np.asarray(s.q, dtype=float)]
            if mirror._plan_goal is not None:
                starts.append(mirror._plan_goal)
            plan = self._plan(target, starts)
            self.warm = True
            return self._choose_move(plan, starts[0])
        except UnstableTarget as exc:
            return ParamError(str(exc))
        except ParamError as exc:
            return exc

    def on_plan(self, msg: PlanChanged) -> None:
        """Once the child has a plan with a goal: load what planning here needs in a thread
        (once; see :meth:`_warm`)."""
        if self.warmer is None and msg.goal is not None:
            self.warmer = threading.Thread(target=self._warm,
                                           args=(np.asarray(msg.goal, dtype=float),),
                                           name="poise-plan-warm", daemon=True)
            self.warmer.start()

    def _plan(self, target: np.ndarray, starts: list[np.ndarray]) -> TargetPlan:
        """The plan to ``target`` from the first of ``starts`` that gets there."""
        from poise.motion.planner import plan_target

        loop = self._config.loop
        return plan_target(self._model, target, starts, self._config.algorithm.tolerance,
                           period=self._period, effort_feedforward=loop.effort_feedforward,
                           params=self._mirror.params, shaper=loop.shaper)

    def _choose_move(self, plan: TargetPlan, q_bar: np.ndarray) -> TargetPlan:
        """``plan`` with its move from ``q_bar`` chosen on the model and the predicted
        response feedback follows after it (:func:`~poise.motion.reference.choose_move`),
        computed here (with this process's own compiled steppers, loaded at the first use)
        rather than beside the loop; ``plan`` itself before the child reported its limits
        or when the parameters at the target are refused (the child refuses them too)."""
        from poise.motion.params import ParamError, with_plan
        from poise.motion.reference import choose_move

        limits = self._mirror._limits
        if limits is None:
            return plan
        try:
            params = with_plan(self._mirror.params, plan)
        except ParamError:
            return plan
        return choose_move(plan, q_bar, params, self._config, self._model, limits,
                           self._steppers())

    def _steppers(self) -> Callable[[str, MechanicalModel], Stepper]:
        """This process's compiled steppers (loaded at the first use)."""
        with self._factory_lock:
            if self._factory is None:
                from poise.motion.step import stepper_factory

                self._factory = stepper_factory(self._model, self._config.loop.compiled)[0]
            return self._factory

    def _warm(self, q_goal: np.ndarray) -> None:
        """Load what planning a target here needs while the loop runs (the statics solver's
        and the steppers' compiled kernels: the first target command otherwise answered
        about 1.5 s later than the next ones): the child's first plan's goal planned again
        here, the result dropped. A failure is only a warm-up that did not happen: the first
        command plans, and reports, for itself."""
        with contextlib.suppress(Exception):
            self._steppers()
            self._plan(np.asarray(self._model.fk(q_goal), dtype=float), [q_goal])
            self.warm = True


__all__ = ["ParentPlanner"]
