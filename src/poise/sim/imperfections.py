"""What makes a real arm differ from its model: the ``[plant]`` table of a plant or model file.

Every key is optional; with none of them (or no ``[plant]`` table) the simulator is exactly the
model. Per-coordinate lists have ``n`` entries, per-actuator lists ``m`` (one number applies to
all). Units are those of the channel: rad and N·m for joints, m and N for tendons, rad and N·m
for motors. ``docs/simulator.md`` ("Imperfections") has the equations::

    [plant.friction]          # joints: Karnopp friction, solved implicitly each internal step
    coulomb = 0.18            # F_c [N·m] while sliding
    stiction = 0.27           # F_s >= F_c [N·m] breakaway (default: coulomb)
    viscous = 0.05            # b [N·m·s/rad]

    [plant.actuators]         # the transmissions (tendon sheaths, gearboxes)
    coulomb = 1.0             # [N or N·m] friction along qa = A q
    stiction = 1.5            # [N or N·m]
    viscous = 2.0             # [N·s/m or N·m·s/rad]
    dead_band = 2e-4          # [m or rad] total play: backlash, slack of a tendon pair
    tendon = 1                # +1: one tendon, tension τ >= 0; -1: τ <= 0; 0: either sign

    [plant.hysteresis]        # Bouc–Wen (n = 1, A = 1, β = γ = 1 / (2 y)) on the springs
    stiffness = 3.6           # κ [N·m/rad]: the hysteretic torque κ z, |z| <= y
    yield_angle = 0.05        # y [rad]

    [plant.sensors]           # overrides of poise.sim.SensorConfig
    counts_per_rev = 4096     # joint encoder resolution; or counts_per_rad
    q_noise = 2e-4            # and qa_noise, effort_noise, q_bias, qa_bias, effort_bias

    [plant.delay]             # transport delay in cycles (plant steps = sensor frames)
    sensors = 2
    commands = 0

:func:`read_effects` validates the table; an error names the file and the key
(``plant.friction.stiction = [0.1]: must be >= coulomb (0.2) entry by entry``).
"""

from __future__ import annotations

import json
import math
import pathlib
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from poise.models.base import FloatArray
from poise.models.registry import ModelError
from poise.sim.sensors import SensorConfig

#: The tables of ``[plant]`` and their keys.
KEYS: dict[str, tuple[str, ...]] = {
    "friction": ("coulomb", "stiction", "viscous"),
    "actuators": ("coulomb", "stiction", "viscous", "dead_band", "tendon"),
    "hysteresis": ("stiffness", "yield_angle"),
    "sensors": ("counts_per_rev", "counts_per_rad", "q_noise", "qa_noise", "effort_noise",
                "q_bias", "qa_bias", "effort_bias"),
    "delay": ("sensors", "commands"),
}
#: Sweeps of the projected Gauss–Seidel friction solve per internal step.
FRICTION_SWEEPS = 20
#: ... or until a sweep changes no friction force by more than this fraction of its bound.
SWEEP_TOL = 1e-12


def _zeros(size: int) -> FloatArray:
    return np.zeros(size)


