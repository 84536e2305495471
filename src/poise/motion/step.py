"""The control cycle's logic as a pure object: measured q + live parameters → setpoint.

:class:`ControlStep` holds the IK stepper (Algorithm 1 / 2 / plain, see
:mod:`poise.motion.stepper`), the safety limits and the approach goal of the current target
plan (:mod:`poise.motion.planner`). One call of :meth:`ControlStep.update` per cycle::

    IK update of q̄a (ff: error from h(q̄), fb: from the measured h(q))
      → approach: to a new plan's goal first, a rate-limited line input-shaped on the
        structural modes (:mod:`poise.motion.shaping`), replacing the IK's update;
        else in fb, anti-windup (an actuator that cannot follow stops integrating away)
      → safety layer (rate and position limits, NaN guard)
      → q̄ made consistent with the setpoint; τ_ff = G_a(q̄)

No I/O, no clock, no threads: the service (:mod:`poise.controller.cycle`) feeds it samples from
the device and writes what it returns; tests feed it an in-process plant in simulated time
(ros2_control's ``read → update → write`` against mock hardware).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from poise.api.rules import HELD_ALGORITHMS
from poise.models.actuation import join, split
from poise.models.base import FloatArray, MechanicalModel
from poise.motion.balance import BalanceController, balances
from poise.motion.balance_hold import BalanceHold, pinned_down
from poise.motion.motion_planner import MotionPlanner, MotionState
from poise.motion.options import MotionOptions
from poise.motion.params import LiveParams
from poise.motion.planner import TargetPlan, approach_move, approach_speed
from poise.motion.plantmap import SpringsErrorMap
from poise.motion.retarget import BIAS_FOLLOW_S, BIAS_SIGMA, End, Retargeting
from poise.motion.ringwatch import RingWatch
from poise.motion.safety import SafetyLimits, all_finite, limit_setpoint
from poise.motion.shaping import ShapedMove
from poise.motion.stability import ALGORITHM_GAINS
from poise.motion.stepper import Stepper, make_stepper
from poise.motion.streaming import LEAD_GAIN, Following
from poise.motion.sway import MoveSway

if TYPE_CHECKING:
    from poise.kernels.packed import PackedModel
    from poise.kernels.warmup import WarmUpReport
    from poise.kernels.wire import WireBuffers


def stepper_factory(model: MechanicalModel, compiled: bool = True, *, dynamics: bool = False
                    ) -> tuple[Callable[[str, MechanicalModel], Stepper], WarmUpReport | None]:
    """The stepper factory of a run and the kernels' warm-up report.

    With ``compiled`` and a model family that has kernels, the kernels are compiled (or
    loaded from Numba's cache) here, once, so that no cycle ever compiles; the factory then
    makes compiled steppers (:mod:`poise.motion.compiled_steppers`). Otherwise: the numpy reference
    steppers and no report. ``dynamics``: also the simulator's right-hand side.
    """
    packed = kernel_pack(model, compiled)
    if packed is None:
        return make_stepper, None
    from poise.kernels import warm_up

    # ControlStep runs the one-call cycle; the balance controller commits its setpoints
    # through the step-by-step commit (loaded from the cache at its first cycle: 36 ms)
    report = warm_up(packed, dynamics=dynamics, stepwise=balances(model))
    return compiled_factory(model, packed), report


def kernel_pack(model: MechanicalModel, compiled: bool = True) -> PackedModel | None:
    """``model`` packed for the kernels (:func:`poise.kernels.pack`) when ``compiled`` and
    its family has kernels; else None (the numpy reference steppers)."""
    if not compiled:
        return None
    from poise.kernels import has_kernels, pack

    return pack(model) if has_kernels(model) else None


def compiled_factory(model: MechanicalModel, packed: PackedModel
                     ) -> Callable[[str, MechanicalModel], Stepper]:
    """A stepper factory making compiled steppers for ``model`` (``packed``; its kernels
    warmed up first) and the numpy reference for any other model (a calibration's)."""
    from poise.motion.compiled_steppers import make_compiled_stepper

    def make(name: str, m: MechanicalModel) -> Stepper:
        if m is not model:  # a model replaced since (a calibration): the reference
            return make_stepper(name, m)
        stepper = make_compiled_stepper(name, m, packed)
        return stepper if stepper is not None else make_stepper(name, m)  # type: ignore[return-value]

    return make


#: Anti-windup in feedback: an actuator lagging its setpoint by more than this fraction of its
#: range stops integrating away from where it is (:meth:`ControlStep._anti_windup`).
WINDUP_BAND = 0.05
#: In feedback at rest, Algorithm 2's ``q̄u`` farther than this from the measured unactuated
#: coordinates starts again from them (:meth:`ControlStep._rebranch`) [unactuated units].
REBRANCH = 1.0


class StepFault(RuntimeError):
    """The cycle produced something that must not reach the actuators; the message says what
    (the service holds the last setpoint and latches a fault)."""


class StepOutput(NamedTuple):
    """What one cycle decided (immutable; a NamedTuple: made every cycle).

    Attributes:
        qa: actuator setpoint q̄a (m,) [actuator units], after the safety layer.
        tau: effort feed-forward ``G_a(q̄)`` (m,), or None when it is not sent.
        x_used: the task value the error used (measured in fb, h(q̄) in ff).
        x_meas: h(q) of the measured q.
        q_bar: the predicted configuration q̄ (n,).
        residual: statics residual ‖G_u(q̄)‖ [N·m].
        switched_from: the algorithm this cycle switched from ('' if none).
    """

    qa: FloatArray
    tau: FloatArray | None
    x_used: FloatArray
    x_meas: FloatArray
    q_bar: FloatArray
    residual: float
    switched_from: str = ""


class ControlStep:
    """One control cycle's computation (see the module docstring).

    Args:
        model: the controller's statics model.
        limits: the safety limits every setpoint passes.
        period: the loop period Δt [s] (the IK's integration step).
        effort_feedforward: send ``τ_ff = G_a(q̄)`` with the setpoint.
        stepper_factory: builds the IK stepper for an algorithm name.
        delay: the sensor-to-setpoint delay [whole periods] the plans' stability analysis
            assumes (:func:`~poise.motion.stability.delay_periods`): 0 for an in-process
            plant stepped in simulated time, 1 for a device (a setpoint is written a
            fraction of a period after the sample it answers).
        shaper: the input shaper of the moves to a target (``[loop] shaper``,
            :func:`~poise.motion.shaping.shaper_for`).
        tolerance: the IK tolerance [task units]; given, feedback removes a static error by
            sampled re-targeting after each move (:mod:`poise.motion.retarget`); None: the
            rate gain alone.
        total_mass: the robot's weighed total mass [kg] for the estimate of its masses
            where its task is its centre of mass (:mod:`poise.motion.masses`; None: the
            model's).
        balance: when the balance controller holds a centre-of-mass target on passive
            joints (``[loop] balance``, :data:`~poise.api.rules.BALANCE_MODES`;
            :meth:`_engage_balance`).
    """

    def __init__(self, model: MechanicalModel, limits: SafetyLimits, period: float, *,
                 effort_feedforward: bool = True,
                 stepper_factory: Callable[[str, MechanicalModel], Stepper] = make_stepper,
                 delay: int = 1, shaper: str = "auto", tolerance: float | None = None,
                 ring_watch: bool = True, total_mass: float | None = None,
                 balance: str = "auto") -> None:
        self.model = model
        self.limits = limits
        self.period = period
        self.effort_feedforward = effort_feedforward
        self.stepper_factory = stepper_factory
        self.delay = delay
        self.shaper = shaper
        self.stepper: Stepper | None = None
        #: The current target's plan (None: none made yet).
        self.plan: TargetPlan | None = None
        #: The plan's actuator goal the cycle still moves towards (None: the IK alone).
        self.goal: FloatArray | None = None
        #: The shaped move to :attr:`goal` (made at its first cycle) and its time [s].
        self.move: ShapedMove | None = None
        self._move_goal: FloatArray | None = None
        self._move_time = 0.0
        #: The next cycle's setpoint of the move, made after this cycle's went out
        #: (:meth:`look_ahead`): the move, its time then [s] and the setpoint.
        self._ahead: tuple[ShapedMove, float, FloatArray] | None = None
        self._A = np.asarray(model.C, dtype=float)[: model.m]
        #: The anti-windup band as a fraction of each actuator's range (inf: no anti-windup).
        self.windup_band = WINDUP_BAND
        self._limit_cache: tuple[SafetyLimits, float, tuple[FloatArray, ...]] | None = None
        #: Cycles in which the anti-windup held an actuator's setpoint.
        self.windup_holds = 0
        self._holds_seen = 0  # windup_holds at the last re-targeting cycle
        self._wired: tuple[FloatArray, FloatArray] = (np.zeros(0), np.zeros(0))  # h(q), x used
        #: The model's predicted response to the current plan's move, which feedback follows
        #: after it (:meth:`follow`), rows [task units] from the move's first cycle; None: none.
        self.reference: FloatArray | None = None
        self._reference_plan: TargetPlan | None = None
        #: What feedback aims at after the move, row by row: the reference, or for a plan
        #: that does not reach its target the reference shifted to end at the target
        #: (:meth:`follow`).
        self._aim_rows: FloatArray | None = None
        #: The live target the current plan serves where it was made for another aim.
        self._serves: FloatArray | None = None
        #: The current move's cycle (0: the cycle that made it; it counts on after arrival).
        self._move_cycle = 0
        #: The reference row aimed at this cycle, and the live parameters aiming at it:
        #: ``(p, p with target = that row)``, made once per p (the row changes in place).
        self._aim = np.zeros(model.task_dim)
        self._aiming: tuple[LiveParams, LiveParams] | None = None
        #: A reference followed cycle by cycle (a stream or a trajectory; None: the target),
        #: and the cycles counted since the step was made (its time base).
        self.following: Following | None = None
        self._cycles = 0
        #: Times Algorithm 2's q̄ was started again from the measured configuration
        #: (:meth:`_rebranch`).
        self.rebranches = 0
        #: Whether the live parameters aim at the current plan's target (then the IK
        #: follows its reference, which sampled re-targeting measures against), per
        #: parameter set: ``(p, plan, same)``.
        self._aims_plan: tuple[LiveParams | None, TargetPlan | None, bool] = (None, None, False)
        #: The wall clock [s] a followed reference is read on (a real-time loop sets
        #: ``time.monotonic``); None: its time is cycles × Δt (simulated time).
        self.clock: Callable[[], float] | None = None
        #: Sampled re-targeting in feedback (:mod:`poise.motion.retarget`); None: off.
        self.retarget: Retargeting | None = None if tolerance is None else Retargeting(
            model, period, tolerance, total_mass)
        #: The task bias (:attr:`Retargeting.task_bias`) the aim rows carry now (None: 0),
        #: followed to the measured configuration every this many cycles.
        self._bias: FloatArray | None = None
        self._bias_every = max(1, round(BIAS_FOLLOW_S / period))
        self._correct = False  # a window closed: its correction at look_ahead
        #: The ring watch in feedback (:mod:`poise.motion.ringwatch`): its scale on the
        #: automatic rate gains; None: off (``ring_watch`` false, or no re-targeting).
        self.ring: RingWatch | None = None if tolerance is None or not ring_watch \
            else RingWatch(period, tolerance)
        self._reference_err = np.zeros(model.task_dim)  # what the watches observe
        #: The plant's sway after each move beyond the model's prediction, and the detuning
        #: of its modes it shows (:mod:`poise.motion.sway`); None: off (no re-targeting).
        self.sway: MoveSway | None = None if tolerance is None else MoveSway(period,
                                                                             tolerance)
        #: Feedback's error map where the plant's measured springs reverse the model's
        #: answer (:mod:`poise.motion.plantmap`).
        self._plant_map = SpringsErrorMap(model, period)
        self._scaled: tuple[LiveParams | None, tuple[float, bool], LiveParams | None] = \
            (None, (1.0, False), None)
        #: The balance controller and when it holds a plan's target in feedback
        #: (:mod:`poise.motion.balance_hold`), for a centre-of-mass task on passive joints;
        #: None: not such a task, ``balance = "off"``, or no re-targeting.
        self.hold: BalanceHold | None = BalanceHold(model, period, balance) \
            if tolerance is not None and balance != "off" and balances(model) else None

    def make_plan(self, target: FloatArray, q_measured: FloatArray | None,
                  tol: float, params: LiveParams | None = None) -> TargetPlan:
        """The plan of ``target`` from :meth:`motion_state` (the current q̄, the measured q
        and the last plan's goal), with the loop linearised at its goal (stability bound,
        shaper; with ``params``, the bounds of their algorithm in both modes computed
        ahead): :meth:`MotionPlanner.target_plan
        <poise.motion.motion_planner.MotionPlanner.target_plan>` with this step's period,
        delay, feed-forward and shaper and the tolerance ``tol``; does not adopt it.

        Raises:
            UnstableTarget: the only held configuration reaching ``target`` is unstable.
        """
        options = MotionOptions(self.period, tol, self.delay, self.effort_feedforward,
                                self.shaper)
        planner = MotionPlanner(self.model, self.limits, options, self.stepper_factory)
        return planner.target_plan(target, self.motion_state(params, q_measured))

    def motion_state(self, params: LiveParams | None, q_measured: FloatArray | None,
                     move_from: FloatArray | None = None) -> MotionState:
        """Where the robot is for a new plan (:class:`~poise.motion.motion_planner.
        MotionState`): this step's q̄ and last plan's goal, the measured ``q_measured``;
        the move from ``move_from`` (None: the plan's own)."""
        stepper, plan = self.stepper, self.plan
        return MotionState(params, stepper.q_bar if stepper is not None else None, q_measured,
                           plan.q_goal if plan is not None else None, move_from,
                           self.detuning, self.spring_scale, self.plant)

    def adopt(self, plan: TargetPlan, serves: FloatArray | None = None) -> None:
        """Make ``plan`` current: approach its goal first where it says so; in feedback
        mode, follow its reference after the move (:meth:`follow`).

        ``serves``: the live target a plan made for another aim serves (a stall's re-plan,
        :mod:`poise.controller.replan`, plans ``x* + m̂`` for the live target ``x*``; by
        default the plan's own ``serves``, :func:`~poise.motion.planner.for_springs`); then
        feedback follows its reference shifted to end at ``serves`` and sampled
        re-targeting watches it, as for a plan aimed at the live target itself."""
        self.plan = plan
        self._correct = False
        serves = serves if serves is not None else plan.serves
        self._serves = None if serves is None else np.array(serves, dtype=np.float64)
        self.goal = plan.qa_goal if plan.approach else None
        r = self.retarget
        if plan.task_bias is not None and r is not None:  # aimed for the plant's masses
            r.adopt_bias(plan.task_bias)
            self._bias = r.task_bias.copy() if r.task_bias.any() else None
        self.reference, self._reference_plan, self._aim_rows = None, None, None
        self.following = None
        self._aiming = None
        if plan.reference is not None:
            self.follow(plan, plan.reference)
        self._begin_retarget()

    def _begin_retarget(self) -> None:
        """Sampled re-targeting starts afresh for the current plan (active where it has a
        reference to measure the mismatch against), and so does the ring watch."""
        r = self.retarget
        if r is not None:
            r.begin(self.plan, self.reference is not None
                    and self._reference_plan is self.plan)
        if self.ring is not None:
            self.ring.begin(self.plan)
        if self.sway is not None:
            self.sway.begin(self.plan, self._aim_rows if self._reference_plan is self.plan
                            else None)

    def backed_off(self, p: LiveParams) -> LiveParams:
        """``p`` with its automatic rate gains × the ring watch's scale
        (:mod:`poise.motion.ringwatch`), and its task rate gain 0 while the setpoints are
        dithered (:attr:`dithering`: an actuator the integrator moves through a window
        rubs one way more than the other, and friction biases its efforts again: on
        ``real`` the dancer's hips moving at 0.5–1 mrad/s under a dither of 3 mrad/s read
        1–7 N·m off); ``p`` itself when neither; one copy per parameter set."""
        ring = self.ring
        scale = ring.scale if ring is not None and p.auto else 1.0
        paused = self.dithering
        if scale == 1.0 and not paused:
            return p
        last, key, copy = self._scaled
        if last is not p or key != (scale, paused) or copy is None:
            gains = {k: getattr(p, k) * scale for k in ALGORITHM_GAINS.get(p.algorithm, ())
                     if k in p.auto and scale != 1.0}
            if paused:
                gains[LEAD_GAIN.get(p.algorithm, "gamma")] = 0.0
            copy = replace(p, **gains)
            self._scaled = (p, (scale, paused), copy)
        return copy

    def follow(self, plan: TargetPlan, reference: FloatArray) -> bool:
        """Make feedback follow ``reference`` after ``plan``'s move: the model's predicted
        response to it (:func:`~poise.motion.reference.predicted_response`, rows from
        the move's first cycle, one per period). After the move, cycle ``i`` of it aims the
        IK at row ``i`` in place of the target, so feedback integrates only what the model
        did not predict (:mod:`poise.motion.reference`); past the last row, the target.
        A reference that arrives after the move began joins it at the current cycle.

        For a plan that does not reach its target (the model's closest held configuration,
        ``plan.reachable`` False), feedback aims at the reference shifted by what the model
        leaves, ``x_ref[i] + (x* − x_ref[-1])``: the model's prediction of the sway is still
        not integrated, but a plant that differs from its model, and may reach the target,
        is driven on towards it rather than held where the model would stop (the soft arm on
        ``mixed15`` stopped 3.3 mm short, where its model's workspace ends). On the exact
        model this is what the IK did once the reference ran out.
        Returns False (nothing changes) when ``plan`` is no longer the current plan."""
        if plan is not self.plan:
            return False
        rows = np.ascontiguousarray(reference, dtype=np.float64)
        if rows.ndim != 2 or rows.shape[1] != self.model.task_dim:
            raise ValueError(f"reference of shape {rows.shape}: must be (rows, "
                             f"{self.model.task_dim})")
        self.reference, self._reference_plan = rows, plan
        end = self._serving(plan)
        self._aim_rows = rows if (plan.reachable and end is plan.target) or not len(rows) \
            else rows + (np.asarray(end, dtype=np.float64) - rows[-1])
        if self._bias is not None and len(rows):  # the model's task where the plant's is
            self._aim_rows = self._aim_rows + self._bias
        if self.retarget is not None and self.retarget.plan is plan and \
                self.retarget.end is End.OFF:
            self._begin_retarget()
        return True

    def follow_source(self, following: Following) -> None:
        """Follow a moving reference from the next cycle on (a stream or a trajectory,
        :mod:`poise.motion.streaming`): the IK aims each cycle at its lead point, with no
        move to a planned goal (one under way ends where it is) and no predicted response.
        A new plan (:meth:`adopt`) or a restart (:meth:`reset`) ends it."""
        following.begin(self._cycles, self.clock)
        self.following = following
        self.goal = None
        self.reference, self._reference_plan, self._aim_rows = None, None, None
        self._aiming = None

    @property
    def source_time(self) -> float | None:
        """The followed reference's time at the next cycle [s] (on a :attr:`clock`, its time
        now); None when none is followed (what a sample arriving now is stamped with)."""
        f = self.following
        return None if f is None else f.time(self._cycles + 1)

    @property
    def reference_seconds(self) -> float | None:
        """How long the current plan's reference lasts from its move's start [s]; None
        without one."""
        rows = self.reference
        if rows is None or self._reference_plan is not self.plan:
            return None
        return rows.shape[0] * self.period

    @property
    def move_summary(self) -> dict[str, Any] | None:
        """The current plan's move, JSON-ready; None when the plan makes none.

        Keys: ``speed`` (fraction of the allowed speed), ``shaper_s`` (the end shaper's
        impulse times [s]), ``slowdown`` (the warp's ``max w′``: how much longer than the
        straight line at constant speed; 1.0 without a warp), ``pause`` (a dwell move's
        ``{"at": fraction of the line, "s": seconds once the move was made}``, else None),
        ``duration_s`` (once the move was made, else None) and ``predicted_settle_s`` (the
        model's settling time from the move's start, where the plan predicted it, else
        None)."""
        plan = self.plan
        if plan is None or not plan.approach or plan.qa_goal is None:
            return None
        move = self.move if self._move_goal is plan.qa_goal else None
        pauses = plan.warp.pauses if plan.warp is not None else []
        pause = {"at": pauses[0][0], "s": pauses[0][1] * move.move_time
                 if move is not None else None} if pauses else None
        return {"speed": plan.speed, "shaper_s": list(plan.shaper.times),
                "slowdown": plan.warp.steepest if plan.warp is not None else 1.0,
                "pause": pause,
                "duration_s": move.duration if move is not None else None,
                "predicted_settle_s": plan.settle_s}

    def _aimed(self, p: LiveParams, fb: bool, moving: bool) -> LiveParams:
        """The parameters the IK steps with this cycle: ``p``; while a moving reference is
        followed (:meth:`follow_source`), a copy aimed at its lead point; or in feedback
        after the move, while ``p`` aims at the plan's target, a copy whose target is this
        cycle's reference row. The aim is written in place into one array that the copy
        holds, so following costs no allocation per cycle."""
        following = self.following
        if following is not None and not moving:
            aiming = self._aiming
            if aiming is None or aiming[0] is not p:
                aiming = self._aiming = (p, replace(p, target=self._aim))
            following.aim(self._cycles, float(getattr(p, LEAD_GAIN.get(p.algorithm, "gamma"))),
                          self._aim)
            return aiming[1]
        rows, plan = self._aim_rows, self.plan
        i = self._move_cycle
        if (not fb or moving or rows is None or plan is None or self._reference_plan is not plan
                or (i >= rows.shape[0] and self._bias is None)):
            return p
        i = min(i, rows.shape[0] - 1)  # past the end with a task bias: its last row
        aiming = self._aiming
        if aiming is None or aiming[0] is not p:  # new parameters: still this plan's target?
            same = bool(np.array_equal(p.target, self._serving(plan)))
            aiming = self._aiming = (p, replace(p, target=self._aim) if same else p)
        if aiming[1] is not p:
            np.take(rows, i, axis=0, out=self._aim)
        return aiming[1]

    def _projection(self, p: LiveParams, aimed: LiveParams, q: FloatArray | None
                    ) -> FloatArray | None:
        """``Π`` of the measured error this cycle (:mod:`poise.motion.agreement`): the
        current plan's (made with its linearisation), while a held algorithm (``alg1``,
        ``alg2``) aims at the plan's reference after its move (``aimed``: what
        :meth:`_aimed` made of ``p``, a copy then). Feedback then leaves the directions the
        model's uncertainty could reverse to sampled re-targeting. After the reference, at
        rest in feedback, the map the plant's measured springs call for
        (:mod:`poise.motion.plantmap`; ``q``: the measured configuration, None: not known);
        else None."""
        if self.following is not None or p.algorithm == "plain":
            return None
        plan = self.plan
        if aimed is p:
            return self._springs_map(p, q)
        if plan is not None and plan.error_map is not None:  # aimed for the plant's masses
            return plan.error_map
        return plan.loop.projection if plan is not None and plan.loop is not None else None

    @property
    def springs_maps(self) -> dict[str, int | bool]:
        """Error maps made for the plant's measured springs (:mod:`poise.motion.plantmap`),
        the cycles that used one, and whether one is in use now (``active``)."""
        keeper = self._plant_map
        return {"made": keeper.made, "cycles": keeper.cycles, "active": keeper.map is not None}

    def _springs_map(self, p: LiveParams, q: FloatArray | None) -> FloatArray | None:
        """The error map of :mod:`poise.motion.plantmap` while a held algorithm rests on its
        plan in feedback (no move, no plan's map) and the resting windows measured the
        plant's springs (and not its masses); else None."""
        r, plan, stepper = self.retarget, self.plan, self.stepper
        if (p.mode != "fb" or r is None or plan is None or stepper is None
                or self.goal is not None or plan.error_map is not None
                or not r.spring_scale or r.plant_bodies is not None):
            self._plant_map.forget()
            return None
        return self._plant_map.at(r.springs, q)

    def _limit_arrays(self) -> tuple[FloatArray, ...]:
        """The anti-windup band (:attr:`windup_band` of each actuator's range) and the
        limits as float64 arrays, made once per :class:`SafetyLimits` (set at connect)."""
        cache = self._limit_cache
        if cache is None or cache[0] is not self.limits or cache[1] != self.windup_band:
            lim = self.limits
            span = lim.qa_max - lim.qa_min
            arrays = tuple(np.ascontiguousarray(a, dtype=np.float64) for a in (
                self.windup_band * np.where(np.isfinite(span), span, 1.0), lim.qa_min,
                lim.qa_max, lim.qa_rate))
            cache = self._limit_cache = (lim, self.windup_band, arrays)
        return cache[2]

    def _anti_windup(self, qa: FloatArray, proposed: FloatArray, q: FloatArray,
                     saturated: bool = False) -> FloatArray:
        """Conditional integration: an actuator that lags its setpoint by more than
        :attr:`windup_band` of its range (its effort at the limit, a joint at a stop) keeps
        its setpoint where it is rather than integrate the error further away; what the
        actuators can follow is integrated as before. The safety layer already keeps
        ``q̄a`` within the position and rate limits, so those never wind up."""
        band = self._limit_arrays()[0]
        lag = proposed - self._A @ q
        away = ((np.abs(lag) > band) | saturated) & ((proposed - qa) * lag > 0)
        if away.any():
            self.windup_holds += 1
            return np.where(away, qa, proposed)
        return proposed

    def _begin(self, stepper: Stepper) -> FloatArray | None:
        """A cycle's first step: count the cycles and the move's, and the approach setpoint
        (:meth:`_approach`)."""
        self._cycles += 1
        self._move_cycle += 1
        return self._approach(stepper, self.period)

    def _approach(self, stepper: Stepper, period: float) -> FloatArray | None:
        """The approach move's setpoint this cycle while a plan's goal is approached (the
        move made at the goal's first cycle), else None."""
        goal, plan = self.goal, self.plan
        if goal is None or plan is None:
            return None
        if self._move_goal is not goal:  # a new goal: the move starts here
            lim = self.limits
            self.move = approach_move(plan, stepper.qa, lim.qa_min, lim.qa_max, lim.qa_rate)
            self._move_goal, self._move_time = goal, 0.0
            self._move_cycle = 0
        move = self.move
        assert move is not None
        self._move_time += period
        if self._move_time >= move.duration and self.goal is goal:
            self.goal = None  # arrived: the IK takes over next cycle
        ahead = self._ahead
        if ahead is not None and ahead[0] is move and ahead[1] == self._move_time:
            return ahead[2]
        return move.at(self._move_time)

    def _serving(self, plan: TargetPlan) -> FloatArray:
        """The live target ``plan`` serves: the one it was adopted for (:meth:`adopt`'s
        ``serves``), else its own."""
        serves = self._serves
        return serves if serves is not None and plan is self.plan else plan.target

    def _aims_at_plan(self, p: LiveParams) -> bool:
        """Whether ``p`` aims at the target the current plan serves (cached per ``p`` and
        plan)."""
        cached = self._aims_plan
        if cached[0] is not p or cached[1] is not self.plan:
            plan = self.plan
            same = plan is not None and bool(np.array_equal(p.target, self._serving(plan)))
            cached = self._aims_plan = (p, plan, same)
        return cached[2]

    def _retarget_cycle(self, p: LiveParams, x_meas: FloatArray, fb: bool,
                        saturated: bool, q: FloatArray, efforts: Any = None) -> None:
        """Sampled re-targeting after this cycle (:mod:`poise.motion.retarget`): in
        feedback, once the move has arrived, the mismatch between the model's predicted
        response and the measured task value is averaged over a window; a full window may
        start a correction move (the IK paused while it runs, as during any move)."""
        self._watch_cycle(p, x_meas, fb)
        r = self.retarget
        if r is None or not fb or not r.watching or r.plan is not self.plan:
            return
        if self._bias is not None and self._cycles % self._bias_every == 0:
            self._carry_bias(r.follow_bias(q))  # b(q) where the arm is now
        rows = self._aim_rows
        if rows is None or not self._settled_on_plan(p):
            r.reset_window()
            return
        stepper = self.stepper
        assert stepper is not None
        i = min(self._move_cycle, rows.shape[0] - 1)
        lim = self.limits
        held = self.windup_holds != self._holds_seen
        self._holds_seen = self.windup_holds
        r.watch_stall(rows[i], x_meas, stepper.qa, lim.qa_min, lim.qa_max, held or saturated,
                      stepper.x_bar)
        if saturated or not r.learning:
            r.reset_window()
            return
        r.rate_gain = p.gamma_z if p.algorithm == "alg2" else p.gamma
        # a full window: its correction is made after this cycle's setpoint went out
        self._correct = r.observe(rows[i], x_meas, stepper.qa, self.windup_holds, q, efforts)

    def _correction_move(self) -> None:
        """The correction of the window that closed this cycle (:meth:`Retargeting.
        correction <poise.motion.retarget.Retargeting.correction>`) and its move, which
        starts at the next cycle. Made from :meth:`look_ahead`, after this cycle's setpoint
        went out: on the model with its springs scaled it is a Gauss–Newton search (about
        3 ms on the dancer), not to be on the way from a sensor frame to its setpoint."""
        self._correct = False
        r, stepper, plan = self.retarget, self.stepper, self.plan
        if r is None or stepper is None or plan is None or r.plan is not plan:
            return
        lim = self.limits
        goal = r.correction(stepper.q_bar, stepper.qa, self._move_cycle * self.period,
                            lim.qa_min, lim.qa_max)
        self._carry_bias(r.task_bias)
        if goal is None or self.balancing:
            return
        speed = plan.speed * approach_speed(lim.qa_min, lim.qa_max, lim.qa_rate)
        known = self.sway is not None and self.sway.evidence > 0
        self.move = r.move(stepper.qa, goal, speed, self.detuning if known else None)
        self.goal = self._move_goal = self.move.goal
        self._move_time = 0.0
        self._ahead = None

    def _carry_bias(self, bias: FloatArray) -> None:
        """Feedback aims the model's task at the target plus the task bias ``bias``
        (:mod:`poise.motion.masses`): the aim rows move by its change."""
        change = bias if self._bias is None else bias - self._bias
        if not change.any():
            return
        own = self._bias is not None  # the aim rows are this step's copy already
        self._bias = np.array(bias, dtype=np.float64) if bias.any() else None
        if self._aim_rows is None:
            return
        if own:
            self._aim_rows += change
        else:
            self._aim_rows = self._aim_rows + change  # a copy: the plan's reference stays

    def _watch_cycle(self, p: LiveParams, x_meas: FloatArray, fb: bool) -> None:
        """The ring watch (in feedback with automatic gains, :mod:`poise.motion.ringwatch`)
        and the sway watch (in feedback, :mod:`poise.motion.sway`) after this cycle, on the
        error from the current plan's reference once its move has arrived; either starts
        again (a move, a followed reference, another aim) where there is none."""
        ring = self.ring if self.ring is not None and p.auto else None
        sway = self.sway if self.sway is not None and self.sway.watching else None
        if not fb or (ring is None and sway is None):
            return
        error = self._reference_error(p, x_meas)
        if ring is not None:
            if error is None:
                ring.reset()
            else:  # the integrator alone once the corrections have ended
                r = self.retarget
                ring.observe(error, alone=r is None or not r.active)
        if sway is not None:
            if error is None:
                sway.interrupt()
            else:
                sway.observe(error)

    def _reference_error(self, p: LiveParams, x_meas: FloatArray) -> FloatArray | None:
        """The current plan's reference row of this cycle minus ``x_meas`` (task_dim,)
        [task units], in a buffer of this step's, while the IK holds the plan after its
        move (:meth:`_settled_on_plan`) and follows its reference; else None."""
        rows = self._aim_rows
        if rows is None or self._reference_plan is not self.plan \
                or not self._settled_on_plan(p):
            return None
        error = self._reference_err
        np.subtract(rows[min(self._move_cycle, rows.shape[0] - 1)], x_meas, out=error)
        return error

    @property
    def detuning(self) -> float:
        """The detuning of the plant's modes its sway after moves showed so far (0: none
        or not measured; :mod:`poise.motion.sway`), which moves chosen on the model allow
        for."""
        return self.sway.detuning if self.sway is not None else 0.0

    @property
    def spring_scale(self) -> float:
        """The plant's stiffness scale where it rested showed, once significant (0: not,
        or not measured; :mod:`poise.motion.springs`), which plans are aimed with."""
        return self.retarget.spring_scale if self.retarget is not None else 0.0

    @property
    def plant(self) -> MechanicalModel | None:
        """The plant as its held efforts showed it, where they pin its task down (None: not,
        or not measured; :mod:`poise.motion.masses`), which plans are aimed for."""
        return self.retarget.plant if self.retarget is not None else None

    def _settled_on_plan(self, p: LiveParams) -> bool:
        """Whether the IK holds the current plan now: its move has arrived, no reference is
        followed, and ``p`` aims at the target the plan serves (where sampled re-targeting
        and the ring watch measure)."""
        return self.goal is None and self.following is None and self._aims_at_plan(p)

    def look_ahead(self) -> None:
        """Make the next cycle's setpoint of the approach move now, after this cycle's
        setpoint went out. The shaped move depends on time alone, so the next cycle finds it
        made (the same numbers) and the time from its sensor frame to its setpoint does not
        include it. Nothing to do when no move is under way. So too the sway watch's fit of a
        window that closed this cycle (:meth:`MoveSway.conclude
        <poise.motion.sway.MoveSway.conclude>`, once per move), and sampled re-targeting's
        correction of a window that closed (:meth:`_correction_move`): a correction move
        made here starts at the next cycle, as one made in the cycle did; the error map
        for the plant's measured springs, where a cycle asked for it
        (:mod:`poise.motion.plantmap`); and the balance controller's designs
        (:meth:`BalanceHold.design <poise.motion.balance_hold.BalanceHold.design>`)."""
        if self.sway is not None:
            self.sway.conclude()
        if self._correct:
            self._correction_move()
        if self._plant_map.due and self.stepper is not None:
            self._plant_map.refresh(self.stepper.q_bar)
        if self.hold is not None and self.stepper is not None:
            self.hold.design(self.plan, self.stepper.qa, self.goal is None, self.limits)
        move, goal = self.move, self.goal
        if move is None or goal is None or self._move_goal is not goal:
            self._ahead = None
            return
        ahead = self._ahead
        buffer = ahead[2] if ahead is not None and ahead[0] is move else np.empty_like(move.start)
        t = self._move_time + self.period
        self._ahead = (move, t, move.at(t, out=buffer))

    def _safe_setpoint(self, stepper: Stepper, proposed: FloatArray, q: FloatArray,
                       fb: bool, saturated: bool, algorithm: str,
                       move_qa: FloatArray | None) -> FloatArray:
        """The IK's proposal → NaN guard → approach move ``move_qa`` (:meth:`_begin`) or
        (fb) anti-windup → safety layer.

        A compiled stepper does it in its one-call cycle (:meth:`_compiled_cycle`, the
        kernel :func:`poise.kernels.guard.guard`); the numpy functions here are its
        reference."""
        if not all_finite(proposed):
            raise StepFault(f"non-finite IK output ({algorithm})")
        if move_qa is not None:
            proposed = move_qa
        elif fb:
            proposed = self._anti_windup(stepper.qa, proposed, q, saturated)
        return limit_setpoint(self.limits, stepper.qa, proposed, self.period)[0]

    def _compiled_cycle(self, stepper: Any, q: FloatArray, p: LiveParams, fb: bool,
                        saturated: bool, efforts: Any = None) -> tuple[FloatArray, FloatArray]:
        """h(q), the IK update, the guard and the commit of a compiled stepper in one kernel
        call (:meth:`poise.motion.compiled_steppers.CompiledStepper.cycle`); returns
        ``(h(q), x used)``."""
        move_qa = self._begin(stepper)
        aimed = self._aimed(p, fb, move_qa is not None)
        p_live, p = p, self.backed_off(aimed)
        x_meas, x_used, status = stepper.cycle(p, q, fb, move_qa, fb and move_qa is None,
                                               bool(saturated), self._limit_arrays(),
                                               self.period, self._projection(p_live, aimed, q))
        if status & stepper.NONFINITE:
            raise StepFault(f"non-finite IK output ({p.algorithm})")
        if status & stepper.HELD:
            self.windup_holds += 1
        self._retarget_cycle(p_live, x_meas, fb, saturated, q, efforts)
        return x_meas, x_used

    def wire_cycle(self, p: LiveParams, buffers: WireBuffers, data: bytes) -> int:
        """:meth:`update` from the bytes of one read to the bytes of its setpoint, in one
        compiled call (:meth:`~poise.motion.compiled_steppers.CompiledStepper.wire`) for a compiled
        stepper of ``p.algorithm`` already running (call :meth:`wire_output` next).

        Returns:
            The outcome (:mod:`poise.kernels.wire`). With ``WIRE_OK`` the setpoint frame
            is in ``buffers``; with any other nothing changed, and the caller runs
            :meth:`update` on the decoded frame (which decides and reports the same).
        """
        stepper: Any = self.stepper
        fb = p.mode == "fb"
        approach = (self.goal, self._move_goal, self.move, self._move_time, self._move_cycle,
                    self._cycles)
        try:
            move_qa = self._begin(stepper)
            aimed = self._aimed(p, fb, move_qa is not None)
            p_live, p = p, self.backed_off(aimed)
            outcome, x_meas, x_used, g_status = stepper.wire(
                p, fb, move_qa, fb and move_qa is None, self._limit_arrays(), self.period,
                buffers, data, self._projection(p_live, aimed, buffers.q))
        except BaseException:
            (self.goal, self._move_goal, self.move, self._move_time,
             self._move_cycle, self._cycles) = approach
            raise
        if outcome != stepper.WIRE_OK:  # update() will take this cycle: as if not begun
            (self.goal, self._move_goal, self.move, self._move_time,
             self._move_cycle, self._cycles) = approach
            return outcome
        if g_status & stepper.HELD:
            self.windup_holds += 1
        self._retarget_cycle(p_live, x_meas, fb, False, buffers.q, buffers.efforts)
        self._wired = (x_meas, x_used)
        return outcome

    def wire_output(self) -> StepOutput:
        """What the last :meth:`wire_cycle` decided, as :meth:`update` returns it."""
        stepper: Any = self.stepper
        x_meas, x_used = self._wired
        return StepOutput(stepper.qa, stepper.tau if self.effort_feedforward else None,
                          x_used, x_meas, stepper.q_bar, stepper.residual)

    def reset(self, q: FloatArray, algorithm: str) -> None:
        """Bumpless (re)start from the measured configuration ``q`` (a followed reference
        ends, and so does the balance controller)."""
        self.following = None
        if self.hold is not None:
            self.hold.stop()
        stepper = self.stepper_factory(algorithm, self.model)
        stepper.reset(np.asarray(q, dtype=float), self.limits.qa_min, self.limits.qa_max)
        self.stepper = stepper

    def update(self, q: FloatArray, p: LiveParams, saturated: bool = False,
               efforts: Any = None) -> StepOutput:
        """One cycle from the measured ``q`` with the live parameters ``p``; ``efforts``:
        the measured actuator efforts (m,) (None or empty: not measured), which the
        estimate of the plant's masses uses (:mod:`poise.motion.masses`).

        Raises:
            StepFault: non-finite IK output or setpoint.
        """
        model, period = self.model, self.period
        stepper, switched = self.stepper, ""
        if stepper is None:
            self.reset(q, p.algorithm)
            stepper = self.stepper
        elif stepper.name != p.algorithm:  # bumpless: the new stepper starts from q̄
            switched = stepper.name
            new = self.stepper_factory(p.algorithm, model)
            new.reset(stepper.q_bar, self.limits.qa_min, self.limits.qa_max)
            self.stepper = stepper = new
        assert stepper is not None
        fb = p.mode == "fb"
        if self._engage_balance(p, fb, q):
            return self._balance_cycle(stepper, q, p, saturated, efforts)
        if fb and self.goal is None and stepper.name == "alg2":
            self._rebranch(stepper, q)
        if hasattr(stepper, "cycle"):  # compiled: the whole chain below in one kernel call
            x_meas, x_used = self._compiled_cycle(stepper, q, p, fb, saturated, efforts)
            finite = stepper.cycle_finite  # checked in the same call
            tau = stepper.tau if self.effort_feedforward else None
        else:
            x_meas = model.fk(q)
            x_used = x_meas if fb else stepper.x_bar
            move_qa = self._begin(stepper)
            aiming = self._aimed(p, fb, move_qa is not None)
            aimed = self.backed_off(aiming)
            projection = self._projection(p, aiming, q)
            x_ik = None if not fb else x_meas if projection is None else \
                aimed.target - projection @ (aimed.target - x_meas)  # x̄ − Π (x̄ − h(q))
            proposed = stepper.propose(aimed, x_ik, period)
            stepper.moving = move_qa is not None
            stepper.commit(self._safe_setpoint(stepper, proposed, q, fb, saturated,
                                               p.algorithm, move_qa))
            self._retarget_cycle(p, x_meas, fb, saturated, q, efforts)
            tau = stepper.tau if self.effort_feedforward else None
            finite = all_finite(stepper.qa, tau, stepper.q_bar)
        if not finite:
            raise StepFault(f"non-finite setpoint ({p.algorithm})")
        return StepOutput(self._dithered(stepper.qa), tau, x_used, x_meas, stepper.q_bar,
                          stepper.residual, switched)

    def _engage_balance(self, p: LiveParams, fb: bool, q: FloatArray) -> bool:
        """Whether the balance controller takes this cycle (:meth:`BalanceHold.engage
        <poise.motion.balance_hold.BalanceHold.engage>`): in feedback with a held algorithm,
        resting on the current plan (its move arrived, no reference followed, ``p`` aiming
        at its target) where the hold is :meth:`~poise.motion.balance_hold.BalanceHold.
        allowed`; it stops where this no longer holds. Its aim is the plan's target plus the
        task bias (:mod:`poise.motion.masses`), and it starts once the estimate of the
        masses pins the centre of mass down to the tolerance, or to a fraction of the
        distance left where friction ate the IK's last correction
        (:func:`~poise.motion.balance_hold.pinned_down`)."""
        hold, r, plan = self.hold, self.retarget, self.plan
        if hold is None or r is None:
            return False
        if not (fb and plan is not None and r.plan is plan and p.algorithm in HELD_ALGORITHMS
                and hold.allowed(plan, r.friction) and self._settled_on_plan(p)):
            hold.stop()
            return False
        aim = self._serving(plan) if self._bias is None else self._serving(plan) + self._bias
        eaten = r.eaten and self._bias is not None  # aiming with a bias, friction eating
        return hold.engage(plan, q, aim, lambda distance: pinned_down(
            r.masses.com_sigma(q), BIAS_SIGMA * r.tolerance, distance, eaten))

    def _balance_cycle(self, stepper: Stepper, q: FloatArray, p: LiveParams,
                       saturated: bool, efforts: Any) -> StepOutput:
        """One cycle of the balance controller: its setpoint through the safety layer,
        q̄ made consistent with it, and sampled re-targeting's watch (its windows go on
        learning the masses, dithered until the estimate pins the centre of mass down,
        :meth:`_dithered`; their corrections are not moved, :meth:`_correction_move`)."""
        hold = self.hold
        assert hold is not None
        self._cycles += 1
        self._move_cycle += 1
        x_meas = self.model.fk(q)
        proposed = hold.setpoint(self.plan, q, x_meas)
        if proposed is None:  # gave up: the IK holds this plan from now on
            self._cycles -= 1
            self._move_cycle -= 1
            return self.update(q, p, saturated, efforts)
        safe = limit_setpoint(self.limits, stepper.qa, proposed, self.period)[0]
        stepper.commit(safe)
        if not np.array_equal(stepper.qa, safe):  # held at a fold of the model's held set
            stepper.reset(join(self.model, safe, split(self.model, q)[1]), self.limits.qa_min,
                          self.limits.qa_max)
        hold.hold(stepper.qa)
        self._retarget_cycle(p, x_meas, True, saturated, q, efforts)
        tau = stepper.tau if self.effort_feedforward else None
        if not all_finite(stepper.qa, tau, stepper.q_bar):
            raise StepFault(f"non-finite setpoint (balance, {p.algorithm})")
        return StepOutput(self._dithered(stepper.qa), tau, x_meas, x_meas, stepper.q_bar,
                          stepper.residual)

    @property
    def balance(self) -> BalanceController | None:
        """The balance controller (:mod:`poise.motion.balance`; None: no :attr:`hold`)."""
        return self.hold.controller if self.hold is not None else None

    @property
    def balancing(self) -> bool:
        """Whether the balance controller holds the target now."""
        return self.hold is not None and self.hold.active

    @property
    def steps_aside(self) -> bool:
        """Whether the compiled wire path (:meth:`wire_cycle`, which encodes the IK's own
        ``qa``) must leave this cycle to :meth:`update`: the setpoints are dithered
        (:attr:`dithering`), or the balance controller holds the target or may start on it
        (resting on a plan it is :meth:`~poise.motion.balance_hold.BalanceHold.allowed`
        to hold; :meth:`_engage_balance` decides)."""
        if self.dithering:
            return True
        hold, r = self.hold, self.retarget
        if hold is None:
            return False
        return hold.active or (hold.allowed(self.plan, r is not None and r.friction)
                               and self.goal is None and self.following is None)

    def _rebranch(self, stepper: Stepper, q: FloatArray) -> None:
        """Algorithm 2 integrates its own ``q̄u`` (statics solved online); through a fold of
        the model's held configurations its statics law, ``Huu⁻¹ Hua Δqa`` with ``Huu``
        nearly singular, can throw ``q̄u`` onto no branch at all (the dancer on ``stiff10``,
        bench target 17: q̄₀ from −0.2 to −3.1 rad in one cycle of a planned move, −34 rad
        after it, while the plant stood at 0.47 rad; the held Jacobian there drove the plant
        over its pointe). In feedback at rest, where ``q̄u`` is more than :data:`REBRANCH`
        from the measured ``qu``, the stepper starts again at its setpoint and the measured
        ``qu`` (as at a bumpless start), and its online statics law takes it from there.
        Models and plants that differ stay far closer (the dancer's pointe on ``stiff10``
        stands 0.37 rad from its model's where they differ most)."""
        model = self.model
        qa_bar, qu_bar = split(model, stepper.q_bar)
        qu = split(model, np.asarray(q, dtype=float))[1]
        if qu.size and float(np.max(np.abs(qu_bar - qu))) > REBRANCH:
            stepper.reset(join(model, qa_bar, qu), self.limits.qa_min, self.limits.qa_max)
            self.rebranches += 1

    def _dithered(self, qa: FloatArray) -> FloatArray:
        """The setpoint sent for the IK's (or the balance controller's) ``qa``: with sampled
        re-targeting's dither of a resting window added (:mod:`poise.motion.dither`; the
        stepper's own ``qa`` keeps none), within the limits; ``qa`` itself when there is
        none."""
        offset = self.retarget.dither_offset() if self.retarget is not None else None
        if offset is None:
            return qa
        return np.clip(qa + offset, self.limits.qa_min, self.limits.qa_max)

    @property
    def dithering(self) -> bool:
        """Sampled re-targeting dithers the setpoints (:mod:`poise.motion.dither`) while the
        arm rests on its plan: no move under way and no reference followed (a streamed
        target moves on with the rate gain as ever). Meanwhile the rate gain is paused
        (:meth:`backed_off`) and the compiled wire path, which encodes the IK's ``qa``,
        steps aside (:meth:`wire_cycle`)."""
        r = self.retarget
        return r is not None and r.dithering and self.goal is None and self.following is None \
            and not self.balancing


__all__ = ["ControlStep", "StepFault", "StepOutput", "stepper_factory"]
