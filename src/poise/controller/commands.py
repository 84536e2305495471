"""The service's commands: validated, applied between two cycles, always answered.

:class:`CommandRoom` applies one :class:`~poise.api.bus.Command` to the service
(:class:`~poise.controller.service.Controller`): ``run`` / ``estop`` / ``clear`` go to its
life cycle; ``target``, ``gains``, ``algorithm`` and ``mode`` build new
:class:`~poise.motion.params.LiveParams` (a target through the
:class:`~poise.motion.motion_planner.MotionPlanner`: plan, parameters at the target, the move
chosen on the model) outside every lock, then swap them in under the parameter lock, atomic
with the e-stop latch. Every command is answered and recorded as a ``command`` event.

A streamed ``target`` (its ``stream`` flag, or ``[loop] targets = "stream"``) and a
``reference`` are samples of a moving reference (:mod:`poise.motion.streaming`): no plan, no
new parameters; while running they go into the stream the control step follows (begun at
the first, where the arm is), stamped with the stream's time, and are answered at once. Only
the first sample of a stream and refusals are recorded as events: the samples themselves
are in every cycle record (its ``target``).

With ``loop.live_targets``, a target received while the loop runs with automatic gains is
answered at once: its quick plan (one solve from q̄, milliseconds) is adopted and the move
starts at the next cycle; the parameters at the target and the predicted response to the move
follow from a background thread (:class:`~poise.controller.refine.PlanRefiner`,
:meth:`CommandRoom.apply_refinement`). Targets that one solve does not settle (unreachable,
unstable) and those sent with explicit gains are planned in full before the answer.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from poise.api.bus import COMMAND_NAMES, ESTOP_CANCELLED, Command, CommandResponse
from poise.api.rules import RuleError, check_reference
from poise.api.state import State
from poise.controller.refine import PlanRefiner, QuickTarget, RefineJob
from poise.controller.replan import Replan
from poise.models.base import FloatArray
from poise.motion.live import (
    MAP_REFRESH_S,
    TrajectoryRun,
    actuator_map,
    begin_stream,
    begin_trajectory,
    clamp_status,
    prepare_trajectory,
)
from poise.motion.motion_planner import MotionPlanner, MotionState, Move
from poise.motion.options import MotionOptions
from poise.motion.params import (
    LiveParams,
    ParamError,
    gains_automatic,
    parse_target,
    with_algorithm,
    with_gains,
    with_mode,
    with_plan,
)
from poise.motion.planner import TargetPlan, UnstableTarget
from poise.motion.streaming import Following
from poise.motion.trajectory import Trajectory, TrajectoryError

if TYPE_CHECKING:
    from poise.controller.service import Controller


#: The answer's reason to the sample that began a stream.
STREAM_BEGUN = "stream started"


def ok(cmd: str, reason: str = "", cid: str = "") -> CommandResponse:
    """An accepted command's answer."""
    return CommandResponse(cid, cmd, True, reason)


def no(cmd: str, reason: str, cid: str = "") -> CommandResponse:
    """A refused command's answer, with the reason."""
    return CommandResponse(cid, cmd, False, reason)


def jsonable(v: Any) -> Any:
    """A command value as JSON takes it (arrays and tuples as lists)."""
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, tuple):
        return list(v)
    return v


@dataclass(frozen=True)
class Unrefined:
    """The quick plan adopted last, waiting for its refinement: the plan, its serial and
    the service's e-stop count when it was adopted."""

    plan: TargetPlan
    serial: int
    estops: int


#: What a ``target`` command may come with (``Controller.submit``'s ``prepared``).
Prepared = TargetPlan | QuickTarget | Replan | TrajectoryRun | ParamError | None


