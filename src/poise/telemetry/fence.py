"""Commands still on their way through MQTT when an e-stop latches are void: :class:`EstopFence`.

The e-stop travels on a connection of its own (:mod:`poise.telemetry.urgent`), so it overtakes
the commands published before it: they may still sit in the broker's queue for the bridge's
connection, in the socket, or in aiomqtt's receive queue when the e-stop has latched. Every one
of them was received by the broker before the e-stop, and none may undo it (a ``clear`` and a
``run: start`` behind a flood of targets would otherwise restart the arm by themselves).

The broker delivers to one subscriber in the order it received the messages. So once an e-stop
has latched, the bridge publishes a *marker* to a topic of its own connection and treats every
command it takes before that marker comes back as received before the e-stop: refused with
:data:`~poise.api.bus.ESTOP_CANCELLED`. The marker was received by the broker after the
e-stop, hence after everything published before it. A marker lost on the way is sent again
(:data:`RESEND`); a new connection starts with nothing in transit, hence with no fence.

What waits beyond the receive path (the dispatcher's queue, the pipe to the real-time process, a
command being applied) is voided by the controller itself: each command carries the
controller's e-stop count at its receipt (``Command.estops``), and a later e-stop refuses it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

#: A marker not back after this long is published again (lost in a full broker queue) [s].
RESEND = 2.0


class EstopFence:
    """The bridge's view of e-stops for commands received on its connection.

    Args:
        estops: the controller's e-stop count (``handler.estops``), or None if it has none
            (then nothing is fenced or stamped).

    Thread-safety: :meth:`stamp` and :meth:`passed` are called in the bridge's event-loop
    thread; :meth:`due` from the same thread.
    """

    def __init__(self, estops: Callable[[], int | None]) -> None:
        self._estops = estops
        self._lock = threading.Lock()
        self._seen = 0  # the e-stop count the fence last started for
        self._wanted = 0  # the marker number that ends the fence (0: none)
        self._sent = 0  # the newest marker number published
        self._sent_at = -float("inf")
        self.voided = 0  # commands refused by a fence (they only grow)

    @property
    def active(self) -> bool:
        """Whether commands taken now are void (a marker is awaited)."""
        return self._wanted > 0

    def reset(self) -> None:
        """A new connection: nothing from before it can arrive; no fence."""
        with self._lock:
            self._seen = self._count() or 0
            self._wanted = 0

    def poll(self) -> int | None:
        """Start a fence if an e-stop latched since the last look; returns the count.
        The bridge polls at every telemetry tick, and before every command it takes."""
        count = self._count()
        with self._lock:
            if count is not None and count > self._seen:
                self._seen = count
                self._wanted = self._sent + 1
        return count

    def stamp(self) -> tuple[int | None, bool]:
        """``(estops, void)`` for a command taken now: the count to stamp it with, and
        whether it was received before an e-stop that has latched."""
        count = self.poll()
        with self._lock:
            void = self._wanted > 0
            if void:
                self.voided += 1
            return count, void

    def due(self, now: float | None = None) -> int | None:
        """The marker number to publish now, if any: a fence that has none out yet, or
        whose marker has been out for :data:`RESEND`."""
        now = time.monotonic() if now is None else now
        with self._lock:
            if not self._wanted:
                return None
            if self._sent < self._wanted or now - self._sent_at >= RESEND:
                self._sent += 1
                self._sent_at = now
                return self._sent
            return None

    def passed(self, payload: bytes) -> None:
        """A marker came back (``payload``: its number): everything published before the
        e-stop has been taken."""
        try:
            number = int(payload)
        except ValueError:
            return
        with self._lock:
            if self._wanted and number >= self._wanted:
                self._wanted = 0

    def _count(self) -> int | None:
        count = self._estops()
        return count if isinstance(count, int) and not isinstance(count, bool) else None


__all__ = ["RESEND", "EstopFence"]
