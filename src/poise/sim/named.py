"""Named plants: the built-in robots as a real arm would differ from them (issue 35).

``write_named(robot, plant, folder)`` writes a plant file (the true parameters, with a
``[plant]`` table of :mod:`poise.sim.imperfections`) for a built-in model with dynamics, from
the recipes below; ``poise bench control --plant real`` and friends use it. The files are
deterministic (the same bytes on every machine), so a run names its plant by
``<robot>=<plant>``. The magnitudes and their reasons are in ``docs/simulator.md`` ("Named
plants"):

* ``stiff10`` — every joint spring +10 %;
* ``mixed15`` — every spring and every mass off by 5–15 %, alternately up and down, body by
  body (fixed seed);
* ``friction`` — joint friction 3 % of the spring torque at 0.5 rad (stiction 1.5×, viscous
  10 % of the model's damping), transmission friction 1 % of the effort limit;
* ``hysteresis`` — Bouc–Wen on every spring: ``κ = 0.2 k``, yield angle 0.05 rad (a loop
  ±2 % of the spring torque at 0.5 rad wide);
* ``slack+noise`` — a dead band of 0.2 % of each actuator's range (the slack of a tendon
  pair; 0.002 rad of backlash for a motor), encoders of 4096 counts/rev, noise twice the
  default on q and q̃a, 1 % of the effort limit on τ̃;
* ``real`` — all of these together (springs and masses as ``mixed15``) and a sensor delay of
  2 cycles.
"""

from __future__ import annotations

import math
import pathlib
import re
from typing import Any

import numpy as np

#: The named plants, in the order of the docs.
NAMED_PLANTS: tuple[str, ...] = ("stiff10", "mixed15", "friction", "hysteresis", "slack+noise",
                                 "real")
#: What the effects of each named plant are (the ``real`` plant has all of them).
PARTS: dict[str, tuple[str, ...]] = {
    "stiff10": ("stiff10",), "mixed15": ("mixed15",), "friction": ("friction",),
    "hysteresis": ("hysteresis",), "slack+noise": ("slack", "noise"),
    "real": ("mixed15", "friction", "hysteresis", "slack", "noise", "delay"),
}

#: Joint Coulomb friction: this fraction of the spring torque at :data:`THETA_MID`.
FRICTION = 0.03
#: The "mid-range" bending of an elastic joint or segment [rad].
THETA_MID = 0.5
#: Breakaway (stiction) over sliding friction.
STICTION_RATIO = 1.5
#: Joint viscous friction: this fraction of the model's joint damping.
VISCOUS = 0.1
#: Transmission Coulomb friction: this fraction of the actuator's effort limit; a joint
#: without a spring gets half of it from each motor acting on it.
TRANSMISSION = 0.01
#: Hysteresis: κ = this fraction of the spring, yield angle [rad].
HYSTERESIS = 0.2
YIELD_ANGLE = 0.05
#: Dead band: this fraction of a tendon's range; a motor's backlash [rad].
DEAD_BAND = 0.002
BACKLASH = 0.002
#: Encoders [counts/rev]; noise factor over the default sensors; effort noise / effort limit.
COUNTS_PER_REV = 4096
NOISE_FACTOR = 2.0
EFFORT_NOISE = 0.01
#: Sensor delay of ``real`` [cycles].
DELAY = 2
#: Springs scaled down for friction and hysteresis, per robot and coordinate: the dancer's
#: pointe (550 N·m/rad) mostly holds up the body; its net stiffness upright is about
#: k0 − m g h ≈ 90 N·m/rad ≈ k0 / 6, which sets how far friction can hold it off balance.
NET_SPRING: dict[str, dict[int, float]] = {"dancer": {0: 1.0 / 6.0}}
#: Seed of ``mixed15``'s factors; their range.
MIXED_SEED = 35
MIXED_RANGE = (0.05, 0.15)


def _scaled_lines(text: str, key: str, factors: Any) -> tuple[str, int]:
    """``key = x`` lines (at the start of a line) multiplied by successive factors."""
    it = iter(factors)
    return re.subn(rf"^{key} = ([0-9.eE+-]+)",
                   lambda m: f"{key} = {round(float(m.group(1)) * float(next(it)), 9)!r}",
                   text, flags=re.M)


def mixed_factors(count: int) -> list[float]:
    """``count`` factors ``1 ± a`` with ``a`` in :data:`MIXED_RANGE`, signs alternating."""
    rng = np.random.default_rng(MIXED_SEED)
    mags = rng.uniform(*MIXED_RANGE, count)
    return [1.0 + (a if i % 2 == 0 else -a) for i, a in enumerate(mags)]


def _toml_list(values: Any) -> str:
    return "[" + ", ".join(repr(round(float(v), 9)) for v in values) + "]"


