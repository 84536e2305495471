"""Configuration of a Dynamixel servo bus: one :class:`ServoConfig` per actuator, and the
conversion between servo counts and actuator coordinates.

A servo winds a tendon on a spool of radius ``r``; with the shaft angle
``θ = counts · 2π / 4096`` [rad] (X series: 4096 counts per turn) the actuator coordinate is

    qa = sign · r · (θ − θ_zero),        θ_zero = zero · 2π / 4096

[m of tendon for a spool; with ``radius = 1`` qa is the shaft angle in rad: a direct-drive
joint]. The effort conjugate to qa (so that effort · q̇a is the shaft power) is

    effort = sign · k_t · I / r          [N of tendon tension; N·m with radius 1]

with the motor current ``I = current · current_unit`` [A] and a torque constant ``k_t``
[N·m/A] (a linear approximation: the real curve saturates near stall).

Defaults (the virtual bus uses the same ones): IDs 1 … m, spool radius
:data:`DEFAULT_RADIUS` = 0.01 m, sign +1, ``zero`` = :data:`DEFAULT_ZERO` = 2048 counts
(qa = 0 at the middle of the first turn, ROBOTIS' "zero radian" position, so that after
power-on, when an extended-position servo reports a position in 0 … 4095, qa is within half a
turn of 0), operating mode 4 (extended position, multi-turn), qa limits ± one spool turn
(± 2π r), current unit 2.69 mA and k_t = 1.79 N·m/A (XM430-W350 at 12 V).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from poise.models.settings import field_default
from poise.models.spec import Key

#: Counts per shaft turn (X series, 12-bit absolute encoder).
COUNTS_PER_TURN = 4096
#: Shaft angle per count [rad].
RAD_PER_COUNT = 2 * math.pi / COUNTS_PER_TURN
#: Present Velocity unit [rad/s per count] (0.229 rev/min).
RAD_S_PER_VELOCITY_UNIT = 0.229 * 2 * math.pi / 60
#: Default spool radius [m].
DEFAULT_RADIUS = 0.01
#: Range of the spool radius accepted [m]: 0.1 mm … 1 km. 1 is a direct drive (qa the shaft
#: angle in rad), 180/π gives qa in degrees; beyond the range is a unit mistake, and near the
#: float limits the count conversion divides by zero or the limits (± one turn) overflow.
MIN_RADIUS, MAX_RADIUS = 1e-4, 1e3
#: Default zero [counts]: qa = 0 at this shaft position.
DEFAULT_ZERO = 2048
#: Default current unit [A per count] (XM430: 2.69 mA; XL330 / XC330: 1 mA).
DEFAULT_CURRENT_UNIT = 2.69e-3
#: Default torque constant [N·m/A] (XM430-W350: 4.1 N·m at 2.3 A, 12 V).
DEFAULT_TORQUE_CONSTANT = 1.79
#: Operating modes poise drives: 4 extended position (multi-turn), 5 current-based position.
EXTENDED_POSITION, CURRENT_BASED_POSITION = 4, 5
MODES = (EXTENDED_POSITION, CURRENT_BASED_POSITION)
#: Goal/Present Position range of the multi-turn modes [counts] (± 256 turns).
POSITION_RANGE = 1_048_575
#: Largest servo ID on a Protocol 2.0 bus (253 and up are reserved; 254 is broadcast).
MAX_ID = 252


@dataclass(frozen=True, slots=True)
class ServoConfig:
    """One actuator driven by one servo.

    Attributes:
        id: servo ID on the bus (0 … 252).
        radius: spool radius r [m] (1.0: qa is the shaft angle [rad]).
        sign: +1 or −1: which shaft direction lengthens qa.
        zero: shaft position [counts] where qa = 0.
        mode: Operating Mode (11): 4 extended position (default) or 5 current-based position.
        current_limit: [A]; mode 5: written to Goal Current (102) at arm, the effort limit;
            mode 4: written to Current Limit (38, EEPROM) at connect if it differs; ``None``:
            leave the servo's setting.
        qa_min, qa_max: actuator limits [m, or rad with radius 1]; ``None``: ∓ one turn.
        current_unit: [A per count] of Present/Goal Current.
        torque_constant: k_t [N·m/A].
        name: channel name (default ``servo<ID>``).
    """

    id: int
    radius: float = DEFAULT_RADIUS
    sign: int = 1
    zero: int = DEFAULT_ZERO
    mode: int = EXTENDED_POSITION
    current_limit: float | None = None
    qa_min: float | None = None
    qa_max: float | None = None
    current_unit: float = DEFAULT_CURRENT_UNIT
    torque_constant: float = DEFAULT_TORQUE_CONSTANT
    name: str = ""

    def __post_init__(self) -> None:
        where = f"servo {self.id}"
        if not (isinstance(self.id, int) and 0 <= self.id <= MAX_ID):
            raise ValueError(f"servo id {self.id!r}: must be an integer 0 … {MAX_ID}")
        if not (math.isfinite(self.radius) and MIN_RADIUS <= self.radius <= MAX_RADIUS):
            raise ValueError(f"{where}: radius = {self.radius!r} m: must be in "
                             f"[{MIN_RADIUS:g}, {MAX_RADIUS:g}]")
        if self.sign not in (1, -1):
            raise ValueError(f"{where}: sign = {self.sign!r}: must be +1 or -1")
        if not (isinstance(self.zero, int) and abs(self.zero) <= POSITION_RANGE):
            raise ValueError(f"{where}: zero = {self.zero!r} counts: must be an integer "
                             f"within ±{POSITION_RANGE}")
        if self.mode not in MODES:
            raise ValueError(f"{where}: mode = {self.mode!r}: must be 4 (extended position) "
                             "or 5 (current-based position)")
        if self.current_limit is not None and not (math.isfinite(self.current_limit)
                                                   and self.current_limit > 0):
            raise ValueError(f"{where}: current_limit = {self.current_limit!r} A: must be > 0")
        if self.mode == CURRENT_BASED_POSITION and self.current_limit is None:
            raise ValueError(f"{where}: mode 5 (current-based position) needs current_limit "
                             "[A], the effort limit written to Goal Current")
        for key in ("current_unit", "torque_constant"):
            v = getattr(self, key)
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f"{where}: {key} = {v!r}: must be > 0")
        turn = 2 * math.pi * self.radius
        lo = -turn if self.qa_min is None else float(self.qa_min)
        hi = turn if self.qa_max is None else float(self.qa_max)
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise ValueError(f"{where}: qa_min = {lo!r}, qa_max = {hi!r}: need qa_min < qa_max")
        for bound in (lo, hi):
            if abs(self.counts(bound)) > POSITION_RANGE:
                raise ValueError(f"{where}: qa limit {bound} is beyond the servo's ±256 turns")
        object.__setattr__(self, "qa_min", lo)
        object.__setattr__(self, "qa_max", hi)
        if not self.name:
            object.__setattr__(self, "name", f"servo{self.id}")

    # ------------------------------------------------------------------ conversions

    def qa(self, counts: int) -> float:
        """Actuator coordinate [m] of a shaft position [counts]."""
        return self.sign * self.radius * (counts - self.zero) * RAD_PER_COUNT

    def counts(self, qa: float) -> int:
        """Shaft position [counts] (rounded) for an actuator coordinate qa [m]."""
        return round(self.zero + qa / (self.sign * self.radius * RAD_PER_COUNT))

    def qa_velocity(self, velocity: int) -> float:
        """q̇a [m/s] of a Present Velocity [0.229 rev/min units]."""
        return self.sign * self.radius * velocity * RAD_S_PER_VELOCITY_UNIT

    def velocity_units(self, qad: float) -> int:
        """Present Velocity [0.229 rev/min units] for q̇a [m/s]."""
        return round(qad / (self.sign * self.radius * RAD_S_PER_VELOCITY_UNIT))

    def effort(self, current: int) -> float:
        """Effort [N] conjugate to qa for a Present Current [counts]."""
        return self.sign * self.torque_constant * current * self.current_unit / self.radius

    def current_units(self, effort: float) -> int:
        """Present Current [counts] for an effort [N] conjugate to qa."""
        return round(effort * self.radius / (self.sign * self.torque_constant
                                             * self.current_unit))

    def current_limit_units(self) -> int | None:
        """``current_limit`` in current counts (``None`` if unset)."""
        if self.current_limit is None:
            return None
        return round(self.current_limit / self.current_unit)


#: ``[[device.servos]]``: one Dynamixel actuator (docs/devices.md), declared for the run
#: configuration's validator and schema (:mod:`poise.models.settings`), defaults taken from
#: :class:`ServoConfig`'s fields. Its cross-key rules (qa_min < qa_max within the servo's ±256
#: turns, mode 5 needs current_limit, distinct IDs) are :class:`ServoConfig`'s.
SERVO_KEYS: dict[str, Key] = {
    "id": Key("integer", "servo ID on the bus", required=True, ge=0, le=MAX_ID),
    "radius": Key("number", "spool radius r [m] (1.0: qa is the shaft angle [rad])",
                  default=field_default(ServoConfig, "radius"), ge=MIN_RADIUS,
                  le=MAX_RADIUS),
    "sign": Key("integer", "+1 or -1: which shaft direction lengthens qa",
                default=field_default(ServoConfig, "sign"), choices=(1, -1)),
    "zero": Key("integer", "shaft position where qa = 0 [counts]",
                default=field_default(ServoConfig, "zero"), ge=-POSITION_RANGE,
                le=POSITION_RANGE),
    "mode": Key("integer", "Operating Mode: 4 extended position (multi-turn), 5 current-based "
                "position (needs current_limit)", default=field_default(ServoConfig, "mode"),
                choices=MODES),
    "current_limit": Key("number", "[A]; mode 5: the effort limit written to Goal Current at "
                         "arm; mode 4: written to Current Limit at connect if it differs "
                         "(default: leave the servo's setting)", gt=0),
    "qa_min": Key("number", "lower actuator limit [m, or rad with radius 1] (default: minus "
                  "one spool turn)"),
    "qa_max": Key("number", "upper actuator limit [m, or rad with radius 1], > qa_min "
                  "(default: one spool turn)"),
    "current_unit": Key("number", "Present/Goal Current unit [A per count] (XM430: 0.00269, "
                        "XL330/XC330: 0.001)",
                        default=field_default(ServoConfig, "current_unit"), gt=0),
    "torque_constant": Key("number", "k_t [N·m/A] (effort = sign · k_t · I / r)",
                           default=field_default(ServoConfig, "torque_constant"), gt=0),
    "name": Key("string", "channel name (empty or absent: servo<ID>)",
                default=field_default(ServoConfig, "name")),
}
#: Keys of one ``[[device.servos]]`` table.
KEYS = tuple(SERVO_KEYS)


def default_servos(m: int, *, radius: float = DEFAULT_RADIUS,
                   qa_min: Sequence[float] | None = None,
                   qa_max: Sequence[float] | None = None) -> tuple[ServoConfig, ...]:
    """The default table for ``m`` actuators: IDs 1 … m, every other field at its default;
    ``qa_min`` / ``qa_max`` (the model's actuator limits, where finite) replace the default
    limits of ∓ one turn."""

    def limit(values: Sequence[float] | None, i: int) -> float | None:
        if values is None or not math.isfinite(float(values[i])):
            return None
        return float(values[i])

    return tuple(ServoConfig(i + 1, radius=radius, qa_min=limit(qa_min, i),
                             qa_max=limit(qa_max, i)) for i in range(m))


def servos_from_config(tables: Sequence[Mapping[str, object]], *,
                       where: str = "device.servos") -> tuple[ServoConfig, ...]:
    """Parse ``[[device.servos]]`` tables (TOML) into :class:`ServoConfig` s.

    Raises:
        ValueError: naming ``where[i]``, the key and the allowed values; duplicate IDs.
    """
    out: list[ServoConfig] = []
    for i, table in enumerate(tables):
        at = f"{where}[{i}]"
        unknown = sorted(set(table) - set(KEYS))
        if unknown:
            raise ValueError(f"{at}: unknown key(s) {', '.join(unknown)}; allowed: "
                             f"{', '.join(KEYS)}")
        if "id" not in table:
            raise ValueError(f"{at}: 'id' (the servo ID) is required")
        try:
            out.append(ServoConfig(**table))  # type: ignore[arg-type]
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{at}: {exc}") from None
    ids = [s.id for s in out]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise ValueError(f"{where}: servo ID(s) {dup} appear more than once")
    return tuple(out)


def with_defaults(servos: Sequence[ServoConfig] | None, m: int | None) -> tuple[ServoConfig, ...]:
    """``servos`` as a tuple, or :func:`default_servos` (m) when none are given."""
    if servos:
        return tuple(servos)
    if not m:
        raise ValueError("a Dynamixel bus needs a servo table or the number of actuators m")
    return default_servos(m)


__all__ = ["COUNTS_PER_TURN", "CURRENT_BASED_POSITION", "DEFAULT_CURRENT_UNIT",
           "DEFAULT_RADIUS", "DEFAULT_TORQUE_CONSTANT", "DEFAULT_ZERO", "EXTENDED_POSITION",
           "KEYS", "MAX_ID", "MAX_RADIUS", "MIN_RADIUS", "MODES", "POSITION_RANGE", "RAD_PER_COUNT",
           "RAD_S_PER_VELOCITY_UNIT", "SERVO_KEYS", "ServoConfig", "default_servos",
           "servos_from_config", "with_defaults"]
