"""Commands from the outside world in, with the e-stop first: :class:`CommandDispatcher`.

MQTT (and anything else that receives commands in bulk) hands each :class:`Command` to
:meth:`CommandDispatcher.post`, which never blocks on the controller:

* **urgent** commands — ``estop``, ``run: stop`` — are executed at once in the caller's thread
  (straight to the device), ahead of everything queued. An e-stop also cancels every command
  still waiting (each answered "cancelled by the e-stop"), so a ``clear`` or ``run: start``
  sent before it can never undo it; a stop cancels the waiting ``run`` commands.
* the others wait in a bounded queue and are executed one at a time, in arrival order, by one
  worker thread. A command of the same kind as one still waiting replaces it (the newest
  target, algorithm or mode wins; a ``gains`` command replaces a waiting one whose keys it
  covers); the replaced one is answered "superseded". ``run`` and ``clear`` keep their order
  and are never merged, nor are the samples of a streamed reference (a ``reference``, a
  streamed ``target``: each is a sample in its place, applied in microseconds). A full queue
  answers "busy".

Every posted command gets exactly one :class:`CommandResponse`, through the ``reply``
callback given with it (called from the worker or the caller's thread).
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from dataclasses import dataclass

from poise.api.bus import Command, CommandResponse

#: Commands executed at once in the receiving thread.
URGENT = ("estop",)
#: Commands of which only the newest waiting one is kept.
COALESCING = ("target", "algorithm", "mode", "gains")
#: Most commands waiting at once.
MAX_PENDING = 256

Reply = Callable[[CommandResponse], None]


def is_urgent(command: Command) -> bool:
    """E-stop, and ``run: stop``: acted on at once, bypassing the queue."""
    return command.name in URGENT or (command.name == "run" and command.value == "stop")


@dataclass
class DispatchStats:
    """Counters (they only grow)."""

    posted: int = 0
    urgent: int = 0
    executed: int = 0
    superseded: int = 0
    cancelled: int = 0
    busy: int = 0


class CommandDispatcher:
    """A bounded, coalescing command queue with one worker, and a bypass for the e-stop.

    Args:
        execute: applies one command and returns its answer (``Controller.submit``).
        max_pending: most commands waiting; one more is answered "busy".
        stream_targets: targets without a ``stream`` flag are streamed samples
            (``[loop] targets = "stream"``): never coalesced.
    """

    def __init__(self, execute: Callable[[Command], CommandResponse], *,
                 max_pending: int = MAX_PENDING, stream_targets: bool = False) -> None:
        self._execute = execute
        #: ``[loop] targets = "stream"``: a target without a ``stream`` flag is a sample.
        self.stream_targets = stream_targets
        self.max_pending = max_pending
        self.stats = DispatchStats()
        self._pending: collections.deque[tuple[Command, Reply]] = collections.deque()
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._closed = False
        self._idle = threading.Event()
        self._idle.set()
        self._worker = threading.Thread(target=self._work, name="poise-commands", daemon=True)
        self._worker.start()

    def post(self, command: Command, reply: Reply) -> None:
        """Hand over ``command``; ``reply`` receives its one answer (never blocks on a
        queued command; an urgent one runs here and now)."""
        self.stats.posted += 1
        if is_urgent(command):
            self.stats.urgent += 1
            cancel = (lambda c: True) if command.name == "estop" else (
                lambda c: c.name == "run")
            dropped = self._take(cancel)
            reply(self._run(command))
            why = "e-stop" if command.name == "estop" else "stop"
            for old, old_reply in dropped:
                self.stats.cancelled += 1
                old_reply(_refused(old, f"cancelled by the {why} (id {command.id!r}) that "
                                        "came after it"))
            return
        answer: list[tuple[Command, Reply, str]] = []
        with self._lock:
            if self._closed:
                answer.append((command, reply, "service stopping: command not applied"))
            else:
                for i, (old, old_reply) in enumerate(self._pending):
                    if _replaces(command, old, self.stream_targets):
                        del self._pending[i]
                        self.stats.superseded += 1
                        answer.append((old, old_reply, f"superseded by a newer {old.name} "
                                                       f"command (id {command.id!r})"))
                        break
                if len(self._pending) >= self.max_pending:
                    self.stats.busy += 1
                    answer.append((command, reply, f"busy: {self.max_pending} commands are "
                                                   "waiting; send it again later"))
                else:
                    self._pending.append((command, reply))
                    self._idle.clear()
                    self._wake.notify()
        for c, r, why in answer:
            r(_refused(c, why))

    def cancel_waiting(self, reason: str) -> int:
        """Answer every waiting command with ``reason`` (an e-stop taken on another path);
        returns how many."""
        dropped = self._take(lambda c: True)
        for command, reply in dropped:
            self.stats.cancelled += 1
            reply(_refused(command, reason))
        return len(dropped)

    def wait_idle(self, timeout: float) -> bool:
        """Block until nothing is waiting or executing; False on timeout."""
        return self._idle.wait(timeout)

    def pending(self) -> int:
        """Commands waiting (not counting the one executing)."""
        with self._lock:
            return len(self._pending)

    def close(self, reason: str = "service stopping: command not applied",
              timeout: float = 5.0) -> None:
        """Refuse what still waits (with ``reason``), let the executing command finish (up
        to ``timeout``) and end the worker."""
        dropped = self._take(lambda c: True, close=True)
        for command, reply in dropped:
            self.stats.cancelled += 1
            reply(_refused(command, reason))
        self._worker.join(timeout)

    # -- internals ------------------------------------------------------------------------
    def _take(self, which: Callable[[Command], bool],
              close: bool = False) -> list[tuple[Command, Reply]]:
        with self._lock:
            taken = [item for item in self._pending if which(item[0])]
            self._pending = collections.deque(item for item in self._pending
                                              if not which(item[0]))
            if close:
                self._closed = True
                self._wake.notify_all()
            return taken

    def _run(self, command: Command) -> CommandResponse:
        try:
            response = self._execute(command)
        except Exception as exc:  # the executor must answer; if it raises, we answer for it
            response = _refused(command, f"internal error: {type(exc).__name__}: {exc}")
        self.stats.executed += 1
        return response

    def _work(self) -> None:
        while True:
            with self._lock:
                while not self._pending and not self._closed:
                    self._idle.set()
                    self._wake.wait()
                if not self._pending:  # closed and drained
                    self._idle.set()
                    return
                command, reply = self._pending.popleft()
            reply(self._run(command))


def _replaces(new: Command, old: Command, stream_targets: bool = False) -> bool:
    """Whether ``new`` makes the waiting ``old`` pointless (same kind, newest wins; never a
    streamed sample, nor one replaced by it)."""
    if new.name != old.name or new.name not in COALESCING:
        return False
    if new.name == "target" and any(
            c.stream if c.stream is not None else stream_targets for c in (new, old)):
        return False
    if new.name == "gains":
        return isinstance(new.value, dict) and isinstance(old.value, dict) and \
            set(old.value) <= set(new.value)
    return True


def _refused(command: Command, reason: str) -> CommandResponse:
    return CommandResponse(command.id, command.name, False, reason)


__all__ = ["COALESCING", "MAX_PENDING", "URGENT", "CommandDispatcher", "DispatchStats",
           "is_urgent"]
