"""What the control loop hands to the outside world, and how commands come back in.

The loop never waits on MQTT, disk or the GUI: every cycle it *offers* a :class:`CycleSample`
to each subscribed :class:`SampleQueue` (bounded, thread-safe, dropping the oldest sample when
full) and records :class:`Event` s the same way. Telemetry (MQTT), the experiment log (MCAP) and
the dashboard consume those queues in their own threads or tasks.

Commands travel the other way as :class:`Command` objects through a controller's
``submit(command) -> CommandResponse`` method: validated (type, range, allowed in the current
state) before they reach the loop, applied atomically between two cycles, and always answered.
"""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Generic, TypeVar

from poise.api.rules import COMMAND_NAMES

T = TypeVar("T")

#: Re-exported from :mod:`poise.api.rules`, the one owner of the names.
__all__ = ["COMMAND_NAMES", "ESTOP_CANCELLED", "Command", "CommandResponse", "CycleSample",
           "Event", "SampleQueue", "SubscriberHub"]

#: The answer to a command that an e-stop voided: it was received before the e-stop latched
#: and had not taken effect yet (wherever it waited: on the MQTT receive path, in a queue, in
#: the real-time process's pipe, or being applied).
ESTOP_CANCELLED = "cancelled by the e-stop that came after it"


@dataclass(frozen=True, slots=True)
class CycleSample:
    """One control cycle, as telemetry and logs see it.

    Attributes:
        t: host monotonic time of the cycle [s] (``time.monotonic``).
        seq: cycle counter (gaps show dropped samples).
        state: controller state name.
        q: measured configuration (n,) [rad / model units].
        q_bar: the algorithm's predicted configuration q̄ (n,).
        qa_ref: actuator setpoint sent this cycle (m,) [actuator units].
        tau_ff: effort feed-forward sent (m,) or empty.
        target: task target x̄ (task_dim,).
        x: task value used for the error this cycle (measured in fb mode, predicted in ff).
        task_error: ‖x̄ − x‖ [task units].
        statics_residual: ‖G_u(q̄)‖ [N·m].
        period_us, lateness_us, compute_us, latency_us: timing of this cycle [µs]; latency is
            sensor frame received → setpoint written.
    """

    t: float
    seq: int
    state: str
    q: tuple[float, ...]
    q_bar: tuple[float, ...]
    qa_ref: tuple[float, ...]
    tau_ff: tuple[float, ...]
    target: tuple[float, ...]
    x: tuple[float, ...]
    task_error: float
    statics_residual: float
    period_us: float
    lateness_us: float
    compute_us: float
    latency_us: float

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready dictionary."""
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Event:
    """Something that happened: a state transition, an accepted change, a fault, a command.

    Attributes:
        t: host monotonic time [s].
        kind: ``"state"``, ``"param"``, ``"command"``, ``"fault"``, ``"info"``,
            ``"trajectory"`` (accepted, progress, done, aborted: ``{"status", "id", …}``).
        data: JSON-ready details (for ``state``: ``{"from", "to", "cause"}``).
    """

    t: float
    kind: str
    data: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready dictionary."""
        return {"t": self.t, "kind": self.kind, "data": self.data}


@dataclass(frozen=True, slots=True)
class Command:
    """A request to change the running controller.

    Attributes:
        name: one of :data:`COMMAND_NAMES`.
        value: the payload (see :data:`COMMAND_NAMES`).
        id: the sender's correlation id, echoed in the response.
        source: who sent it (``"mqtt"``, ``"cli"``, ``"gui"``, ``"api"``).
        estops: how many e-stops the receiver had seen latch when it received the command
            (``Controller.estops``), or None. A stamped command is refused if a later e-stop
            latched before it took effect: nothing received before an e-stop can undo it,
            wherever it waited.
        stream: a ``target`` taken as a sample of a moving reference (True), as a target to
            move to and hold (False), or as ``[loop] targets`` says (None).
        t: a streamed ``target``'s time on the sender's clock [s] (None: when it arrives).
    """

    name: str
    value: Any = None
    id: str = ""
    source: str = "api"
    estops: int | None = None
    stream: bool | None = None
    t: float | None = None


