"""The parent's call channel to the real-time process: calls out, replies back, by call id.

A call (:class:`~poise.controller.realtime.messages.Call`) goes through a queue and a sender
thread onto the commands pipe, so that posting never blocks on a full pipe; its
:class:`~poise.controller.realtime.messages.Reply` comes back through the parent's reader
thread (:meth:`CallChannel.answer`). A call waits in :attr:`CallChannel.pending` until then:
a synchronous caller on an event, a posted e-stop through its ``reply`` callback. One id
counter numbers calls, e-stops and barriers, so the child can tell what was sent before an
e-stop.
"""

from __future__ import annotations

import contextlib
import itertools
import queue
import threading
from collections.abc import Callable
from multiprocessing import connection
from typing import Any

from poise.api.bus import CommandResponse
from poise.controller.realtime.messages import Barrier, Call, CallKind, PlanRefined, Reply


class RealtimeError(RuntimeError):
    """The real-time process could not start, or is gone; the message says why."""


class Pending:
    """A call waiting for its answer: a sync caller (``done``) or a ``reply`` callback."""

    __slots__ = ("command", "done", "id", "ok", "reply", "value")

    def __init__(self, command: str, cid: str = "",
                 reply: Callable[[CommandResponse], None] | None = None) -> None:
        self.command, self.id, self.reply = command, cid, reply
        self.done = threading.Event()
        self.ok = False
        self.value: Any = None


class CallChannel:
    """Calls to the child and their answers.

    Args:
        down: the commands pipe (this process's end).
        refusal: why no call may go now ("" while they may: the child is gone, or closing).
        gone: why a call could not be sent (the child's death reason, or a plain "gone").
    """

    def __init__(self, down: connection.Connection, refusal: Callable[[], str],
                 gone: Callable[[], str]) -> None:
        self._down = down
        self._refusal, self._gone = refusal, gone
        self._pending: dict[int, Pending] = {}
        self._pending_lock = threading.Lock()
        self._ids = itertools.count(1)
        self._id_lock = threading.Lock()
        self._outbox: queue.SimpleQueue[Call | Barrier | PlanRefined | None] = \
            queue.SimpleQueue()
        self.sender = threading.Thread(target=self._send_loop, name="poise-rt-send",
                                       daemon=True)
        self.sender.start()

    def next_id(self) -> int:
        with self._id_lock:
            return next(self._ids)

    def register(self, p: Pending) -> int:
        """A new call id with ``p`` waiting for its answer."""
        cid = self.next_id()
        with self._pending_lock:
            self._pending[cid] = p
        return cid

    def unregister(self, cid: int) -> Pending | None:
        with self._pending_lock:
            return self._pending.pop(cid, None)

    def call(self, kind: CallKind, *args: Any, timeout: float | None = None) -> Any:
        """Run ``kind(*args)`` in the child and return its result.

        Raises:
            RealtimeError: the child is gone (or went during the call), or the call raised.
        """
        refused = self._refusal()
        if refused:
            raise RealtimeError(refused)
        p = Pending(kind.value)
        cid = self.register(p)
        self._outbox.put(Call(cid, kind, args))
        if not p.done.wait(timeout):
            self.unregister(cid)
            raise RealtimeError(f"{kind.value}: no answer from the real-time process in "
                                f"{timeout} s")
        if not p.ok:
            raise RealtimeError(str(p.value))
        return p.value

    def barrier(self) -> None:
        """Tell the child that calls sent from now on came after the e-stop it took."""
        self._outbox.put(Barrier(self.next_id()))

    def tell(self, message: PlanRefined) -> None:
        """A message that is not a call (nothing answers it), after the calls sent before."""
        self._outbox.put(message)

    def response(self, p: Pending, cid: int, timeout: float | None) -> CommandResponse:
        """``p``'s answer (a :class:`CommandResponse`), or a refusal saying why none came."""
        if not p.done.wait(timeout) or not p.ok:
            self.unregister(cid)
            return CommandResponse(p.id, p.command, False, str(p.value or "no answer"))
        return p.value

    def answer(self, cid: int, ok: bool, value: Any) -> None:
        """Call ``cid``'s answer (the reader thread): its caller woken, or its ``reply``
        called (a refusal :class:`CommandResponse` when the call failed)."""
        p = self.unregister(cid)
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

    def on_reply(self, msg: Reply) -> None:
        self.answer(msg.call_id, msg.ok, msg.value)

    def fail(self, cid: int, reason: str) -> None:
        self.answer(cid, False, reason)

    def fail_all(self, reason: str) -> None:
        """Every waiting call answered with ``reason``."""
        with self._pending_lock:
            ids = list(self._pending)
        for cid in ids:
            self.fail(cid, reason)

    def stop(self) -> None:
        """End the sender thread after what it still has to send (join :attr:`sender`)."""
        self._outbox.put(None)

    def _send_loop(self) -> None:
        """Writes the commands pipe, so posting never blocks on a full pipe."""
        while True:
            item = self._outbox.get()
            if item is None:
                return
            try:
                self._down.send(item)
            except (OSError, ValueError):
                if isinstance(item, Call):
                    self.fail(item.call_id, self._gone())


__all__ = ["CallChannel", "Pending", "RealtimeError"]
