"""One entry point from a target to the move the loop makes: :class:`MotionPlanner`.

Every place that takes a new target (the service's ``target`` and ``start`` commands, the
real-time process's parent, the simulated loop, tests) runs the same sequence::

    plan_target   the held configuration to go to, solved offline from several starts
                  (:func:`~poise.motion.planner.plan_target`; raises UnstableTarget)
      → with_plan the live parameters at the new target: automatic gains from the plan's
                  stability bound, explicit ones checked against it
                  (:func:`~poise.motion.params.with_plan`; raises ParamError)
      → choose_move the move from where it starts, chosen on the model, and the predicted
                  response feedback follows after it
                  (:func:`~poise.motion.reference.choose_move`)
      → adopt     the caller's: ``ControlStep.adopt(move.plan)`` and the new parameters made
                  live together (the service under its parameter lock)

API::

    planner = MotionPlanner(model, limits, MotionOptions.from_config(config),
                            stepper_factory)          # or MotionOptions(period, tolerance, …)
    state = MotionState(params, q_bar=q̄, q=q_measured, goal=last_plan.q_goal,
                        move_from=q̄)                  # or step.motion_state(params, q, …)
    move = planner.plan(target, state)                  # → Move(plan, params)
    step.adopt(move.plan); live_params = move.params

or in two halves, where the target's plan is made elsewhere or at another time:
``plan = planner.target_plan(target, state)`` then ``move = planner.move(plan, state)``.

A target received while the loop runs may be answered at once instead (the service's
``loop.live_targets``)::

    plan = planner.quick_plan(target, state)    # one solve from q̄, milliseconds; or None:
    step.adopt(plan)                            #   then plan(target, state) as above
    move = planner.refine(plan, state)          # later, in a worker thread: the parameters
    live_params = move.params                   #   at the target and the predicted response
    step.follow(plan, move.plan.reference)      #   of the move that has begun
``move_from`` None keeps the plan's own move (nothing chosen, no reference): the service
before the loop runs (start plans again), or a caller without a q̄ yet.

``limits`` and ``stepper_factory`` are plain attributes: the service sets them once the
device's limits and the compiled kernels are known.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from poise.ik.branch import check_lands
from poise.models.base import FloatArray, MechanicalModel
from poise.motion.options import MotionOptions
from poise.motion.params import LiveParams, with_plan
from poise.motion.planner import TargetPlan, plan_target, quick_target
from poise.motion.reference import choose_move, with_reference
from poise.motion.safety import SafetyLimits
from poise.motion.springs import scaled_plant
from poise.motion.stepper import Stepper, make_stepper


@dataclass(frozen=True)
class MotionState:
    """Where the robot is when a target is planned.

    Attributes:
        params: the live parameters now (their algorithm's bounds are computed ahead; the
            move's parameters derive from them). None: plan only (:meth:`target_plan`).
        q_bar: the IK's predicted configuration q̄ (n,), None before the loop first ran.
        q: the measured configuration (n,), None when unknown.
        goal: the last plan's held configuration (n,), None without one.
        move_from: where the move starts (q̄ while running; the measured q when the loop
            restarts from it); None: keep the plan's own move.
        detuning: how far the plant's modes are from the model's, as its sway after earlier
            moves showed [fraction of ω] (:mod:`poise.motion.sway`); a move chosen on the
            model allows for it (0: the model's modes).
        spring_scale: the plant's springs are ``1 +`` this × the model's, as where it rested
            showed (:mod:`poise.motion.springs`); not 0: plans are aimed where the model
            must go for such a plant to reach the target (:func:`~poise.motion.planner.
            for_springs`).
        plant: the plant as its held efforts showed it (:mod:`poise.motion.masses`), where
            they pin its task down: plans are aimed for it (:func:`~poise.motion.planner.
            for_plant`) in place of the spring scale. None: not known.
    """

    params: LiveParams | None = None
    q_bar: FloatArray | None = None
    q: FloatArray | None = None
    goal: FloatArray | None = None
    move_from: FloatArray | None = None
    detuning: float = 0.0
    spring_scale: float = 0.0
    plant: MechanicalModel | None = None

    @property
    def starts(self) -> list[FloatArray]:
        """The offline solves' starts: q̄, the measured q, the last goal (those known)."""
        return [s for s in (self.q_bar, self.q, self.goal) if s is not None]


@dataclass(frozen=True)
class Move:
    """What a target leads to.

    Attributes:
        plan: the target's plan with the chosen move and, in feedback, the predicted
            response it follows after the move (:attr:`TargetPlan.reference`).
        params: the live parameters at the target, gains within the plan's stability bound.
    """

    plan: TargetPlan
    params: LiveParams

    def note(self) -> str:
        """Why the target is unreachable ('' otherwise)."""
        return self.plan.note()


class MotionPlanner:
    """From a target to its :class:`Move` (see the module docstring).

    Args:
        model: the controller's statics model.
        limits: the safety limits (the move's speed and range).
        options: period, tolerance, delay, shaper and prediction switches.
        stepper_factory: the steppers the model predictions run (the loop's own).
    """

    def __init__(self, model: MechanicalModel, limits: SafetyLimits, options: MotionOptions,
                 stepper_factory: Callable[[str, MechanicalModel], Stepper] = make_stepper
                 ) -> None:
        self.model = model
        self.limits = limits
        self.options = options
        self.stepper_factory = stepper_factory

    def plan(self, target: FloatArray, state: MotionState) -> Move:
        """:meth:`target_plan` then :meth:`move`.

        Raises:
            UnstableTarget: the only held configuration reaching ``target`` is unstable.
            ParamError: an explicit gain at or above the bound at the new target.
        """
        return self.move(self.target_plan(target, state), state)

    def replan(self, aim: FloatArray, state: MotionState) -> tuple[TargetPlan, Move | None]:
        """A stalled target's re-plan (:mod:`poise.controller.replan`,
        :meth:`SimulatedLoop.replan_stall <poise.controller.simulate.SimulatedLoop.
        replan_stall>`): ``aim`` planned from ``state``, and its move (from
        ``state.move_from``) only where the plan reaches it; ``(plan, None)`` otherwise.

        The move must bring the model to the plan's goal: moved slowly from
        ``state.move_from``, the model may snap through a fold on the way, but where it comes
        to rest must be the goal (:func:`~poise.ik.branch.slow_move_end`). A re-plan serves a
        stalled target whose plant has already parted from the model; a move that leaves the
        model on another branch than the plant's feeds the plant its Jacobian from there (the
        dancer on ``real``: tipped over, 995 mm).

        Raises:
            UnstableTarget, ParamError: as :meth:`plan`.
            OffBranch: the move would not bring the model to the plan's goal.
        """
        # the aim is where the model must go already (the plant's offset measured in it)
        plan = self.target_plan(aim, replace(state, spring_scale=0.0, plant=None))
        if not plan.reachable or plan.qa_goal is None:
            return plan, None
        if state.move_from is not None and plan.q_goal is not None:
            check_lands(self.model, state.move_from, plan.q_goal)
        return plan, self.move(plan, state)

    def target_plan(self, target: FloatArray, state: MotionState) -> TargetPlan:
        """The plan of ``target`` from ``state``'s starts, the loop linearised at its goal
        (:func:`~poise.motion.planner.plan_target`); with ``state.params``, the bounds of
        their algorithm in both modes computed ahead.

        Raises:
            UnstableTarget: the only held configuration reaching ``target`` is unstable.
        """
        o, lim = self.options, self.limits
        return plan_target(self.model, np.asarray(target, dtype=float), state.starts,
                           o.tolerance, period=o.period, delay=o.delay,
                           effort_feedforward=o.effort_feedforward, params=state.params,
                           shaper=o.shaper, uncertainty=o.gain_uncertainty,
                           spring_scale=state.spring_scale, plant=state.plant,
                           qa_min=None if lim is None else lim.qa_min,
                           qa_max=None if lim is None else lim.qa_max)

    def quick_plan(self, target: FloatArray, state: MotionState) -> TargetPlan | None:
        """The plan of ``target`` from one solve from ``state.q_bar``, with the loop
        linearised at its goal and the move's shapers, made in milliseconds
        (:func:`~poise.motion.planner.quick_target`; its goal within the model's and
        :attr:`limits`' actuator limits). None when that solve does not settle the target
        (unreachable and unstable targets among them) or there is no q̄ yet: plan it with
        :meth:`plan`. Its move is the plan's own (none chosen), its parameters are not made
        (:meth:`refine`)."""
        if state.q_bar is None:
            return None
        o, lim = self.options, self.limits
        return quick_target(self.model, np.asarray(target, dtype=float), state.q_bar,
                            o.tolerance, period=o.period, delay=o.delay,
                            effort_feedforward=o.effort_feedforward, shaper=o.shaper,
                            qa_min=None if lim is None else lim.qa_min,
                            qa_max=None if lim is None else lim.qa_max,
                            uncertainty=o.gain_uncertainty, spring_scale=state.spring_scale,
                            plant=state.plant)

    def refine(self, plan: TargetPlan, state: MotionState) -> Move:
        """What a quick plan (:meth:`quick_plan`) adopted at once still lacks, computed
        while its move runs: the parameters at its target (:func:`~poise.motion.params.
        with_plan`: the stability bound there, automatic gains from it) and, in ``fb`` with
        ``follow_model``, the model's predicted response to the plan's own move from
        ``state.move_from`` (:func:`~poise.motion.reference.with_reference`; none before
        the safety limits are known; for a plan aimed for the plant's springs, only its
        end, with no simulation).

        No move is chosen on the model here (:func:`~poise.motion.reference.choose_move`):
        once the quick plan's move has begun, a differently timed move could not start from
        where the arm is, and its prediction would not describe what the arm does.

        Raises:
            ParamError: an explicit gain at or above the bound at the new target.
        """
        params = _params_at(plan, state, "refine")
        if self.limits is not None:
            plan = with_reference(plan, state.move_from, params, self.options, self.model,
                                  self.limits, self.stepper_factory)
        return Move(_static_reference(plan), params)

    def move(self, plan: TargetPlan, state: MotionState) -> Move:
        """``plan`` made a move: the parameters at its target
        (:func:`~poise.motion.params.with_plan`), then its move from ``state.move_from``
        chosen on the model with them (:func:`~poise.motion.reference.choose_move`; none
        chosen without ``move_from``). A plan aimed for the plant its held efforts show
        (``task_bias`` set, :func:`~poise.motion.planner.for_plant`) has its move chosen by
        simulating that plant (``state.plant``) instead of the model. So has a plan aimed
        for the plant's springs far from its target (its ``plant_modes`` set,
        :func:`~poise.motion.planner.for_springs`, :data:`~poise.motion.planner.AIM_NEAR`),
        on the model with its springs scaled (:func:`~poise.motion.springs.scaled_plant`):
        the model's transient to such an aim (the dancer's: 4–25 cm off) is not the
        plant's, and the plan's own move, shaped for the plant's modes at its end only, left
        the dancer on ``stiff10`` swaying ±10 cm after a 1.5 m lean (settle p50 10–15 s
        against 3.3–3.8 s so chosen). Where the model cannot be so rebuilt, such a plan
        keeps its own move.

        Raises:
            ParamError: an explicit gain at or above the bound at the new target.
        """
        params = _params_at(plan, state, "move")
        if state.move_from is None:
            return Move(_static_reference(plan), params)
        if plan.plant_modes is not None and plan.task_bias is None:  # aimed for the springs
            springs = scaled_plant(self.model, state.spring_scale)
            # its modes are the plant's, detuned as the sway showed: no detuning on top
            plan = with_reference(plan, state.move_from, params, self.options, self.model,
                                  self.limits, self.stepper_factory) if springs is None else \
                choose_move(plan, state.move_from, params, self.options, self.model,
                            self.limits, self.stepper_factory, plant=springs)
        else:
            plant = state.plant if plan.task_bias is not None else None
            plan = choose_move(plan, state.move_from, params, self.options, self.model,
                               self.limits, self.stepper_factory, detuning=state.detuning,
                               plant=plant)
        return Move(_static_reference(plan), params)


def _static_reference(plan: TargetPlan) -> TargetPlan:
    """A plan aimed for the plant's springs (``serves`` set, :func:`~poise.motion.planner.
    for_springs`) keeps of the model's predicted response only its end: the plant, stiffer or
    softer than the model, does not follow the model's transient to the aim (the dancer's
    model, near the edge of its stability there, was still 6 cm from its end 4 s after the
    move while the plant stood on the target, and feedback following it pulled the plant
    off). Feedback aims at the target after the move, and the corrections measure against it."""
    if plan.serves is None or plan.reference is None or len(plan.reference) <= 1:
        return plan
    return replace(plan, reference=plan.reference[-1:])


def _params_at(plan: TargetPlan, state: MotionState, method: str) -> LiveParams:
    """``state``'s live parameters at ``plan``'s target (:func:`~poise.motion.params.
    with_plan`).

    Raises:
        ValueError: ``state`` has none (``method`` is named).
        ParamError: an explicit gain at or above the bound at the new target.
    """
    if state.params is None:
        raise ValueError(f"MotionPlanner.{method}: the state has no live parameters")
    return with_plan(state.params, plan)


__all__ = ["MotionPlanner", "MotionState", "Move"]
