"""The real-time part in a process of its own: :class:`RealtimeController`.

The control loop must never wait on MQTT, the log writer, JSON encoding or another thread's
GIL time. So :class:`RealtimeController` starts one child process (``spawn``) that builds the
ordinary :class:`~poise.controller.loop.Controller` and runs it there: the loop thread, the
device, command application and target planning all live in the child, and nothing else
does. The parent (``poise run``, telemetry, logs) sees the same API as ``Controller``::

    ctl = RealtimeController(load_config("run.toml"))   # spawns the real-time process
    samples = ctl.subscribe()                           # fed from the shared-memory ring
    ctl.start(); ctl.set_target([0.4]); ...
    ctl.close()                                         # clean stop; returns when it is gone

Channels between the two processes::

    child → parent   cycle records    CycleRing (shared memory, written by the loop thread)
                     events, replies  one pipe, in order: the events a command caused arrive
                                      before its reply, so ``state``/``params`` are current
                                      when a call returns
    parent → child   commands         a pipe served by one child thread (calls, answered by
                                      call id); commands from MQTT wait, coalesce and are
                                      planned in the parent (its own CommandDispatcher), so
                                      a flood never reaches the child and no target is
                                      planned beside the running loop
                     e-stop           a pipe and a thread of its own: never behind a command
    MQTT → child     e-stop           with MQTT on, the child holds an e-stop connection of
                                      its own (:meth:`RealtimeController.serve_urgent`): an
                                      e-stop goes from the socket to the device without this
                                      process's GIL; the child answers it and reports it here

The parent mirrors ``state``, ``reason``, ``params``, ``target_status`` and ``target_note``
from what the child sends, so reading them costs no round trip.

Lifetimes: the child dies with the parent even on SIGKILL (``PR_SET_PDEATHSIG`` plus a
``getppid`` poll, :mod:`poise.firmware_bridge.lifetime`), closing its controller (disarm) on
the way out; its virtual device (a grandchild) does the same. The parent notices a dead child
at once (the process sentinel): the state becomes ``fault`` with the reason "real-time process
died (exit code …)", a ``fault`` event is published and every further command is refused
with that reason; the device's own watchdog makes the arm safe.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import multiprocessing as mp
import os
import pickle
import queue
import threading
import time
from collections.abc import Callable
from multiprocessing import connection
from typing import TYPE_CHECKING, Any

import numpy as np

from poise.api.bus import (
    ESTOP_CANCELLED,
    Command,
    CommandResponse,
    CycleSample,
    Event,
    SubscriberHub,
)
from poise.api.state import LATCHED, State
from poise.controller.config import Config, ConfigError, build_model
from poise.controller.dispatch import CommandDispatcher
from poise.controller.ring import DEFAULT_CAPACITY, CycleRing, RingError
from poise.controller.rtboot import boot
from poise.controller.rtchild import (
    PUMP_HZ,
    RESPONSE_NAME,
    GainOrigins,
    clean,
    plain,
)

if TYPE_CHECKING:  # imported where used: spawning the child needs neither (SciPy)
    from poise.models.base import MechanicalModel
    from poise.motion.params import LiveParams, ParamError
    from poise.motion.planner import TargetPlan
    from poise.motion.safety import SafetyLimits
    from poise.motion.stepper import Stepper

#: How often the parent polls the ring when nothing else wakes it [s].
POLL = 0.005
#: Longest wait for the child's answer to an e-stop [s] (it waits for the device's ack).
ESTOP_TIMEOUT = 30.0
class RealtimeError(RuntimeError):
    """The real-time process could not start, or is gone; the message says why."""


class StartupCancelled(RealtimeError):
    """The start-up was abandoned on request (a signal); nothing is left running."""


class _Pending:
    """A call waiting for its answer: a sync caller (``done``) or a ``reply`` callback."""

    __slots__ = ("command", "done", "id", "ok", "reply", "value")

    def __init__(self, command: str, cid: str = "",
                 reply: Callable[[CommandResponse], None] | None = None) -> None:
        self.command, self.id, self.reply = command, cid, reply
        self.done = threading.Event()
        self.ok = False
        self.value: Any = None


class _ChildUrgent:
    """The handle of the e-stop listener running in the child (``connected`` mirrors it)."""

    def __init__(self, owner: RealtimeController,
                 on_answer: Callable[[CommandResponse], None]) -> None:
        self.owner, self.on_answer = owner, on_answer
        self.connected = threading.Event()

    def stop(self, timeout: float = 5.0) -> None:
        with contextlib.suppress(RealtimeError):
            self.owner._call("stop_urgent", timeout=timeout)
        self.connected.clear()


def _early_device(config: Config) -> dict[str, Any] | None:
    """What the real-time process launches first: the virtual device of ``config`` (``port =
    "sim"``), on the CPUs the control loop leaves (``loop.cpu``); else None."""
    from poise.devices.affinity import plan_cpus
    from poise.devices.factory import early_device_spec

    plan = plan_cpus(config.loop.cpu)[0]
    return early_device_spec(config.device, model=config.model.name, rate=config.loop.rate,
                             priority=config.loop.priority, cpus=plan and plan.others)


class RealtimeController(SubscriberHub):
    """A :class:`~poise.controller.loop.Controller` running in a child process, with the same
    API for the telemetry side (see the module docstring).

    Args:
        config: the validated configuration.
        capacity: records the cycle ring keeps.
        startup_timeout: how long the child may take to build its controller [s].
        cancelled: polled while the child starts; once it returns True the start-up is
            abandoned (the child, which has opened no device yet, is killed) and
            :class:`StartupCancelled` raised: a Ctrl-C during start-up ends it at once.
        check_gains: the child checks the configuration's gains against the stability
            bound before it reports itself started (``poise run``; where every module it
            needs is loaded already): a gain at or above its bound is raised here as a
            :class:`ConfigError`. ``origins``: the command-line
            overrides, so that the message names the flag (see
            :func:`~poise.controller.gains.check_configured_gains`).
        progress: called (in a thread of this object) with each step of a first start's
            compile, which the child runs before it reports itself started
            (:class:`~poise.kernels.warmup.KernelProgress`; a start from the cache reports
            nothing).

    Raises:
        ConfigError: the child's controller refused the configuration.
        RealtimeError: the child did not start.
    """

    def __init__(self, config: Config, *, capacity: int = DEFAULT_CAPACITY,
                 startup_timeout: float = 120.0,
                 cancelled: Callable[[], bool] | None = None,
                 check_gains: bool = False, origins: GainOrigins | None = None,
                 progress: Callable[[Any], Any] | None = None) -> None:
        self.config = config
        self._progress = progress
        self.model_info = build_model(config.model)
        self.model = self.model_info.model
        #: The robot's reach [m] (as ``Controller.reach``).
        self.reach: float | None = getattr(self.model, "reach", None)
        self.period = 1.0 / config.loop.rate
        #: Cycle records overwritten in the ring before the parent read them.
        self.samples_lost = 0
        self._state = State.IDLE
        self._reason = ""
        self._estops = 0  # the child's Controller.estops, as it last reported it
        self._target = ("", "")
        self._changed = threading.Condition()
        self._dead = ""  # the death reason once the child is gone unexpectedly
        self._closing = False
        self._closed = False
        SubscriberHub.__init__(self)
        self._pending: dict[int, _Pending] = {}
        self._pending_lock = threading.Lock()
        self._ids = itertools.count(1)
        self._estop_lock = threading.Lock()
        self._id_lock = threading.Lock()
        self._last_sample: CycleSample | None = None
        self._plan_goal: np.ndarray | None = None  # the child's current plan's q_goal
        self._limits: SafetyLimits | None = None  # the child's safety limits (its plans')
        #: The steppers of the references made here (:meth:`_choose_move`), made once.
        self._factory: Callable[[str, MechanicalModel], Stepper] | None = None
        self._factory_lock = threading.Lock()
        self._warmer: threading.Thread | None = None  # :meth:`_warm_planner`, once
        self._planner_warm = False  # ... and it planned
        self._last_summary: dict[str, Any] = {}
        self._final: dict[str, Any] | None = None
        self._since = 0
        self._startup_timeout = startup_timeout
        self._built = threading.Event()  # the child has built its controller
        self._hello = threading.Event()  # ... and serves (its gains checked)
        self._fatal: tuple[str, str] | None = None  # why it could not

        m = self.model
        self._ring = CycleRing.create(m.n, m.m, m.task_dim, capacity=capacity)
        ctx = mp.get_context("spawn")
        down_r, self._down = ctx.Pipe(duplex=False)
        estop_r, self._estop = ctx.Pipe(duplex=False)
        self._up, up_w = ctx.Pipe(duplex=False)
        # the child launches the virtual device before its own imports: what it needs for
        # that comes as plain values, the configuration pickled (unpickled after the launch)
        self._proc = ctx.Process(target=boot, name="poise-realtime", daemon=True,
                                 args=(_early_device(config), pickle.dumps(config),
                                       self._ring.name, down_r, estop_r, up_w, os.getpid(),
                                       dict(origins or {}) if check_gains else None))
        try:
            self._proc.start()
        except BaseException:
            self._ring.close()
            self._ring.unlink()
            raise
        finally:  # the child has its copies; ours would hide its death (no EOF)
            for c in (down_r, estop_r, up_w):
                c.close()
        # after the spawn: the child imports and builds while this process loads the
        # parameters' stability machinery (SciPy)
        from poise.motion.params import LiveParams

        target = config.algorithm.target
        self._params = LiveParams.from_config(config, np.asarray(
            target if target is not None else np.zeros(self.model.task_dim), dtype=float))
        self._outbox: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()
        self._sender = threading.Thread(target=self._send_loop, name="poise-rt-send",
                                        daemon=True)
        self._reader = threading.Thread(target=self._read_loop, name="poise-rt-read",
                                        daemon=True)
        self._sender.start()
        self._reader.start()
        #: Commands posted from outside (MQTT): queued, coalesced and planned here.
        self.dispatcher = CommandDispatcher(self._execute)
        self._urgent: _ChildUrgent | None = None
        self._wait_started(startup_timeout, cancelled or (lambda: False))

    def _wait_started(self, limit: float, cancelled: Callable[[], bool]) -> None:
        """Block until the child serves (its ``hello``); else raise :class:`ConfigError`
        (the child refused the configuration), :class:`RealtimeError` (it did not build its
        controller in ``limit`` s, or died) or :class:`StartupCancelled` (``cancelled`` said
        so), the child gone and this object closed. Once built, the child may take as long
        as its gain check takes (compiling on a first start) while it lives."""
        deadline = time.monotonic() + limit
        while not self._hello.wait(POLL * 10):
            if self._fatal is not None or not self._proc.is_alive():
                self._proc.join(5)
                self._reader.join(5)  # it reads what the child said last (its "fatal")
                kind, text = self._fatal or ("", "")
                self._abandon(ConfigError(text) if kind == "ConfigError" else RealtimeError(
                    f"the real-time process did not start: {kind}: {text}" if kind else
                    f"the real-time process did not start (exit code {self._proc.exitcode})"))
            if cancelled():
                self._abandon(StartupCancelled("start-up cancelled"))
            if time.monotonic() > deadline and not self._built.is_set():
                self._abandon(RealtimeError("the real-time process did not build its "
                                            f"controller in {limit:g} s"))

    # ------------------------------------------------------------------ observation

    @property
    def pid(self) -> int | None:
        """The real-time process's pid."""
        return self._proc.pid

    @property
    def state(self) -> State:
        """The real-time controller's state (mirrored; no round trip)."""
        return self._state

    @property
    def reason(self) -> str:
        """Why a latched state (fault, estop) was entered; empty otherwise."""
        return self._reason

    @property
    def params(self) -> LiveParams:
        """The live parameters the next cycle uses (mirrored)."""
        return self._params

    @property
    def estops(self) -> int:
        """The child's ``Controller.estops`` as it last reported it (never ahead of the
        child's: a command stamped with it is refused there if an e-stop latched since)."""
        return self._estops

    @property
    def target_status(self) -> str:
        """``reachable``, ``unreachable`` or ``""`` (see ``Controller.target_status``)."""
        return self._target[0]

    @property
    def target_note(self) -> str:
        """Why the target is unreachable ('' otherwise)."""
        return self._target[1]

    def wait_for(self, *states: State, timeout: float = 5.0) -> bool:
        """Block until the state is one of ``states``; False on timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: self._state in states, timeout)

    def timing(self) -> dict[str, Any]:
        """Timing percentiles (µs) and counters of the cycles so far (from the child; the
        last known ones once it is gone)."""
        try:
            return self._call("timing")
        except RealtimeError:
            return dict(self._last_summary.get("timing") or {})

    def reset_timing(self) -> None:
        """Start the child's timing statistics afresh (a benchmark's measured window)."""
        self._call("reset_timing")

    def device_pid(self) -> int | None:
        """The virtual device's pid (``device.port = "sim"`` once connected), else None."""
        return self._call("device_pid")

    # ------------------------------------------------------------------ commands

    def connect(self) -> CommandResponse:
        """idle → ready in the child (opens the device; see ``Controller.connect``)."""
        return self._command("connect")

    def start(self, cause: str = "start") -> CommandResponse:
        """Connect if needed, arm and run (→ running)."""
        return self._command("start", cause)

    def stop(self, cause: str = "stop") -> CommandResponse:
        """running → ready: stop sending setpoints and disarm."""
        return self._command("stop", cause)

    def clear(self, cause: str = "clear") -> CommandResponse:
        """Clear a latched fault or e-stop."""
        return self._command("clear", cause)

    def submit(self, command: Command) -> CommandResponse:
        """Validate and apply ``command`` in the child (a target planned here first, see
        :meth:`_execute`); always answered."""
        return self._execute(command)

    def set_target(self, target: Any, source: str = "api") -> CommandResponse:
        """Shorthand for ``submit(Command("target", target))``."""
        return self.submit(Command("target", plain(target), source=source))

    def estop(self, cause: str = "e-stop") -> CommandResponse:
        """Latch the e-stop in the child at once: its own pipe and thread, never behind other
        commands; commands sent before it that still wait are cancelled."""
        if self._dead:
            return CommandResponse("", "estop", False, self._dead)
        p = _Pending("estop")
        cid = self._register(p)
        try:
            with self._estop_lock:
                self._estop.send(("estop", cid, cause))
        except (OSError, ValueError):
            self._unregister(cid)
            return CommandResponse("", "estop", False, self._dead or "real-time process gone")
        self.dispatcher.cancel_waiting("cancelled by the e-stop that came after it")
        return self._await(p, cid, ESTOP_TIMEOUT)

    def post(self, command: Command, reply: Callable[[CommandResponse], None]) -> None:
        """Hand over a command without waiting (never blocks); ``reply`` gets its one answer.

        ``reply`` may run in the parent's reader thread: it must not block, nor call this
        object's synchronous methods (their answers come through that thread). An e-stop
        goes on the e-stop pipe at once and cancels every command still waiting here; the
        others wait in this process's :class:`CommandDispatcher` (coalesced, bounded; a
        ``run: stop`` bypasses the queue)."""
        if self._dead or self._closing:
            reply(CommandResponse(command.id, command.name, False,
                                  self._dead or "service stopping: command not applied"))
            return
        if command.name != "estop":
            self.dispatcher.post(command, reply)
            return
        cid = self._register(_Pending(command.name, command.id, reply))
        try:
            with self._estop_lock:
                self._estop.send(("post", cid, command))
        except (OSError, ValueError):
            self._fail(cid, self._dead or "real-time process gone")
        self.dispatcher.cancel_waiting(f"cancelled by the e-stop (id {command.id!r}) that "
                                       "came after it")

    def serve_urgent(self, mqtt: Any, priority: int,
                     on_answer: Callable[[CommandResponse], None],
                     device: str = "", *, starter: Callable[..., Any]) -> _ChildUrgent:
        """Serve MQTT e-stops in the real-time process itself (a connection of its own, which
        ``starter`` opens there: :func:`poise.telemetry.urgent.serve_in_process`, a
        module-level function sent by reference): from the socket to the device
        without this process's GIL, which a flood of commands here holds. The child answers
        them and publishes ``$state`` (``device`` in it) once each has latched;
        ``on_answer`` is told each answer (in the reader thread; must not block).

        Raises:
            RealtimeError: the child is gone.
        """
        handle = _ChildUrgent(self, on_answer)
        self._urgent = handle
        self._call("serve_urgent", mqtt, priority, device, starter, timeout=10.0)
        return handle

    # ------------------------------------------------------------------ summary, close

    def summary(self) -> dict[str, Any]:
        """``Controller.summary()`` of the child (the last known one, with the current state,
        once it is gone)."""
        try:
            out = self._call("summary")
        except RealtimeError:
            return self._local_summary()
        self._last_summary = out
        return self._with_dispatch(out)

    def final_summary(self) -> dict[str, Any]:
        """``Controller.final_summary()``: the state the run ended in."""
        if self._final is not None:
            return dict(self._final)
        try:
            out = self._call("final_summary")
        except RealtimeError:
            return self._local_summary()
        self._last_summary = out
        return self._with_dispatch(out)

    def _with_dispatch(self, out: dict[str, Any]) -> dict[str, Any]:
        """A child's summary with this process's command counters (where MQTT's commands
        wait and coalesce)."""
        out["dispatch"] = dataclasses.asdict(self.dispatcher.stats)
        return out

    def close(self, timeout: float = 30.0) -> None:
        """Stop the child cleanly (its ``Controller.close()``: disarm, ``summary`` event),
        wait for it to exit, then unlink the shared memory. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.dispatcher.close()
        if not self._dead:
            with contextlib.suppress(RealtimeError):
                self._final = self._call("close", timeout=timeout)
                if self._final is not None:
                    self._with_dispatch(self._final)
        self._closing = True
        self._proc.join(timeout)
        self._kill()
        self._outbox.put(None)
        self._reader.join(timeout)
        self._sender.join(timeout)
        self._fail_all(self._dead or "service stopping: command not applied")
        for c in (self._down, self._estop, self._up):
            c.close()
        self._ring.close()
        self._ring.unlink()

    def __enter__(self) -> RealtimeController:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ calls

    def _register(self, p: _Pending) -> int:
        with self._id_lock:
            cid = next(self._ids)
        with self._pending_lock:
            self._pending[cid] = p
        return cid

    def _unregister(self, cid: int) -> _Pending | None:
        with self._pending_lock:
            return self._pending.pop(cid, None)

    def _call(self, name: str, *args: Any, timeout: float | None = None) -> Any:
        """Run ``name(*args)`` in the child and return its result.

        Raises:
            RealtimeError: the child is gone (or went during the call), or the call raised.
        """
        if self._dead or self._closing:
            raise RealtimeError(self._dead or "real-time process closed")
        p = _Pending(name)
        cid = self._register(p)
        self._outbox.put(("call", cid, name, args))
        if not p.done.wait(timeout):
            self._unregister(cid)
            raise RealtimeError(f"{name}: no answer from the real-time process in {timeout} s")
        if not p.ok:
            raise RealtimeError(str(p.value))
        return p.value

    def _command(self, method: str, *args: Any, name: str | None = None,
                 cid: str = "") -> CommandResponse:
        name = name or RESPONSE_NAME.get(method, method)
        if self._dead or self._closing:
            return CommandResponse(cid, name, False,
                                   self._dead or "service stopping: command not applied")
        try:
            return self._call(method, *args)
        except RealtimeError as exc:
            return CommandResponse(cid, name, False, str(exc))

    def _execute(self, command: Command) -> CommandResponse:
        """Apply ``command`` in the child, a target planned here first (:meth:`_prepare`);
        one received before an e-stop that has latched since is refused here, unplanned
        (the child would refuse it too: ``Command.estops``)."""
        if command.estops is not None and command.estops < self._estops:
            return CommandResponse(command.id, command.name, False, ESTOP_CANCELLED)
        return self._command("submit", command, self._prepare(command), name=command.name,
                             cid=command.id)

    def _prepare(self, command: Command) -> TargetPlan | ParamError | None:
        """A target's offline plan, made here while the loop runs, so that its solves never
        compete with the loop for the real-time process's CPU; from the newest cycle
        record's q̄ and q and the current plan's goal (as ``ControlStep.make_plan`` does in
        the child). None (the child plans) for other commands, or before the loop runs
        (nothing to disturb yet). A bad or unstable target: the :class:`ParamError` the
        child answers with."""
        s = self._last_sample
        if command.name != "target" or self._state != State.RUNNING or s is None:
            return None
        from poise.motion.params import ParamError, parse_target
        from poise.motion.planner import UnstableTarget, plan_target

        try:
            target = parse_target(command.value, self.model.task_dim, self.reach)
            starts = [np.asarray(s.q_bar, dtype=float), np.asarray(s.q, dtype=float)]
            if self._plan_goal is not None:
                starts.append(self._plan_goal)
            plan = plan_target(self.model, target, starts, self.config.algorithm.tolerance,
                               period=self.period,
                               effort_feedforward=self.config.loop.effort_feedforward,
                               params=self._params, shaper=self.config.loop.shaper)
            self._planner_warm = True
            return self._choose_move(plan, starts[0])
        except UnstableTarget as exc:
            return ParamError(str(exc))
        except ParamError as exc:
            return exc

    def _choose_move(self, plan: TargetPlan, q_bar: np.ndarray) -> TargetPlan:
        """``plan`` with its move from ``q_bar`` chosen on the model and the predicted
        response feedback follows after it (:func:`~poise.motion.reference.choose_move`),
        computed here (with this process's own compiled steppers, loaded at the first use)
        rather than beside the loop; ``plan`` itself before the child reported its limits
        or when the parameters at the target are refused (the child refuses them too)."""
        from poise.motion.params import ParamError, with_plan
        from poise.motion.reference import choose_move

        limits = self._limits
        if limits is None:
            return plan
        try:
            params = with_plan(self._params, plan)
        except ParamError:
            return plan
        return choose_move(plan, q_bar, params, self.config, self.model, limits,
                           self._steppers())

    def _steppers(self) -> Callable[[str, MechanicalModel], Stepper]:
        """This process's compiled steppers (loaded at the first use)."""
        with self._factory_lock:
            if self._factory is None:
                from poise.motion.step import stepper_factory

                self._factory = stepper_factory(self.model, self.config.loop.compiled)[0]
            return self._factory

    def _warm_planner(self, q_goal: np.ndarray) -> None:
        """Load what planning a target here needs while the loop runs (the statics solver's
        and the steppers' compiled kernels: the first target command otherwise answered
        about 1.5 s later than the next ones): the child's first plan's goal planned again
        here, the result dropped. A failure is only a warm-up that did not happen: the first
        command plans, and reports, for itself."""
        from poise.motion.planner import plan_target

        with contextlib.suppress(Exception):
            self._steppers()
            plan_target(self.model, np.asarray(self.model.fk(q_goal), dtype=float), [q_goal],
                        self.config.algorithm.tolerance, period=self.period,
                        effort_feedforward=self.config.loop.effort_feedforward,
                        params=self._params, shaper=self.config.loop.shaper)
            self._planner_warm = True

    def _await(self, p: _Pending, cid: int, timeout: float | None) -> CommandResponse:
        if not p.done.wait(timeout) or not p.ok:
            self._unregister(cid)
            return CommandResponse(p.id, p.command, False, str(p.value or "no answer"))
        return p.value

    def _answer(self, cid: int, ok: bool, value: Any) -> None:
        p = self._unregister(cid)
        if p is None:
            return
        if p.reply is not None:
            if not ok or not isinstance(value, CommandResponse):
                value = CommandResponse(p.id, p.command, False, str(value))
            with contextlib.suppress(Exception):  # a caller's callback must not stop us
                p.reply(value)
            return
        p.ok, p.value = ok, value
        p.done.set()

    def _fail(self, cid: int, reason: str) -> None:
        self._answer(cid, False, reason)

    def _fail_all(self, reason: str) -> None:
        with self._pending_lock:
            ids = list(self._pending)
        for cid in ids:
            self._fail(cid, reason)

    # ------------------------------------------------------------------ threads

    def _send_loop(self) -> None:
        """Writes the command pipe, so ``post`` never blocks on a full pipe."""
        while True:
            item = self._outbox.get()
            if item is None:
                return
            try:
                self._down.send(item)
            except (OSError, ValueError):
                self._fail(item[1], self._dead or "real-time process gone")

    def _read_loop(self) -> None:
        """Drains the pipe (events, replies) and the ring; notices the child's death."""
        up, sentinel = self._up, self._proc.sentinel
        eof = False
        while True:
            ready = connection.wait([up, sentinel] if not eof else [sentinel], POLL)
            if up in ready and not eof:
                eof = self._drain_up()
            self._drain_ring()
            if sentinel in ready:
                if not eof:
                    self._drain_up()
                self._drain_ring()
                self._proc.join(1.0)
                if not self._hello.is_set():  # a failed start-up: wait_started reports it
                    self._fail_all(self._dead or "the real-time process did not start")
                elif not self._closed:
                    self._died(self._proc.exitcode)
                return

    def _drain_up(self) -> bool:
        """Everything waiting in the pipe; True at its end (the child is gone)."""
        up = self._up
        try:
            while up.poll():
                self._handle(up.recv())
        except (EOFError, OSError):
            return True
        return False

    def _drain_ring(self) -> None:
        try:
            samples, self._since, lost = self._ring.read_new(self._since)
        except RingError:
            return
        self.samples_lost += lost
        if not samples:
            return
        self._last_sample = samples[-1]
        for sub in self._sample_subs:
            for s in samples:
                sub.put(s)

    def _handle(self, msg: tuple[Any, ...]) -> None:
        kind = msg[0]
        if kind == "hello":
            self._hello.set()
        elif kind == "built":
            self._built.set()
        elif kind == "fatal":
            self._fatal = (msg[1], msg[2])
        elif kind == "estops":
            self._estops = msg[1]
        elif kind == "progress" and self._progress is not None:
            with contextlib.suppress(Exception):  # the owner's callback must not stop us
                self._progress(msg[1])
        elif kind == "ev":
            for ev in msg[1]:
                self._on_event(ev)
        elif kind == "re":
            self._answer(msg[1], msg[2], msg[3])
        elif kind == "params":
            self._params = type(self._params).from_dict(msg[1])
        elif kind == "urgent":  # an e-stop the child took from MQTT and acted on
            self._urgent_done(msg[1])
        elif kind == "urgent_answer" and self._urgent is not None:  # given by the child
            with contextlib.suppress(Exception):  # the owner's callback must not stop us
                self._urgent.on_answer(msg[1])
        elif kind == "urgent_conn" and self._urgent is not None:
            (self._urgent.connected.set if msg[1] else self._urgent.connected.clear)()
        elif kind == "plan":
            self._target = (msg[1], msg[2])
            self._plan_goal = None if msg[3] is None else np.asarray(msg[3], dtype=float)
            self._limits = msg[4]
            if self._warmer is None and self._plan_goal is not None:
                self._warmer = threading.Thread(target=self._warm_planner,
                                                args=(self._plan_goal.copy(),),
                                                name="poise-plan-warm", daemon=True)
                self._warmer.start()

    def _urgent_done(self, estop_id: str) -> None:
        """After an e-stop taken in the child: cancel what waits here, and tell the child
        which calls are older than the e-stop (until then it cancels them all)."""
        self.dispatcher.cancel_waiting(f"cancelled by the e-stop (id {estop_id!r}) that "
                                       "came after it")
        with self._id_lock:
            barrier = next(self._ids)
        self._outbox.put(("barrier", barrier))

    def _on_event(self, ev: Event) -> None:
        if ev.kind == "state":
            to, frm = State(ev.data["to"]), ev.data.get("from")
            with self._changed:
                self._state = to
                if to in LATCHED:
                    self._reason = str(ev.data.get("cause", ""))
                elif frm in (s.value for s in LATCHED) or to == State.IDLE:
                    self._reason = ""
                self._changed.notify_all()
        self._publish(ev)

    def _died(self, code: int | None) -> None:
        reason = f"real-time process died (exit code {code})"
        with self._changed:
            old = self._state
            self._dead = reason
            self._state, self._reason = State.FAULT, reason
            self._changed.notify_all()
        now = time.monotonic()
        self._publish(Event(now, "state", {"from": old.value, "to": State.FAULT.value,
                                           "cause": reason}))
        self._publish(Event(now, "fault", {"source": "host", "code": "realtime_died",
                                           "reason": reason, "exit_code": code}))
        self._fail_all(reason)

    # ------------------------------------------------------------------ start-up, teardown

    def _abandon(self, error: Exception) -> None:
        """A failed start-up: kill the child (before its hello it has opened no device),
        close this object, raise ``error``."""
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(5)
        self._dead = str(error) or type(error).__name__
        self.close(timeout=5.0)
        raise error

    def _kill(self) -> None:
        """End the child if it is still there (SIGTERM: it closes its controller; then
        SIGKILL)."""
        proc = self._proc
        if proc.is_alive():
            proc.terminate()
            proc.join(10)
        if proc.is_alive():
            proc.kill()
            proc.join(5)

    def _local_summary(self) -> dict[str, Any]:
        """The last known summary, updated with the last cycle record and the state."""
        out = dict(self._final or self._last_summary)
        s = self._last_sample
        if s is not None:
            out.update(clean({"q": list(s.q), "q_bar": list(s.q_bar), "x": list(s.x),
                               "target": list(s.target), "task_error": s.task_error,
                               "statics_residual": s.statics_residual}))
            if s.qa_ref:
                out["qa_ref"] = list(s.qa_ref)
        out.update(state=self._state.value, reason=self._reason)
        out.setdefault("reached", False)
        out.setdefault("timing", {})
        return out


def make_controller(config: Config, cancelled: Callable[[], bool] | None = None, *,
                    check_gains: bool = False, origins: GainOrigins | None = None,
                    progress: Callable[[Any], Any] | None = None) -> Any:
    """The controller ``config`` asks for: a :class:`RealtimeController` (its own process,
    ``[loop] process = "own"``) or an in-process :class:`~poise.controller.loop.Controller`
    (``"shared"``); both have the same API. ``cancelled``, ``check_gains``, ``origins``,
    ``progress``: see :class:`RealtimeController` (the in-process controller prepares its
    kernels and checks its gains here).

    Raises:
        ConfigError: the configuration refused (with ``check_gains``: a gain at or above
            its bound).
    """
    if config.loop.process == "own":
        return RealtimeController(config, cancelled=cancelled, check_gains=check_gains,
                                  origins=origins, progress=progress)
    from poise.controller.gains import check_configured_gains
    from poise.controller.loop import Controller

    ctl = Controller(config)
    with contextlib.suppress(Exception):  # a failure is connect's to report (it retries)
        ctl.prepare_kernels(progress=progress)
    if check_gains:
        check_configured_gains(config, ctl.model, origins=origins)
    return ctl


__all__ = ["PUMP_HZ", "RealtimeController", "RealtimeError", "StartupCancelled",
           "make_controller"]
