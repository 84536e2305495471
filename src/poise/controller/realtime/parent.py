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

The parts: :mod:`~poise.controller.realtime.process` (spawn, start-up, the reader thread),
:mod:`~poise.controller.realtime.channel` (calls and replies),
:mod:`~poise.controller.realtime.mirror` (state, events, cycle records),
:mod:`~poise.controller.realtime.estop` (the e-stop pipe, the child's MQTT e-stops),
:mod:`~poise.controller.realtime.planning` (targets planned here) and
:mod:`~poise.controller.realtime.messages` (what crosses the pipes).

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
from collections.abc import Callable
from typing import Any

import numpy as np

from poise.api.bus import ESTOP_CANCELLED, Command, CommandResponse
from poise.controller.config import Config, build_model
from poise.controller.dispatch import CommandDispatcher
from poise.controller.interface import ControllerAPI
from poise.controller.realtime.channel import CallChannel, RealtimeError
from poise.controller.realtime.child import GainOrigins
from poise.controller.realtime.estop import ChildUrgent, EstopLine
from poise.controller.realtime.messages import (
    CallKind,
    EstopCount,
    EventBatch,
    ParamsChanged,
    PlanChanged,
    Reply,
    UrgentAnswer,
    UrgentConnection,
    UrgentTaken,
)
from poise.controller.realtime.mirror import ChildMirror
from poise.controller.realtime.planning import ParentPlanner
from poise.controller.realtime.process import ChildProcess, StartupCancelled
from poise.controller.replan import StallReplanner
from poise.controller.ring import DEFAULT_CAPACITY, CycleRing


class RealtimeController(ChildMirror):
    """A :class:`~poise.controller.loop.Controller` running in a child process, with the same
    API for the telemetry side (:class:`~poise.controller.interface.ControllerAPI`; see the
    module docstring). ``state``, ``reason``, ``params``, ``estops``, ``target_status``,
    ``target_note``, ``wait_for`` and the subscriptions are the mirror's
    (:class:`~poise.controller.realtime.mirror.ChildMirror`).

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
        ChildMirror.__init__(self)
        self.config = config
        self.model_info = build_model(config.model)
        self.model = self.model_info.model
        #: The robot's reach [m] (as ``Controller.reach``).
        self.reach: float | None = getattr(self.model, "reach", None)
        self.period = 1.0 / config.loop.rate
        self._closing = False
        self._closed = False
        m = self.model
        self._child = ChildProcess(config, CycleRing.create(m.n, m.m, m.task_dim,
                                                            capacity=capacity),
                                   dict(origins or {}) if check_gains else None, progress)
        # after the spawn: the child imports and builds while this process loads the
        # parameters' stability machinery (SciPy)
        from poise.motion.params import LiveParams

        target = config.algorithm.target
        self._params = LiveParams.from_config(config, np.asarray(
            target if target is not None else np.zeros(self.model.task_dim), dtype=float))
        self._calls = CallChannel(self._child.down, self._refusal,
                                  lambda: self._dead or "real-time process gone")
        #: Where target commands are planned (in this process, beside nothing real-time).
        self._planner = ParentPlanner(self, config, self.model, self.reach,
                                      tell=self._calls.tell)
        #: Re-plans the child's stalled targets here (``loop.replan_on_stall``, fb), from
        #: when the child has started.
        self.replanner: StallReplanner | None = None
        #: Commands posted from outside (MQTT): queued, coalesced and planned here.
        self.dispatcher = CommandDispatcher(
            self.submit, stream_targets=config.loop.targets == "stream")
        self._estop_line = EstopLine(self._child.estop, self._calls, self.dispatcher,
                                     lambda: self._dead)
        self._child.watch(self._message_handlers(),
                          lambda: self._drain_ring(self._child.ring), self._on_exit)
        error = self._child.wait_started(startup_timeout, cancelled or (lambda: False))
        if error is not None:
            self._abandon(error)
        if config.loop.replan_on_stall and config.loop.mode == "fb":
            self.replanner = StallReplanner(
                self, self._planner.plan_aim,
                lambda command, prepared: self._command(CallKind.SUBMIT, command, prepared,
                                                        name=command.name, cid=command.id),
                self.announce)

    # ------------------------------------------------------------------ observation

    @property
    def pid(self) -> int | None:
        """The real-time process's pid."""
        return self._child.proc.pid

    def timing(self) -> dict[str, Any]:
        """Timing percentiles (µs) and counters of the cycles so far (from the child; the
        last known ones once it is gone)."""
        try:
            return self._calls.call(CallKind.TIMING)
        except RealtimeError:
            return dict(self._last_summary.get("timing") or {})

    def reset_timing(self) -> None:
        """Start the child's timing statistics afresh (a benchmark's measured window)."""
        self._calls.call(CallKind.RESET_TIMING)

    def device_pid(self) -> int | None:
        """The virtual device's pid (``device.port = "sim"`` once connected), else None."""
        return self._calls.call(CallKind.DEVICE_PID)

    # ------------------------------------------------------------------ commands

    def connect(self) -> CommandResponse:
        """idle → ready in the child (opens the device; see ``Controller.connect``)."""
        return self._command(CallKind.CONNECT)

    def start(self, cause: str = "start") -> CommandResponse:
        """Connect if needed, arm and run (→ running)."""
        return self._command(CallKind.START, cause)

    def stop(self, cause: str = "stop") -> CommandResponse:
        """running → ready: stop sending setpoints and disarm."""
        return self._command(CallKind.STOP, cause)

    def clear(self, cause: str = "clear") -> CommandResponse:
        """Clear a latched fault or e-stop."""
        return self._command(CallKind.CLEAR, cause)

    def submit(self, command: Command) -> CommandResponse:
        """Validate and apply ``command`` in the child, a target planned here first
        (:meth:`ParentPlanner.prepare`; a quick plan, adopted at once, is refined here once
        the child has it: :meth:`ParentPlanner.answered`); always answered. One received
        before an e-stop that has latched since is refused here, unplanned (the child would
        refuse it too: ``Command.estops``)."""
        if command.estops is not None and command.estops < self._estops:
            return CommandResponse(command.id, command.name, False, ESTOP_CANCELLED)
        prepared = self._planner.prepare(command)
        response = self._command(CallKind.SUBMIT, command, prepared, name=command.name,
                                 cid=command.id)
        self._planner.answered(prepared, response)
        return response

    def set_target(self, target: Any, source: str = "api") -> CommandResponse:
        """Shorthand for ``submit(Command("target", target))``."""
        if isinstance(target, np.ndarray):  # a command value crosses the process boundary
            target = target.tolist()
        return self.submit(Command("target", target, source=source))

    def estop(self, cause: str = "e-stop") -> CommandResponse:
        """Latch the e-stop in the child at once: its own pipe and thread, never behind other
        commands; commands sent before it that still wait are cancelled."""
        return self._estop_line.estop(cause)

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
        elif command.name != "estop":
            self.dispatcher.post(command, reply)
        else:
            self._estop_line.post(command, reply)

    def serve_urgent(self, mqtt: Any, priority: int,
                     on_answer: Callable[[CommandResponse], None],
                     device: str = "", *, starter: Callable[..., Any]) -> ChildUrgent:
        """Serve MQTT e-stops in the real-time process itself (a connection of its own, which
        ``starter`` opens there: :func:`poise.telemetry.urgent.serve_in_process`, a
        module-level function sent by reference): from the socket to the device
        without this process's GIL, which a flood of commands here holds. The child answers
        them and publishes ``$state`` (``device`` in it) once each has latched;
        ``on_answer`` is told each answer (in the reader thread; must not block).

        Raises:
            RealtimeError: the child is gone.
        """
        return self._estop_line.serve_urgent(on_answer, mqtt, priority, device, starter)

    def _command(self, kind: CallKind, *args: Any, name: str | None = None,
                 cid: str = "") -> CommandResponse:
        """Call ``kind(*args)`` in the child, answered as command ``name`` (default: the
        call's :attr:`~CallKind.response_name`) with id ``cid``; a refusal if it cannot."""
        name = name or kind.response_name
        if self._dead or self._closing:
            return CommandResponse(cid, name, False,
                                   self._dead or "service stopping: command not applied")
        try:
            return self._calls.call(kind, *args)
        except RealtimeError as exc:
            return CommandResponse(cid, name, False, str(exc))

    def _refusal(self) -> str:
        """Why no call may go to the child now ("" while calls may)."""
        if self._dead or self._closing:
            return self._dead or "real-time process closed"
        return ""

    # ------------------------------------------------------------------ summary, close

    def summary(self) -> dict[str, Any]:
        """``Controller.summary()`` of the child (the last known one, with the current state,
        once it is gone)."""
        try:
            out = self._calls.call(CallKind.SUMMARY)
        except RealtimeError:
            return self._local_summary()
        self._last_summary = out
        return self._with_dispatch(out)

    def final_summary(self) -> dict[str, Any]:
        """``Controller.final_summary()``: the state the run ended in."""
        if self._final is not None:
            return dict(self._final)
        try:
            out = self._calls.call(CallKind.FINAL_SUMMARY)
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
        self._planner.refiner.close()
        if self.replanner is not None:
            self.replanner.close()
        if not self._dead:
            with contextlib.suppress(RealtimeError):
                self._final = self._calls.call(CallKind.CLOSE, timeout=timeout)
                if self._final is not None:
                    self._with_dispatch(self._final)
        self._closing = True
        child = self._child
        child.proc.join(timeout)
        child.kill()
        self._calls.stop()
        if child.reader is not None:
            child.reader.join(timeout)
        self._calls.sender.join(timeout)
        self._calls.fail_all(self._dead or "service stopping: command not applied")
        child.release()

    def __enter__(self) -> RealtimeController:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ the reader thread

    def _message_handlers(self) -> dict[type, Callable[[Any], None]]:
        """What each message from the child does here, besides the start-up ones (run in
        the reader thread, in the order they come)."""
        line = self._estop_line
        return {
            EstopCount: self._on_estops, EventBatch: self._on_events,
            ParamsChanged: self._on_params, PlanChanged: _in_turn(self._on_plan,
                                                                  self._planner.on_plan),
            Reply: self._calls.on_reply, UrgentTaken: line.urgent_taken,
            UrgentAnswer: line.urgent_answer, UrgentConnection: line.urgent_connection,
        }

    def _on_exit(self) -> None:
        """The child is gone: a failed start-up (``wait_started`` reports it) or a death."""
        if not self._child.hello.is_set():
            self._calls.fail_all(self._dead or "the real-time process did not start")
        elif not self._closed:
            self._calls.fail_all(self._died(self._child.proc.exitcode))

    def _abandon(self, error: Exception) -> None:
        """A failed start-up: end the child, close this object, raise ``error``.

        SIGTERM first (:meth:`ChildProcess.kill`): before its hello the child has opened no
        device, but it may have launched the virtual device (:mod:`~poise.controller.
        realtime.boot`), which its SIGTERM handler stops and waits for. A SIGKILL left that
        device an orphan, which removed its folder only once it noticed, after ``poise run``
        had exited (a folder left in the temporary directory, seen on a busy machine)."""
        self._child.kill()
        self._dead = str(error) or type(error).__name__
        self.close(timeout=5.0)
        raise error


def _in_turn(*handlers: Callable[[Any], None]) -> Callable[[Any], None]:
    """One handler that runs ``handlers`` in turn."""
    def run(msg: Any) -> None:
        for handle in handlers:
            handle(msg)
    return run


def make_controller(config: Config, cancelled: Callable[[], bool] | None = None, *,
                    check_gains: bool = False, origins: GainOrigins | None = None,
                    progress: Callable[[Any], Any] | None = None) -> ControllerAPI:
    """The controller ``config`` asks for: a :class:`RealtimeController` (its own process,
    ``[loop] process = "own"``) or an in-process :class:`~poise.controller.loop.Controller`
    (``"shared"``); both have the same API (:class:`ControllerAPI`). ``cancelled``,
    ``check_gains``, ``origins``, ``progress``: see :class:`RealtimeController` (the
    in-process controller prepares its kernels and checks its gains here).

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


__all__ = ["RealtimeController", "RealtimeError", "StartupCancelled", "make_controller"]
