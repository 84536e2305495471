"""What feedback tracks after a move: the model's own response to it (two-degree-of-freedom).

A move to a new target excites the structure: a soft arm or the dancer still sways for several
seconds after its actuators arrive, and in feedback mode the IK integrates the measured task
error, sway included. A decaying sway of amplitude ``A`` at ``ω`` leaves an offset of order
``Γ A / ω`` in q̄a that decays only at the integrator's pole ``1/Γ`` (6 s on the dancer at its
automatic gain, longer than the sway itself), so feedback settled later than feedforward after
every large move (docs/controller.md).

Feedback is there for what the model does not know (calibration, loads), not for the response
the model predicts. So the loop is two-degree-of-freedom: the move is feedforward, and after it
the IK's feedback error is measured against the *model's predicted response* to the same move,
``e = x_ref(t) − h(q)`` with ``x_ref(t) = h(q_model(t))``, not against the fixed target:

* with an exact model the arm follows ``x_ref`` and the integrator sees nothing to integrate:
  feedback settles exactly as feedforward does;
* with a wrong model it integrates the difference between what the arm does and what the model
  predicted: the static error (what feedback is for) and the part of the sway the model got
  wrong; ``x_ref`` ends at the target, and past its end the error is ``x* − h(q)`` as before;
* the reference is a signal from outside the loop, so the closed loop's stability (its bound,
  :mod:`poise.motion.stability`) is unchanged.

:func:`predicted_response` computes ``x_ref`` off the loop, when a target is planned: the
controller's own model (its dynamics, with the actuators' position loop as
:class:`~poise.motion.stability.LoopLinearisation` assumes it) driven by the same control
step in feedforward mode, from rest at the current q̄, one row per loop period from the move's
first cycle until the predicted response has settled. :class:`ControlStep
<poise.motion.step.ControlStep>` follows it (:meth:`~poise.motion.step.ControlStep.follow`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from poise.api.rules import MODE_CHANGE
from poise.models.actuation import join, split
from poise.models.base import FloatArray, MechanicalModel
from poise.motion.dwell import dwell_move
from poise.motion.options import MotionOptions, RunSettings
from poise.motion.sway import fitted_sway, move_shaper, sway_settle

if TYPE_CHECKING:
    from poise.motion.params import LiveParams
    from poise.motion.planner import TargetPlan
    from poise.motion.safety import SafetyLimits
    from poise.motion.step import StepOutput
    from poise.motion.stepper import Stepper

#: The predicted response counts as settled when it stays this close to its end for
#: :data:`SETTLED_PERIODS` periods of the slowest structural mode [fraction of the tolerance].
SETTLED_FRACTION = 0.05
SETTLED_PERIODS = 1.0
#: :func:`choose_move` compares candidates settled this far (the same periods): where it
#: enters the tolerance for good is known long before the response has settled as far as a
#: reference needs, and only the chosen one runs on.
CHOOSING_FRACTION = 0.5
#: A candidate still swaying after its move is given up as soon as its sway could not fit
#: in the tolerance by the best settling time so far, even decaying this many times faster
#: than the fastest structural mode at the goal.
DECAY_MARGIN = 2.0
#: ... checked this many times per period of the slowest structural mode.
CHECKS_PER_PERIOD = 4
#: The moves :func:`choose_move` tries on the model: these shapers of the slowest mode, each
#: at these fractions of the allowed speed.
MOVE_SHAPERS = ("zvdd", "zvd", "zv")
MOVE_SPEEDS = (1.0, 0.7, 0.5)
#: Where the arm's equilibrium moves unevenly along the line, each shaper also slowed where
#: it moves fast (:func:`~poise.motion.warp.equilibrium_warp`), its equilibrium never
#: faster than these fractions of its mean speed along the line ...
MOVE_WARPS = (0.7, 0.5)
#: ... at these fractions of the allowed speed.
WARP_SPEEDS = (1.0, 0.7)
#: A move chosen on the model overshoots no more than the plan's own or this fraction of the
#: distance moved.
OVERSHOOT = 0.05
#: Longest reference: the move plus this many periods of the slowest structural mode, and
#: never more than :data:`MAX_SECONDS`.
MAX_PERIODS = 20.0
MAX_SECONDS = 120.0


def wants_reference(model: MechanicalModel, plan: TargetPlan) -> bool:
    """Whether a plan's move leaves anything to predict: a move (the plan approaches its
    goal) on a robot with structural modes (``n > m``: passive coordinates that sway)."""
    return bool(plan.approach and plan.qa_goal is not None and model.n > model.m)


def predicts(model: MechanicalModel, options: MotionOptions | RunSettings) -> bool:
    """Whether plans of this run predict the model's response (:func:`choose_move`,
    :func:`with_reference`): a robot with structural modes and ``follow_model`` or
    ``choose_move`` on (:class:`~poise.motion.options.MotionOptions`; a configuration is
    read as :meth:`~poise.motion.options.MotionOptions.from_config` does)."""
    o = MotionOptions.of(options)
    return model.n > model.m and (o.follow_model or o.choose_move)


def plant_rest(model: MechanicalModel, plant: MechanicalModel, q: FloatArray
               ) -> FloatArray | None:
    """Where ``plant`` rests held at the actuators of the model's configuration ``q`` (n,)
    (its passive coordinates solved from ``q``'s); None where it holds no stable rest
    there."""
    from poise.ik.statics import solve_statics

    qa, qu = split(model, np.asarray(q, dtype=float))
    sol = solve_statics(plant, qa, qu)
    return join(plant, qa, sol.qu) if sol.converged and sol.stable else None


class Prediction:
    """The model's response to one plan's move, simulated on demand (:meth:`run`) and
    resumable: :func:`choose_move` runs every candidate only until it is settled enough to
    compare (:data:`CHOOSING_FRACTION`), then only the chosen one on to the reference's
    stricter :data:`SETTLED_FRACTION`.

    The same control step as the loop's (limits, shaper, effort feed-forward, the stepper of
    ``params.algorithm`` from ``stepper_factory``) runs in feedforward mode against the
    model's dynamics with the devices' default position loop
    (:class:`~poise.sim.simulator.Simulator`), from rest at ``q_bar``, in simulated time;
    nothing here touches the live loop. Row ``i`` of :attr:`rows` is ``h(q)`` at the sample
    of the move's cycle ``i`` (0: the cycle that starts the move) [task units].

    ``plant``: the body that moves, when the robot is known to differ from the model (its
    masses as its held efforts show them, :mod:`poise.motion.masses`): the same control
    step, still on the model, drives ``plant``'s dynamics from where it rests at q̄'s
    actuators (:func:`plant_rest`); the rows are still the model's task at its ``q`` (what
    the loop measures), and the response ends at :attr:`goal`, the model's task where it
    rests at the plan's actuator goal, not at the plan's ``target``; after the move the IK
    holds the model at the plan's ``target`` (its aim), as feedback then does.

    Raises:
        ValueError: ``plant`` holds no stable rest at q̄'s or the goal's actuators.
    """

    def __init__(self, model: MechanicalModel, plan: TargetPlan, q_bar: FloatArray,
                 params: LiveParams, *, period: float, limits: SafetyLimits,
                 effort_feedforward: bool, shaper: str,
                 stepper_factory: Callable[[str, MechanicalModel], Stepper],
                 compiled: bool = True, plant: MechanicalModel | None = None) -> None:
        from poise.motion.step import ControlStep
        from poise.sim.simulator import Simulator

        slow = plan.loop.slowest_mode() if plan.loop is not None else None
        slow_period = slow.period if slow is not None and math.isfinite(slow.period) else 1.0
        modes = plan.loop.structural_modes() if plan.loop is not None else []
        self.plan, self.period = plan, period
        #: One period of the slowest structural mode [cycles]: how long a settled response
        #: stays quiet, and the window its sway is measured over.
        self._window = max(1, math.ceil(SETTLED_PERIODS * slow_period / period))
        self._check = max(1, self._window // CHECKS_PER_PERIOD)
        self._max_after_move = MAX_PERIODS * slow_period
        #: The fastest the sway could decay [1/s] (:data:`DECAY_MARGIN`); 0: no bound.
        self._decay = DECAY_MARGIN * max((mode.decay_rate for mode in modes), default=0.0)
        #: Half a period of the slowest mode [s]: a sway within the tolerance at some time
        #: may still peak outside it until then.
        self._half_period = 0.5 * slow_period
        step = ControlStep(model, limits, period, effort_feedforward=effort_feedforward,
                           stepper_factory=stepper_factory, delay=0, shaper=shaper)
        step.reset(np.asarray(q_bar, dtype=float), params.algorithm)
        stepper = step.stepper
        assert stepper is not None
        #: Where the simulated body rests at the plan's actuator goal (n,), and the model's
        #: task there [task units]: the plan's goal and target on the model.
        self.q_rest = np.asarray(plan.q_goal if plan.q_goal is not None else stepper.q_bar,
                                 dtype=float)
        self.goal = np.asarray(plan.target, dtype=float)
        q0 = stepper.q_bar
        if plant is not None:
            start, rest = plant_rest(model, plant, q0), plant_rest(model, plant, self.q_rest)
            if start is None or rest is None:
                raise ValueError(f"{plant.name}: no stable rest at the move's ends")
            q0, self.q_rest = start, rest
            self.goal = np.asarray(model.fk(rest), dtype=float)
        #: What the model's task at the simulated body's rest is beyond the model's own.
        self._offset = self.goal - np.asarray(plan.target, dtype=float) \
            if plant is not None else None
        self._sim = Simulator(plant if plant is not None else model, q0=q0,
                              compiled=compiled)  # at rest, held
        self._sim.set_mode("position")
        self._sim.command(stepper.qa, stepper.tau if effort_feedforward else None)
        step.adopt(plan)
        # on the plant, the IK holds the model at the plan's aim after the move (as the loop
        # does, aiming at the model's task where the plant rests), not at the live target
        self._step, self._ff = step, replace(params, mode="ff") if plant is None else \
            replace(params, mode="ff", target=np.asarray(plan.target, dtype=float))
        self._rows: list[FloatArray] = []
        self._limit: float | None = None
        self._move_end: int | None = None  # the first row after the move (:meth:`_cycle`)

    @property
    def rows(self) -> FloatArray:
        """The response so far (rows, task_dim)."""
        return np.array(self._rows)

    def run(self, tolerance: float, fraction: float = SETTLED_FRACTION,
            give_up: float | None = None) -> bool:
        """Simulate on until, after the move, the response has stayed within ``fraction``
        of ``tolerance`` [task units] of the model's equilibrium ``h(q̄)`` for
        :data:`SETTLED_PERIODS` periods of the slowest structural mode, at most the move
        plus :data:`MAX_PERIODS` periods (:data:`MAX_SECONDS`); then True.

        ``give_up`` [s from the move's start]: stop and return False as soon as the response
        cannot be within ``tolerance`` of the target for good by then: it is still farther
        at that time, or its sway over the last such period could not decay into the
        tolerance by then (by its next peak, half a period later) even :data:`DECAY_MARGIN`
        times faster than the fastest structural mode at the goal (:meth:`_cannot_settle`,
        :data:`CHECKS_PER_PERIOD` times a period)."""
        step, period, rows = self._step, self.period, self._rows
        tol, target, window = fraction * float(tolerance), self.goal, self._window
        offset = self._offset
        quiet = 0
        while True:
            out = self._cycle()
            x = out.x_meas
            if step.goal is None:  # the move is over: wait for the response to settle
                rest = out.x_used if offset is None else out.x_used + offset
                quiet = quiet + 1 if math.dist(x, rest) <= tol else 0
                if quiet >= window:
                    return True
                past = len(rows) - (self._move_end or 0)
                if give_up is not None and past >= window and past % self._check == 0 and \
                        self._cannot_settle(tolerance, give_up):
                    return False
            if self._limit is not None and len(rows) * period >= self._limit:
                return True
            if give_up is not None and len(rows) * period > give_up and \
                    math.dist(x, target) > tolerance:
                return False

    def run_move(self, after: float) -> None:
        """Simulate on until ``after`` [s] past the end of the commanded move."""
        while self._move_end is None or \
                (len(self._rows) - self._move_end) * self.period < after:
            self._cycle()

    @property
    def move_end_s(self) -> float:
        """When the commanded move ended [s from its first row] (the rows so far while it
        runs)."""
        end = self._move_end if self._move_end is not None else len(self._rows)
        return end * self.period

    @property
    def state(self) -> tuple[FloatArray, FloatArray]:
        """The model's ``(q, q̇)`` now [(n,), (n,)]."""
        return self._sim.q.copy(), self._sim.qd.copy()

    def _cycle(self) -> StepOutput:
        """One loop period: the model moves, the control step answers its sample (a row)."""
        sim, step = self._sim, self._step
        sim.step(self.period)
        out = step.update(sim.q, self._ff)
        self._rows.append(out.x_meas)  # h(q) of this sample, computed by the cycle
        sim.command(out.qa, out.tau)
        step.look_ahead()
        if self._limit is None and step.move is not None:
            self._limit = min(MAX_SECONDS, step.move.duration + self._max_after_move)
        if self._move_end is None and step.goal is None:
            self._move_end = len(self._rows)
        return out

    def _cannot_settle(self, tolerance: float, by: float) -> bool:
        """Whether the largest sway [task units] from the target over the last
        :attr:`_window` rows, decaying from the window's start at the fastest rate it could
        (:attr:`_decay`), would still exceed ``tolerance`` half a period of the slowest mode
        after ``by`` [s]: a sway whose bound still exceeds the tolerance at ``by`` may
        already stay within it from then on, its next peak coming up to half a period later
        (the dancer's crossing, straight: 2.2 mm over the window that starts 0.1 s before
        it enters the 2 mm band for good)."""
        if self._decay <= 0.0:
            return False
        recent = np.array(self._rows[-self._window:])
        sway = float(np.max(np.linalg.norm(recent - self.goal, axis=1)))
        start = (len(self._rows) - self._window) * self.period
        ahead = max(0.0, by + self._half_period - start)
        return sway * math.exp(-self._decay * ahead) > tolerance


def predicted_response(model: MechanicalModel, plan: TargetPlan, q_bar: FloatArray,
                       params: LiveParams, *, tolerance: float, period: float,
                       limits: SafetyLimits, effort_feedforward: bool, shaper: str,
                       stepper_factory: Callable[[str, MechanicalModel], Stepper],
                       compiled: bool = True, give_up: float | None = None
                       ) -> FloatArray | None:
    """The model's task response ``x_ref`` (rows, task_dim) to ``plan``'s move from rest at
    ``q_bar`` (:class:`Prediction`), until it has settled within :data:`SETTLED_FRACTION`
    of ``tolerance`` [task units]; ``None`` when :func:`wants_reference` says there is
    nothing to predict, or when ``give_up`` [s] gave it up (:meth:`Prediction.run`)."""
    if not wants_reference(model, plan):
        return None
    prediction = Prediction(model, plan, q_bar, params, period=period, limits=limits,
                            effort_feedforward=effort_feedforward, shaper=shaper,
                            stepper_factory=stepper_factory, compiled=compiled)
    return prediction.rows if prediction.run(tolerance, give_up=give_up) else None


def settle_time(rows: FloatArray, target: FloatArray, tolerance: float, period: float
                ) -> float:
    """When a response (rows, one per ``period``) is within ``tolerance`` of ``target``
    for good [s from its first row]."""
    outside = np.nonzero(np.linalg.norm(rows - np.asarray(target), axis=1) > tolerance)[0]
    return float(outside[-1] + 1) * period if outside.size else 0.0


def overshoot(rows: FloatArray, target: FloatArray) -> float:
    """The largest excursion of a response past ``target`` along the direction from its
    first row to the target, as a fraction of that distance (0 for no move)."""
    target = np.asarray(target, dtype=float)
    direction = target - rows[0]
    distance = float(np.linalg.norm(direction))
    if distance == 0.0:
        return 0.0
    return max(0.0, float(np.max((rows - target) @ direction))) / distance ** 2


def shapers_fall_short(model: MechanicalModel, plan: TargetPlan, q_bar: FloatArray) -> bool:
    """Whether the shapers designed at the ends of ``plan``'s move from ``q_bar`` may leave
    the arm ringing, so that :func:`choose_move` chooses its move on the model: the slowest
    structural mode at the start or the goal is lightly damped (``ζ <``
    :data:`~poise.motion.shaping.ZETA_SHAPED`: the soft arms ring long after a move), or
    its frequency at one end differs from the other's by more than :data:`MODE_CHANGE` (the
    dancer leaning towards upright, 1.35 → 0.82 rad/s at ζ 0.2–0.3: its ZVDD-shaped move
    left the ankle swinging by 0.05 rad and settled after 24 s, 3 T = 23 s; the move chosen
    on the model after 13 s)."""
    from poise.motion.shaping import ZETA_SHAPED
    from poise.motion.stability import structural_modes

    if plan.loop is None:
        return False
    goal = plan.loop.structural_modes()[:1]
    start = structural_modes(model, np.asarray(q_bar, dtype=float), plan.loop.actuators)[:1]
    if any(mode.zeta < ZETA_SHAPED for mode in goal + start):
        return True
    return bool(goal and start) and not (
        1.0 / (1.0 + MODE_CHANGE) <= start[0].omega / goal[0].omega <= 1.0 + MODE_CHANGE)


def move_candidates(model: MechanicalModel, plan: TargetPlan, q_bar: FloatArray
                    ) -> list[TargetPlan]:
    """``plan`` and its variants :func:`choose_move` tries: each shaper of
    :data:`MOVE_SHAPERS` on the slowest modes at both ends, at each speed of
    :data:`MOVE_SPEEDS`; where the equilibrium moves unevenly along the line, each shaper
    warped by each cap of :data:`MOVE_WARPS` at each speed of :data:`WARP_SPEEDS`, tried
    before the straight ones (they settle first where they apply, and the others are then
    given up sooner). ``plan`` first: it wins ties."""
    from poise.motion.shaping import shaper_for
    from poise.motion.stability import structural_modes
    from poise.motion.warp import equilibrium_path, path_warp

    assert plan.loop is not None and plan.qa_goal is not None
    q_bar = np.asarray(q_bar, dtype=float)
    goal_modes = plan.structural_modes()  # the plant's where the plan is aimed for it
    start_modes = structural_modes(model, q_bar, plan.loop.actuators)
    path = equilibrium_path(model, q_bar, plan.qa_goal)
    warps = [path_warp(path, cap) for cap in MOVE_WARPS] if path is not None else []
    variants = [(warp, WARP_SPEEDS) for warp in warps if warp is not None] + [
        (None, MOVE_SPEEDS)]
    out = [plan]
    for warp, speeds in variants:
        for kind in MOVE_SHAPERS:
            shaper, start = shaper_for(goal_modes, kind), shaper_for(start_modes, kind)
            for speed in speeds:
                candidate = replace(plan, shaper=shaper, start_shaper=start, speed=speed,
                                    warp=warp)
                if all(candidate != c for c in out):
                    out.append(candidate)
    return out


def straight_line(plan: TargetPlan) -> TargetPlan:
    """``plan``'s move as a straight line at the allowed speed, unshaped."""
    from poise.motion.shaping import Shaper

    return replace(plan, shaper=Shaper(), start_shaper=Shaper(), speed=1.0, warp=None)


def line_time(plan: TargetPlan, q_bar: FloatArray, model: MechanicalModel,
              limits: SafetyLimits) -> float:
    """How long ``plan``'s straight line from ``q_bar`` lasts at the allowed speed, unshaped
    [s] (:func:`~poise.motion.planner.approach_move`)."""
    from poise.motion.planner import approach_move

    qa = split(model, np.asarray(q_bar, dtype=float))[0]
    return approach_move(straight_line(plan), qa, limits.qa_min, limits.qa_max,
                         limits.qa_rate).move_time


def unshaped_sway(plan: TargetPlan, straight: Prediction, period: float) -> float | None:
    """How much ``plan``'s move excites the slowest structural mode at its goal [task
    units]: the model's sway there after the straight line unshaped (``straight``, its
    :class:`Prediction`), fitted over one damped period from the end of the move
    (:func:`~poise.motion.sway.fitted_sway`); None without such a mode."""
    slow = plan.loop.slowest_mode() if plan.loop is not None else None
    if slow is None or not math.isfinite(slow.period) or slow.damped_omega <= 0:
        return None
    window = slow.damped_period
    straight.run_move(window)
    rows = np.asarray(straight.rows)
    start = round(straight.move_end_s / period)
    after = rows[start:start + max(8, math.ceil(window / period))]
    return fitted_sway(after - straight.goal, period, slow) if len(after) >= 8 \
        else None


def choose_move(plan: TargetPlan, q_bar: FloatArray | None, params: LiveParams,
                options: MotionOptions | RunSettings, model: MechanicalModel,
                limits: SafetyLimits,
                stepper_factory: Callable[[str, MechanicalModel], Stepper], *,
                detuning: float = 0.0, plant: MechanicalModel | None = None) -> TargetPlan:
    """``plan`` with the move that settles first on the model and, in ``fb`` with
    ``follow_model``, that move's predicted response as its reference.

    ``plant``: the robot as its held efforts show it, for a plan aimed for it
    (:func:`~poise.motion.planner.for_plant`): the candidates are simulated on it instead
    (:class:`Prediction`'s ``plant``), and the one that brings *it* to rest first is kept.
    Chosen on the model, whose masses are off, a move that settles the model at once left the
    plant swaying for 10 s (the dancer on ``mixed15``), or crept to the target over 8–13 s
    where the model's transient to the aim is slow. None, or where ``plant`` does not rest
    stably at the move's ends: the model.

    ``detuning``: how far the plant's modes are from the model's, as its sway after earlier
    moves showed (:class:`~poise.motion.sway.MoveSway`): each candidate's settling time is
    then the later of the model's and the time the sway its shaper leaves on a mode detuned
    that far takes to decay into the tolerance (:func:`~poise.motion.sway.sway_settle`; a ZV
    shaper, exact on the model, is fragile on a plant a few percent off). 0: the model's.

    ``options``: the run's :class:`~poise.motion.options.MotionOptions` (a configuration is
    read as :meth:`~poise.motion.options.MotionOptions.from_config` does; prefer
    :class:`~poise.motion.motion_planner.MotionPlanner`, which calls this).

    With ``choose_move`` where the shapers at the move's ends may leave the arm ringing
    (:func:`shapers_fall_short`), each of :func:`move_candidates`, with the dwell move
    solved on the model right after the plan's own
    (:func:`~poise.motion.dwell.dwell_move`, where there is one), runs through a
    :class:`Prediction` (pruned as soon as it cannot beat the best so far, and settled only
    as far as :data:`CHOOSING_FRACTION`: the chosen one alone runs on to its reference) and
    the one whose response enters the tolerance for good first is kept, among those that
    overshoot no more than the plan's own move or :data:`OVERSHOOT` of the distance: over a
    long move the arm's modes change, and no shaper designed at the ends cancels every sway,
    while a slower move excites less.
    Otherwise the plan's own move (:func:`with_reference`)."""
    o = MotionOptions.of(options)
    if not (o.choose_move and q_bar is not None and wants_reference(model, plan)
            and shapers_fall_short(model, plan, q_bar)):
        return with_reference(plan, q_bar, params, o, model, limits, stepper_factory)
    period, tol = o.period, o.tolerance

    if plant is not None and (plant_rest(model, plant, q_bar) is None or
                              plan.q_goal is None or
                              plant_rest(model, plant, plan.q_goal) is None):
        plant = None

    def predict(candidate: TargetPlan) -> Prediction:
        return Prediction(model, candidate, q_bar, params, period=period, limits=limits,
                          effort_feedforward=o.effort_feedforward, shaper=o.shaper,
                          stepper_factory=stepper_factory, compiled=o.compiled, plant=plant)

    # how much the move excites the slowest mode: the scale of the sway a shaper leaves on a
    # plant whose modes are off (fb measures it after the move, poise.motion.sway)
    excitation = unshaped_sway(plan, predict(straight_line(plan)), period) \
        if params.mode == "fb" else None
    candidates = move_candidates(model, plan, q_bar)
    tuned = dwell_move(model, plan, q_bar, predict, line_time(plan, q_bar, model, limits))
    if tuned is not None:
        candidates.insert(1, tuned)  # after the plan's own (ties), before the others
    best: tuple[float, TargetPlan, Prediction] | None = None
    allowed = OVERSHOOT
    for candidate in candidates:
        prediction = predict(candidate)
        if not prediction.run(tol, CHOOSING_FRACTION,
                              give_up=None if best is None else best[0]):
            continue
        rows, goal = prediction.rows, prediction.goal
        if best is None:  # the plan's own move: the overshoot it allows the others
            allowed = max(allowed, overshoot(rows, goal))
        elif overshoot(rows, goal) > allowed:
            continue
        settle = settle_time(rows, goal, tol, period)
        if detuning > 0.0 and candidate.loop is not None:
            slow = candidate.loop.slowest_mode()
            if slow is not None:
                settle = sway_settle(settle, prediction.move_end_s, excitation,
                                     move_shaper(candidate, slow), slow, detuning, tol)
        if best is None or settle < best[0]:
            best = (settle, candidate, prediction)
    assert best is not None  # the first candidate is never given up
    settle, chosen, prediction = best
    chosen = replace(chosen, unshaped_sway=excitation)
    if not (params.mode == "fb" and o.follow_model):
        return replace(chosen, reference=None, settle_s=settle_time(
            prediction.rows, prediction.goal, tol, period))
    prediction.run(tol)  # on to the reference's SETTLED_FRACTION
    rows = prediction.rows
    return replace(chosen, reference=rows,
                   settle_s=settle_time(rows, prediction.goal, tol, period))


def with_reference(plan: TargetPlan, q_bar: FloatArray | None, params: LiveParams,
                   options: MotionOptions | RunSettings, model: MechanicalModel,
                   limits: SafetyLimits,
                   stepper_factory: Callable[[str, MechanicalModel], Stepper]) -> TargetPlan:
    """``plan`` carrying the reference feedback follows after its move: in ``fb`` with
    ``follow_model``, the :func:`predicted_response` from ``q_bar`` (where the move starts)
    with ``params`` (the parameters at the new target); else ``plan`` itself.

    A plan aimed for the plant's springs (``serves`` set, :func:`~poise.motion.planner.
    for_springs`) gets the one row its feedback uses, the model's held value at its goal
    (its ``target``), without simulating the model: the plant does not follow the model's
    transient to the aim (:func:`poise.motion.motion_planner._static_reference`)."""
    o = MotionOptions.of(options)
    if (params.mode != "fb" or not o.follow_model or q_bar is None
            or not wants_reference(model, plan)):
        return plan
    if plan.serves is not None:
        return replace(plan, reference=np.array(plan.target, dtype=float)[None, :])
    rows = predicted_response(model, plan, q_bar, params, tolerance=o.tolerance,
                              period=o.period, limits=limits,
                              effort_feedforward=o.effort_feedforward, shaper=o.shaper,
                              stepper_factory=stepper_factory, compiled=o.compiled)
    if rows is None:
        return plan
    return replace(plan, reference=rows,
                   settle_s=settle_time(rows, plan.target, o.tolerance, o.period))


__all__ = [
    "CHECKS_PER_PERIOD",
    "CHOOSING_FRACTION",
    "DECAY_MARGIN",
    "MAX_PERIODS",
    "MAX_SECONDS",
    "MODE_CHANGE",
    "MOVE_SHAPERS",
    "MOVE_SPEEDS",
    "MOVE_WARPS",
    "OVERSHOOT",
    "SETTLED_FRACTION",
    "SETTLED_PERIODS",
    "WARP_SPEEDS",
    "Prediction",
    "choose_move",
    "line_time",
    "move_candidates",
    "overshoot",
    "predicted_response",
    "predicts",
    "settle_time",
    "shapers_fall_short",
    "wants_reference",
    "with_reference",
]
