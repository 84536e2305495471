"""The real-time process's lifetime, seen from its parent: spawn, start-up, watch, end.

:class:`ChildProcess` creates the shared-memory cycle ring and the three pipes, spawns the
process (:func:`~poise.controller.realtime.boot.boot`, which launches the virtual device
first), reads what the child sends in a thread of its own (:meth:`ChildProcess.watch`: the
up pipe, the ring, the process sentinel, so a dead child is noticed at once) and follows
its start-up (:meth:`ChildProcess.wait_started`: built, then serving, or why not).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import pickle
import threading
import time
from collections.abc import Callable, Mapping
from multiprocessing import connection
from typing import Any

from poise.controller.config import Config, ConfigError
from poise.controller.realtime.boot import boot
from poise.controller.realtime.channel import RealtimeError
from poise.controller.realtime.child import GainOrigins
from poise.controller.realtime.messages import Built, Fatal, Hello, Progress
from poise.controller.ring import CycleRing

#: How often the reader polls the ring when nothing else wakes it [s].
POLL = 0.005


class StartupCancelled(RealtimeError):
    """The start-up was abandoned on request (a signal); nothing is left running."""


def early_device(config: Config) -> dict[str, Any] | None:
    """What the real-time process launches first: the virtual device of ``config`` (``port =
    "sim"``), on the CPUs the control loop leaves (``loop.cpu``); else None."""
    from poise.devices.affinity import plan_cpus
    from poise.devices.factory import early_device_spec

    plan = plan_cpus(config.loop.cpu)[0]
    return early_device_spec(config.device, model=config.model.name, rate=config.loop.rate,
                             priority=config.loop.priority, cpus=plan and plan.others)


class ChildProcess:
    """The spawned real-time process, its ring and this process's ends of its pipes.

    Args:
        config: the validated configuration (pickled to the child).
        ring: the cycle ring the child writes (this object unlinks it in :meth:`release`).
        gain_origins: the child checks the configuration's gains before it serves (see
            :func:`~poise.controller.gains.check_configured_gains`); None: no check.
        progress: told each step of a first start's compile (in the reader thread).
    """

    def __init__(self, config: Config, ring: CycleRing, gain_origins: GainOrigins | None,
                 progress: Callable[[Any], Any] | None = None) -> None:
        self.ring = ring
        self._progress = progress
        ctx = mp.get_context("spawn")
        down_r, self.down = ctx.Pipe(duplex=False)
        estop_r, self.estop = ctx.Pipe(duplex=False)
        self.up, up_w = ctx.Pipe(duplex=False)
        self.built = threading.Event()  # the child has built its controller
        self.hello = threading.Event()  # ... and serves (its gains checked)
        self.fatal: Fatal | None = None  # why it could not
        self.reader: threading.Thread | None = None
        # the child launches the virtual device before its own imports: what it needs for
        # that comes as plain values, the configuration pickled (unpickled after the launch)
        self.proc = ctx.Process(target=boot, name="poise-realtime", daemon=True,
                                args=(early_device(config), pickle.dumps(config), ring.name,
                                      down_r, estop_r, up_w, os.getpid(), gain_origins))
        try:
            self.proc.start()
        except BaseException:
            ring.close()
            ring.unlink()
            raise
        finally:  # the child has its copies; ours would hide its death (no EOF)
            for c in (down_r, estop_r, up_w):
                c.close()

    def on_startup(self, msg: Built | Fatal | Hello | Progress) -> None:
        """A start-up message of the child."""
        if isinstance(msg, Hello):
            self.hello.set()
        elif isinstance(msg, Built):
            self.built.set()
        elif isinstance(msg, Fatal):
            self.fatal = msg
        elif self._progress is not None:
            with contextlib.suppress(Exception):  # the owner's callback must not stop us
                self._progress(msg.step)

    def watch(self, handlers: Mapping[type, Callable[[Any], None]],
              on_ring: Callable[[], None], on_exit: Callable[[], None]) -> None:
        """Start the reader thread: each message from the child to the handler of its type
        (:meth:`on_startup` for the start-up ones), ``on_ring`` whenever it wakes (at least
        every :data:`POLL` s), ``on_exit`` once the child is gone (after its last
        messages)."""
        on_message = {Built: self.on_startup, Fatal: self.on_startup, Hello: self.on_startup,
                      Progress: self.on_startup, **handlers}
        self.reader = threading.Thread(target=self._read_loop, name="poise-rt-read",
                                       args=(on_message, on_ring, on_exit), daemon=True)
        self.reader.start()

    def _read_loop(self, on_message: Mapping[type, Callable[[Any], None]],
                   on_ring: Callable[[], None], on_exit: Callable[[], None]) -> None:
        up, sentinel = self.up, self.proc.sentinel
        eof = False
        while True:
            ready = connection.wait([up, sentinel] if not eof else [sentinel], POLL)
            if up in ready and not eof:
                eof = self._drain_up(on_message)
            on_ring()
            if sentinel in ready:
                if not eof:
                    self._drain_up(on_message)
                on_ring()
                self.proc.join(1.0)
                on_exit()
                return

    def _drain_up(self, on_message: Mapping[type, Callable[[Any], None]]) -> bool:
        """Everything waiting in the pipe; True at its end (the child is gone)."""
        up = self.up
        try:
            while up.poll():
                msg = up.recv()
                on_message[type(msg)](msg)
        except (EOFError, OSError):
            return True
        return False

    def wait_started(self, limit: float, cancelled: Callable[[], bool]) -> Exception | None:
        """Block until the child serves (None); else the error to raise:
        :class:`ConfigError` (the child refused the configuration), :class:`RealtimeError`
        (it did not build its controller in ``limit`` s, or died) or
        :class:`StartupCancelled` (``cancelled`` said so). Once built, the child may take as
        long as its gain check takes (compiling on a first start) while it lives."""
        deadline = time.monotonic() + limit
        while not self.hello.wait(POLL * 10):
            if self.fatal is not None or not self.proc.is_alive():
                self.proc.join(5)
                if self.reader is not None:
                    self.reader.join(5)  # it reads what the child said last (its Fatal)
                return self._start_failure()
            if cancelled():
                return StartupCancelled("start-up cancelled")
            if time.monotonic() > deadline and not self.built.is_set():
                return RealtimeError(f"the real-time process did not build its controller "
                                     f"in {limit:g} s")
        return None

    def _start_failure(self) -> Exception:
        """Why the child ended before it served."""
        fatal = self.fatal
        if fatal is None:
            return RealtimeError("the real-time process did not start "
                                 f"(exit code {self.proc.exitcode})")
        if fatal.kind == "ConfigError":
            return ConfigError(fatal.text)
        return RealtimeError(f"the real-time process did not start: {fatal.kind}: "
                             f"{fatal.text}")

    def kill(self) -> None:
        """End the child if it is still there (SIGTERM: it closes its controller; then
        SIGKILL)."""
        proc = self.proc
        if proc.is_alive():
            proc.terminate()
            proc.join(10)
        if proc.is_alive():
            proc.kill()
            proc.join(5)

    def release(self) -> None:
        """Close this process's pipe ends, close and unlink the ring (the child is gone)."""
        for c in (self.down, self.estop, self.up):
            c.close()
        self.ring.close()
        self.ring.unlink()


__all__ = ["POLL", "ChildProcess", "StartupCancelled", "early_device"]