@dataclass(frozen=True, slots=True)
class CommandResponse:
    """The answer to every command: accepted, or refused with the reason."""

    id: str
    command: str
    accepted: bool
    reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready dictionary."""
        return {"id": self.id, "command": self.command, "accepted": self.accepted,
                "reason": self.reason}


class SampleQueue(Generic[T]):
    """Bounded thread-safe queue that drops the oldest item when full; ``put`` never blocks.

    Attributes:
        dropped: items discarded because the queue was full.
    """

    def __init__(self, maxlen: int = 10_000) -> None:
        self._items: collections.deque[T] = collections.deque(maxlen=maxlen)
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self.dropped = 0

    def put(self, item: T) -> None:
        """Offer an item (O(1), never blocks the caller beyond a short lock)."""
        with self._lock:
            if len(self._items) == self._items.maxlen:
                self.dropped += 1
            self._items.append(item)
            self._ready.notify()

    def drain(self, max_items: int | None = None) -> list[T]:
        """Take everything queued (or at most ``max_items``), oldest first, without waiting."""
        with self._lock:
            if max_items is None or max_items >= len(self._items):
                out = list(self._items)
                self._items.clear()
            else:
                out = [self._items.popleft() for _ in range(max_items)]
        return out

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for at least one item; True if there is one."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while not self._items:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._ready.wait(remaining):
                    return bool(self._items)
            return True

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)


class SubscriberHub:
    """Subscribers of a controller's cycle samples and events, and its recent events: what
    the in-process :class:`~poise.controller.service.Controller` and the real-time process's
    parent side (:class:`~poise.controller.realtime.parent.RealtimeController`) both offer.

    Subclasses call :meth:`_publish` for each event and feed every queue of
    :attr:`_sample_subs` with each sample (the list is replaced, never changed, so a reader
    needs no lock).
    """

    #: Events kept for late subscribers (``events(history=True)``, :meth:`history`).
    HISTORY = 2000

    def __init__(self) -> None:
        self._sub_lock = threading.Lock()
        self._sample_subs: list[SampleQueue[CycleSample]] = []
        self._event_subs: list[SampleQueue[Event]] = []
        self._history: collections.deque[Event] = collections.deque(maxlen=self.HISTORY)

    def subscribe(self, maxlen: int = 10_000) -> SampleQueue[CycleSample]:
        """A new bounded queue that receives every :class:`CycleSample` (drop-oldest)."""
        q: SampleQueue[CycleSample] = SampleQueue(maxlen)
        with self._sub_lock:
            self._sample_subs = [*self._sample_subs, q]
        return q

    def events(self, maxlen: int = 10_000, history: bool = True) -> SampleQueue[Event]:
        """A new bounded queue that receives every :class:`Event` (with the past ones first
        when ``history``)."""
        q: SampleQueue[Event] = SampleQueue(maxlen)
        with self._sub_lock:
            if history:
                for ev in self._history:
                    q.put(ev)
            self._event_subs = [*self._event_subs, q]
        return q

    def unsubscribe(self, queue: SampleQueue[Any]) -> None:
        """Stop feeding ``queue`` (samples or events)."""
        with self._sub_lock:
            self._sample_subs = [q for q in self._sample_subs if q is not queue]
            self._event_subs = [q for q in self._event_subs if q is not queue]

    def history(self) -> list[Event]:
        """The last events (up to :attr:`HISTORY`)."""
        with self._sub_lock:
            return list(self._history)

    def announce(self, kind: str, **data: Any) -> Event:
        """Publish an event from outside the control loop (the experiment log's failure,
        :func:`poise.telemetry.log.controller_log`) as the controller publishes its own: into
        the history and every event queue (MQTT's ``events``); returns it."""
        event = Event(time.monotonic(), kind, data)
        self._publish(event)
        return event

    def _publish(self, event: Event) -> None:
        """Record ``event`` and hand it to every event subscriber."""
        with self._sub_lock:
            self._history.append(event)
            subs = self._event_subs
        for q in subs:
            q.put(event)
