"""The controller service: state machine, the fixed-rate loop thread, safety, commands.

:class:`Controller` owns one :class:`~poise.devices.base.Device` (opened from ``[device]`` by
:func:`poise.devices.factory.open_device`: the poise wire protocol, a Dynamixel bus, a composite
of a joint-sensor board and a bus, or the virtual device) and one loop thread. Per cycle::

    sample → measured q → IK step (alg1 / alg2 / plain; ff: error from q̄, fb: from q)
      → safety (rate + position limits, NaN guard) → setpoint (q̄a, τ_ff = G_a(q̄))
      → CycleSample offered to every subscribed SampleQueue (never blocks)

Pacing (``loop.pacing``):

* ``device`` (default): the device streams sensor frames at the loop rate and the loop answers
  each one as soon as it arrives (blocking ``next_sensors``); if it fell behind it skips to the
  newest frame (counted as missed). Latency = frame arrival → setpoint written.
* ``host``: the loop keeps its own clock (sleep, then spin on ``perf_counter`` for the last
  0.25 ms) and uses the newest frame at each deadline; for devices that must be polled or
  stream at another rate. Latency then includes the frame's age. A polled device (a servo bus)
  is always host-paced: each deadline reads the bus once.

A device that does not measure q (a servo bus alone) runs feed-forward only: the loop's q is
then the predicted q̄, started from the equilibrium at the measured actuator positions.

Everything else (MQTT, logs, the GUI, ``submit``) runs in other threads and talks to the loop
only through the immutable :class:`~poise.motion.params.LiveParams` reference (swapped
atomically), the state machine, and bounded :class:`~poise.api.bus.SampleQueue` s.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import math
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from poise.api.bus import (
    COMMAND_NAMES,
    ESTOP_CANCELLED,
    Command,
    CommandResponse,
    CycleSample,
    Event,
    SubscriberHub,
)
from poise.api.state import LATCHED, State, StateMachine
from poise.controller.config import Config, ConfigError, ControllerModel, build_model
from poise.controller.dispatch import CommandDispatcher
from poise.controller.gcpacing import CollectorPacing
from poise.controller.timing import TimingStats
from poise.devices.affinity import CpuPlan, pin_thread, plan_cpus
from poise.motion.params import (
    LiveParams,
    ParamError,
    parse_target,
    with_algorithm,
    with_gains,
    with_mode,
    with_plan,
)
from poise.motion.planner import TargetPlan, UnstableTarget
from poise.motion.reference import choose_move, predicts
from poise.motion.safety import SafetyLimits
from poise.motion.step import ControlStep, StepFault, compiled_factory, kernel_pack
from poise.motion.stepper import make_stepper

if TYPE_CHECKING:
    from poise.controller.wirepath import WirePath
    from poise.devices.simdevice import SimDevice
    from poise.kernels.packed import PackedModel
    from poise.kernels.warmup import WarmUpProgress, WarmUpStep
    from poise.kernels.wire import WireBuffers

    #: What the wire path prepares before a read: parameters, stepper, buffers, sequence no.
    WireTurn = tuple[LiveParams, Any, WireBuffers, int]
from poise.devices.base import Device, DeviceError, DeviceInfo, DeviceTimeout, Sample
from poise.devices.factory import open_device
from poise.firmware_bridge import messages as msg
from poise.firmware_bridge.faultinfo import HostWrites, watchdog_cause
from poise.firmware_bridge.lifetime import fifo
from poise.firmware_bridge.transport import RawRead
from poise.ik.statics import solve_statics
from poise.models.actuation import join, split

#: Host pacing spins on the clock for this long before each deadline [s].
SPIN = 0.25e-3
#: Device status bits as plain ints (an ``enum.Flag`` operation costs ~1 µs in a cycle).
ARMED, WATCHDOG, ESTOP, SATURATED = (int(msg.Status.ARMED), int(msg.Status.WATCHDOG),
                                     int(msg.Status.ESTOP), int(msg.Status.SATURATED))


class ControllerError(RuntimeError):
    """The controller cannot do what was asked; the message says why."""


def _ok(cmd: str, reason: str = "", cid: str = "") -> CommandResponse:
    return CommandResponse(cid, cmd, True, reason)


def _no(cmd: str, reason: str, cid: str = "") -> CommandResponse:
    return CommandResponse(cid, cmd, False, reason)


class Controller(SubscriberHub):
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
                 launched: SimDevice | None = None) -> None:
        self.config = config
        #: Where the loop thread and the virtual device run (``loop.cpu``), or why nothing
        #: is pinned (:func:`~poise.devices.affinity.plan_cpus`).
        self.cpu_plan: CpuPlan | None
        self.cpu_plan, self._unpinned = plan_cpus(config.loop.cpu)
        self.model_info = model or build_model(config.model)
        self.model = self.model_info.model
        #: The robot's reach [m]: bounds the targets accepted (poise.api.rules).
        self.reach: float | None = getattr(self.model, "reach", None)
        self.period = 1.0 / config.loop.rate
        SubscriberHub.__init__(self)
        self._sm = StateMachine(self._publish)
        self.timing_stats = TimingStats()
        self._cmd_lock = threading.RLock()
        self._param_lock = threading.Lock()
        self.device: Device | None = None
        #: What the device is (set at connect).
        self.device_info: DeviceInfo | None = None
        self.sim: object | None = None  # the virtual device process (port "sim")
        # the virtual device launched before this controller was built, which the first
        # connect opens (see poise.controller.rtboot)
        self._launched = launched
        self.pacing = config.loop.pacing
        self._thread: threading.Thread | None = None
        self._quit = threading.Event()
        target = config.algorithm.target
        if target is not None and len(target) != self.model.task_dim:
            raise ConfigError(f"{config.source}: algorithm.target = {list(target)}: the model "
                              f"'{self.model.name}' has a {self.model.task_dim}-dimensional "
                              f"task")
        self._target_set = target is not None
        self._params = LiveParams.from_config(
            config, np.asarray(target if target is not None else np.zeros(self.model.task_dim)))
        if config.algorithm.name == "alg1" and config.algorithm.update == "inverse" and \
                self.model.m != self.model.task_dim:
            raise ConfigError(f"{config.source}: algorithm.update = 'inverse' needs m = "
                              f"task_dim; model '{self.model.name}' has m = {self.model.m}, "
                              f"task_dim = {self.model.task_dim}")
        self.limits = SafetyLimits.build(self.model.m, self.model.qa_min, self.model.qa_max,
                                         config.limits.qa_min, config.limits.qa_max,
                                         config.limits.qa_rate)
        #: The cycle's computation (pure; see poise.motion.step).
        self.step = ControlStep(self.model, self.limits, self.period,
                                effort_feedforward=config.loop.effort_feedforward,
                                shaper=config.loop.shaper)
        self._reset_pending = False
        self._kernels_ready = False
        self._kernel_lock = threading.Lock()
        self._clear_estop = False
        self._estops = 0  # e-stops latched so far (see estops)
        self._armed_at = math.inf
        self._seq = 0
        self._target_cache: tuple[object, tuple[float, ...]] = (None, ())
        self._gc = CollectorPacing()  # the loop's (set when it starts)
        self._busy_poll = False  # loop.busy_poll, where the device supports it
        self._wire: WirePath | None = None  # loop.wire, where the device has a wire path
        self._last: dict[str, Any] = {}
        #: ``_last`` when the run stopped: what it achieved, before the disarmed device moves
        #: (a servo bus goes limp); None while running.
        self._at_stop: dict[str, Any] | None = None
        self._holding = False
        self._last_frame_time = time.perf_counter()
        self._writes = HostWrites()  #: when setpoints went out (the watchdog's diagnosis)
        self._watchdog_ms: float | None = None  #: the device's watchdog limit [ms]
        self._started_at: float | None = None
        self._old_switch: float | None = None
        #: What the loop thread got (``enter_realtime``): scheduler, priority, refusal.
        self._realtime: dict[str, Any] = {}
        self.dispatcher = CommandDispatcher(self.submit)
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

    def _estopped_since(self, since: int | None) -> bool:
        """Whether an e-stop latched after ``since`` (a value of :attr:`estops`)."""
        return since is not None and self._estops > since

    @property
    def reason(self) -> str:
        """Why a latched state (fault, estop) was entered; empty otherwise."""
        return self._sm.reason

    @property
    def params(self) -> LiveParams:
        """The live parameters the next cycle will use."""
        return self._params

    @property
    def target_status(self) -> str:
        """``reachable``, ``unreachable`` (the arm goes as close as it can) or ``""`` (not
        checked: fully actuated robots, or no target yet)."""
        plan = self.step.plan
        return "" if plan is None or plan.q_goal is None else plan.status

    @property
    def target_note(self) -> str:
        """Why the target is unreachable ('' otherwise)."""
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

    # ------------------------------------------------------------------ events

    def _event(self, kind: str, **data: Any) -> None:
        self._publish(Event(time.monotonic(), kind, data))

    # ------------------------------------------------------------------ lifecycle

    def connect(self) -> CommandResponse:
        """idle → connecting → ready: open the device (spawning the virtual device for
        ``device.port = "sim"``), check its channels against the model, set its rate."""
        with self._cmd_lock:
            if self.state in (State.READY, State.RUNNING):
                return _ok("connect", "already connected")
            if self.state != State.IDLE:
                return _no("connect", f"cannot connect in state {self.state.value}")
            self._sm.to(State.CONNECTING, "connect")
            cfg = self.config.device
            try:
                self.prepare_kernels()
                launched, self._launched = self._launched, None
                opened = open_device(cfg, model=self.config.model.name, m=self.model.m,
                                     rate=self.config.loop.rate,
                                     on_fault=self._on_device_fault,
                                     qa_min=self.model.qa_min, qa_max=self.model.qa_max,
                                     launched=launched, cpus=self.cpu_plan and
                                     self.cpu_plan.others)
                self.device, self.sim = opened.device, opened.sim
                info = self.device.describe()
                self.device_info = info
                self._check_device(info)
                self.device.configure(rate_hz=self.config.loop.rate,
                                      watchdog_ms=cfg.watchdog_ms)
                self._watchdog_ms = cfg.watchdog_ms or info.extra.get("watchdog_ms")
                self._busy_poll = self._poll_busily(self.config.loop.busy_poll)
                self._wire = self._wire_path()
                self.limits = SafetyLimits.build(
                    self.model.m, self.model.qa_min, self.model.qa_max,
                    self.config.limits.qa_min, self.config.limits.qa_max,
                    self.config.limits.qa_rate, list(info.qa_min), list(info.qa_max))
                self.step.limits = self.limits
            except (DeviceError, ControllerError, ValueError, OSError) as exc:
                self._teardown()
                self._sm.to(State.FAULT, f"connect failed: {exc}")
                return _no("connect", f"connect failed: {exc}")
            self.pacing = "host" if info.polled else self.config.loop.pacing
            self._event("info", device=_device_dict(info), port=opened.port, pacing=self.pacing)
            if not info.measures_q:
                self._event("info", code="feedforward_only",
                            text=f"{info.name} does not measure q: feed-forward only "
                                 "(give a joint-sensor board, --sensors, for feedback)")
            self._quit.clear()
            self._thread = threading.Thread(target=self._run, name="poise-control-loop",
                                            daemon=True)
            if self.config.loop.switch_interval > 0:
                self._old_switch = sys.getswitchinterval()
                sys.setswitchinterval(self.config.loop.switch_interval)
            self._sm.to(State.READY, "connected")
            self._thread.start()
            return _ok("connect")

    def _poll_busily(self, wanted: bool) -> bool:
        """``loop.busy_poll`` on the device that supports it (a poise-protocol serial port);
        elsewhere an ``info`` event says it is not (the loop then sleeps between frames)."""
        if not wanted:
            return False
        poll = getattr(self.device, "poll_busily", None)
        if poll is not None and poll(True):
            return True
        self._event("info", code="busy_poll_unsupported",
                    text=f"loop.busy_poll: {type(self.device).__name__} has no port to poll; "
                         "the loop sleeps between frames")
        return False

    def _wire_path(self) -> WirePath | None:
        """``loop.wire``: the wire path (:mod:`poise.controller.wirepath`) for a
        poise-protocol serial device and compiled kernels, else None."""
        if not self.config.loop.wire or not self.config.loop.compiled:
            return None
        from poise.controller.wirepath import wire_path

        return wire_path(self.device, self.step.effort_feedforward)

    def prepare_kernels(self, progress: WarmUpProgress | None = None) -> None:
        """Compile (or load from the cache) the run's kernels, once per controller, before
        the device is opened (:meth:`connect` calls it; the real-time process calls it as
        soon as it is built): no cycle ever compiles, and no compile runs while the device
        is armed. The steps are :meth:`kernel_steps`; ``progress`` hears of each as it
        starts (:class:`~poise.kernels.warmup.KernelProgress`: ``poise run`` shows a first
        start's compile with it). Once all are done the cache is marked as holding this
        model family's kernels (:func:`poise.kernels.cache.mark_prepared`).
        Thread-safe: a second caller waits for the first."""
        from poise.kernels.cache import mark_prepared
        from poise.kernels.warmup import cache_dir, run_steps

        with self._kernel_lock:
            if self._kernels_ready:
                return
            packed = kernel_pack(self.model, self.config.loop.compiled)
            report = run_steps(self.model.name, self.kernel_steps(packed), progress=progress,
                               cached=self.kernels_cached())
            mark_prepared(cache_dir(), self._kernel_key())
            self.step.stepper_factory = make_stepper if packed is None else \
                compiled_factory(self.model, packed)
            self._kernels_ready = True
        if packed is not None:
            self._event("info", code="kernels_ready", seconds=round(report.seconds, 3),
                        text=report.summary())

    def kernel_steps(self, packed: PackedModel | None) -> list[WarmUpStep]:
        """What :meth:`prepare_kernels` compiles or loads: the timing statistics' percentiles
        (:meth:`TimingStats.summary`, which the status calls), then with compiled kernels
        (``packed``) the cycle's and the planner's (:func:`~poise.kernels.warmup.
        warm_up_steps`, the cycle only) and the simulated plant's
        (:class:`~poise.sim.compiled.CompiledPlant`) where plans predict the model's
        response or this controller starts its virtual device itself (which then finds them
        in the cache; one launched early, :mod:`poise.controller.rtboot`, compiles or loads
        its own meanwhile)."""
        todo: list[WarmUpStep] = [("timing percentiles", self.timing_stats.summary)]
        if packed is None:
            return todo
        from poise.kernels.warmup import warm_up_steps

        cfg = self.config.device
        simulator = cfg.port == "sim" and cfg.protocol == "poise" and self._launched is None
        todo += warm_up_steps(packed, dynamics=simulator, stepwise=False)
        if simulator or predicts(self.model, self.config):
            # the plans' model predictions step its dynamics: loaded now, not while the
            # loop runs beside a target's planning (in this process: the GIL)
            def plant() -> None:
                from poise.sim.compiled import CompiledPlant

                CompiledPlant(self.model)

            todo.append(("simulated plant", plant))
        return todo

    def kernels_cached(self) -> bool:
        """Whether :meth:`prepare_kernels` will load from Numba's cache (this model family's
        kernels were prepared before from the same sources) rather than compile."""
        from poise.kernels.cache import prepared
        from poise.kernels.warmup import cache_dir

        return prepared(cache_dir(), self._kernel_key())

    def _kernel_key(self) -> str:
        """The cache mark's key: the model family with compiled kernels, else
        ``reference``."""
        from poise.kernels import has_kernels

        compiled = self.config.loop.compiled and has_kernels(self.model)
        return str(self.model.family) if compiled else "reference"

    def _check_device(self, info: DeviceInfo) -> None:
        n_q, n_a = info.n_q, info.n_a
        if n_q not in (0, self.model.n) or n_a != self.model.m:
            raise ControllerError(
                f"device '{info.name}' has {n_q} coordinate and {n_a} actuator channels"
                f"; model '{self.model.name}' needs n = {self.model.n} and m = {self.model.m}")
        if n_q == 0 and self._params.mode == "fb":
            raise ControllerError(
                f"device '{info.name}' does not measure q, so feedback (mode 'fb') cannot run:"
                " use mode 'ff', or add a joint-sensor board (--sensors PORT / "
                "[device] sensors)")

    @property
    def measures_q(self) -> bool:
        """Whether the device measures q (False: feed-forward only)."""
        return self.device_info is None or self.device_info.measures_q

    def start(self, cause: str = "start", since: int | None = None) -> CommandResponse:
        """Connect if needed, arm the device and run the loop (ready → running).

        ``since``: the :attr:`estops` count when the command was received (default: now).
        An e-stop that latches meanwhile, even while the device is being armed, wins: the
        device is sent EStop again and the start is refused."""
        with self._cmd_lock:
            since = self._estops if since is None else since
            st = self.state
            if st in LATCHED:
                return _no("run", f"{st.value} latched ({self.reason}); send 'clear' first")
            if st == State.RUNNING:
                return _ok("run", "already running")
            if st == State.IDLE:
                r = self.connect()
                if not r.accepted:
                    return _no("run", r.reason)
            device = self.device
            if self.state != State.READY or device is None:
                return _no("run", f"cannot start in state {self.state.value}")
            if not device.connected:
                return _no("run", "device not connected (the link is reconnecting)")
            if self._target_set:
                try:
                    plan = self._plan_for(self._params.target)
                    params = with_plan(self._params, plan)  # gains within its bound
                except ParamError as exc:
                    return _no("run", str(exc))
                # the loop resets the step from the measured q: the move starts there
                plan = self._choose_move(plan, params, self._last.get("q"))
                self._set_plan(plan)
                self._params = params
                self._event("param", name="start", value=None, id="", source=cause,
                            params=params.as_dict())  # the target's bounds, automatic gains
            if self._estopped_since(since):
                return _no("run", ESTOP_CANCELLED)
            try:
                device.arm(clear_estop=self._clear_estop)
            except DeviceError as exc:
                return _no("run", f"arm failed: {exc}")
            with self._param_lock:  # atomic with the e-stop latch
                late = self._estopped_since(since)
                if not late:
                    self._armed_at = time.perf_counter()
                    self._clear_estop = False
                    self._reset_pending = True
                    self._started_at = time.monotonic()
                    self._at_stop = None
                    self._sm.to(State.RUNNING, cause)
            if late:  # it latched while arming: the device may have been armed after EStop
                with contextlib.suppress(DeviceError):
                    device.estop()
                return _no("run", ESTOP_CANCELLED)
            return _ok("run")

    def stop(self, cause: str = "stop") -> CommandResponse:
        """running → stopping → ready: stop sending setpoints and disarm (the device holds)."""
        with self._cmd_lock:
            if self.state != State.RUNNING:
                return _ok("run", f"not running (state {self.state.value})")
            self._sm.to(State.STOPPING, cause)
            self._at_stop = dict(self._last)
            self._disarm()
            self._sm.to(State.READY, "stopped")
            return _ok("run")

    def estop(self, cause: str = "e-stop") -> CommandResponse:
        """Latch the e-stop (any state) and send EStop to the device, in the caller's thread;
        the device's acknowledgement is recorded as an ``info`` event
        (``code = "estop_acknowledged"``), its absence as a ``fault`` event. A command being
        applied is either done before the latch or refused (the parameter lock is held for
        microseconds, never during planning)."""
        with self._param_lock:
            self._estops += 1
            self._sm.to(State.ESTOP, cause)
            self._clear_estop = True
        self.step.goal = None
        device = self.device
        if device is not None and device.connected:
            try:
                device.estop()
                self._event("info", code="estop_acknowledged", ok=True)
            except DeviceError as exc:
                self._event("fault", source="host", code="estop_not_acknowledged",
                            text=str(exc))
        return _ok("estop")

    def clear(self, cause: str = "clear", since: int | None = None) -> CommandResponse:
        """Clear a latched fault or e-stop: → ready (device connected) or idle (no link).

        ``since``: the :attr:`estops` count when the command was received (default: now);
        an e-stop that latched after it is never cleared by it."""
        with self._cmd_lock:
            since = self._estops if since is None else since
            if self.state not in LATCHED:
                return _no("clear", f"nothing to clear (state {self.state.value})")
            if self.device is None:
                self._sm.to(State.IDLE, cause)
                return _ok("clear")
            if not self.device.connected:
                return _no("clear", "device not connected (the link is reconnecting); "
                           "clear again once it is back")
            with self._param_lock:  # atomic with the e-stop latch
                if self._estopped_since(since):
                    return _no("clear", ESTOP_CANCELLED)
                self._holding = False
                self._last_frame_time = time.perf_counter()
                self._sm.to(State.READY, cause)
            return _ok("clear")

    def final_summary(self) -> dict[str, Any]:
        """:meth:`summary` with the state the run ended in: ``fault``, ``estop`` or
        ``stopped``."""
        out = self.summary()
        if out["state"] not in (State.FAULT.value, State.ESTOP.value):
            out["state"] = "stopped"
        return out

    def close(self) -> None:
        """Stop (disarm), refuse the commands still waiting, record the final summary as an
        event (kind ``summary``), end the loop thread, close the link and the virtual device
        → idle."""
        self.dispatcher.close()
        with self._cmd_lock:
            if self.state == State.RUNNING:
                self.stop("close")
            if self._started_at is not None and self.state != State.IDLE:
                self._event("summary", **self.final_summary())
            self._quit.set()
            if self._thread is not None and self._thread is not threading.current_thread():
                self._thread.join(timeout=5)
            self._thread = None
            self._teardown()
            launched, self._launched = self._launched, None
            if launched is not None:  # never connected: it was never opened
                launched.stop()
            self._sm.to(State.IDLE, "closed")
            if self._old_switch is not None:
                sys.setswitchinterval(self._old_switch)
                self._old_switch = None

    def _teardown(self) -> None:
        device, self.device = self.device, None
        self._wire = None
        if device is not None:
            with contextlib.suppress(DeviceError):
                if device.connected:
                    device.disarm()
            with contextlib.suppress(DeviceError):
                device.close()  # also stops a virtual device process

    def __enter__(self) -> Controller:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _disarm(self) -> None:
        device = self.device
        if device is None or not device.connected:
            return
        try:
            device.disarm()
        except DeviceError as exc:
            self._event("fault", source="host", code="disarm_failed", text=str(exc))

    def _fault(self, cause: str, **data: Any) -> None:
        """Latch a fault (from any thread) and disarm the device without blocking the loop."""
        if self._sm.to(State.FAULT, cause):
            self._event("fault", source="host", reason=cause, **data)
            threading.Thread(target=self._disarm, name="poise-disarm", daemon=True).start()

    def _on_device_fault(self, fault: msg.Fault) -> None:
        """Reader thread: a Fault frame from the device."""
        try:
            code = msg.FaultCode(fault.code).name.lower()
        except ValueError:
            code = f"code_{fault.code}"
        sev = int(fault.severity)
        self._event("fault", source="device", code=code, severity=sev, channel=fault.channel,
                    value=fault.value, text=fault.text)
        if fault.code == msg.FaultCode.ESTOP:
            # _clear_estop: an e-stop we already know of (ours) and have not re-armed since;
            # its Fault frame may arrive after a fast `clear`, and must not latch again.
            if self.state != State.ESTOP and not self._clear_estop:
                self._clear_estop = True
                self._sm.to(State.ESTOP, f"device reported e-stop ({fault.text})")
        elif sev >= msg.Severity.ERROR and self.state in (State.RUNNING, State.READY):
            if fault.code == msg.FaultCode.WATCHDOG:
                self._watchdog_fault(fault.value)
            else:
                self._fault(f"device fault: {code} ({fault.text})")

    def _watchdog_fault(self, device_silence: float | None) -> None:
        """The device's watchdog tripped: fault with a cause that names the quiet side
        (:func:`~poise.firmware_bridge.faultinfo.watchdog_cause`)."""
        cause, side = watchdog_cause(device_silence, self._writes.silence(time.perf_counter()),
                                     self._watchdog_ms)
        self._fault(cause, quiet_side=side)

    # ------------------------------------------------------------------ commands

    def post(self, command: Command, reply: Callable[[CommandResponse], None]) -> None:
        """Hand over a command without waiting for it (thread-safe): an e-stop or stop acts at
        once in the caller's thread, the rest is queued, coalesced and applied in order (see
        :class:`~poise.controller.dispatch.CommandDispatcher`); ``reply`` gets the one
        answer."""
        self.dispatcher.post(command, reply)

    def submit(self, command: Command, *,
               prepared: TargetPlan | ParamError | None = None) -> CommandResponse:
        """Validate and apply a command between two cycles (thread-safe); always answered.

        Refused with a reason: unknown name, bad value, not allowed in the current state
        (everything but ``clear`` and ``estop`` while the e-stop is latched).

        ``prepared``: for a ``target`` command, its offline plan made elsewhere (the parent
        of the real-time process plans, so that no planning runs beside the loop), or the
        :class:`ParamError` that planning raised; None: planned here.
        """
        name, value, cid = command.name, command.value, command.id
        if name not in COMMAND_NAMES:
            resp = _no(name, f"unknown command; allowed: {', '.join(COMMAND_NAMES)}", cid)
        elif name != "estop" and self._estopped_since(command.estops):
            resp = _no(name, ESTOP_CANCELLED, cid)
        elif self.state == State.ESTOP and name not in ("clear", "estop"):
            resp = _no(name, f"e-stop latched ({self.reason}); send 'clear' first", cid)
        else:
            try:
                resp = self._apply(command, prepared)
            except ParamError as exc:
                resp = _no(name, str(exc), cid)
        resp = CommandResponse(cid, name, resp.accepted, resp.reason)
        self._event("command", name=name, value=_jsonable(value), id=cid,
                    source=command.source, accepted=resp.accepted, reason=resp.reason)
        return resp

    def _apply(self, c: Command, prepared: TargetPlan | ParamError | None = None
               ) -> CommandResponse:
        if c.name == "run":
            if c.value == "start":
                return self.start(f"{c.source} start", since=c.estops)
            if c.value == "stop":
                return self.stop(f"{c.source} stop")
            raise ParamError(f"run = {c.value!r}: must be 'start' or 'stop'")
        if c.name == "estop":
            return self.estop(f"{c.source} e-stop")
        if c.name == "clear":
            return self.clear(f"{c.source} clear", since=c.estops)
        note = ""
        plan: TargetPlan | None = None
        if c.name == "target":  # the offline solves run here, outside every lock
            if isinstance(prepared, ParamError):
                raise prepared
            plan = prepared if prepared is not None else self._plan_for(
                parse_target(c.value, self.model.task_dim, self.reach))
            note = plan.note()
        # the new parameters are derived outside the lock (their stability bounds take
        # milliseconds); under it, again only if the loop changed them meanwhile
        p = self._params
        new = self._derive(c, p, plan)
        stepper = self.step.stepper
        if plan is not None and prepared is None and self.state == State.RUNNING and \
                stepper is not None:  # (not running: start plans again)
            plan = self._choose_move(plan, new, stepper.q_bar)
        with self._param_lock:  # atomic with the e-stop latch (estop() takes it too)
            if self.state == State.ESTOP:  # it latched while the target was being planned
                raise ParamError(f"e-stop latched ({self.reason}) while the command was "
                                 "being applied; send 'clear' first")
            if self._estopped_since(c.estops):  # latched and cleared since it was received
                raise ParamError(ESTOP_CANCELLED)
            if self._params is not p:
                new = self._derive(c, self._params, plan)
            if plan is not None:
                self._set_plan(plan)
            self._params = new
            self._target_set = self._target_set or c.name == "target"
            self._event("param", name=c.name, value=_jsonable(c.value), id=c.id,
                        source=c.source, params=new.as_dict())
        return _ok(c.name, note)

    def _derive(self, c: Command, p: LiveParams, plan: TargetPlan | None) -> LiveParams:
        """The parameters after command ``c`` (target, gains, algorithm, mode), checked:
        gains within the stability bound (:mod:`poise.motion.params`)."""
        if plan is not None:
            return with_plan(p, plan)
        if c.name == "gains":
            return with_gains(p, c.value, self.period)
        if c.name == "algorithm":
            return with_algorithm(p, c.value, self.model.m, self.model.task_dim)
        new = with_mode(p, c.value)
        if new.mode == "fb" and not self.measures_q:
            raise ParamError("mode 'fb' needs a measured q; this device does not measure it "
                             "(add a joint-sensor board)")
        return new

    def set_target(self, target: Any, source: str = "api") -> CommandResponse:
        """Shorthand for ``submit(Command("target", target))``."""
        return self.submit(Command("target", target, source=source))

    def _plan_for(self, target: np.ndarray) -> TargetPlan:
        """The offline plan of ``target`` (see :mod:`poise.motion.planner`); an unstable
        target is refused."""
        try:
            return self.step.make_plan(target, self._last.get("q"),
                                       self.config.algorithm.tolerance, self._params)
        except UnstableTarget as exc:
            raise ParamError(str(exc)) from None

    def _choose_move(self, plan: TargetPlan, params: LiveParams,
                     q_start: np.ndarray | None) -> TargetPlan:
        """``plan`` with its move from ``q_start`` chosen on the model and the predicted
        response feedback follows after it (:func:`~poise.motion.reference.choose_move`).
        """
        return choose_move(plan, q_start, params, self.config, self.model, self.limits,
                           self.step.stepper_factory)

    def _set_plan(self, plan: TargetPlan) -> None:
        """Make ``plan`` current: the loop moves the actuators to its goal, then runs the IK."""
        self.step.adopt(plan)
        if not plan.reachable:
            self._event("info", code="target_unreachable", target=plan.target.tolist(),
                        error=plan.error, text=plan.note())

    # ------------------------------------------------------------------ the loop

    def _run(self) -> None:
        self._realtime = {**enter_realtime(self.config.loop.priority),
                          **self._pin_loop(), "busy_poll": self._busy_poll}
        self._event("info", code="realtime", **self._realtime)
        try:
            with CollectorPacing() as self._gc:
                if self.pacing == "host":
                    self._run_host_paced()
                else:
                    self._run_device_paced()
        except Exception as exc:  # never die silently: latch a fault with the reason
            self._fault(f"control loop crashed: {type(exc).__name__}: {exc}")
            raise

    def _pin_loop(self) -> dict[str, Any]:
        """The loop thread onto its CPU (``loop.cpu``); what was done, JSON-ready."""
        plan = self.cpu_plan
        if plan is None:
            return {"cpu": None, "unpinned": self._unpinned}
        refused = pin_thread(frozenset({plan.loop}))
        if refused:
            return {"cpu": None, "unpinned": refused}
        return {**plan.as_dict(), "loop_tid": threading.get_native_id()}

    def _run_device_paced(self) -> None:
        hold_after = self.config.limits.sensor_hold
        prev: float | None = None
        busy_until = -math.inf  # perf_counter when the last cycle finished
        while not self._quit.is_set():
            device = self.device
            if device is None:
                return
            wire = self._wire
            turn = None if wire is None else self._wire_turn(wire)
            try:
                got = device.read(timeout=hold_after) if wire is None else \
                    wire.device.read_raw(hold_after)
            except DeviceTimeout:
                self._no_frame(time.perf_counter() - self._last_frame_time)
                self._gc.after_cycle()  # no frame for a while: still collect
                continue
            except DeviceError as exc:
                self._device_failed(exc)
                self._gc.after_cycle()
                continue
            if type(got) is RawRead:  # a read, not yet decoded: the wire cycle answers it
                assert wire is not None
                t0 = time.perf_counter()
                period = self.period if prev is None else got.host_time - prev
                if turn is not None and self._wire_cycle(wire, turn, got, t0, period):
                    prev = got.host_time
                    self._gc.after_cycle()
                    busy_until = time.perf_counter()
                    continue
                if turn is not None:  # the wire path could have answered it: declined
                    wire.passed += 1
                wire.device.feed_raw(got)  # the ordinary way: decoded, counted, queued
                newest = wire.device.read_nowait()
                if newest is None:  # part of a frame, or no sensor frame
                    continue
                got = newest
            sample = got
            missed = coalesced = 0
            nowait = getattr(device, "read_nowait", None)  # a streaming device's queue
            while True:  # answer the newest frame only
                older = sample
                try:
                    newer = nowait() if nowait is not None else device.read(timeout=0)
                except DeviceError:
                    break
                if newer is None:
                    break
                sample = newer
                # Skipped: missed if it arrived while the previous cycle was still running
                # (the host fell behind), coalesced if the loop was idle (a device burst).
                if older.host_time < busy_until:
                    missed += 1
                else:
                    coalesced += 1
            t0 = time.perf_counter()
            period = self.period if prev is None else sample.host_time - prev
            prev = sample.host_time
            self._count_skipped(missed, coalesced)
            self._cycle(sample, t0, t0 - sample.host_time, period)
            self._gc.after_cycle()  # the garbage collector in the slack, not in a cycle
            busy_until = time.perf_counter()

    def _run_host_paced(self) -> None:
        hold_after = self.config.limits.sensor_hold
        period = self.period
        deadline = time.perf_counter()
        prev_t0: float | None = None
        while not self._quit.is_set():
            device = self.device
            if device is None:
                return
            self._gc.after_cycle()  # the slack before the next deadline, whatever came last
            deadline += period
            left = deadline - time.perf_counter()
            if left > SPIN:
                time.sleep(left - SPIN)
            while time.perf_counter() < deadline:
                pass
            t0 = time.perf_counter()
            late = t0 - deadline
            if late > period:
                skipped = int(late // period)
                self._count_skipped(skipped)
                deadline += skipped * period
            try:
                sample = device.latest()
            except DeviceError as exc:
                self._device_failed(exc)
                continue
            if sample is None or t0 - sample.host_time > hold_after:
                self._no_frame(t0 - (sample.host_time if sample else self._last_frame_time))
                continue
            measured = period if prev_t0 is None else t0 - prev_t0
            prev_t0 = t0
            self._cycle(sample, t0, t0 - deadline, measured)

    def _count_skipped(self, missed: int, coalesced: int = 0) -> None:
        """Count frames (device pacing) or deadlines (host pacing) the loop skipped, while
        running only: the statistics cover the cycles that run the controller, as their
        percentiles and ``cycles`` do. Before arming the loop only watches the sensors, and
        its first cycles take the link over from the reader thread with a backlog of frames
        the handshake left (they showed as 3-5 "missed" at the start of a run)."""
        if self._sm.state == State.RUNNING:
            self.timing_stats.missed += missed
            self.timing_stats.coalesced += coalesced

    def _device_failed(self, exc: DeviceError) -> None:
        """A read failed (a servo's hardware error, a bus that stopped answering): fault,
        once; then wait a sensor-hold interval before the next try."""
        if self.state in (State.RUNNING, State.READY):
            self._fault(f"device error: {exc}")
        self._quit.wait(self.config.limits.sensor_hold)

    def _no_frame(self, silence: float) -> None:
        """No sensor frame for ``silence`` seconds: hold, then fault."""
        st = self.state
        device = self.device
        if st not in (State.RUNNING, State.READY) or device is None:
            return
        if not device.connected:
            self._fault("device disconnected", silence_s=round(silence, 3))
            return
        if silence >= self.config.limits.sensor_fault:
            self._fault(f"sensor timeout: no sensor frame for {silence:.3f} s",
                        silence_s=round(silence, 3))
            return
        if st == State.RUNNING:
            if not self._holding:
                self._holding = True
                self._event("fault", source="host", code="sensor_timeout", action="hold",
                            silence_s=round(silence, 3))
            self._hold_last()

    def _cycle(self, sample: Sample, t0: float, lateness: float, period: float) -> None:
        self._last_frame_time = sample.host_time
        if self._holding:
            self._holding = False
            self._event("info", code="sensor_resumed")
        st = self.state
        model = self.model
        measured = sample.q if sample.q else tuple(self._estimate_q(sample.qa).tolist())
        if not all(map(math.isfinite, measured)):
            if st in (State.RUNNING, State.READY):
                self._hold_last()
                self._fault("non-finite sensor values", q=[repr(x) for x in sample.q],
                            qa=[repr(x) for x in sample.qa])
            return
        q = np.array(measured, dtype=float)
        if not self._target_set:
            with self._param_lock:
                if not self._target_set:  # hold the task value where the robot is
                    self._params = replace(self._params, target=model.fk(q))
                    self._target_set = True
        p = self._params
        qa_ref: tuple[float, ...] = ()
        tau_ff: tuple[float, ...] = ()
        t_sent = t0
        status = sample.status
        if st == State.RUNNING and sample.host_time > self._armed_at and \
                not status & ARMED:
            if status & ESTOP:
                self._sm.to(State.ESTOP, "device reports e-stop")
            elif status & WATCHDOG:
                self._watchdog_fault(None)
            else:
                self._fault("device not armed (disarmed)")
            st = self.state
        if st == State.RUNNING:
            step = self.step
            if self._reset_pending:  # bumpless start from the measured q after arming
                step.reset(q, p.algorithm)
                self._reset_pending = False
            try:
                out = step.update(q, p, bool(status & SATURATED))
            except StepFault as exc:
                self._hold_last()
                self._fault(str(exc), algorithm=p.algorithm)
                return
            if out.switched_from:
                self._event("info", code="algorithm_switch", to=p.algorithm,
                            frm=out.switched_from)
            qa_ref = tuple(out.qa.tolist())
            tau_ff = tuple(out.tau.tolist()) if out.tau is not None else ()
            try:
                self.device.write(qa_ref, tau_ff or None)  # type: ignore[union-attr]
            except DeviceError as exc:
                self._fault(f"device error: {exc}")
                return
            t_sent = time.perf_counter()
            step.look_ahead()
            self._sent(sample, qa_ref, tau_ff, t0, t_sent, lateness, period)
            x_meas, x_used = out.x_meas, out.x_used
            q_bar, residual = out.q_bar, out.residual
        else:
            x_meas = model.fk(q)
            x_used = x_meas
            stepper = self.step.stepper
            q_bar = stepper.q_bar if stepper is not None else q
            residual = math.nan
        self._record(sample, st, p, q, measured, x_meas, x_used, q_bar, residual, qa_ref,
                     tau_ff, t0, t_sent, lateness, period)

    def _wire_turn(self, wire: WirePath) -> WireTurn | None:
        """Before the read: what the wire path needs that does not depend on it (the
        parameters, the stepper, its buffers, the setpoint's sequence number), or None when
        the next cycle is the ordinary one's (not running, holding, just armed, an algorithm
        switch, the reference stepper, the link down)."""
        if self._sm.state is not State.RUNNING or self._holding or self._reset_pending or \
                not self._target_set:
            return None
        p, stepper = self._params, self.step.stepper
        if stepper is None or stepper.name != p.algorithm or not hasattr(stepper, "wire"):
            return None
        buffers = wire.buffers(stepper)
        seq = wire.reserve(buffers)
        return None if seq is None else (p, stepper, buffers, seq)

    def _wire_cycle(self, wire: WirePath, turn: WireTurn, read: RawRead, t0: float,
                    period: float) -> bool:
        """Answer ``read`` on the wire path (:mod:`poise.controller.wirepath`) with what
        :meth:`_wire_turn` prepared: False, with nothing changed, when this cycle is the
        ordinary one's (anything changed since the turn was prepared, or a read the
        compiled call leaves to it)."""
        p, stepper, buffers, seq = turn
        step = self.step
        if self._sm.state is not State.RUNNING or self._params is not p or self._holding or \
                step.stepper is not stepper or read.host_time <= self._armed_at:
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
        step.look_ahead()
        out = step.wire_output()
        qa_ref = tuple(out.qa.tolist())
        tau_ff = tuple(out.tau.tolist()) if out.tau is not None else ()
        failed = None
        if not sent:  # its number went to another frame meanwhile: framed anew
            try:
                wire.device.write(qa_ref, tau_ff or None)
            except DeviceError as exc:
                failed = exc
            t_sent = time.perf_counter()
        sample, skipped = wire.account(read, buffers, start)
        if skipped:  # a burst: the older frames came while the loop was idle
            self._count_skipped(0, skipped)
        self._last_frame_time = sample.host_time
        if failed is not None:  # as the ordinary cycle: the read counted, nothing recorded
            self._fault(f"device error: {failed}")
            return True
        self._sent(sample, qa_ref, tau_ff, t0, t_sent, t0 - read.host_time, period)
        self._record(sample, State.RUNNING, p, np.array(sample.q), sample.q, out.x_meas,
                     out.x_used, out.q_bar, out.residual, qa_ref, tau_ff, t0, t_sent,
                     t0 - read.host_time, period)
        return True

    def _sent(self, sample: Sample, qa_ref: tuple[float, ...], tau_ff: tuple[float, ...],
              t0: float, t_sent: float, lateness: float, period: float) -> None:
        """The timing of a cycle whose setpoint went out at ``t_sent``, and the setpoint."""
        latency = t_sent - sample.host_time
        self._writes.wrote(t_sent)
        self.timing_stats.record(period * 1e6, lateness * 1e6, (t_sent - t0) * 1e6,
                                 latency * 1e6, latency > self.period)
        self._last["qa_ref"], self._last["tau"] = qa_ref, (tau_ff or None)

    def _record(self, sample: Sample, st: State, p: LiveParams, q: np.ndarray,
                measured: tuple[float, ...], x_meas: Any, x_used: Any, q_bar: Any,
                residual: float, qa_ref: tuple[float, ...], tau_ff: tuple[float, ...],
                t0: float, t_sent: float, lateness: float, period: float) -> None:
        """What a cycle leaves behind: the last values (``q`` the measured configuration,
        ``measured`` the same as a tuple), the cycle record for the subscribers and the
        ring."""
        status = sample.status
        target = self._target_tuple(p)
        x_meas_t = tuple(x_meas.tolist())
        x_t = x_meas_t if x_used is x_meas else tuple(np.asarray(x_used).tolist())
        err = math.dist(target, x_t)
        last = self._last
        last.update(q=q, q_bar=q_bar, x=x_meas, task_error=math.dist(target, x_meas_t),
                    task_error_used=err, residual=residual, status=status, qa=sample.qa)
        self._seq += 1
        subs, sink = self._sample_subs, self.cycle_sink
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

    def _target_tuple(self, p: LiveParams) -> tuple[float, ...]:
        """``p.target`` as a tuple of floats, converted once per parameter set (commands
        replace the :class:`LiveParams`, never change it)."""
        cached = self._target_cache
        if cached[0] is not p:
            cached = self._target_cache = (p, tuple(np.asarray(p.target, float).tolist()))
        return cached[1]

    def _hold_last(self) -> None:
        device, qa = self.device, self._last.get("qa_ref")
        if device is not None and qa is not None and self.state == State.RUNNING:
            with contextlib.suppress(DeviceError):
                device.write(qa, self._last.get("tau"))
                self._writes.wrote(time.perf_counter())

    def _estimate_q(self, qa_measured: tuple[float, ...]) -> np.ndarray:
        """q when the device does not measure it: the IK's prediction q̄ once running, else
        the equilibrium the robot settles in at the measured actuator positions (from the
        last estimate's unactuated coordinates)."""
        stepper = self.step.stepper
        if stepper is not None:
            return stepper.q_bar
        model = self.model
        last = self._last.get("q")
        qu0 = split(model, np.asarray(last))[1] if last is not None else \
            np.zeros(model.n - model.m)
        sol = solve_statics(model, np.asarray(qa_measured, dtype=float), qu0)
        return sol.q if sol.converged else join(model, np.asarray(qa_measured, float), qu0)

    # ------------------------------------------------------------------ summary

    def summary(self) -> dict[str, Any]:
        """What the run achieved: ``reached``, ``task_error`` (measured), ``statics_residual``,
        ``state``, ``timing`` (µs percentiles, missed cycles) and more; JSON-ready. Once
        stopped, the values are those of the run's last cycle."""
        last = self._last if self._at_stop is None else self._at_stop
        p = self._params
        err = last.get("task_error", math.nan)
        st = self.step.stepper
        residual = st.residual if st is not None else math.nan
        out = {
            # a latched fault or e-stop has stopped the control: not "reached", however
            # close the arm stood when it latched
            "reached": bool(err <= self.config.algorithm.tolerance) and
            self.state not in LATCHED,
            "task_error": err,
            "task_error_predicted": float(np.linalg.norm(p.target - st.x_bar)) if st else None,
            "statics_residual": residual,
            "state": self.state.value,
            "reason": self.reason,
            "model": self.model.name,
            "calibration": self.model_info.calibration,
            "algorithm": p.algorithm,
            "mode": p.mode,
            "params": p.as_dict(),
            "rate_hz": self.config.loop.rate,
            "pacing": self.pacing,
            "target": p.target.tolist(),
            "target_status": self.target_status,
            "target_note": self.target_note,
            "x": _list(last.get("x")),
            "q": _list(last.get("q")),
            "q_bar": _list(last.get("q_bar")),
            "qa_ref": list(last.get("qa_ref") or ()),
            "qa": list(last.get("qa") or ()),
            "tau_ff": list(last.get("tau") or ()),
            "duration_s": (time.monotonic() - self._started_at) if self._started_at else 0.0,
            "timing": self.timing(),
            "limits": self.limits.as_dict(),
            "events": dict(collections.Counter(e.kind for e in self.history())),
            "statics_fallbacks": getattr(st, "fallbacks", 0),
            "reference_s": self.step.reference_seconds,
            "move": self.step.move_summary,
            "dispatch": dataclasses.asdict(self.dispatcher.stats),
            "realtime": {**self._realtime, "gc_between_cycles": list(self._gc.collections)},
            "wire": {} if self._wire is None else
            {"answered": self._wire.answered, "passed": self._wire.passed},
        }
        out.update(self._device_summary())
        return _clean(out)

    def _device_summary(self) -> dict[str, Any]:
        """``device`` (what it is), ``link`` (the poise-protocol stream's statistics) and
        ``bus_rtt_us`` (a polled servo bus's round trip), where they apply."""
        out: dict[str, Any] = {}
        info, device = self.device_info, self.device
        if info is not None:
            out["device"] = _device_dict(info)
        sim = self.sim
        if sim is not None:
            out["device"] = {**out.get("device", {}), "port": "sim",
                             "model": getattr(sim, "model", ""), "pty": getattr(sim, "pty", "")}
        if device is None:
            return out
        stats = device.stats()
        parts = [stats.get("sensors"), stats.get("actuators"), stats]
        for part in parts:
            if isinstance(part, dict) and "sensor_frames" in part and "link" not in out:
                out["link"] = part
            if isinstance(part, dict) and "bus_rtt_us" in part and "bus_rtt_us" not in out:
                out["bus_rtt_us"] = part["bus_rtt_us"]
        return out


def enter_realtime(priority: int) -> dict[str, Any]:
    """Prepare the calling (loop) thread for the cycle; returns what was done, JSON-ready.

    * ``gc.freeze()``: every object made during start-up (models, kernels, configuration)
      moves to the permanent generation, so the collector never scans them again during a
      cycle.
    * ``priority`` > 0: ``SCHED_FIFO`` at that priority for this thread (Linux: a thread is
      a task, ``pid 0`` is the caller). Needs ``CAP_SYS_NICE`` or an ``rtprio`` limit
      (docs/controller.md); refused, the thread keeps the normal scheduler and the reason is
      reported.
    """
    import gc

    gc.collect()
    gc.freeze()
    return {"gc_frozen": gc.get_freeze_count(), **fifo(priority)}


def _device_dict(info: DeviceInfo) -> dict[str, Any]:
    return {"name": info.name, "n_q": info.n_q, "n_a": info.n_a, "polled": info.polled,
            "rate_hz": info.rate_hz, "ids": list(info.ids), **info.extra}


def _list(a: Any) -> list[float] | None:
    return None if a is None else [float(x) for x in np.asarray(a).ravel()]


def _jsonable(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, tuple):
        return list(v)
    return v


def _clean(v: Any) -> Any:
    """NaN/inf → None, recursively (strict JSON)."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return v


__all__ = ["Controller", "ControllerError"]
