"""The messages between the real-time process and its parent: one frozen dataclass per kind.

They cross the process boundary pickled, through the pipes of
:class:`~poise.controller.realtime.parent.RealtimeController` (three, each one way)::

    parent → child  commands pipe   Call, Barrier, PlanRefined
    parent → child  e-stop pipe     Estop, PostedEstop
    child → parent  up pipe         Built, Fatal, Progress (start-up); Hello (serving);
                                    EstopCount, EventBatch, ParamsChanged, PlanChanged, Reply;
                                    UrgentTaken, UrgentAnswer, UrgentConnection

Every pipe keeps its order: the child sends a reply after the ``EstopCount``, events, params
and plan that the call produced (:meth:`~poise.controller.realtime.child.RealtimeChild.send`),
so the parent's mirror is current when a call returns. Call ids (``call_id``) are the
parent's, one counter for calls, e-stops and barriers: a command numbered below an e-stop's id
was sent before it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from poise.api.bus import Command, CommandResponse, Event


class CallKind(enum.StrEnum):
    """What a :class:`Call` asks the child to run (its ``Controller`` method of that name, or
    the child's own for ``close``, ``device_pid``, ``serve_urgent``, ``stop_urgent``)."""

    CONNECT = "connect"
    START = "start"
    CLEAR = "clear"
    SUBMIT = "submit"
    STOP = "stop"
    SUMMARY = "summary"
    FINAL_SUMMARY = "final_summary"
    TIMING = "timing"
    RESET_TIMING = "reset_timing"
    CLOSE = "close"
    DEVICE_PID = "device_pid"
    SERVE_URGENT = "serve_urgent"
    STOP_URGENT = "stop_urgent"

    @property
    def cancelled_by_estop(self) -> bool:
        """An e-stop sent after this call cancels it (like the dispatcher's queue)."""
        return self in CANCELLED_BY_ESTOP

    @property
    def response_name(self) -> str:
        """The name this call answers under (``CommandResponse.command``)."""
        return "run" if self in (CallKind.START, CallKind.STOP) else self.value


#: Calls that an e-stop sent after them cancels.
CANCELLED_BY_ESTOP = frozenset({CallKind.CONNECT, CallKind.START, CallKind.CLEAR,
                                CallKind.SUBMIT})


# ---------------------------------------------------------------- parent → child


@dataclass(frozen=True, slots=True)
class Call:
    """Run ``kind(*args)`` in the child; answered by a :class:`Reply` with ``call_id``
    (``submit``'s args: the command and its plan made by the parent, or None)."""

    call_id: int
    kind: CallKind
    args: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True)
class Barrier:
    """The parent's answer to an e-stop the child took itself (:class:`UrgentTaken`): calls
    numbered below ``call_id`` were sent before it (cancelled), later ones are not."""

    call_id: int


@dataclass(frozen=True, slots=True)
class PlanRefined:
    """The rest of a quick plan the parent made and the child adopted (a
    :class:`~poise.controller.refine.QuickTarget` with this ``serial``), computed in the
    parent while its move ran: ``loop``, the plan's
    :class:`~poise.motion.stability.LoopLinearisation` with the bounds at the target
    computed, and ``reference``, the predicted response feedback follows after the move
    (rows, task_dim; None: none), ``seconds`` after the plan was adopted; ``error``: why
    the refinement failed ('' if it did not; then ``loop`` and ``reference`` are None).
    The child applies it only to the plan it still runs
    (``CommandRoom.apply_refinement``); it is not answered."""

    serial: int
    loop: Any
    reference: Any
    seconds: float
    error: str = ""


@dataclass(frozen=True, slots=True)
class Estop:
    """Latch the e-stop now (``Controller.estop(cause)``), on the e-stop pipe."""

    call_id: int
    cause: str


@dataclass(frozen=True, slots=True)
class PostedEstop:
    """An e-stop :class:`~poise.api.bus.Command` (from MQTT): ``Controller.submit``, so it is
    recorded as a command event; on the e-stop pipe."""

    call_id: int
    command: Command


# ---------------------------------------------------------------- child → parent


@dataclass(frozen=True, slots=True)
class Built:
    """The child has built its controller (the start-up timeout stops counting)."""


@dataclass(frozen=True, slots=True)
class Fatal:
    """The child could not start: ``kind`` is the exception's class name (``ConfigError``
    for a configuration or gain the child refused), ``text`` its message."""

    kind: str
    text: str


@dataclass(frozen=True, slots=True)
class Progress:
    """One step of a first start's compile (:class:`~poise.kernels.warmup.KernelProgress`)."""

    step: Any


@dataclass(frozen=True, slots=True)
class Hello:
    """The child serves (its kernels compiled, its gains checked)."""

    pid: int


@dataclass(frozen=True, slots=True)
class EstopCount:
    """The child's ``Controller.estops`` changed (sent before anything else of a flush: the
    parent stamps commands with it, ``Command.estops``)."""

    estops: int


@dataclass(frozen=True, slots=True)
class EventBatch:
    """The controller's events since the last batch, oldest first."""

    events: list[Event]


@dataclass(frozen=True, slots=True)
class ParamsChanged:
    """The controller's live parameters changed (``LiveParams.as_dict()``)."""

    values: dict[str, Any]


@dataclass(frozen=True, slots=True)
class PlanChanged:
    """The controller's target plan changed: its status and note (``target_status``,
    ``target_note``), its goal q̄ (None: no plan, or none reached) and the safety limits
    (:class:`~poise.motion.safety.SafetyLimits`) its plans are made for."""

    status: str
    note: str
    goal: list[float] | None
    limits: Any


@dataclass(frozen=True, slots=True)
class Reply:
    """The answer to call ``call_id``: its value, or (``ok`` False) why it failed."""

    call_id: int
    ok: bool
    value: Any


@dataclass(frozen=True, slots=True)
class UrgentTaken:
    """The child took an e-stop from MQTT itself and acted on it (the parent cancels what
    still waits there and answers with a :class:`Barrier`)."""

    estop_id: str


@dataclass(frozen=True, slots=True)
class UrgentAnswer:
    """The child's answer to an e-stop taken from MQTT (for the parent's observer)."""

    response: CommandResponse


@dataclass(frozen=True, slots=True)
class UrgentConnection:
    """The child's e-stop MQTT connection came up (``connected``) or went down."""

    connected: bool


__all__ = [
    "CANCELLED_BY_ESTOP",
    "Barrier",
    "Built",
    "Call",
    "CallKind",
    "Estop",
    "EstopCount",
    "EventBatch",
    "Fatal",
    "Hello",
    "ParamsChanged",
    "PlanChanged",
    "PlanRefined",
    "PostedEstop",
    "Progress",
    "Reply",
    "UrgentAnswer",
    "UrgentConnection",
    "UrgentTaken",
]
