"""The plant protocol: what the device endpoint drives (a simulator or real hardware drivers).

The device endpoint (:mod:`poise.firmware_bridge.device`) owns the link and the safety logic; a
*plant* owns the physics (or the motor drivers). Any object with the methods and attributes of
:class:`Plant` works; it is a structural protocol, so ``poise.sim`` (lower in the dependency order)
implements it **without importing this module**. Channel descriptions are likewise structural:
any object with the attributes of :class:`ChannelLike` (e.g. the frozen dataclass
:class:`poise.sim.SimChannel`, which hardware drivers and tests may use too), or a mapping with
those keys.

Conventions (what the endpoint relies on):

* Channels are ordered: first the ``n_q`` measured coordinates (``kind == "coordinate"``), then the
  ``n_a`` actuators (``kind == "actuator"``). ``read_sensors`` returns arrays in that order.
* Units are SI and named per channel (``"rad"``, ``"m"``; efforts ``"N*m"``, ``"N"``), ≤ 8 bytes.
  Names are ≤ 16 bytes UTF-8.
* Time is simulated time in seconds; the endpoint calls ``step(dt)`` with the real elapsed time
  between sensor frames (≈ 1/rate), so a plant may sub-step internally for stiffness.
* A plant never raises for a reference outside the limits (the endpoint clips first) and never
  returns NaN unless something is physically wrong (the endpoint then reports a SENSOR fault).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal, Protocol, runtime_checkable

from poise.firmware_bridge import messages as m

#: ``position``: track the actuator references (with the optional effort feed-forward);
#: ``hold``: hold the actuators where they are now (brake / stiff position hold);
#: ``disabled``: no actuator effort at all (motors off; the robot may sag under gravity).
Mode = Literal["position", "hold", "disabled"]
MODES: tuple[str, ...] = ("position", "hold", "disabled")


class ChannelLike(Protocol):
    """One sensor or actuator channel as a plant describes it.

    Attributes:
        name: ≤ 16 bytes UTF-8, e.g. ``"theta1"``, ``"tendon2"``.
        kind: ``"coordinate"`` (a measured configuration coordinate q_i) or ``"actuator"``
            (a commanded actuator coordinate qa_j, which also reports its position and effort).
        unit: position unit, e.g. ``"rad"`` or ``"m"``.
        lower, upper: position limits [unit]; references are clipped to them.
        effort_unit: e.g. ``"N"`` or ``"N*m"``; ``""`` for coordinates.
        effort_limit: |effort| limit [effort_unit]; ``0.0`` for coordinates.
    """

    name: str
    kind: str
    unit: str
    lower: float
    upper: float
    effort_unit: str
    effort_limit: float


@runtime_checkable
class Plant(Protocol):
    """What a device endpoint drives. Implemented by ``poise.sim`` plants and hardware drivers.

    Attributes:
        time: plant time [s], advanced by :meth:`step`.
    """

    time: float

    def describe(self) -> Sequence[ChannelLike | Mapping[str, object]]:
        """The channels: coordinates first, then actuators (see :class:`ChannelLike`).

        Called once when the endpoint starts; must not change afterwards.
        """
        ...

    def set_mode(self, mode: Mode) -> None:
        """Switch the low-level actuator control: ``"position"``, ``"hold"`` or ``"disabled"``.

        The endpoint calls ``"hold"`` or ``"disabled"`` on disarm, watchdog and e-stop
        (``"disabled"``), and ``"position"`` on arm. A plant starts in ``"disabled"``.
        Entering ``"hold"`` freezes the actuator references at the current actuator positions.
        """
        ...

    def set_actuator_command(self, qa_ref: Sequence[float],
                             tau_ff: Sequence[float] | None) -> None:
        """Set the actuator references qa_ref [channel unit] (length n_a, already clipped to the
        limits) and an optional effort feed-forward tau_ff [effort unit] (length n_a) that the
        low-level controller adds to its feedback effort. Used only in ``"position"`` mode; the
        command holds until the next call.
        """
        ...

    def step(self, dt: float) -> None:
        """Advance the plant by ``dt`` seconds (dt > 0, typically 1/rate) under the current mode
        and command; efforts are limited to ``effort_limit`` by the plant's own actuator model.
        """
        ...

    def read_sensors(self) -> tuple[Sequence[float], Sequence[float], Sequence[float], int]:
        """The current measurement ``(q, qa, tau, status)``:

        * ``q``: the n_q measured coordinates [channel units] (e.g. joint encoders);
        * ``qa``: the n_a measured actuator positions (e.g. tendon lengths, motor encoders);
        * ``tau``: the n_a actuator efforts (e.g. tendon tensions, motor torques);
        * ``status``: plant-defined bits 0 … 15, sent in bits 16 … 31 of the sensor status word.
        """
        ...


def channel_messages(plant: Plant) -> list[m.Channel]:
    """The wire descriptions (:class:`~poise.firmware_bridge.messages.Channel`) of a plant's
    channels; checks the ordering (coordinates first) and the field sizes."""
    out: list[m.Channel] = []
    seen_actuator = False
    for index, ch in enumerate(plant.describe()):
        get = ch.get if isinstance(ch, Mapping) else lambda k, d=None, c=ch: getattr(c, k, d)
        kind = str(get("kind"))
        if kind not in ("coordinate", "actuator"):
            raise ValueError(f"channel {index}: kind {kind!r} is not 'coordinate' or 'actuator'")
        if kind == "actuator":
            seen_actuator = True
        elif seen_actuator:
            raise ValueError(f"channel {index}: coordinates must come before actuators")
        msg = m.Channel(index,
                        m.ChannelKind.ACTUATOR if kind == "actuator"
                        else m.ChannelKind.COORDINATE,
                        str(get("name")), str(get("unit")), float(get("lower")),
                        float(get("upper")), str(get("effort_unit", "") or ""),
                        float(get("effort_limit", 0.0) or 0.0))
        msg.pack()  # raises on over-long names/units
        out.append(msg)
    return out