def plant_table(robot: str, parts: tuple[str, ...]) -> str:
    """The ``[plant]`` table (TOML text) of the effects ``parts`` for the built-in ``robot``."""
    from poise.models import load_model
    from poise.sim.actuators import default_effort_limit
    from poise.sim.plant import actuator_is_motor
    from poise.sim.sensors import SensorConfig

    model = load_model(robot)
    m = model.m
    k = np.asarray(model.stiffness, dtype=float)
    net = k.copy()
    for i, scale in NET_SPRING.get(model.name, {}).items():
        net[i] *= scale
    A = np.asarray(model.C[:m], dtype=float)
    limit = default_effort_limit(model, model.name)
    out: list[str] = []
    if "friction" in parts:
        motor_share = 0.5 * TRANSMISSION * (np.abs(A).T @ limit)  # joints without a spring
        coulomb = np.where(k > 0, FRICTION * net * THETA_MID, motor_share)
        out += ["[plant.friction]",
                f"coulomb = {_toml_list(coulomb)}   # [N·m]",
                f"stiction = {_toml_list(STICTION_RATIO * coulomb)}",
                f"viscous = {_toml_list(VISCOUS * np.asarray(model.damping))}   # [N·m·s/rad]",
                ""]
    acts: list[str] = []
    if "friction" in parts:
        acts += [f"coulomb = {_toml_list(TRANSMISSION * limit)}   # [N or N·m]",
                 f"stiction = {_toml_list(STICTION_RATIO * TRANSMISSION * limit)}"]
    if "slack" in parts:
        span = np.asarray(model.qa_max, float) - np.asarray(model.qa_min, float)
        band = [BACKLASH if actuator_is_motor(model, j) or not math.isfinite(span[j])
                else DEAD_BAND * span[j] for j in range(m)]
        acts += [f"dead_band = {_toml_list(band)}   # [m or rad]"]
    if acts:
        out += ["[plant.actuators]", *acts, ""]
    if "hysteresis" in parts:
        kappa = HYSTERESIS * net
        out += ["[plant.hysteresis]", f"stiffness = {_toml_list(kappa)}   # [N·m/rad]",
                f"yield_angle = {_toml_list(np.where(kappa > 0, YIELD_ANGLE, 0.0))}   # [rad]",
                ""]
    if "noise" in parts:
        base = SensorConfig()
        out += ["[plant.sensors]", f"counts_per_rev = {COUNTS_PER_REV}",
                f"q_noise = {NOISE_FACTOR * float(base.q_noise)!r}   # [rad]",
                f"qa_noise = {NOISE_FACTOR * float(base.qa_noise)!r}   # [m or rad]",
                f"effort_noise = {_toml_list(EFFORT_NOISE * limit)}   # [N or N·m]", ""]
    if "delay" in parts:
        out += ["[plant.delay]", f"sensors = {DELAY}   # [cycles]", ""]
    return "\n".join(out)


def named_text(robot: str, plant: str) -> str:
    """The plant file (TOML) of the named ``plant`` for the built-in ``robot``.

    Raises:
        ValueError: an unknown plant name, robot, or a robot without springs for
            ``stiff10``/``mixed15``.
    """
    from poise.models.registry import builtin_path

    if plant not in PARTS:
        raise ValueError(f"plant {plant!r}: unknown; named plants are {', '.join(NAMED_PLANTS)}")
    parts = PARTS[plant]
    text = builtin_path(robot).read_text()  # a ModelError (a ValueError) for an unknown name
    if "stiff10" in parts:
        text, count = _scaled_lines(text, "stiffness", iter(lambda: 1.1, None))
        if count == 0:
            raise ValueError(f"plant {robot}={plant}: the model has no joint spring")
    if "mixed15" in parts:
        for key in ("stiffness", "mass"):
            count = len(re.findall(rf"^{key} = ", text, flags=re.M))
            text, _ = _scaled_lines(text, key, mixed_factors(count) if key == "stiffness"
                                    else mixed_factors(count + 7)[7:])
    head = f"# {robot} as the named plant {plant!r} (poise.sim.named; docs/simulator.md)\n"
    table = plant_table(robot, parts)
    return head + text + ("\n" + table if table else "")


def write_named(robot: str, plant: str, folder: str | pathlib.Path) -> str:
    """Write :func:`named_text` to ``folder/<robot>_<plant>.toml``; its path."""
    path = pathlib.Path(folder) / f"{robot}_{plant.replace('+', '_')}.toml"
    path.write_text(named_text(robot, plant))
    return str(path)


__all__ = ["NAMED_PLANTS", "PARTS", "mixed_factors", "named_text", "plant_table",
           "write_named"]
