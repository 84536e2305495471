"""The real-time process's side of :mod:`poise.controller.realtime`: the child that runs the
ordinary :class:`~poise.controller.loop.Controller`, writes its cycle records into the
shared-memory :class:`~poise.controller.ring.CycleRing`, and serves the parent's calls (one
pipe and thread for commands, one of each for the e-stop; the messages are
:mod:`~poise.controller.realtime.messages`).
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping
from multiprocessing import connection
from typing import TYPE_CHECKING, Any

from poise.api.bus import ESTOP_CANCELLED, Command, CommandResponse, CycleSample
from poise.api.state import State
from poise.controller.config import Config, ConfigError
from poise.controller.realtime.messages import (
    Barrier,
    Built,
    Call,
    CallKind,
    Estop,
    EstopCount,
    EventBatch,
    Fatal,
    Hello,
    ParamsChanged,
    PlanChanged,
    PlanRefined,
    Progress,
    Reply,
    UrgentAnswer,
    UrgentConnection,
    UrgentTaken,
)
from poise.controller.ring import CycleRing, RingError
from poise.firmware_bridge.lifetime import fifo, parent_alive, watch_parent

if TYPE_CHECKING:
    from poise.devices.simdevice import SimDevice

#: How often the child's event thread looks for a changed ``params`` or plan when no event
#: wakes it [Hz] (cycle records go into the ring from the loop thread itself).
PUMP_HZ = 20.0
#: Where each command-line override came from: ``{"algorithm.gamma": (2.0, "--gamma")}``.
GainOrigins = Mapping[str, tuple[Any, str]]
#: Calls the child runs itself rather than on its controller.
OWN_CALLS = frozenset({CallKind.CLOSE, CallKind.DEVICE_PID, CallKind.SERVE_URGENT,
                       CallKind.STOP_URGENT})


class RealtimeChild:
    """The real-time process: the controller, the ring writer, the command servers.
    ``priority``: the e-stop server's ``SCHED_FIFO`` priority (``loop.priority``; 0: the
    normal scheduler); of the threads here only the e-stop server takes it (the loop, and the
    MQTT e-stop listener once served, take theirs themselves)."""

    def __init__(self, ctl: Any, ring: CycleRing, down: connection.Connection,
                 estop: connection.Connection, up: connection.Connection,
                 quit_: threading.Event, *, priority: int = 0) -> None:
        self.ctl, self.ring = ctl, ring
        self.priority = priority
        self.down, self.estop_conn, self.up = down, estop, up
        self.quit = quit_
        ctl.cycle_sink = self.record
        self.events = ctl.events(history=True)
        self.up_lock = threading.Lock()
        self.barrier = 0  # the newest e-stop's call id: older commands are cancelled
        # e-stops taken from MQTT here (serve_urgent) that the parent has not yet answered
        # with a barrier: until it has, every call that an e-stop cancels is cancelled
        self.unbarred = 0
        self.barrier_lock = threading.Lock()
        self.urgent: Any = None
        self.last_params: object = None
        self.last_plan: object = self  # never a plan: the first flush sends it
        self.last_status = ""
        self.last_estops = 0
        self.ring_errors = 0
        self.closed = False
        self.close_lock = threading.Lock()
        self.pump_quit = threading.Event()

    def run(self, parent_pid: int, signalled: list[int]) -> None:
        """Serve until ``close``, a signal (``signalled`` non-empty) or the parent's end."""
        self.send(Hello(os.getpid()))
        threads = [threading.Thread(target=f, name=n, daemon=True) for f, n in
                   ((self.serve, "poise-rt-rpc"), (self.serve_estop, "poise-rt-estop"),
                    (self.pump, "poise-rt-pump"))]
        for t in threads:
            t.start()
        # the kernels load now from the cache (a first start compiled them before the
        # hello), while the parent attaches its telemetry; the first connect waits for them.
        # A failure here is connect's to report (it retries).
        with contextlib.suppress(Exception):
            self.ctl.prepare_kernels()
        gc.collect()
        gc.freeze()  # start-up objects never scanned again (the loop freezes once more)
        while not self.quit.wait(0.1):
            if signalled or not parent_alive(parent_pid):
                break
        self.shutdown()
        threads[2].join(2)

    # -- the outgoing pipe --------------------------------------------------------------

    def send(self, extra: object = None) -> None:
        """Events, changed params and plan, then ``extra``: in this order, so the parent has
        the state a command produced before its reply."""
        ctl = self.ctl
        with self.up_lock:
            try:
                if ctl.estops != self.last_estops:  # first: the parent stamps commands
                    self.last_estops = ctl.estops  # with it (Command.estops)
                    self.up.send(EstopCount(self.last_estops))
                evs = self.events.drain()
                if evs:
                    self.up.send(EventBatch(evs))
                p = ctl.params
                if p is not self.last_params:
                    self.last_params = p
                    self.up.send(ParamsChanged(p.as_dict()))
                plan = ctl.step.plan
                status = ctl.target_status
                if plan is not self.last_plan or status != self.last_status:
                    self.last_plan, self.last_status = plan, status
                    goal = None if plan is None or plan.q_goal is None else \
                        plan.q_goal.tolist()
                    self.up.send(PlanChanged(status, ctl.target_note, goal,
                                             ctl.limits))
                if extra is not None:
                    self.up.send(extra)
            except (OSError, ValueError):  # the parent is gone
                self.quit.set()

    def reply(self, cid: int, value: Any, ok: bool = True) -> None:
        self.send(Reply(cid, ok, value))

    # -- threads ------------------------------------------------------------------------

    def record(self, sample: CycleSample) -> None:
        """The loop thread's cycle record into the ring (never waits)."""
        try:
            self.ring.write(sample)
        except RingError:
            self.ring_errors += 1

    def pump(self) -> None:
        """Events into the pipe as they come; params and plan at least PUMP_HZ times a
        second (the loop may change them without an event)."""
        events, period = self.events, 1.0 / PUMP_HZ
        while not self.pump_quit.is_set():
            events.wait(period)
            self.send()
        self.send()

    def serve(self) -> None:
        """Commands and calls, one at a time, answered by call id."""
        while True:
            try:
                msg = self.down.recv()
            except (EOFError, OSError):
                self.quit.set()
                return
            if isinstance(msg, Barrier):  # the parent's answer to an e-stop taken here
                with self.barrier_lock:
                    self.unbarred -= 1
                    self.barrier = max(self.barrier, msg.call_id)
                continue
            if isinstance(msg, PlanRefined):  # the rest of a quick plan, made in the parent
                self.refined(msg)
                continue
            call: Call = msg
            cid, kind = call.call_id, call.kind
            if kind.cancelled_by_estop and (self.unbarred or cid < self.barrier):
                cmd = call.args[0] if kind is CallKind.SUBMIT else None
                self.reply(cid, self.cancelled(cmd.name if cmd else kind.response_name,
                                               cmd.id if cmd else ""))
                continue
            try:
                value, ok = self.execute(kind, call.args), True
            except Exception as exc:  # answered, never fatal
                value, ok = f"{kind.value} failed: {type(exc).__name__}: {exc}", False
            self.reply(cid, value, ok)
            if kind is CallKind.CLOSE:
                self.quit.set()
                return

    def refined(self, msg: PlanRefined) -> None:
        """Apply a quick plan's refinement to the plan the controller still runs (an e-stop
        since, or a newer plan, drops it: ``CommandRoom.apply_refinement``)."""
        try:
            self.ctl.commands.apply_refinement(msg.serial, msg.loop, msg.reference,
                                               msg.seconds, msg.error)
        except Exception as exc:  # never fatal: the plan runs on with its gains
            self.ctl.announce("info", code="plan_refine_failed",
                              text=f"{type(exc).__name__}: {exc}")

    def serve_estop(self) -> None:
        """E-stops, acted on the moment they arrive (at ``SCHED_FIFO`` where granted: it
        sleeps until one comes, then must not wait behind the command server)."""
        fifo(self.priority)
        while True:
            try:
                msg = self.estop_conn.recv()
            except (EOFError, OSError):
                return
            with self.barrier_lock:
                self.barrier = max(self.barrier, msg.call_id)
            if isinstance(msg, Estop):
                self.reply(msg.call_id, self.ctl.estop(msg.cause))
            else:  # a PostedEstop: the Command (recorded as a command event)
                self.reply(msg.call_id, self.ctl.submit(msg.command))

    def post_urgent(self, command: Command, reply: Callable[[CommandResponse], None]) -> None:
        """An e-stop taken from MQTT in this process (``serve_urgent``): acted on in the
        listener's thread, answered, then reported to the parent (which cancels what still
        waits there and sends the barrier for what is on its way)."""
        with self.barrier_lock:
            self.unbarred += 1
        response = self.ctl.submit(command)
        reply(response)
        self.send(UrgentTaken(response.id))

    def serve_urgent(self, config: Any, priority: int, device: str,
                     starter: Callable[..., Any]) -> bool:
        """Start (once) the e-stop's own MQTT connection in this process with ``starter``
        (the telemetry layer's :func:`~poise.telemetry.urgent.serve_in_process`); it
        publishes ``$state`` itself once an e-stop has latched (``device`` in it)."""
        if self.urgent is None:
            self.urgent = starter(config, self.ctl, self.post_urgent, priority=priority,
                                  device=device,
                                  on_connected=lambda up: self.send(UrgentConnection(up)),
                                  observe=lambda response: self.send(UrgentAnswer(response)))
        return True

    def stop_urgent(self) -> bool:
        if self.urgent is not None:
            self.urgent.stop(2.0)
            self.urgent = None
        return True

    def cancelled(self, name: str, cid: str) -> CommandResponse:
        return CommandResponse(cid, name, False, ESTOP_CANCELLED)

    def execute(self, kind: CallKind, args: tuple[Any, ...]) -> Any:
        """Run call ``kind`` with ``args``: the controller's method of that name, or (for
        :data:`OWN_CALLS`) this object's."""
        ctl = self.ctl
        if kind not in OWN_CALLS:
            if kind is CallKind.SUBMIT:  # (command, its plan made by the parent, or None)
                return ctl.submit(args[0], prepared=args[1] if len(args) > 1 else None)
            return getattr(ctl, kind.value)(*args)
        if kind is CallKind.CLOSE:
            return self.close_controller()
        if kind is CallKind.DEVICE_PID:
            proc = getattr(ctl.sim, "proc", None)
            return None if proc is None else proc.pid
        return getattr(self, kind.value)(*args)

    def close_controller(self) -> dict[str, Any] | None:
        """Stop, take the final summary, close the controller (once)."""
        with self.close_lock:
            if self.closed:
                return None
            self.closed = True
            ctl = self.ctl
            if ctl.state == State.RUNNING:
                ctl.stop("close")
            final = ctl.final_summary()
            ctl.close()
            return final

    def shutdown(self) -> None:
        self.close_controller()
        self.pump_quit.set()