@dataclass(frozen=True)
class PlantEffects:
    """The validated ``[plant]`` table (see the module docstring); zeros mean "absent".

    Attributes:
        joint_coulomb, joint_stiction, joint_viscous: (n,) joint friction.
        act_coulomb, act_stiction, act_viscous: (m,) transmission friction along ``A q``.
        dead_band: (m,) total play of each transmission.
        tendon: (m,) ``+1`` tension only (τ >= 0), ``-1`` (τ <= 0), ``0`` either sign.
        hyst_stiffness, hyst_yield: (n,) Bouc–Wen κ and y (``y = 0``: no hysteresis).
        sensors: :class:`SensorConfig` field overrides.
        sensor_delay, command_delay: transport delays [cycles].
    """

    n: int
    m: int
    joint_coulomb: FloatArray = field(default_factory=lambda: _zeros(0))
    joint_stiction: FloatArray = field(default_factory=lambda: _zeros(0))
    joint_viscous: FloatArray = field(default_factory=lambda: _zeros(0))
    act_coulomb: FloatArray = field(default_factory=lambda: _zeros(0))
    act_stiction: FloatArray = field(default_factory=lambda: _zeros(0))
    act_viscous: FloatArray = field(default_factory=lambda: _zeros(0))
    dead_band: FloatArray = field(default_factory=lambda: _zeros(0))
    tendon: FloatArray = field(default_factory=lambda: _zeros(0))
    hyst_stiffness: FloatArray = field(default_factory=lambda: _zeros(0))
    hyst_yield: FloatArray = field(default_factory=lambda: _zeros(0))
    sensors: Mapping[str, Any] = field(default_factory=dict)
    sensor_delay: int = 0
    command_delay: int = 0
    source: str = ""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, np.ndarray) and value.size == 0:
                size = self.n if f.name.startswith(("joint", "hyst")) else self.m
                object.__setattr__(self, f.name, np.zeros(size))

    @property
    def dynamic(self) -> bool:
        """Whether any effect acts on the dynamics (friction, play, tendons, hysteresis)."""
        return bool(self.friction_rows()[0].size or np.any(self.joint_viscous)
                    or np.any(self.act_viscous) or np.any(self.dead_band)
                    or np.any(self.tendon) or np.any(self.hyst_yield > 0))

    @property
    def empty(self) -> bool:
        """No effect at all: the plant is exactly its model."""
        return not (self.dynamic or self.sensors or self.sensor_delay or self.command_delay)

    def friction_rows(self, A: FloatArray | None = None
                      ) -> tuple[FloatArray, FloatArray, FloatArray]:
        """``(J, F_c, F_s)``: one row per joint or transmission with dry friction, ``J`` (K, n)
        the row's direction (``e_i`` for joint i, ``A_j`` for actuator j)."""
        rows, fc, fs = [], [], []
        eye = np.eye(self.n)
        for i in range(self.n):
            if self.joint_stiction[i] > 0:
                rows.append(eye[i])
                fc.append(self.joint_coulomb[i])
                fs.append(self.joint_stiction[i])
        for j in range(self.m):
            if self.act_stiction[j] > 0:
                if A is None:  # only counting
                    rows.append(np.zeros(self.n))
                else:
                    rows.append(np.asarray(A[j], dtype=float))
                fc.append(self.act_coulomb[j])
                fs.append(self.act_stiction[j])
        J = np.array(rows, dtype=float).reshape(len(rows), self.n)
        return J, np.array(fc, dtype=float), np.array(fs, dtype=float)

    def sensor_config(self, base: SensorConfig) -> SensorConfig:
        """``base`` with this table's sensor overrides."""
        if not self.sensors:
            return base
        return replace(base, **dict(self.sensors))

    def describe(self) -> list[str]:
        """The effects present, as ``"plant.<table>.<key>: value"`` lines."""
        out = []
        for name, values in (
                ("friction.coulomb", self.joint_coulomb), ("friction.stiction",
                                                           self.joint_stiction),
                ("friction.viscous", self.joint_viscous), ("actuators.coulomb",
                                                           self.act_coulomb),
                ("actuators.stiction", self.act_stiction), ("actuators.viscous",
                                                            self.act_viscous),
                ("actuators.dead_band", self.dead_band), ("actuators.tendon", self.tendon),
                ("hysteresis.stiffness", self.hyst_stiffness),
                ("hysteresis.yield_angle", self.hyst_yield)):
            if np.any(values):
                out.append(f"plant.{name}: {[float(v) for v in values]}")
        for key, value in self.sensors.items():
            out.append(f"plant.sensors.{key}: {value!r}")
        if self.sensor_delay:
            out.append(f"plant.delay.sensors: {self.sensor_delay}")
        if self.command_delay:
            out.append(f"plant.delay.commands: {self.command_delay}")
        return out


def no_effects(n: int, m: int) -> PlantEffects:
    """The exact plant."""
    return PlantEffects(n, m)


# --------------------------------------------------------------------------- reading


class _Table:
    def __init__(self, data: Any, source: str, prefix: str, allowed: tuple[str, ...]) -> None:
        if not isinstance(data, Mapping):
            raise ModelError(f"{source}: {prefix.rstrip('.')} = {data!r}: must be a table")
        for key in data:
            if key not in allowed:
                raise ModelError(f"{source}: {prefix}{key}: unknown key; allowed keys are "
                                 f"{', '.join(allowed)}")
        self.data, self.source, self.prefix = data, source, prefix

    def error(self, key: str, allowed: str) -> ModelError:
        return ModelError(f"{self.source}: {self.prefix}{key} = {self.data.get(key)!r}: "
                          f"{allowed}")

    def vector(self, key: str, size: int, what: str, default: FloatArray | None = None
               ) -> FloatArray:
        """A number or ``size`` numbers, finite and >= 0."""
        if key not in self.data:
            return np.zeros(size) if default is None else default.copy()
        raw = self.data[key]
        items = raw if isinstance(raw, list) else [raw]
        ok = all(isinstance(v, int | float) and not isinstance(v, bool) for v in items)
        if not ok or len(items) not in (1, size):
            raise self.error(key, f"must be a number or {size} numbers (one per {what})")
        arr = np.array(items, dtype=float)
        if not np.all(np.isfinite(arr)) or np.any(arr < 0):
            raise self.error(key, "must be finite and >= 0")
        return np.full(size, arr[0]) if arr.size == 1 else arr


