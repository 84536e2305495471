"""One control cycle of the service: ``read → update → write → record``.

:class:`Cycle` owns the :class:`~poise.motion.step.ControlStep` (the computation), the q
estimate of a device that does not measure q, and the bookkeeping a cycle leaves behind (the
timing statistics, the last values the summary shows, the :class:`~poise.api.bus.CycleSample`
for the subscribers and the ring). Per cycle::

    read       a Sample (the pacing read it: :mod:`poise.controller.pacing`)
      → q      measured, or estimated (feed-forward only: q̄, or the equilibrium at the
               measured actuators before the first run)
      → update ControlStep.update (alg1 / alg2 / plain; ff: error from q̄, fb: from q),
               safety (rate + position limits, NaN guard), τ_ff = G_a(q̄)
      → write  Device.write(q̄a, τ_ff)
      → record after the write, never before it: the next move setpoint made ahead,
               the timing, the last values, the CycleSample offered to every subscriber
               (never blocks) and to ``cycle_sink``

The wire path (:mod:`poise.controller.wirepath`, ``loop.wire``) is the same cycle with another
``update → write``: from the bytes of the read to the bytes of the setpoint in one compiled
call (:meth:`Cycle.run_wire`, prepared before the read by :meth:`Cycle.wire_turn`); what it
declines the ordinary :meth:`Cycle.run` answers. Both end in the same :meth:`Cycle._record`.

Nothing here waits: the pacing decides when a cycle runs; the service
(:mod:`poise.controller.service`) owns the states, the commands and the device's life.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from poise.api.bus import CycleSample, SubscriberHub
from poise.api.state import State, StateMachine
from poise.controller.timing import TimingStats
from poise.devices.base import Device, DeviceError, Sample
from poise.firmware_bridge import messages as msg
from poise.ik.statics import solve_statics
from poise.models.actuation import join, split
from poise.models.base import MechanicalModel
from poise.motion.params import LiveParams
from poise.motion.step import ControlStep, StepFault
from poise.motion.streaming import Following

if TYPE_CHECKING:
    from poise.controller.faults import FaultLatch
    from poise.controller.wirepath import WirePath
    from poise.devices.base import RawRead
    from poise.kernels.wire import WireBuffers
    from poise.motion.retarget import Retargeting

    #: What the wire path prepares before a read: parameters, stepper, buffers, sequence no.
    WireTurn = tuple[LiveParams, Any, WireBuffers, int]

#: Device status bits as plain ints (an ``enum.Flag`` operation costs ~1 µs in a cycle).
ARMED, WATCHDOG, ESTOP, SATURATED = (int(msg.Status.ARMED), int(msg.Status.WATCHDOG),
                                     int(msg.Status.ESTOP), int(msg.Status.SATURATED))
#: The ring watch's counts (:mod:`poise.motion.ringwatch`) the cycle announces as they grow:
#: ``(count, event code, reason)``, the reason formatted with the ``scale`` now.
RING_EVENTS = (
    ("rings", "gain_backed_off", "the task error swung on undamped after the move "
     "(poise.motion.ringwatch): the automatic rate gains × {scale:g} until the next target"),
    ("raises", "gain_raised", "feedback barely moved a static error after the move "
     "(poise.motion.ringwatch): the automatic rate gains × {scale:g} until the next target"),
    ("halts", "gain_stopped", "feedback alone drove the task error away after the "
     "corrections ended (poise.motion.ringwatch): the automatic rate gains stopped until "
     "the next target"),
)


class Cycle:
    """The service's cycle (see the module docstring).

    Args:
        model: the controller's statics model.
        step: the cycle's computation.
        params: the live parameters at start.
        target_set: whether ``params.target`` was given; else the first cycle holds the task
            value where the robot is.
        sm: the service's state machine (read every cycle; e-stop and fault transitions).
        hub: the service: its sample subscribers and ``cycle_sink`` get each cycle's record,
            its event stream the cycle's events.
        faults: latches the faults the cycle finds.
        param_lock: the service's parameter lock (atomic with the e-stop latch).
        sensor_fault: no sensor frame for this long latches a fault [s].
    """

    def __init__(self, model: MechanicalModel, step: ControlStep, params: LiveParams,
                 target_set: bool, sm: StateMachine, hub: SubscriberHub, faults: FaultLatch,
                 param_lock: threading.Lock, sensor_fault: float) -> None:
        self.model = model
        self.step = step
        self.period = step.period
        #: The live parameters the next cycle uses (replaced whole by commands, never changed).
        self.params = params
        self.target_set = target_set
        self.sm, self.hub, self.faults = sm, hub, faults
        self.param_lock = param_lock
        self.sensor_fault = sensor_fault
        self.device: Device | None = None
        #: ``loop.wire``, where the device has a wire path (set at connect).
        self.wire: WirePath | None = None
        self.timing_stats = TimingStats(period_us=self.period * 1e6)
        #: When setpoints went out (the watchdog's diagnosis).
        self.writes = faults.writes
        #: The last cycle's values (q, q̄, x, errors, setpoint, status) for the summary.
        self.last: dict[str, Any] = {}
        #: The next running cycle restarts the step from the measured q (bumpless start).
        self.reset_pending = False
        #: Holding the last setpoint while the sensor frames are missing.
        self.holding = False
        #: When the device was armed [s, perf_counter]: its status counts from then on.
        self.armed_at = math.inf
        self.last_frame_time = time.perf_counter()
        self._seq = 0
        self._corrections_seen = 0  # sampled re-targeting's corrections announced
        # the ring watch's counts announced (RING_EVENTS)
        self._ring_seen = {count: 0 for count, _, _ in RING_EVENTS}
        self._detuning_seen = 0.0  # the step's sway detuning announced (move_sway)
        self._springs_seen = 0.0  # the step's spring scale announced (spring_scale)
        self._plant_seen = (0, False)  # mass windows, plant estimate used (plant_estimate)
        self._dither_seen: Any = None  # the dither announced running (dither), or None
        # the stepper and plan under which fold holds were last announced (none yet), and
        # that stepper's holds seen
        self._fold_seen: tuple[Any, Any, int] = (None, object(), 0)
        self._target_cache: tuple[object, tuple[float, ...]] = (None, ())

    # ------------------------------------------------------------------ the ordinary cycle

    def run(self, sample: Sample, t0: float, lateness: float, period: float) -> None:
        """Answer ``sample`` (the pacing read it; the cycle starts at ``t0``, ``lateness``
        and ``period`` as :mod:`poise.controller.timing` counts them [s]): q → update →
        write → record while running; record only otherwise."""
        self.last_frame_time = sample.host_time
        if self.holding:
            self.holding = False
            self.hub.announce("info", code="sensor_resumed")
        st = self.sm.state
        measured = sample.q if sample.q else tuple(self.estimate_q(sample.qa).tolist())
        if not all(map(math.isfinite, measured)):
            if st in (State.RUNNING, State.READY):
                self.hold_last()
                self.faults.fault("non-finite sensor values", q=[repr(x) for x in sample.q],
                                  qa=[repr(x) for x in sample.qa])
            return
        q = np.array(measured, dtype=float)
        if not self.target_set:
            self._hold_target(q)
        p = self.params
        status = sample.status
        if st is State.RUNNING and sample.host_time > self.armed_at and not status & ARMED:
            st = self._not_armed(status)
        if st is not State.RUNNING:
            x = self.model.fk(q)
            stepper = self.step.stepper
            self._record(sample, st, p, q, measured, x, x,
                         stepper.q_bar if stepper is not None else q, math.nan, (), (), t0,
                         t0, lateness, period)
            return
        step = self.step
        if self.reset_pending:  # bumpless start from the measured q after arming
            step.reset(q, p.algorithm)
            self.reset_pending = False
        try:
            out = step.update(q, p, bool(status & SATURATED), sample.efforts)
        except StepFault as exc:
            self.hold_last()
            self.faults.fault(str(exc), algorithm=p.algorithm)
            return
        if out.switched_from:
            self.hub.announce("info", code="algorithm_switch", to=p.algorithm,
                              frm=out.switched_from)
        qa_ref = tuple(out.qa.tolist())
        tau_ff = tuple(out.tau.tolist()) if out.tau is not None else ()
        try:
            self.device.write(qa_ref, tau_ff or None)  # type: ignore[union-attr]
        except DeviceError as exc:
            self.faults.fault(f"device error: {exc}")
            return
        self._record(sample, st, p, q, measured, out.x_meas, out.x_used, out.q_bar,
                     out.residual, qa_ref, tau_ff, t0, time.perf_counter(), lateness, period)

    def _not_armed(self, status: int) -> State:
        """Running, yet the device reports it is not armed: its e-stop, its watchdog, or
        disarmed; the state after the latch."""
        if status & ESTOP:
            self.sm.to(State.ESTOP, "device reports e-stop")
        elif status & WATCHDOG:
            self.faults.watchdog(None)
        else:
            self.faults.fault("device not armed (disarmed)")
        return self.sm.state

    def _hold_target(self, q: np.ndarray) -> None:
        """No target given: hold the task value where the robot is (once)."""
        with self.param_lock:
            if not self.target_set:
                self.params = replace(self.params, target=self.model.fk(q))
                self.target_set = True

    # ------------------------------------------------------------------ the wire variant

    def wire_turn(self, wire: WirePath) -> WireTurn | None:
        """Before the read: what the wire path needs that does not depend on it (the
        parameters, the stepper, its buffers, the setpoint's sequence number), or None when
        the next cycle is the ordinary one's (not running, holding, just armed, an algorithm
        switch, the reference stepper, the link down, a dither of the setpoints or the balance
        controller: the compiled call sends the IK's own; ``ControlStep.steps_aside``)."""
        if self.sm.state is not State.RUNNING or self.holding or self.reset_pending or \
                not self.target_set or self.step.steps_aside:
            return None
        p, stepper = self.params, self.step.stepper
        if stepper is None or stepper.name != p.algorithm or not hasattr(stepper, "wire"):
            return None
        buffers = wire.buffers(stepper)
        seq = wire.reserve(buffers)
        return None if seq is None else (p, stepper, buffers, seq)

    def run_wire(self, wire: WirePath, turn: WireTurn, read: RawRead, t0: float,
                 period: float) -> bool:
        """Answer ``read`` on the wire path with what :meth:`wire_turn` prepared: update and
        write in one compiled call, then the bookkeeping of :meth:`run`. False, with nothing
        changed, when this cycle is the ordinary one's (anything changed since the turn was
        prepared, or a read the compiled call leaves to it)."""
        p, stepper, buffers, seq = turn
        step = self.step
        if self.sm.state is not State.RUNNING or self.params is not p or self.holding or \
                step.stepper is not stepper or read.host_time <= self.armed_at or \
                step.steps_aside:
            return False
        start = wire.newest(read)
        if start < 0:
            return False
        wire.stamp(buffers, read)
        try:
            frame = read.data[start:] if start else read.data
            if step.wire_cycle(p, buffers, frame) != stepper.WIRE_OK:
                return False
        except Exception:  # the ordinary cycle repeats it and reports it
            return False
        sent = wire.send(seq, buffers)
        t_sent = time.perf_counter()
        # from here on nothing delays the setpoint: the bookkeeping
        out = step.wire_output()
        qa_ref = tuple(out.qa.tolist())
        tau_ff = tuple(out.tau.tolist()) if out.tau is not None else ()
        failed = None
        if not sent:  # its number went to another frame meanwhile: framed anew
            try:
                self.device.write(qa_ref, tau_ff or None)  # type: ignore[union-attr]
            except DeviceError as exc:
                failed = exc
            t_sent = time.perf_counter()
        sample, skipped = wire.account(read, buffers, start)
        if skipped:  # a burst: the older frames came while the loop was idle
            self.count_skipped(0, skipped)
        self.last_frame_time = sample.host_time
        if failed is not None:  # as the ordinary cycle: the read counted, nothing recorded
            self.faults.fault(f"device error: {failed}")
            return True
        self._record(sample, State.RUNNING, p, np.array(sample.q), sample.q, out.x_meas,
                     out.x_used, out.q_bar, out.residual, qa_ref, tau_ff, t0, t_sent,
                     t0 - read.host_time, period)
        return True

    # ------------------------------------------------------------------ after the write

    def _record(self, sample: Sample, st: State, p: LiveParams, q: np.ndarray,
                measured: tuple[float, ...], x_meas: Any, x_used: Any, q_bar: Any,
                residual: float, qa_ref: tuple[float, ...], tau_ff: tuple[float, ...],
                t0: float, t_sent: float, lateness: float, period: float) -> None:
        """What a cycle leaves behind (``q`` the measured configuration, ``measured`` the
        same as a tuple). With a setpoint ``qa_ref`` written at ``t_sent``: the next move
        setpoint made ahead (:meth:`ControlStep.look_ahead`), the write's time (the
        watchdog's diagnosis) and the timing. Then the last values and the cycle record for
        the subscribers and the ring."""
        last = self.last
        if qa_ref:
            self.step.look_ahead()
            if self.step.retarget is not None:
                self._retarget_events()
            self._fold_events()
            following = self.step.following
            if following is not None and following.kind == "trajectory":
                self._trajectory_progress(following)
            latency = t_sent - sample.host_time
            self.writes.wrote(t_sent)
            self.timing_stats.record(period * 1e6, lateness * 1e6, (t_sent - t0) * 1e6,
                                     latency * 1e6, latency > self.period)
            last["qa_ref"], last["tau"] = qa_ref, (tau_ff or None)
        status = sample.status
        target = self._target_tuple(p)
        x_meas_t = tuple(x_meas.tolist())
        x_t = x_meas_t if x_used is x_meas else tuple(np.asarray(x_used).tolist())
        err = math.dist(target, x_t)
        last.update(q=q, q_bar=q_bar, x=x_meas, task_error=math.dist(target, x_meas_t),
                    task_error_used=err, residual=residual, status=status, qa=sample.qa)
        self._seq += 1
        hub = self.hub
        subs, sink = hub._sample_subs, hub.cycle_sink  # type: ignore[attr-defined]
        if subs or sink is not None:
            cs = CycleSample(
                t=time.monotonic(), seq=self._seq, state=st.value, q=measured,
                q_bar=tuple(np.asarray(q_bar).tolist()), qa_ref=qa_ref, tau_ff=tau_ff,
                target=target, x=x_t, task_error=err, statics_residual=residual,
                period_us=period * 1e6, lateness_us=lateness * 1e6,
                compute_us=(t_sent - t0) * 1e6,
                latency_us=(t_sent - sample.host_time) * 1e6 if qa_ref else math.nan)
            if sink is not None:
                sink(cs)
            for sub in subs:
                sub.put(cs)

    def _announce_plant(self, r: Retargeting) -> None:
        """``plant_estimate``: the plant's bodies as its held efforts show them
        (:attr:`Retargeting.plant_bodies <poise.motion.retarget.Retargeting.plant_bodies>`:
        ``masses`` [kg], ``stiffness`` [N·m/rad], the ``task_bias`` [task units], the
        ``windows`` they come from), or ``masses`` None when plans are no longer aimed for
        an estimate. A real-time parent plans with what it last heard."""
        bodies = r.plant_bodies
        if bodies is None:
            self.hub.announce("info", code="plant_estimate", masses=None, stiffness=None,
                              task_bias=None, windows=r.masses.windows,
                              reason="the model's task is within the threshold of the "
                                     "plant's: targets are planned on the model")
            return
        masses, stiffness = bodies
        self.hub.announce("info", code="plant_estimate", masses=masses.tolist(),
                          stiffness=stiffness.tolist(), task_bias=r.task_bias.tolist(),
                          windows=r.masses.windows,
                          reason="the held efforts show the plant's masses off the model's "
                                 f"(the task {1e3 * float(np.linalg.norm(r.task_bias)):.3g} "
                                 "mm apart): targets are planned for the plant from now on")

    def _fold_events(self) -> None:
        """An ``info`` event ``fold_hold`` when Algorithm 1 first holds its setpoint at a
        fold of the model's held configurations under the current plan
        (:class:`~poise.motion.stepper.FoldHold`: past it the model would lean the other way,
        which the robot may not): ``qa`` the setpoint held, ``q_bar``, ``fold_holds`` the
        holds of the run so far. The target may be left short of while it holds."""
        stepper, plan = self.step.stepper, self.step.plan
        holds = int(getattr(stepper, "fold_holds", 0))
        seen_stepper, seen_plan, seen = self._fold_seen
        if holds <= (seen if stepper is seen_stepper else 0):  # a new stepper counts afresh
            return
        self._fold_seen = (stepper, plan, holds)
        if plan is seen_plan:
            return
        assert stepper is not None
        self.hub.announce("info", code="fold_hold", qa=np.asarray(stepper.qa).tolist(),
                          q_bar=np.asarray(stepper.q_bar).tolist(), fold_holds=holds,
                          reason="the IK holds its setpoint at a fold of the model's held "
                                 "configurations: past it the model would lean the other way "
                                 "(the target may be left short of)")

    def _retarget_events(self) -> None:
        """Sampled re-targeting's events (:mod:`poise.motion.retarget`): an ``info`` event
        ``static_correction`` for each correction (the mismatch, the actuator step, whether a
        limit bounded it), and ``stalled_at_limit`` when the limits keep a correction from
        the target (the live target, the mismatch, and ``aim``: where a re-plan from the
        measured state should send the model, the live target plus the model's offset from
        the plant at the setpoint now; the
        service's :class:`~poise.controller.replan.StallReplanner` hears it and re-plans);
        and ``gain_backed_off`` when the ring watch (:mod:`poise.motion.ringwatch`) halved
        the automatic rate gains (``gain_scale``, ``rings``), ``gain_stopped`` when it
        stopped them, feedback alone driving the error away (``halts``), ``gain_raised``
        when it raised them, feedback barely moving a static error (``raises``);
        ``move_sway`` when
        the plant's sway after a move changed the detuning of its modes the step takes (the
        mean over the moves that are evidence; :mod:`poise.motion.sway`: ``detuning``,
        ``sway`` [task units], ``ratio`` to the move's unshaped sway on the model), which
        later moves chosen on the model allow for; ``spring_scale`` when the plant's springs
        as where it rested showed (:mod:`poise.motion.springs`: ``spring_scale``,
        ``samples``, ``explained``) changed the scale later plans are aimed with;
        ``plant_estimate`` when the plant's bodies as its held efforts show them
        (:mod:`poise.motion.masses`) are taken up, change or are dropped
        (:meth:`_announce_plant`); ``dither`` when the setpoints' dither
        (:mod:`poise.motion.dither`) starts, changes or stops (``on``, ``hz``,
        ``amplitude`` [actuator units], ``friction``): the arm moves a little on purpose
        meanwhile."""
        r, ring, sway = self.step.retarget, self.step.ring, self.step.sway
        assert r is not None
        if sway is not None and sway.detuning != self._detuning_seen:
            self._detuning_seen = sway.detuning
            last = sway.last or (0.0, 0.0)
            self.hub.announce("info", code="move_sway", detuning=sway.detuning,
                              sway=last[0], ratio=last[1],
                              reason="the plant swayed after the move beyond the model's "
                                     "prediction: its modes are taken as "
                                     f"±{100 * sway.detuning:.2g} % off the model's in the "
                                     "moves chosen from now on")
        if r.spring_scale != self._springs_seen:
            self._springs_seen = r.spring_scale
            self.hub.announce("info", code="spring_scale", spring_scale=r.spring_scale,
                              samples=r.springs.samples, explained=r.springs.explained,
                              reason="where the plant rested after moves shows its springs "
                                     f"× {1 + r.spring_scale:.3g} the model's: targets are "
                                     "planned for that from now on")
        dither = r.dither if r.dithering else None
        if dither is not self._dither_seen:
            self._dither_seen = dither
            self._announce_dither(dither)
        plant_key = (r.masses.windows, bool(r.task_bias.any()))
        if plant_key != self._plant_seen:
            announced = self._plant_seen[1]
            self._plant_seen = plant_key
            if plant_key[1] or announced:
                self._announce_plant(r)
        if ring is not None:
            self._ring_events(ring)
        if r.total != self._corrections_seen:
            self._corrections_seen = r.total
            if r.corrections:
                self.hub.announce("info", code="static_correction", **r.corrections[-1].as_dict())
        if r.stalled is not None and r.plan is not None:
            mismatch, r.stalled = r.stalled, None
            self.hub.announce("info", code="stalled_at_limit", reason=r.ended,
                              target=np.asarray(self.params.target, dtype=float).tolist(),
                              mismatch=mismatch.tolist(),
                              aim=(np.asarray(r.plan.live_target) + mismatch).tolist())

    def _ring_events(self, ring: Any) -> None:
        """An ``info`` event for each of the ring watch's counts that grew
        (:data:`RING_EVENTS`), with its summary (the scale now)."""
        for count, code, reason in RING_EVENTS:
            value = getattr(ring, count)
            if value != self._ring_seen[count]:
                self._ring_seen[count] = value
                self.hub.announce("info", code=code, **ring.summary(),
                                  reason=reason.format(scale=ring.scale))

    def _announce_dither(self, dither: Any) -> None:
        """The ``dither`` event of :meth:`_retarget_events` (``dither``: the
        :class:`~poise.motion.dither.Dither` now, or None: stopped)."""
        if dither is None:
            self.hub.announce("info", code="dither", on=False, hz=None, amplitude=None,
                              reason="the setpoints are no longer dithered")
            return
        hz = dither.omega / (2 * math.pi)
        self.hub.announce("info", code="dither", on=True, hz=hz,
                          amplitude=dither.amplitude.tolist(), friction=True,
                          reason="the resting efforts disagree as friction makes them: the "
                                 f"setpoints are dithered at {hz:.2g} Hz (at most "
                                 f"{float(np.max(np.abs(dither.amplitude))):.2g} actuator "
                                 "units), the rate gain paused, while the arm rests until "
                                 "its masses are measured")

    def _trajectory_progress(self, following: Following) -> None:
        """A trajectory's ``trajectory`` events: its progress at every tenth of its duration,
        and at its end ``done``: the live target becomes its last point (held by the IK from
        the next cycle) and the step stops following it."""
        t = self.step.source_time
        duration = following.duration
        if t is None or not duration > 0:
            return
        fraction = min(1.0, max(0.0, (t - self.period) / duration))
        tenth = int(fraction * 10 + 1e-9)
        if tenth > following.reported and fraction < 1.0:
            following.reported = tenth
            self.hub.announce("trajectory", status="running", id=following.ident,
                              progress=tenth / 10, t=round(t - self.period, 6))
        if fraction >= 1.0:
            with self.param_lock:
                self.params = replace(self.params, target=following.x_d.copy())
                if self.step.following is following:
                    self.step.following = None
            self.hub.announce("trajectory", status="done", id=following.ident, progress=1.0,
                              t=round(t - self.period, 6), target=following.x_d.tolist())

    def _target_tuple(self, p: LiveParams) -> tuple[float, ...]:
        """``p.target`` as a tuple of floats, converted once per parameter set (commands
        replace the :class:`LiveParams`, never change it); while a moving reference is
        followed, its value this cycle x_d (what the record compares the arm with)."""
        following = self.step.following
        if following is not None and following.x_d.size:
            return tuple(following.x_d.tolist())
        cached = self._target_cache
        if cached[0] is not p:
            cached = self._target_cache = (p, tuple(np.asarray(p.target, float).tolist()))
        return cached[1]

    def count_skipped(self, missed: int, coalesced: int = 0) -> None:
        """Count frames (device pacing) or deadlines (host pacing) the loop skipped, while
        running only: the statistics cover the cycles that run the controller, as their
        percentiles and ``cycles`` do. Before arming the loop only watches the sensors, and
        its first cycles take the link over from the reader thread with a backlog of frames
        the handshake left (they showed as 3-5 "missed" at the start of a run)."""
        if self.sm.state is State.RUNNING:
            self.timing_stats.missed += missed
            self.timing_stats.coalesced += coalesced

    # ------------------------------------------------------------------ no cycle

    def hold_last(self) -> None:
        """Write the last setpoint again (running only)."""
        device, qa = self.device, self.last.get("qa_ref")
        if device is not None and qa is not None and self.sm.state == State.RUNNING:
            with contextlib.suppress(DeviceError):
                device.write(qa, self.last.get("tau"))
                self.writes.wrote(time.perf_counter())

    def no_frame(self, silence: float) -> None:
        """No sensor frame for ``silence`` seconds: hold, then fault."""
        st = self.sm.state
        device = self.device
        if st not in (State.RUNNING, State.READY) or device is None:
            return
        if not device.connected:
            self.faults.fault("device disconnected", silence_s=round(silence, 3))
            return
        if silence >= self.sensor_fault:
            self.faults.fault(f"sensor timeout: no sensor frame for {silence:.3f} s",
                              silence_s=round(silence, 3))
            return
        if st == State.RUNNING:
            if not self.holding:
                self.holding = True
                self.hub.announce("fault", source="host", code="sensor_timeout",
                                  action="hold", silence_s=round(silence, 3))
            self.hold_last()

    def estimate_q(self, qa_measured: tuple[float, ...]) -> np.ndarray:
        """q when the device does not measure it: the IK's prediction q̄ once running, else
        the equilibrium the robot settles in at the measured actuator positions (from the
        last estimate's unactuated coordinates)."""
        stepper = self.step.stepper
        if stepper is not None:
            return stepper.q_bar
        model = self.model
        last = self.last.get("q")
        qu0 = split(model, np.asarray(last))[1] if last is not None else \
            np.zeros(model.n - model.m)
        sol = solve_statics(model, np.asarray(qa_measured, dtype=float), qu0)
        return sol.q if sol.converged else join(model, np.asarray(qa_measured, float), qu0)


__all__ = ["ARMED", "ESTOP", "SATURATED", "WATCHDOG", "Cycle"]