class StartupAbandoned(Exception):
    """The parent ended the start-up (SIGTERM) while the child compiled its kernels."""


def child_main(config: Config, ring_name: str, down: connection.Connection,
                estop: connection.Connection, up: connection.Connection,
                parent_pid: int, gain_origins: GainOrigins | None = None, *,
                launched: SimDevice | None = None,
                signalled: list[int] | None = None) -> None:
    """The real-time process's main thread (after
    :func:`poise.controller.realtime.boot.boot`): :class:`Built` once its controller is,
    :class:`Hello` when it serves. ``gain_origins``: check the configuration's gains against
    the stability bound in between (see
    :func:`~poise.controller.gains.check_configured_gains`; a refusal is a ``ConfigError``
    in the parent). ``launched``: the virtual device the boot started (its imports and plant
    overlap ours; it takes its real-time priority, one below ours, once started).
    ``signalled``: the signals the boot noted before (they stop the start-up here)."""
    # signal handlers only note the signal (an Event.set there could deadlock on the
    # event's lock held by the interrupted main thread); the main loop polls it
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides (Ctrl-C reaches both)

    def note(signum: int, _frame: object) -> None:
        signalled.append(signum)

    if signalled is None:  # else the boot's handler, which also stops the launched device,
        signalled = []     # stays until the controller owns the device
        signal.signal(signal.SIGTERM, note)
    if not watch_parent(parent_pid, lambda: signalled.append(signal.SIGHUP)):
        if launched is not None:
            launched.stop()
        return
    try:
        from poise.controller.loop import Controller

        # the process stays at the normal scheduler: only the threads that must run on time
        # take SCHED_FIFO themselves (the loop, the e-stop server, the MQTT e-stop listener
        # and its $state announcer). A process-wide priority made every thread real-time,
        # the command server and the pump too: a flood of commands, or the kernels loading
        # at a start, then held both CPUs of a 2-core machine at the loops' priority, above
        # the virtual devices, and another controller's device went unserved for 100-240 ms
        # (its watchdog fired)
        ctl = Controller(config, launched=launched, replan=False)  # the parent re-plans
        ring = CycleRing.attach(ring_name)
    except Exception as exc:
        if launched is not None:
            launched.stop()
        _tell(up, Fatal(type(exc).__name__, str(exc)))
        return
    signal.signal(signal.SIGTERM, note)  # from here the controller closes its device

    def abandoned() -> bool:
        """Whether the parent abandoned the start-up (then the controller and ring closed)."""
        if signalled:
            ctl.close()
            ring.close()
        return bool(signalled)

    if abandoned():
        return
    # built: the parent's start-up timeout stops here (a first start compiles the kernels
    # next, a minute or more on a slow computer)
    _tell(up, Built())
    if not ctl.kernels_cached():
        # a first start: compile before the gain check (which needs the solvers) and the
        # hello, the parent showing each step (Progress); a failure is connect's to report
        # at the normal scheduler: a minute of compiling must not hold a CPU at SCHED_FIFO
        def progress(step: object) -> None:
            if signalled:  # abandoned: no further kernel (each is cached whole or not)
                raise StartupAbandoned
            _tell(up, Progress(step))

        with contextlib.suppress(Exception):
            ctl.prepare_kernels(progress=progress)
        if abandoned():
            return
    try:
        if gain_origins is not None:
            from poise.controller.gains import check_configured_gains

            check_configured_gains(config, ctl.model, origins=gain_origins)
    except Exception as exc:
        # a gain or target (ValueError too) is the parent's ConfigError, like a bad file
        kind = "ConfigError" if isinstance(exc, ConfigError | ValueError) else \
            type(exc).__name__
        ctl.close()
        ring.close()
        _tell(up, Fatal(kind, str(exc)))
        return
    child = RealtimeChild(ctl, ring, down, estop, up, threading.Event(),
                          priority=config.loop.priority)
    try:
        child.run(parent_pid, signalled)
    finally:
        ring.close()
        for c in (down, estop, up):
            c.close()
    # controller, device and ring are closed: skip the interpreter's teardown (~0.5-1 s with
    # numpy, scipy and numba loaded), which would hold up the parent's exit
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _tell(up: connection.Connection, message: object) -> None:
    """``message`` (:mod:`~poise.controller.realtime.messages`) to the parent from the main
    thread before the child serves (no other thread writes the pipe yet); nothing when the
    parent is gone."""
    with contextlib.suppress(OSError, ValueError):
        up.send(message)


__all__ = ["PUMP_HZ", "GainOrigins", "RealtimeChild", "child_main"]