def effects_from_dict(data: Mapping[str, Any] | None, n: int, m: int,
                      source: str = "<dict>") -> PlantEffects:
    """Validate a ``[plant]`` table for a robot with ``n`` coordinates and ``m`` actuators.

    Raises:
        ModelError: an unknown table or key, a wrong size, a negative value, stiction below
            Coulomb friction, a tendon value other than -1, 0, +1 (the message names the file
            and the key).
    """
    if data is None:
        return no_effects(n, m)
    _Table(data, source, "plant.", tuple(KEYS))  # refuses an unknown table
    args: dict[str, Any] = {}
    tables = {name: _Table(data.get(name, {}), source, f"plant.{name}.", keys)
              for name, keys in KEYS.items()}
    for prefix, t, size, what in (("joint", tables["friction"], n, "coordinate"),
                                  ("act", tables["actuators"], m, "actuator")):
        coulomb = t.vector("coulomb", size, what)
        stiction = t.vector("stiction", size, what, default=coulomb)
        if np.any(stiction < coulomb):
            raise t.error("stiction", f"must be >= coulomb ({coulomb.tolist()}) entry by "
                          "entry (the breakaway is at least the sliding friction)")
        args[f"{prefix}_coulomb"], args[f"{prefix}_stiction"] = coulomb, stiction
        args[f"{prefix}_viscous"] = t.vector("viscous", size, what)
    act = tables["actuators"]
    args["dead_band"] = act.vector("dead_band", m, "actuator")
    if "tendon" in act.data:
        raw = act.data["tendon"]
        items = raw if isinstance(raw, list) else [raw]
        if len(items) not in (1, m) or any(v not in (-1, 0, 1) or isinstance(v, bool)
                                           for v in items):
            raise act.error("tendon", f"must be -1, 0 or +1, or {m} of them (one per "
                            "actuator: +1 a tendon with tension >= 0, -1 <= 0, 0 either sign)")
        args["tendon"] = np.array(items * m if len(items) == 1 else items, dtype=float)
    hyst = tables["hysteresis"]
    args["hyst_stiffness"] = hyst.vector("stiffness", n, "coordinate")
    args["hyst_yield"] = hyst.vector("yield_angle", n, "coordinate")
    if np.any((args["hyst_stiffness"] > 0) & ~(args["hyst_yield"] > 0)):
        raise hyst.error("yield_angle", "must be > 0 where stiffness > 0 (the Bouc–Wen "
                         "variable z is bounded by it)")
    sens = tables["sensors"]
    overrides: dict[str, Any] = {}
    for key, value in sens.data.items():
        if key in ("counts_per_rev", "counts_per_rad"):
            if not isinstance(value, int | float) or isinstance(value, bool) or value < 0 \
                    or not math.isfinite(value):
                raise sens.error(key, "must be a finite number >= 0 (0: no quantisation)")
            if "counts_per_rev" in sens.data and "counts_per_rad" in sens.data:
                raise sens.error(key, "give counts_per_rev or counts_per_rad, not both")
            overrides["counts_per_rad"] = (float(value) / (2 * math.pi)
                                           if key == "counts_per_rev" else float(value))
            continue
        size = n if key.startswith("q_") else m
        if key.endswith("_bias"):  # a bias may be negative
            items = value if isinstance(value, list) else [value]
            if len(items) not in (1, size) or not all(
                    isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
                    for v in items):
                raise sens.error(key, f"must be a number or {size} finite numbers")
        else:
            sens.vector(key, size, "channel")
        overrides[key] = tuple(value) if isinstance(value, list) else float(value)
    args["sensors"] = overrides
    delay = tables["delay"]
    for key in ("sensors", "commands"):
        value = delay.data.get(key, 0)
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 1000:
            raise delay.error(key, "must be a whole number of cycles in [0, 1000]")
        args[f"{'sensor' if key == 'sensors' else 'command'}_delay"] = value
    return PlantEffects(n, m, source=source, **args)


def read_effects(path: str | pathlib.Path | None, n: int, m: int) -> PlantEffects:
    """The ``[plant]`` table of a plant or model file (TOML, or JSON by its suffix); the exact
    plant for ``None``, a built-in model name, or a file without the table.

    Raises:
        ModelError: see :func:`effects_from_dict`; an unreadable file.
    """
    if path is None:
        return no_effects(n, m)
    text = str(path)
    if not (text.endswith((".toml", ".json")) or "/" in text):
        return no_effects(n, m)  # a built-in model: exact
    p = pathlib.Path(text)
    try:
        raw = p.read_bytes()
        data = json.loads(raw) if p.suffix == ".json" else tomllib.loads(raw.decode())
    except (OSError, ValueError) as exc:
        raise ModelError(f"{p.name}: cannot be read ({exc})") from None
    return effects_from_dict(data.get("plant") if isinstance(data, dict) else None, n, m,
                             source=p.name)


__all__ = ["FRICTION_SWEEPS", "KEYS", "SWEEP_TOL", "PlantEffects", "effects_from_dict",
           "no_effects", "read_effects"]