class CommandRoom:
    """Applies the service's commands (see the module docstring).

    Args:
        service: the controller whose state, parameters and plans the commands change.
    """

    def __init__(self, service: Controller) -> None:
        self.service = service
        cfg = service.config
        #: Plans the targets: the step's limits and steppers, the run's options.
        self.planner = MotionPlanner(service.model, service.limits,
                                     MotionOptions.from_config(cfg, delay=service.step.delay),
                                     service.step.stepper_factory)
        #: ``[loop] targets``: targets are streamed samples unless a command says otherwise.
        self.stream_targets = cfg.loop.targets == "stream"
        #: The stream being fed: its following, and the offset from the sender's clock to
        #: the stream's time [s] (fixed by its first time-stamped sample).
        self._stream: Following | None = None
        self._offset: float | None = None
        self._mapped_at = -1e9
        #: Why the arm is held back from the streamed reference ('' when it is not).
        self.clamp_note = ""
        #: The quick plan adopted last while its refinement is still to come (None: none).
        self.unrefined: Unrefined | None = None
        self._serials = itertools.count(1)
        #: Finishes this service's quick plans (one thread, the newest job only), off the
        #: loop's CPU where it is pinned.
        self.refiner = PlanRefiner(self._planner, self._refined,
                                   cpus=service.cpu_plan.others if service.cpu_plan else None)

    def submit(self, command: Command, prepared: Prepared = None) -> CommandResponse:
        """:meth:`Controller.submit <poise.controller.service.Controller.submit>`."""
        s = self.service
        name, value, cid = command.name, command.value, command.id
        if name not in COMMAND_NAMES:
            resp = no(name, f"unknown command; allowed: {', '.join(COMMAND_NAMES)}", cid)
        elif name != "estop" and self.estopped_since(command.estops):
            resp = no(name, ESTOP_CANCELLED, cid)
        elif s.state == State.ESTOP and name not in ("clear", "estop"):
            resp = no(name, f"e-stop latched ({s.reason}); send 'clear' first", cid)
        else:
            try:
                resp = self._apply(command, prepared)
            except ParamError as exc:
                resp = no(name, str(exc), cid)
        resp = CommandResponse(cid, name, resp.accepted, resp.reason)
        if not (resp.accepted and self.is_stream(command) and resp.reason != STREAM_BEGUN):
            s.announce("command", name=name, value=jsonable(value), id=cid,
                       source=command.source, accepted=resp.accepted, reason=resp.reason)
        return resp

    def is_stream(self, command: Command) -> bool:
        """A streamed sample: a ``reference``, or a ``target`` streamed by its flag or by
        ``[loop] targets``."""
        if command.name == "reference":
            return True
        return command.name == "target" and (
            command.stream if command.stream is not None else self.stream_targets)

    def _apply(self, c: Command, prepared: Prepared = None) -> CommandResponse:
        s = self.service
        if c.name == "run":
            if c.value == "start":
                return s.start(f"{c.source} start", since=c.estops)
            if c.value == "stop":
                return s.stop(f"{c.source} stop")
            raise ParamError(f"run = {c.value!r}: must be 'start' or 'stop'")
        if c.name == "estop":
            return s.estop(f"{c.source} e-stop")
        if c.name == "clear":
            return s.clear(f"{c.source} clear", since=c.estops)
        if self.is_stream(c) and (c.name == "reference" or s.state == State.RUNNING):
            return self._stream_samples(c)
        if c.name == "trajectory":
            return self._trajectory(c, prepared)
        cycle = s.cycle
        # the new parameters are derived outside the lock (their stability bounds take
        # milliseconds; a target's offline solves run here too); under it, again only if
        # the loop changed them meanwhile
        p = cycle.params
        plan: TargetPlan | None = None
        quick: QuickTarget | None = None
        moved_from: MotionState | None = None  # a quick plan made here: refined here
        note = ""
        replan = prepared if isinstance(prepared, Replan) else None
        if c.name == "target":
            made = self._quick(c, p, prepared)
            if made is not None:
                quick, moved_from = made
                plan, new = quick.plan, self._quick_params(p, quick.plan)
            else:
                move = self._target(c, p, prepared)
                plan, new, note = move.plan, move.params, move.note()
        else:
            new = self._derive(c, p)
        with s.param_lock:  # atomic with the e-stop latch (estop() takes it too)
            if s.state == State.ESTOP:  # it latched while the target was being planned
                raise ParamError(f"e-stop latched ({s.reason}) while the command was "
                                 "being applied; send 'clear' first")
            if self.estopped_since(c.estops):  # latched and cleared since it was received
                raise ParamError(ESTOP_CANCELLED)
            if cycle.params is not p:
                if plan is None:
                    new = self._derive(c, cycle.params)
                else:
                    new = self._quick_params(cycle.params, plan) if quick is not None else \
                        with_plan(cycle.params, plan)
            if replan is not None:
                new = self._replanned(replan, cycle.params, new)
            if plan is not None:
                self.adopt(plan, serves=replan.target if replan is not None else None)
            if quick is not None:
                self.unrefined = Unrefined(quick.plan, quick.serial, s.estops)
                if moved_from is not None:  # here, under the lock: never after a newer one
                    self.refiner.submit(quick.plan, replace(moved_from, params=new),
                                        quick.serial)
            cycle.params = new
            cycle.target_set = cycle.target_set or c.name == "target"
            s.announce("param", name=c.name, value=jsonable(c.value), id=c.id,
                       source=c.source, params=new.as_dict())
        return ok(c.name, note)

    def _replanned(self, replan: Replan, now: LiveParams, new: LiveParams) -> LiveParams:
        """The parameters a stall's re-plan is adopted with: ``new`` (at its plan) aimed at
        the live target, not at the plan's ``aim``, so that feedback removes the error on
        the true robot (:mod:`poise.controller.replan`). Refused (under the lock) when the
        target changed since the stall."""
        if now.target is None or not np.array_equal(now.target, replan.target):
            raise ParamError("re-plan dropped: the target changed since the stall")
        self.service.announce(
            "info", code="replanned", target=replan.target.tolist(), aim=replan.aim.tolist(),
            q_goal=np.asarray(replan.plan.q_goal, dtype=float).tolist(),
            text="feedback stalled with an actuator at its limit: re-planned from the "
                 "measured state to another held configuration that reaches the target")
        return replace(new, target=replan.target)

    def _quick(self, c: Command, p: LiveParams, prepared: Prepared
               ) -> tuple[QuickTarget, MotionState | None] | None:
        """A ``target`` command's quick plan (``prepared`` elsewhere, or made here with the
        state it was made from), while the loop runs with ``loop.live_targets`` and every
        rate gain automatic (:func:`~poise.motion.params.gains_automatic`: none can be
        refused at the new target); None: plan it in full (:meth:`_target`), as for a
        target that one solve from q̄ does not settle."""
        if isinstance(prepared, QuickTarget):
            return prepared, None
        s = self.service
        stepper = s.step.stepper
        if prepared is not None or not s.config.loop.live_targets or \
                s.state != State.RUNNING or stepper is None or not gains_automatic(p):
            return None
        target = parse_target(c.value, s.model.task_dim, s.reach)
        q_bar = np.array(stepper.q_bar, dtype=float)
        state = MotionState(p, q_bar=q_bar, move_from=q_bar, detuning=s.step.detuning,
                            spring_scale=s.step.spring_scale,
                            plant=s.step.plant)
        plan = self._planner().quick_plan(target, state)
        return None if plan is None else (QuickTarget(plan, next(self._serials)), state)

    @staticmethod
    def _quick_params(p: LiveParams, plan: TargetPlan) -> LiveParams:
        """The parameters a quick plan is adopted with: ``p`` aimed at its target, the
        gains kept until its refinement (the approach move replaces the IK's output while
        it runs, so they do not act before); with a gain no longer automatic (a command
        meanwhile), at the target's bound at once (:func:`with_plan`)."""
        return replace(p, target=plan.live_target) if gains_automatic(p) \
            else with_plan(p, plan)

    def _target(self, c: Command, p: LiveParams, prepared: Prepared) -> Move:
        """A ``target`` command's move: its plan (``prepared`` elsewhere, or made here),
        the parameters at it and, while running and planned here, its move chosen from q̄
        with what the step knows of the plant, as the plan was (:meth:`ControlStep.
        motion_state <poise.motion.step.ControlStep.motion_state>`; not running: ``start``
        plans again)."""
        if isinstance(prepared, ParamError):
            raise prepared
        assert not isinstance(prepared, QuickTarget)
        if isinstance(prepared, Replan):  # planned with its move by the re-planner
            prepared = prepared.plan
        s = self.service
        plan = prepared if prepared is not None else self._plan(
            parse_target(c.value, s.model.task_dim, s.reach), p)
        stepper = s.step.stepper
        choose = prepared is None and s.state == State.RUNNING and stepper is not None
        return self._planner().move(plan, s.step.motion_state(
            p, s.cycle.last.get("q"),
            move_from=stepper.q_bar if choose and stepper is not None else None))

    def _stream_samples(self, c: Command) -> CommandResponse:
        """A streamed ``target`` or a ``reference``: its samples into the stream the step
        follows (begun where the arm is at the first), stamped with the stream's time: a
        sample's own time ``t`` (the sender's clock) moved by the offset its stream's first
        stamped sample fixed; one without, the time it arrives."""
        s = self.service
        if s.state != State.RUNNING:
            raise ParamError(f"{c.name}: a streamed reference needs the loop running "
                             f"(state {s.state.value}); send 'run start' first")
        if c.name == "reference":
            try:
                samples = check_reference(c.value, s.model.task_dim, s.reach)
            except RuleError as exc:
                raise ParamError(str(exc)) from None
        else:
            samples = [(c.t, parse_target(c.value, s.model.task_dim, s.reach).tolist(), None)]
        begun = ""
        with s.param_lock:  # atomic with the e-stop latch
            if s.state != State.RUNNING:
                raise ParamError(f"e-stop or stop while the {c.name} was being applied")
            if self.estopped_since(c.estops):
                raise ParamError(ESTOP_CANCELLED)
            step = s.step
            following = step.following
            if following is None or following is not self._stream:
                following = self._stream = begin_stream(step, c.id)
                self._offset, self._mapped_at, begun = None, time.monotonic(), STREAM_BEGUN
            now = step.source_time
            assert now is not None
            source = following.source
            late = 0
            for t, x, v in samples:
                if t is None:
                    stamp = now
                else:
                    if self._offset is None:
                        self._offset = now - t
                    stamp = t + self._offset
                late += not source.push(stamp, x, v, on_arrival=t is None)  # type: ignore[call-arg]
        if begun:
            s.announce("info", code="stream_started", command=c.name, id=c.id)
        self._refresh(following)
        if late:
            return ok(c.name, f"{late} of {len(samples)} samples not newer than the stream's "
                              "newest: dropped")
        return ok(c.name, begun)

    def _trajectory(self, c: Command, prepared: object) -> CommandResponse:
        """A ``trajectory`` command: ``"stop"`` ends the one being followed (the arm holds
        where its reference is); waypoints are checked and shaped from where the arm is
        (``prepared`` in the real-time process's parent, else here), refused before anything
        moves when the arm cannot follow them (naming the first waypoint at fault), then
        followed from the next cycle. A target, ``run stop`` or an e-stop aborts it."""
        s = self.service
        if c.value == "stop":
            return ok(c.name, "stopped" if self.end_trajectory("stopped by command", c.id)
                      else "no trajectory running")
        if isinstance(prepared, ParamError):
            raise prepared
        if s.state != State.RUNNING:
            raise ParamError(f"trajectory: the loop must be running (state "
                             f"{s.state.value}); send 'run start' first")
        run = prepared if isinstance(prepared, TrajectoryRun) else self.prepare_trajectory(
            c.value, s.step.stepper.q_bar if s.step.stepper is not None else None)
        with s.param_lock:  # atomic with the e-stop latch
            if s.state != State.RUNNING:
                raise ParamError("e-stop or stop while the trajectory was being checked")
            if self.estopped_since(c.estops):
                raise ParamError(ESTOP_CANCELLED)
            self.end_trajectory("replaced by a new trajectory", c.id)
            begin_trajectory(s.step, run, c.id)
            self._stream, self.clamp_note = None, ""
        s.announce("trajectory", status="accepted", id=c.id, **run.summary())
        return ok(c.name, f"following {len(run.trajectory.waypoints[0])} waypoints for "
                          f"{run.source.duration:.3g} s"
                  + (f" after a {run.lead_in_s:.3g} s lead-in" if run.lead_in_s else ""))

    def prepare_trajectory(self, value: object, q_bar: np.ndarray | None) -> TrajectoryRun:
        """Waypoints checked and shaped from ``q_bar`` (:func:`~poise.motion.live.
        prepare_trajectory`, with this run's limits, period, tolerance and shaper).

        Raises:
            ParamError: malformed waypoints, or a trajectory the arm cannot follow (the
                message names the first waypoint at fault).
        """
        s = self.service
        if q_bar is None:
            raise ParamError("trajectory: no predicted configuration yet (the loop has not "
                             "run)")
        try:
            trajectory = Trajectory.from_payload(value, s.model.task_dim)
            return prepare_trajectory(s.model, trajectory, q_bar, s.limits, period=s.period,
                                      tolerance=s.config.algorithm.tolerance,
                                      delay=s.step.delay, shaper=s.config.loop.shaper)
        except TrajectoryError as exc:
            raise ParamError(f"trajectory refused: {exc}") from None

    def end_trajectory(self, why: str, ident: str = "") -> bool:
        """End the trajectory being followed, if any (the live target becomes where its
        reference is: the arm holds there) and say so (a ``trajectory`` event, ``aborted``).
        Call under the parameter lock or where no cycle runs."""
        s = self.service
        following = s.step.following
        if following is None or following.kind != "trajectory":
            return False
        if following.x_d.size:
            s.cycle.params = replace(s.cycle.params, target=following.x_d.copy())
        s.step.following = None
        s.announce("trajectory", status="aborted", id=following.ident, why=why, by=ident,
                   target=following.x_d.tolist())
        return True

    def end_following(self, why: str) -> None:
        """``run stop`` or an e-stop: a trajectory being followed is aborted (said), a stream
        ends (the next start plans the live target)."""
        self.end_trajectory(why)
        if self.service.step.following is not None:
            self.service.step.following = None
        self._stream, self.clamp_note = None, ""

    def _refresh(self, following: Following) -> None:
        """Keep the stream's filter limits current (the held Jacobian at q̄, at most every
        :data:`MAP_REFRESH_S`) and say when the arm starts or stops being held back from the
        reference (the state's ``target`` is then ``clamped``)."""
        s = self.service
        stepper = s.step.stepper
        if stepper is None:
            return
        q_bar = np.array(stepper.q_bar, dtype=float)
        now = time.monotonic()
        if now - self._mapped_at >= MAP_REFRESH_S and following.filter is not None:
            self._mapped_at = now
            following.filter.set_actuator_map(actuator_map(s.model, q_bar))
        qa = s.cycle.last.get("qa_ref")
        if qa is None:
            return
        lim = s.limits
        note = clamp_status(s.model, following, q_bar, np.asarray(qa), lim.qa_min,
                            lim.qa_max, s.config.algorithm.tolerance, s.reach)
        if bool(note) != bool(self.clamp_note):
            s.announce("info", code="reference_clamped" if note else "reference_free",
                       text=note or "the arm follows the reference again")
        self.clamp_note = note

    def _derive(self, c: Command, p: LiveParams) -> LiveParams:
        """The parameters after a ``gains``, ``algorithm`` or ``mode`` command, checked:
        gains within the stability bound (:mod:`poise.motion.params`)."""
        s = self.service
        p = self._at_current_plan(p)
        if c.name == "gains":
            return with_gains(p, c.value, s.period)
        if c.name == "algorithm":
            return with_algorithm(p, c.value, s.model.m, s.model.task_dim)
        new = with_mode(p, c.value)
        if new.mode == "fb" and not s.measures_q:
            raise ParamError("mode 'fb' needs a measured q; this device does not measure it "
                             "(add a joint-sensor board)")
        return new

    def _at_current_plan(self, p: LiveParams) -> LiveParams:
        """``p`` at the bound of the quick plan adopted last while its refinement is still to
        come (its parameters keep the previous target's bound till then), so that a
        ``gains``, ``algorithm`` or ``mode`` command is checked at the new target."""
        pending = self.unrefined
        if pending is None or self.service.step.plan is not pending.plan:
            return p
        return with_plan(p, pending.plan)

    def _refined(self, job: RefineJob, outcome: Move | Exception, seconds: float) -> None:
        """The refiner's result for one of this service's quick plans, applied
        (:meth:`apply_refinement`)."""
        if isinstance(outcome, Exception):
            self.apply_refinement(job.serial, None, None, seconds,
                                  f"{type(outcome).__name__}: {outcome}")
        else:
            self.apply_refinement(job.serial, outcome.plan.loop, outcome.plan.reference,
                                  seconds)

    def apply_refinement(self, serial: int, loop: Any, reference: FloatArray | None,
                         seconds: float, error: str = "") -> bool:
        """Finish the quick plan number ``serial``: the live parameters at its target
        (:func:`~poise.motion.params.with_plan`, with ``loop``, its linearisation with the
        bounds computed where the refinement ran; None: the plan's own) and, made within
        ``loop.plan_budget``, the predicted response ``reference`` that feedback follows
        after its move (:meth:`ControlStep.follow <poise.motion.step.ControlStep.follow>`;
        a later one is dropped, the parameters are still applied: past the move the old
        target's gains would act at the new one). Only while that plan is still the
        step's, the loop runs and no e-stop latched since it was adopted; then a ``param``
        event and an ``info`` event ``plan_refined`` (``seconds``: since the plan was
        adopted; ``error``: why the refinement failed, if it did). Returns whether it was
        applied."""
        s = self.service
        pending = self.unrefined
        if pending is None or pending.serial != serial:
            return False
        plan = pending.plan
        at = plan if loop is None or loop is plan.loop else replace(plan, loop=loop)
        budget = s.config.loop.plan_budget
        late = seconds > budget
        p = s.cycle.params
        new = _refined_params(p, at)
        with s.param_lock:  # atomic with the e-stop latch
            if self.unrefined is not pending or s.step.plan is not plan or \
                    s.state != State.RUNNING or s.estops != pending.estops:
                return False
            if s.cycle.params is not p:  # a command meanwhile
                new = _refined_params(s.cycle.params, at)
            s.cycle.params = new
            followed = reference is not None and not late and s.step.follow(plan, reference)
            self.unrefined = None
            s.announce("param", name="refine", value=None, id="", source="planner",
                       params=new.as_dict())
        text = f"the background plan took {seconds:.3g} s"
        if late and reference is not None:
            text += (f", more than loop.plan_budget = {budget:g} s: its predicted response is "
                     "dropped (the gains at the target are applied)")
        if error:
            text += f" and failed ({error}): the gains at the target are applied"
        s.announce("info", code="plan_refined", target=plan.live_target.tolist(),
                   seconds=round(seconds, 4), reference=followed, late=late, text=text)
        return True

    def estopped_since(self, since: int | None) -> bool:
        """Whether an e-stop latched after ``since`` (a value of the service's ``estops``)."""
        return since is not None and self.service.estops > since

    def start_move(self) -> Move:
        """The current target planned again for ``start``: from the measured q, where the
        loop restarts the step (the move starts there, chosen with what the step knows of
        the plant).

        Raises:
            ParamError: an unstable target, or an explicit gain above its bound.
        """
        s = self.service
        p, q = s.cycle.params, s.cycle.last.get("q")
        plan = self._plan(p.target, p, q)
        return self._planner().move(plan, s.step.motion_state(p, q, move_from=q))

    def _plan(self, target: np.ndarray, p: LiveParams, q: np.ndarray | None = None
              ) -> TargetPlan:
        """The offline plan of ``target`` from the step's q̄, the measured q (default: the
        last cycle's) and the last plan's goal; an unstable target is refused."""
        s = self.service
        q = s.cycle.last.get("q") if q is None else q
        try:
            return self._planner().target_plan(target, s.step.motion_state(p, q))
        except UnstableTarget as exc:
            raise ParamError(str(exc)) from None

    def plan_aim(self, aim: np.ndarray) -> TargetPlan | None:
        """A stall's re-plan (:mod:`poise.controller.replan`, in the re-planner's thread):
        ``aim`` planned from the measured state (q̄, the measured q, the last goal), its move
        from q̄ chosen on the model; None unless the loop runs.

        Raises:
            UnstableTarget, ParamError: no stable held configuration, a gain refused there.
        """
        s = self.service
        stepper = s.step.stepper
        if stepper is None or s.state != State.RUNNING:
            return None
        q_bar = np.array(stepper.q_bar, dtype=float)
        state = s.step.motion_state(s.cycle.params, s.cycle.last.get("q"), move_from=q_bar)
        plan, move = self._planner().replan(aim, state)
        return move.plan if move is not None else plan

    def _planner(self) -> MotionPlanner:
        """The planner with the step's current limits and steppers (set at connect and once
        the kernels are ready)."""
        planner, step = self.planner, self.service.step
        planner.limits, planner.stepper_factory = step.limits, step.stepper_factory
        return planner

    def adopt(self, plan: TargetPlan, serves: np.ndarray | None = None) -> None:
        """Make ``plan`` current: the loop moves the actuators to its goal, then runs the IK
        (``serves``: the live target a stall's re-plan serves, :meth:`ControlStep.adopt
        <poise.motion.step.ControlStep.adopt>`). A quick plan's refinement still to come is
        dropped."""
        self.unrefined = None
        self.refiner.cancel()
        self.end_trajectory("replaced by a target")
        self.service.step.adopt(plan, serves)
        self._stream, self.clamp_note = None, ""
        if not plan.reachable:
            self.service.announce("info", code="target_unreachable",
                                  target=plan.target.tolist(), error=plan.error,
                                  text=plan.note())


def _refined_params(p: LiveParams, plan: TargetPlan) -> LiveParams:
    """``p`` at ``plan``'s target with its bound (:func:`with_plan`); ``p`` aimed at the
    target where that refuses an explicit gain (one set meanwhile was checked at this
    target's bound already, :meth:`CommandRoom._at_current_plan`)."""
    try:
        return with_plan(p, plan)
    except ParamError:
        return replace(p, target=plan.live_target)


__all__ = ["STREAM_BEGUN", "CommandRoom", "Prepared", "Unrefined", "jsonable", "no", "ok"]
