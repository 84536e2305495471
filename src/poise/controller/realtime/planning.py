"""Targets planned in the parent of the real-time process, not beside its loop.

:class:`ParentPlanner` makes a target command's offline plan (statics solves, the move's
reference) in this process while the loop runs, so that the solves never compete with the
loop for the real-time process's CPU; the child applies the plan it is handed
(``Controller.submit(command, prepared=plan)``). It reads the child's state from the
:class:`~poise.controller.realtime.mirror.ChildMirror` (the newest cycle record, the current
plan's goal, the live parameters, the safety limits). All planning of the parent is here.

With ``loop.live_targets`` and automatic gains a target is first planned quickly
(:meth:`MotionPlanner.quick_plan <poise.motion.motion_planner.MotionPlanner.quick_plan>`)
and handed over as a :class:`~poise.controller.refine.QuickTarget`, which the child adopts
at once; once it has, this process refines it in a worker thread of its own
(:class:`~poise.controller.refine.PlanRefiner`, off the loop's CPU where that is pinned) and
sends the result to the child (:class:`~poise.controller.realtime.messages.PlanRefined`).
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from poise.api.bus import Command, CommandResponse
from poise.api.state import State
from poise.controller.config import Config
from poise.controller.realtime.messages import PlanChanged, PlanRefined
from poise.controller.refine import PlanRefiner, QuickTarget, RefineJob

if TYPE_CHECKING:
    from poise.api.bus import CycleSample
    from poise.controller.realtime.mirror import ChildMirror, PlantBodies
    from poise.models.base import MechanicalModel
    from poise.motion.live import TrajectoryRun
    from poise.motion.motion_planner import MotionPlanner, MotionState, Move
    from poise.motion.params import ParamError
    from poise.motion.planner import TargetPlan
    from poise.motion.stepper import Stepper


#: Quick plans handed over whose answer is remembered at most (older ones are forgotten).
MAX_UNANSWERED = 8


class ParentPlanner:
    """A target command's plan made in the parent (see the module docstring).

    Args:
        mirror: the child's state as reported (read, never changed).
        config: the configuration (``algorithm.tolerance``, ``loop`` shaping and steppers).
        model: the robot's model; ``reach``: its reach [m] (targets beyond it are refused).
        tell: sends a quick plan's refinement to the child (after the calls sent before).
    """

    def __init__(self, mirror: ChildMirror, config: Config, model: MechanicalModel,
                 reach: float | None,
                 tell: Callable[[PlanRefined], None] = lambda msg: None) -> None:
        from poise.devices.affinity import plan_cpus

        self._mirror, self._tell = mirror, tell
        self._config, self._model, self._reach = config, model, reach
        #: The one entry point from a target to its move (:meth:`_motion`; made at the first
        #: plan: importing the planner loads SciPy and Numba, which the parent defers).
        self._planner: MotionPlanner | None = None
        #: The steppers of the references made here (:meth:`_move`), made once.
        self._factory: Callable[[str, MechanicalModel], Stepper] | None = None
        self._factory_lock = threading.Lock()
        #: The thread of :meth:`_warm` (started once), and whether it or a plan planned.
        self.warmer: threading.Thread | None = None
        self.warm = False
        #: The quick plans handed over and not yet answered, by serial, with the state each
        #: was made from (refined once the child has adopted it, :meth:`answered`).
        self._serials = itertools.count(1)
        self._quick: dict[int, MotionState] = {}
        self._quick_lock = threading.Lock()
        #: The plant made of the child's last estimate of its bodies (:meth:`_plant`).
        self._plant_made: tuple[PlantBodies | None, MechanicalModel | None] = (None, None)
        cpus = plan_cpus(config.loop.cpu)[0]
        #: Refines the quick plans the child adopted (one thread, the newest job only).
        self.refiner = PlanRefiner(self._refining, self._refined,
                                   cpus=cpus.others if cpus is not None else None,
                                   name="poise-plan-refine")

    @property
    def steppers_loaded(self) -> bool:
        return self._factory is not None

    def prepare(self, command: Command
                ) -> TargetPlan | QuickTarget | TrajectoryRun | ParamError | None:
        """A target's offline plan, from the newest cycle record's q̄ and q and the current
        plan's goal (as ``ControlStep.make_plan`` does in the child). None (the child plans)
        for other commands, or before the loop runs (nothing to disturb yet). A bad or
        unstable target: the :class:`ParamError` the child answers with. A streamed target is
        never planned (None); a trajectory is checked and shaped here (:meth:`_trajectory`).

        With ``loop.live_targets`` and every rate gain automatic, the quick plan from q̄
        where one solve settles the target (:class:`QuickTarget`: the child adopts it at
        once; :meth:`answered` then starts its refinement here); else the full plan."""
        mirror = self._mirror
        s = mirror._last_sample
        if command.name == "trajectory" and command.value != "stop" and s is not None and \
                mirror.state == State.RUNNING:
            return self._trajectory(command.value, np.asarray(s.q_bar, dtype=float))
        if command.name != "target" or mirror.state != State.RUNNING or s is None:
            return None
        streamed = command.stream if command.stream is not None else \
            self._config.loop.targets == "stream"
        if streamed:  # a sample of a moving reference: never planned
            return None
        from poise.motion.params import ParamError, gains_automatic, parse_target
        from poise.motion.planner import UnstableTarget

        self.refiner.cancel()  # an older target's refinement: the child drops it anyway
        try:
            target = parse_target(command.value, self._model.task_dim, self._reach)
            state = self._state(s)
            planner = self._motion()
            if self._config.loop.live_targets and gains_automatic(mirror.params):
                planner.limits = mirror._limits  # type: ignore[assignment]
                quick = planner.quick_plan(target, state)
                if quick is not None:
                    self.warm = True
                    made = QuickTarget(quick, next(self._serials))
                    with self._quick_lock:
                        while len(self._quick) >= MAX_UNANSWERED:  # never answered
                            del self._quick[next(iter(self._quick))]
                        self._quick[made.serial] = state
                    return made
            plan = planner.target_plan(target, state)
            self.warm = True
            return self._move(plan, state)
        except UnstableTarget as exc:
            return ParamError(str(exc))
        except ParamError as exc:
            return exc

    def _state(self, s: CycleSample) -> MotionState:
        """The state a plan is made from: the cycle record ``s``'s q̄ and q, the current
        plan's goal, the live parameters, and what the child's step measured of the plant
        (detuning, spring scale, and its bodies: :meth:`_plant`)."""
        from poise.motion.motion_planner import MotionState

        mirror = self._mirror
        q_bar = np.asarray(s.q_bar, dtype=float)
        return MotionState(mirror.params, q_bar=q_bar, q=np.asarray(s.q, dtype=float),
                           goal=mirror._plan_goal, move_from=q_bar, detuning=mirror.detuning,
                           spring_scale=mirror.spring_scale, plant=self._plant())

    def _plant(self) -> MechanicalModel | None:
        """The plant as the child's step estimated its bodies (:attr:`ChildMirror.
        plant_bodies <poise.controller.realtime.mirror.ChildMirror.plant_bodies>`), made
        here once per estimate (:func:`~poise.models.planar_tree.with_bodies`); None: plan
        on the model."""
        bodies = self._mirror.plant_bodies
        if bodies is None:
            return None
        if self._plant_made[0] is not bodies:
            from poise.models.planar_tree import with_bodies

            masses, stiffness = bodies
            self._plant_made = (bodies, with_bodies(
                self._model, masses, stiffness=stiffness,  # type: ignore[arg-type]
                source="<estimated plant>"))
        return self._plant_made[1]

    def plan_aim(self, aim: np.ndarray) -> TargetPlan | None:
        """A stall's re-plan for the child (:mod:`poise.controller.replan`, in the
        re-planner's thread): ``aim`` planned from the newest cycle record's q̄ and q and the
        current plan's goal, its move from q̄ chosen here with this process's steppers
        (:meth:`MotionPlanner.replan <poise.motion.motion_planner.MotionPlanner.replan>`,
        as the in-process service's ``CommandRoom.plan_aim``); None unless the loop runs
        and the child reported its limits.

        Raises:
            UnstableTarget, ParamError: no stable held configuration, a gain refused there.
        """
        mirror = self._mirror
        s, limits = mirror._last_sample, mirror._limits
        if mirror.state != State.RUNNING or s is None or limits is None:
            return None
        state = self._state(s)
        planner = self._motion()
        planner.limits, planner.stepper_factory = limits, self._steppers()
        plan, move = planner.replan(np.asarray(aim, dtype=float), state)
        return move.plan if move is not None else plan

    def _trajectory(self, value: object, q_bar: np.ndarray) -> TrajectoryRun | ParamError | None:
        """A trajectory's waypoints checked and shaped here from the newest q̄
        (:func:`~poise.motion.live.prepare_trajectory`: Algorithm 1 along the whole path,
        0.1–0.3 s for 20 s of it), not beside the loop; the child follows what it is handed.
        Refused: the :class:`ParamError` the child answers with. None before the child
        reported its limits (the child checks it itself)."""
        from poise.motion.live import prepare_trajectory
        from poise.motion.params import ParamError
        from poise.motion.trajectory import Trajectory, TrajectoryError

        limits = self._mirror._limits
        if limits is None:
            return None
        cfg = self._config
        try:
            trajectory = Trajectory.from_payload(value, self._model.task_dim)
            return prepare_trajectory(self._model, trajectory, q_bar, limits,
                                      period=1.0 / cfg.loop.rate,
                                      tolerance=cfg.algorithm.tolerance, delay=1,
                                      shaper=cfg.loop.shaper)
        except TrajectoryError as exc:
            return ParamError(f"trajectory refused: {exc}")

    def answered(self, prepared: object, response: CommandResponse) -> None:
        """The child's answer to a target handed over as ``prepared``: a quick plan it
        accepted (and adopted) is refined here from now on, with the parameters it reported
        with the answer."""
        if not isinstance(prepared, QuickTarget):
            return
        with self._quick_lock:
            state = self._quick.pop(prepared.serial, None)
        if state is not None and response.accepted:
            self.refiner.submit(prepared.plan, replace(state, params=self._mirror.params),
                                prepared.serial)

    def _refining(self) -> MotionPlanner:
        """The planner a refinement runs with: the child's limits, this process's compiled
        steppers."""
        planner = self._motion()
        planner.limits, planner.stepper_factory = self._mirror._limits, self._steppers()
        return planner

    def _refined(self, job: RefineJob, outcome: Move | Exception, seconds: float) -> None:
        """A refinement to the child (in the worker thread; it applies it only to the plan
        it still runs)."""
        if isinstance(outcome, Exception):
            self._tell(PlanRefined(job.serial, None, None, seconds,
                                   f"{type(outcome).__name__}: {outcome}"))
        else:
            self._tell(PlanRefined(job.serial, outcome.plan.loop, outcome.plan.reference,
                                   seconds))

    def on_plan(self, msg: PlanChanged) -> None:
        """Once the child has a plan with a goal: load what planning here needs in a thread
        (once; see :meth:`_warm`)."""
        if self.warmer is None and msg.goal is not None:
            self.warmer = threading.Thread(target=self._warm,
                                           args=(np.asarray(msg.goal, dtype=float),),
                                           name="poise-plan-warm", daemon=True)
            self.warmer.start()

    def _motion(self) -> MotionPlanner:
        """The :class:`~poise.motion.motion_planner.MotionPlanner` of this run (made once)."""
        if self._planner is None:
            from poise.motion.motion_planner import MotionPlanner
            from poise.motion.options import MotionOptions

            self._planner = MotionPlanner(self._model, None,  # type: ignore[arg-type]
                                          MotionOptions.from_config(self._config, delay=1))
        return self._planner

    def _move(self, plan: TargetPlan, state: MotionState) -> TargetPlan:
        """``plan`` with its move from q̄ chosen on the model and the predicted response
        feedback follows after it (:meth:`MotionPlanner.move
        <poise.motion.motion_planner.MotionPlanner.move>`), computed here (with this
        process's own compiled steppers, loaded at the first use) rather than beside the
        loop; ``plan`` itself before the child reported its limits or when the parameters at
        the target are refused (the child refuses them too)."""
        from poise.motion.params import ParamError

        limits = self._mirror._limits
        if limits is None:
            return plan
        planner = self._motion()
        planner.limits, planner.stepper_factory = limits, self._steppers()
        try:
            return planner.move(plan, state).plan
        except ParamError:
            return plan

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
        from poise.motion.motion_planner import MotionState

        with contextlib.suppress(Exception):
            self._steppers()
            self._motion().target_plan(np.asarray(self._model.fk(q_goal), dtype=float),
                                      MotionState(self._mirror.params, goal=q_goal))
            self.warm = True


__all__ = ["ParentPlanner"]
