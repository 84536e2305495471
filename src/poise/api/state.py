"""The controller's states and the transitions allowed between them.

::

    idle ──connect──▶ connecting ──▶ ready ──start──▶ running ──stop──▶ stopping ──▶ ready
      ▲                   │            │                 │                            │
      └──── close ────────┴────────────┴─────────────────┴──── (any state) ───────────┘
    (any connected state) ──fault──▶ fault   (latched with a reason until ``clear``)
    (any state)           ──estop──▶ estop   (latched with a reason until ``clear``)
    fault / estop ──clear──▶ ready (device connected) or idle (link closed)

Every transition is recorded as ``Event(kind="state", data={"from", "to", "cause"})``.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable

from poise.api.bus import Event


class State(enum.StrEnum):
    IDLE = "idle"
    CONNECTING = "connecting"
    READY = "ready"
    RUNNING = "running"
    STOPPING = "stopping"
    FAULT = "fault"
    ESTOP = "estop"


#: Latched states: left only by an explicit ``clear``.
LATCHED = (State.FAULT, State.ESTOP)

S = State
ALLOWED: dict[State, tuple[State, ...]] = {
    S.IDLE: (S.CONNECTING, S.ESTOP),
    S.CONNECTING: (S.READY, S.IDLE, S.FAULT, S.ESTOP),
    S.READY: (S.RUNNING, S.IDLE, S.FAULT, S.ESTOP),
    S.RUNNING: (S.STOPPING, S.FAULT, S.ESTOP, S.IDLE),
    S.STOPPING: (S.READY, S.IDLE, S.FAULT, S.ESTOP),
    S.FAULT: (S.READY, S.IDLE, S.ESTOP),
    S.ESTOP: (S.READY, S.IDLE),
}


class StateMachine:
    """Thread-safe current state with a latched reason; every transition calls ``emit``.

    Args:
        emit: receives the ``state`` :class:`~poise.api.bus.Event` of each transition.
    """

    def __init__(self, emit: Callable[[Event], None]) -> None:
        self._state = State.IDLE
        self.reason = ""
        self._emit = emit
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)

    @property
    def state(self) -> State:
        return self._state

    def to(self, new: State, cause: str) -> bool:
        """Move to ``new`` if allowed (False, and nothing happens, otherwise).

        Entering ``fault`` or ``estop`` latches ``cause`` as the reason; a fault does not
        replace a latched e-stop.
        """
        with self.lock:
            old = self._state
            if new == old or new not in ALLOWED[old]:
                return False
            self._state = new
            if new in LATCHED:
                self.reason = cause
            elif old in LATCHED or new == State.IDLE:
                self.reason = ""
            self._emit(Event(time.monotonic(), "state",
                             {"from": old.value, "to": new.value, "cause": cause}))
            self.changed.notify_all()
            return True

    def wait_for(self, states: tuple[State, ...], timeout: float) -> bool:
        """Block until the state is one of ``states`` (True) or ``timeout`` s pass (False)."""
        with self.changed:
            return self.changed.wait_for(lambda: self._state in states, timeout)
