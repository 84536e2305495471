"""The e-stop's way into the real-time process: a pipe and a child thread of its own.

An e-stop never waits behind commands: :class:`EstopLine` writes it on the e-stop pipe at
once (no queue, no sender thread), then cancels every command still waiting in the parent's
dispatcher; the child's e-stop thread acts on it the moment it arrives and numbers it, so
that the commands sent before it are cancelled there too. With MQTT on, the child also takes
e-stops from a connection of its own (:class:`ChildUrgent`); it reports each one
(:class:`~poise.controller.realtime.messages.UrgentTaken`) and the parent answers with a
barrier (:meth:`EstopLine.urgent_taken`).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from multiprocessing import connection

from poise.api.bus import Command, CommandResponse
from poise.controller.dispatch import CommandDispatcher
from poise.controller.realtime.channel import CallChannel, Pending, RealtimeError
from poise.controller.realtime.messages import (
    CallKind,
    Estop,
    PostedEstop,
    UrgentAnswer,
    UrgentConnection,
    UrgentTaken,
)

#: Longest wait for the child's answer to an e-stop [s] (it waits for the device's ack).
ESTOP_TIMEOUT = 30.0


class ChildUrgent:
    """The handle of the e-stop listener running in the child (``connected`` mirrors it)."""

    def __init__(self, calls: CallChannel,
                 on_answer: Callable[[CommandResponse], None]) -> None:
        self._calls, self.on_answer = calls, on_answer
        self.connected = threading.Event()

    def stop(self, timeout: float = 5.0) -> None:
        with contextlib.suppress(RealtimeError):
            self._calls.call(CallKind.STOP_URGENT, timeout=timeout)
        self.connected.clear()


class EstopLine:
    """E-stops to the child on their own pipe (see the module docstring).

    Args:
        conn: the e-stop pipe (this process's end).
        calls: the call channel (its ids and answers: an e-stop is answered as a call).
        dispatcher: the parent's command queue, which every e-stop empties.
        dead: why the child is gone unexpectedly ("" while it lives).
    """

    def __init__(self, conn: connection.Connection, calls: CallChannel,
                 dispatcher: CommandDispatcher, dead: Callable[[], str]) -> None:
        self._conn, self._calls, self._dispatcher, self._dead = conn, calls, dispatcher, dead
        self._lock = threading.Lock()
        #: The child's MQTT e-stop listener, once :meth:`serve_urgent` started it.
        self.urgent: ChildUrgent | None = None

    def estop(self, cause: str) -> CommandResponse:
        """Latch the e-stop in the child at once; commands sent before it that still wait
        are cancelled. Waits for the child's answer (at most :data:`ESTOP_TIMEOUT`)."""
        if self._dead():
            return CommandResponse("", "estop", False, self._dead())
        p = Pending("estop")
        cid = self._calls.register(p)
        try:
            with self._lock:
                self._conn.send(Estop(cid, cause))
        except (OSError, ValueError):
            self._calls.unregister(cid)
            return CommandResponse("", "estop", False, self._dead() or "real-time process gone")
        self._dispatcher.cancel_waiting("cancelled by the e-stop that came after it")
        return self._calls.response(p, cid, ESTOP_TIMEOUT)

    def post(self, command: Command, reply: Callable[[CommandResponse], None]) -> None:
        """An e-stop ``command`` to the child without waiting; ``reply`` gets its answer."""
        cid = self._calls.register(Pending(command.name, command.id, reply))
        try:
            with self._lock:
                self._conn.send(PostedEstop(cid, command))
        except (OSError, ValueError):
            self._calls.fail(cid, self._dead() or "real-time process gone")
        self._dispatcher.cancel_waiting(f"cancelled by the e-stop (id {command.id!r}) that "
                                        "came after it")

    def serve_urgent(self, on_answer: Callable[[CommandResponse], None],
                     *args: object) -> ChildUrgent:
        """Start the child's own MQTT e-stop listener (``serve_urgent(*args)`` there);
        ``on_answer`` is told each of its answers.

        Raises:
            RealtimeError: the child is gone.
        """
        handle = ChildUrgent(self._calls, on_answer)
        self.urgent = handle
        self._calls.call(CallKind.SERVE_URGENT, *args, timeout=10.0)
        return handle

    def urgent_taken(self, msg: UrgentTaken) -> None:
        """After an e-stop taken in the child: cancel what waits here, and tell the child
        which calls are older than the e-stop (until then it cancels them all)."""
        self._dispatcher.cancel_waiting(f"cancelled by the e-stop (id {msg.estop_id!r}) "
                                        "that came after it")
        self._calls.barrier()

    def urgent_answer(self, msg: UrgentAnswer) -> None:
        """The child's answer to an MQTT e-stop, to the listener's owner."""
        if self.urgent is not None:
            with contextlib.suppress(Exception):  # the owner's callback must not stop us
                self.urgent.on_answer(msg.response)

    def urgent_connection(self, msg: UrgentConnection) -> None:
        if self.urgent is not None:
            (self.urgent.connected.set if msg.connected else self.urgent.connected.clear)()


__all__ = ["ESTOP_TIMEOUT", "ChildUrgent", "EstopLine"]
