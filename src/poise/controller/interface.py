"""What every controller offers its users: :class:`ControllerAPI`.

Two classes implement it: the in-process :class:`~poise.controller.loop.Controller` and
:class:`~poise.controller.realtime.parent.RealtimeController` (the same controller in a
real-time process of its own); :func:`~poise.controller.realtime.parent.make_controller`
returns either. The members are those its users call: ``poise run`` (:mod:`poise.cli`), the
telemetry (:func:`poise.telemetry.service.attach`: MQTT bridge, experiment log, Foxglove
live view), the benchmarks and the tests. ``tests/test_controller_api.py`` checks that both
classes have every member with a compatible signature.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, Self, runtime_checkable

from poise.api.bus import Command, CommandResponse, CycleSample, Event, SampleQueue
from poise.api.state import State

if TYPE_CHECKING:  # annotations only: loading them costs a controller's user SciPy
    from poise.controller.config import Config, ControllerModel
    from poise.models.base import MechanicalModel
    from poise.motion.params import LiveParams


class ControllerView(Protocol):
    """What observers read: the state and live parameters (no round trip), the cycle records
    and events as they come, the timing and summary."""

    @property
    def state(self) -> State:
        """The state machine's state."""
        ...

    @property
    def reason(self) -> str:
        """Why a latched state (fault, estop) was entered; empty otherwise."""
        ...

    @property
    def params(self) -> LiveParams:
        """The live parameters the next cycle uses."""
        ...

    @property
    def estops(self) -> int:
        """E-stops latched so far (a command stamped with an older count is refused)."""
        ...

    @property
    def target_status(self) -> str:
        """``reachable``, ``unreachable`` or ``""``."""
        ...

    @property
    def target_note(self) -> str:
        """Why the target is unreachable ('' otherwise)."""
        ...

    def wait_for(self, *states: State, timeout: float = 5.0) -> bool:
        """Block until the state is one of ``states``; False on timeout [s]."""
        ...

    def subscribe(self, maxlen: int = 10_000) -> SampleQueue[CycleSample]:
        """A new bounded queue of every cycle record (drop-oldest)."""
        ...

    def events(self, maxlen: int = 10_000, history: bool = True) -> SampleQueue[Event]:
        """A new bounded queue of every event (the past ones first when ``history``)."""
        ...

    def unsubscribe(self, queue: SampleQueue[Any]) -> None:
        """Stop feeding ``queue``."""
        ...

    def history(self) -> list[Event]:
        """The last events."""
        ...

    def announce(self, kind: str, **data: Any) -> Event:
        """Publish an event from outside the control loop."""
        ...

    def timing(self) -> dict[str, Any]:
        """Timing percentiles [µs] and counters of the cycles so far."""
        ...

    def summary(self) -> dict[str, Any]:
        """The run so far (JSON-ready)."""
        ...

    def final_summary(self) -> dict[str, Any]:
        """The state the run ended in."""
        ...


class ControllerCommands(Protocol):
    """What commanders call: every command is answered with a :class:`CommandResponse`,
    never an exception; ``post`` never blocks; ``estop`` goes ahead of every waiting
    command."""

    def connect(self) -> CommandResponse:
        """idle → ready: open the device."""
        ...

    def start(self, cause: str = "start") -> CommandResponse:
        """Connect if needed, arm and run (→ running)."""
        ...

    def stop(self, cause: str = "stop") -> CommandResponse:
        """running → ready: stop sending setpoints and disarm."""
        ...

    def clear(self, cause: str = "clear") -> CommandResponse:
        """Clear a latched fault or e-stop."""
        ...

    def estop(self, cause: str = "e-stop") -> CommandResponse:
        """Latch the e-stop now, ahead of every waiting command."""
        ...

    def submit(self, command: Command) -> CommandResponse:
        """Validate and apply ``command``; always answered."""
        ...

    def set_target(self, target: Any, source: str = "api") -> CommandResponse:
        """Shorthand for ``submit(Command("target", target))``."""
        ...

    def post(self, command: Command, reply: Callable[[CommandResponse], None]) -> None:
        """Hand over ``command`` without waiting; ``reply`` gets its one answer."""
        ...


@runtime_checkable
class ControllerAPI(ControllerView, ControllerCommands, Protocol):
    """A controller as its users see it (see the module docstring): its configuration and
    model, :class:`ControllerView`, :class:`ControllerCommands`, and its lifetime."""

    #: The validated configuration.
    config: Config
    #: The model as configured (calibration applied) and the model itself.
    model_info: ControllerModel
    model: MechanicalModel
    #: The robot's reach [m], if the model knows it.
    reach: float | None

    def reset_timing(self) -> None:
        """Start the timing statistics afresh (a benchmark's measured window)."""
        ...

    def close(self) -> None:
        """Stop, disarm, release the device (idempotent)."""
        ...

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc: object) -> None: ...


__all__ = ["ControllerAPI", "ControllerCommands", "ControllerView"]
