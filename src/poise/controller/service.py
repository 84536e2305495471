"""The controller service: states, commands, the device's life cycle, summaries.

:class:`Controller` owns one :class:`~poise.devices.base.Device` (opened from ``[device]`` by
:func:`poise.devices.factory.open_device`: the poise wire protocol, a Dynamixel bus, a composite
of a joint-sensor board and a bus, or the virtual device) and one loop thread. It is built of
three rooms:

* the service (this module): the state machine (idle → connecting → ready → running, the
  latched fault and e-stop), the life cycle (connect, start, stop, estop, clear, close), the
  commands (:class:`~poise.controller.commands.CommandRoom`, the targets planned by the
  :class:`~poise.motion.motion_planner.MotionPlanner`), the faults
  (:class:`~poise.controller.faults.FaultLatch`) and the summaries
  (:mod:`poise.controller.summary`);
* the cycle (:class:`~poise.controller.cycle.Cycle`): one ``read → update → write → record``
  around the :class:`~poise.motion.step.ControlStep`, with its wire-path variant;
* the pacing (:class:`~poise.controller.pacing.Pacer`): when the next cycle runs, on the
  device's clock or the host's (``loop.pacing``).

A device that does not measure q (a servo bus alone) runs feed-forward only: the loop's q is
then the predicted q̄, started from the equilibrium at the measured actuator positions.

Everything else (MQTT, logs, the GUI, ``submit``) runs in other threads and talks to the loop
only through the immutable :class:`~poise.motion.params.LiveParams` reference (swapped
atomically), the state machine, and bounded :class:`~poise.api.bus.SampleQueue` s.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from poise.api.bus import ESTOP_CANCELLED, Command, CommandResponse, CycleSample
from poise.api.state import LATCHED, State, StateMachine
from poise.controller import kernelprep
from poise.controller import summary as summaries
from poise.controller.commands import CommandRoom, Prepared, no, ok
from poise.controller.config import Config, ConfigError, ControllerModel, build_model
from poise.controller.cycle import Cycle
from poise.controller.dispatch import CommandDispatcher
from poise.controller.face import ControllerFace
from poise.controller.faults import FaultLatch
from poise.controller.pacing import SPIN, Pacer, enter_realtime
from poise.controller.replan import StallReplanner
from poise.controller.wirepath import wire_path
from poise.devices.affinity import CpuPlan, plan_cpus
from poise.devices.base import Device, DeviceError, DeviceInfo
from poise.devices.factory import open_device
from poise.motion.params import LiveParams, ParamError
from poise.motion.safety import SafetyLimits
from poise.motion.step import ControlStep

if TYPE_CHECKING:
    from poise.devices.simdevice import SimDevice
    from poise.kernels.packed import PackedModel
    from poise.kernels.warmup import WarmUpProgress, WarmUpStep


class ControllerError(RuntimeError):
    """The controller cannot do what was asked; the message says why."""


class Controller(ControllerFace):
    """The real-time controller service (in-process API; ``poise run`` is a thin CLI on it).

    Args:
        config: the validated configuration.
        model: the statics model (default: built from ``config.model``).
        launched: a virtual device started earlier, which the first connect opens.

    Use::

        ctl = Controller(load_config("run.toml"))
        samples = ctl.subscribe()            # SampleQueue[CycleSample]
        ctl.start()                          # idle → connecting → ready → running
        ctl.submit(Command("target", [0.4]))
        ...
        ctl.stop(); print(ctl.summary()); ctl.close()
    """

    def __init__(self, config: Config, *, model: ControllerModel | None = None,
                 launched: SimDevice | None = None, replan: bool = True) -> None:
        self.config = config
        #: Where the loop thread and the virtual device run (``loop.cpu``), or why nothing
        #: is pinned (:func:`~poise.devices.affinity.plan_cpus`).
        self.cpu_plan: CpuPlan | None
        self.cpu_plan, unpinned = plan_cpus(config.loop.cpu)
        self.model_info = model or build_model(config.model)
        self.model = self.model_info.model
        #: The robot's reach [m]: bounds the targets accepted (poise.api.rules).
        self.reach: float | None = getattr(self.model, "reach", None)
        self.period = 1.0 / config.loop.rate
        ControllerFace.__init__(self)
        self._sm = StateMachine(self._publish)
        self._cmd_lock = threading.RLock()
        #: Held for microseconds while parameters are swapped: atomic with the e-stop latch.
        self.param_lock = threading.Lock()
        self.device: Device | None = None
        #: What the device is (set at connect).
        self.device_info: DeviceInfo | None = None
        #: Whether the device measures q (False: feed-forward only; set at connect).
        self.measures_q = True
        self.sim: object | None = None  # the virtual device process (port "sim")
        # the virtual device launched before this controller was built, which the first
        # connect opens (see poise.controller.realtime.boot)
        self._launched = launched
        self.pacing = config.loop.pacing
        self._thread: threading.Thread | None = None
        target = config.algorithm.target
        if target is not None and len(target) != self.model.task_dim:
            raise ConfigError(f"{config.source}: algorithm.target = {list(target)}: the model "
                              f"'{self.model.name}' has a {self.model.task_dim}-dimensional "
                              f"task")
        params = LiveParams.from_config(
            config, np.asarray(target if target is not None else np.zeros(self.model.task_dim)))
        if config.algorithm.name == "alg1" and config.algorithm.update == "inverse" and \
                self.model.m != self.model.task_dim:
            raise ConfigError(f"{config.source}: algorithm.update = 'inverse' needs m = "
                              f"task_dim; model '{self.model.name}' has m = {self.model.m}, "
                              f"task_dim = {self.model.task_dim}")
        lim = config.limits
        self.limits = SafetyLimits.build(self.model.m, self.model.qa_min, self.model.qa_max,
                                         lim.qa_min, lim.qa_max, lim.qa_rate,
                                         qa_accel=lim.qa_accel)
        #: The cycle's computation (pure; see poise.motion.step).
        self.step = ControlStep(self.model, self.limits, self.period,
                                effort_feedforward=config.loop.effort_feedforward,
                                shaper=config.loop.shaper,
                                tolerance=config.algorithm.tolerance,
                                ring_watch=config.loop.ring_watch,
                                balance=config.loop.balance,
                                total_mass=config.model.total_mass)
        #: Streams and trajectories run on the wall clock (the device sets the loop's pace).
        self.step.clock = time.monotonic
        self._kernels_ready = False
        self._kernel_lock = threading.Lock()
        self._estops = 0  # e-stops latched so far (see estops)
        #: The cycle's last values when the run stopped: what it achieved, before the
        #: disarmed device moves (a servo bus goes limp); None while running.
        self._at_stop: dict[str, Any] | None = None
        self._started_at: float | None = None
        self._old_switch: float | None = None
        self.faults = FaultLatch(self._sm, self)
        #: The cycle (poise.controller.cycle) and the clock that runs it.
        self.cycle = Cycle(self.model, self.step, params, target is not None, self._sm, self,
                           self.faults, self.param_lock, lim.sensor_fault)
        self.pacer = Pacer(self.cycle, config.loop.priority, self.cpu_plan, unpinned,
                           lim.sensor_hold)
        self.timing_stats = self.cycle.timing_stats
        self.commands = CommandRoom(self)
        #: Re-plans a target whose feedback stalled at an actuator limit
        #: (``loop.replan_on_stall``, fb; the real-time process's parent does it for its
        #: child, which passes ``replan=False``).
        self.replanner: StallReplanner | None = StallReplanner(
            self, self.commands.plan_aim,
            lambda command, prepared: self.submit(command, prepared=prepared),
            self.announce) if (replan and config.loop.replan_on_stall
                               and config.loop.mode == "fb") else None
        self.dispatcher = CommandDispatcher(
            self.submit, stream_targets=config.loop.targets == "stream")
        #: Called in the loop thread with every cycle's record (the real-time process writes
        #: it into its shared-memory ring there: no thread hand-over); must never block.
        self.cycle_sink: Callable[[CycleSample], None] | None = None

    # ------------------------------------------------------------------ observation

    @property
    def state(self) -> State:
        """The current :class:`~poise.api.state.State`."""
        return self._sm.state

    @property
    def estops(self) -> int:
        """How many e-stops have latched (it only grows). A receiver stamps each command
        with it (``Command.estops``): a command is refused if an e-stop latched after it was
        received and before it took effect."""
        return self._estops

    @property
    def reason(self) -> str:
        """Why a latched state (fault, estop) was entered; empty otherwise."""
        return self._sm.reason

    @property
    def params(self) -> LiveParams:
        """The live parameters the next cycle will use."""
        return self.cycle.params

    @property
    def target_status(self) -> str:
        """``reachable``, ``unreachable`` (the arm goes as close as it can) or ``""`` (not
        checked: fully actuated robots, or no target yet); while a moving reference is
        followed, its kind (``stream``, ``trajectory``), or ``clamped`` when the arm is held
        back from it (:attr:`target_note` says why)."""
        following = self.step.following
        if following is not None:
            return "clamped" if self.commands.clamp_note else following.kind
        plan = self.step.plan
        return "" if plan is None or plan.q_goal is None else plan.status

    @property
    def target_note(self) -> str:
        """Why the target is unreachable, or why the arm is held back from a streamed
        reference ('' otherwise)."""
        if self.step.following is not None:
            return self.commands.clamp_note
        plan = self.step.plan
        return "" if plan is None else plan.note()

    def wait_for(self, *states: State, timeout: float = 5.0) -> bool:
        """Block until the state is one of ``states``; False on timeout."""
        return self._sm.wait_for(tuple(states), timeout)

    def timing(self) -> dict[str, Any]:
        """Timing percentiles (µs) and counters of the cycles so far (see
        :mod:`poise.controller.timing`). Call from any thread."""
        return self.timing_stats.summary()

    def reset_timing(self) -> None:
        """Start the timing statistics afresh (a benchmark's measured window)."""
        self.timing_stats.reset()

    def summary(self) -> dict[str, Any]:
        """What the run achieved: ``reached``, ``task_error`` (measured), ``statics_residual``,
        ``state``, ``timing`` (µs percentiles, missed cycles) and more; JSON-ready. Once
        stopped, the values are those of the run's last cycle
        (:func:`poise.controller.summary.summary`)."""
        return summaries.summary(self)

    def final_summary(self) -> dict[str, Any]:
        """:meth:`summary` with the state the run ended in: ``fault``, ``estop`` or
        ``stopped``."""
        return summaries.final_summary(self)

    # ------------------------------------------------------------------ kernels

    def prepare_kernels(self, progress: WarmUpProgress | None = None) -> None:
        """Compile (or load from the cache) the run's kernels, once per controller, before
        the device is opened (:meth:`connect` calls it; the real-time process calls it as
        soon as it is built): no cycle ever compiles, and no compile runs while the device
        is armed. The steps are :meth:`kernel_steps`; ``progress`` hears of each as it
        starts (:class:`~poise.kernels.warmup.KernelProgress`: ``poise run`` shows a first
        start's compile with it). Once all are done the cache is marked as holding this
        model family's kernels (:func:`poise.kernels.cache.mark_prepared`).
        Thread-safe: a second caller waits for the first."""
        kernelprep.prepare_kernels(self, progress)

    def kernel_steps(self, packed: PackedModel | None) -> list[WarmUpStep]:
        """What :meth:`prepare_kernels` compiles or loads
        (:func:`poise.controller.kernelprep.kernel_steps`)."""
        return kernelprep.kernel_steps(self, packed)

    def kernels_cached(self) -> bool:
        """Whether :meth:`prepare_kernels` will load from Numba's cache (this model family's
        kernels were prepared before from the same sources) rather than compile."""
        return kernelprep.kernels_cached(self)

    # ------------------------------------------------------------------ lifecycle

    def connect(self) -> CommandResponse:
        """idle → connecting → ready: open the device (spawning the virtual device for
        ``device.port = "sim"``), check its channels against the model, set its rate, start
        the loop thread."""
        with self._cmd_lock:
            if self.state in (State.READY, State.RUNNING):
                return ok("connect", "already connected")
            if self.state != State.IDLE:
                return no("connect", f"cannot connect in state {self.state.value}")
            self._sm.to(State.CONNECTING, "connect")
            cfg, loop = self.config.device, self.config.loop
            try:
                self.prepare_kernels()
                launched, self._launched = self._launched, None
                opened = open_device(cfg, model=self.config.model.name, m=self.model.m,
                                     rate=loop.rate, on_fault=self.faults.on_device_fault,
                                     qa_min=self.model.qa_min, qa_max=self.model.qa_max,
                                     launched=launched, cpus=self.cpu_plan and
                                     self.cpu_plan.others, priority=loop.priority)
                self.device = self.cycle.device = device = opened.device
                self.sim = opened.sim
                info = self.device_info = device.describe()
                self.measures_q = info.measures_q
                _check_device(info, self.model, self.cycle.params.mode)
                device.configure(rate_hz=loop.rate, watchdog_ms=cfg.watchdog_ms)
                self.faults.watchdog_ms = cfg.watchdog_ms or info.extra.get("watchdog_ms")
                self.pacer.busy_poll = _poll_busily(self, device, loop.busy_poll)
                self.cycle.wire = wire_path(device, info, self.step.effort_feedforward) \
                    if loop.wire and loop.compiled else None
                lim = self.config.limits
                self.limits = self.step.limits = SafetyLimits.build(
                    self.model.m, self.model.qa_min, self.model.qa_max, lim.qa_min,
                    lim.qa_max, lim.qa_rate, list(info.qa_min), list(info.qa_max),
                    qa_accel=lim.qa_accel)
            except (DeviceError, ControllerError, ValueError, OSError) as exc:
                _teardown(self)
                self._sm.to(State.FAULT, f"connect failed: {exc}")
                return no("connect", f"connect failed: {exc}")
            self.pacing = self.pacer.mode = "host" if info.polled else loop.pacing
            self.announce("info", device=summaries.device_dict(info), port=opened.port,
                          pacing=self.pacing)
            if not info.measures_q:
                self.announce("info", code="feedforward_only",
                              text=f"{info.name} does not measure q: feed-forward only "
                                   "(give a joint-sensor board, --sensors, for feedback)")
            self.pacer.quit.clear()
            self._thread = threading.Thread(target=self.pacer.run, name="poise-control-loop",
                                            daemon=True)
            if loop.switch_interval > 0:
                self._old_switch = sys.getswitchinterval()
                sys.setswitchinterval(loop.switch_interval)
            self._sm.to(State.READY, "connected")
            self._thread.start()
            return ok("connect")

    def start(self, cause: str = "start", since: int | None = None) -> CommandResponse:
        """Connect if needed, arm the device and run the loop (ready → running).

        ``since``: the :attr:`estops` count when the command was received (default: now).
        An e-stop that latches meanwhile, even while the device is being armed, wins: the
        device is sent EStop again and the start is refused."""
        with self._cmd_lock:
            since = self._estops if since is None else since
            st = self.state
            if st in LATCHED:
                return no("run", f"{st.value} latched ({self.reason}); send 'clear' first")
            if st == State.RUNNING:
                return ok("run", "already running")
            if st == State.IDLE:
                r = self.connect()
                if not r.accepted:
                    return no("run", r.reason)
            device, cycle, commands = self.device, self.cycle, self.commands
            if self.state != State.READY or device is None:
                return no("run", f"cannot start in state {self.state.value}")
            if not device.connected:
                return no("run", "device not connected (the link is reconnecting)")
            if cycle.target_set:  # the loop resets the step from the measured q: the move
                try:                # starts there; the target's bounds, automatic gains
                    move = commands.start_move()
                except ParamError as exc:
                    return no("run", str(exc))
                commands.adopt(move.plan)
                cycle.params = move.params
                self.announce("param", name="start", value=None, id="", source=cause,
                              params=move.params.as_dict())
            if commands.estopped_since(since):
                return no("run", ESTOP_CANCELLED)
            try:
                device.arm(clear_estop=self.faults.clear_estop)
            except DeviceError as exc:
                return no("run", f"arm failed: {exc}")
            with self.param_lock:  # atomic with the e-stop latch
                late = commands.estopped_since(since)
                if not late:
                    cycle.armed_at = time.perf_counter()
                    self.faults.clear_estop = False
                    cycle.reset_pending = True
                    self._started_at = time.monotonic()
                    self._at_stop = None
                    self._sm.to(State.RUNNING, cause)
            if late:  # it latched while arming: the device may have been armed after EStop
                with contextlib.suppress(DeviceError):
                    device.estop()
                return no("run", ESTOP_CANCELLED)
            return ok("run")

    def stop(self, cause: str = "stop") -> CommandResponse:
        """running → stopping → ready: stop sending setpoints and disarm (the device holds)."""
        with self._cmd_lock:
            if self.state != State.RUNNING:
                return ok("run", f"not running (state {self.state.value})")
            self._sm.to(State.STOPPING, cause)
            self._at_stop = dict(self.cycle.last)
            self.faults.disarm()
            self._sm.to(State.READY, "stopped")
            with self.param_lock:
                self.commands.end_following(cause)
            return ok("run")

    def estop(self, cause: str = "e-stop") -> CommandResponse:
        """Latch the e-stop (any state) and send EStop to the device, in the caller's thread;
        the device's acknowledgement is recorded as an ``info`` event
        (``code = "estop_acknowledged"``), its absence as a ``fault`` event. A command being
        applied is either done before the latch or refused (the parameter lock is held for
        microseconds, never during planning)."""
        with self.param_lock:
            self._estops += 1
            self._sm.to(State.ESTOP, cause)
            self.faults.clear_estop = True
            self.commands.end_following(cause)
        self.step.goal = None
        device = self.device
        if device is not None and device.connected:
            try:
                device.estop()
                self.announce("info", code="estop_acknowledged", ok=True)
            except DeviceError as exc:
                self.announce("fault", source="host", code="estop_not_acknowledged",
                              text=str(exc))
        return ok("estop")

    def clear(self, cause: str = "clear", since: int | None = None) -> CommandResponse:
        """Clear a latched fault or e-stop: → ready (device connected) or idle (no link).

        ``since``: the :attr:`estops` count when the command was received (default: now);
        an e-stop that latched after it is never cleared by it."""
        with self._cmd_lock:
            since = self._estops if since is None else since
            if self.state not in LATCHED:
                return no("clear", f"nothing to clear (state {self.state.value})")
            if self.device is None:
                self._sm.to(State.IDLE, cause)
                return ok("clear")
            if not self.device.connected:
                return no("clear", "device not connected (the link is reconnecting); "
                          "clear again once it is back")
            with self.param_lock:  # atomic with the e-stop latch
                if self.commands.estopped_since(since):
                    return no("clear", ESTOP_CANCELLED)
                self.cycle.holding = False
                self.cycle.last_frame_time = time.perf_counter()
                self._sm.to(State.READY, cause)
            return ok("clear")

    def close(self) -> None:
        """Stop (disarm), refuse the commands still waiting, record the final summary as an
        event (kind ``summary``), end the loop thread, close the link and the virtual device
        → idle."""
        self.dispatcher.close()
        self.commands.refiner.close()
        if self.replanner is not None:
            self.replanner.close()
        with self._cmd_lock:
            if self.state == State.RUNNING:
                self.stop("close")
            if self._started_at is not None and self.state != State.IDLE:
                self.announce("summary", **self.final_summary())
            self.pacer.quit.set()
            if self._thread is not None and self._thread is not threading.current_thread():
                self._thread.join(timeout=5)
            self._thread = None
            _teardown(self)
            launched, self._launched = self._launched, None
            if launched is not None:  # never connected: it was never opened
                launched.stop()
            self._sm.to(State.IDLE, "closed")
            if self._old_switch is not None:
                sys.setswitchinterval(self._old_switch)
                self._old_switch = None

    # ------------------------------------------------------------------ commands

    def post(self, command: Command, reply: Callable[[CommandResponse], None]) -> None:
        """Hand over a command without waiting for it (thread-safe): an e-stop or stop acts at
        once in the caller's thread, the rest is queued, coalesced and applied in order (see
        :class:`~poise.controller.dispatch.CommandDispatcher`); ``reply`` gets the one
        answer."""
        self.dispatcher.post(command, reply)

    def submit(self, command: Command, *, prepared: Prepared = None) -> CommandResponse:
        """Validate and apply a command between two cycles (thread-safe); always answered.

        Refused with a reason: unknown name, bad value, not allowed in the current state
        (everything but ``clear`` and ``estop`` while the e-stop is latched).

        ``prepared``: for a ``target`` command, its offline plan made elsewhere (the parent
        of the real-time process plans, so that no planning runs beside the loop): a plan,
        a quick plan to adopt at once (:class:`~poise.controller.refine.QuickTarget`,
        refined later by :meth:`CommandRoom.apply_refinement
        <poise.controller.commands.CommandRoom.apply_refinement>`), for a ``trajectory`` its
        checked and shaped reference (:class:`~poise.motion.live.TrajectoryRun`), or the
        :class:`ParamError` that planning raised; None: planned here
        (:class:`~poise.controller.commands.CommandRoom`).
        """
        return self.commands.submit(command, prepared)


def _check_device(info: DeviceInfo, model: Any, mode: str) -> None:
    """The device's channels against the model's; feedback needs a measured q.

    Raises:
        ControllerError: they do not match, or mode ``fb`` without a measured q.
    """
    n_q, n_a = info.n_q, info.n_a
    if n_q not in (0, model.n) or n_a != model.m:
        raise ControllerError(
            f"device '{info.name}' has {n_q} coordinate and {n_a} actuator channels"
            f"; model '{model.name}' needs n = {model.n} and m = {model.m}")
    if n_q == 0 and mode == "fb":
        raise ControllerError(
            f"device '{info.name}' does not measure q, so feedback (mode 'fb') cannot run:"
            " use mode 'ff', or add a joint-sensor board (--sensors PORT / "
            "[device] sensors)")


def _poll_busily(ctl: Controller, device: Device, wanted: bool) -> bool:
    """``loop.busy_poll`` on the device that supports it (a poise-protocol serial port);
    elsewhere an ``info`` event says it is not (the loop then sleeps between frames)."""
    if not wanted:
        return False
    poll = getattr(device, "poll_busily", None)
    if poll is not None and poll(True):
        return True
    ctl.announce("info", code="busy_poll_unsupported",
                 text=f"loop.busy_poll: {type(device).__name__} has no port to poll; "
                      "the loop sleeps between frames")
    return False


def _teardown(ctl: Controller) -> None:
    """Disarm and close the device (also stops a virtual device process); no wire path."""
    device, ctl.device = ctl.device, None
    ctl.cycle.device, ctl.cycle.wire = None, None
    if device is not None:
        with contextlib.suppress(DeviceError):
            if device.connected:
                device.disarm()
        with contextlib.suppress(DeviceError):
            device.close()


__all__ = ["SPIN", "Controller", "ControllerError", "enter_realtime"]
