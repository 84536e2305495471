"""What a model file may hold, as data: one :class:`Key` per key of each table.

Every family declares its tables with these (``PlanarTree.KEYS``, ``PlanarPCC.KEYS`` …). Two
readers use the same declarations, so they cannot disagree:

* the validator, :class:`poise.models.registry.Fields`: ``fields.get("mass")`` checks the type
  and range declared here and raises a :class:`~poise.models.registry.ModelError` naming file,
  key and value; ``fields.check_keys()`` refuses keys not declared;
* the JSON Schema for editors, :func:`poise.models.schema.model_schema`.

What a key-by-key schema cannot say (``q_min ≤ q_max``, a parent listed before its child, an
``n × n`` invertible ``C``) stays in the family's ``from_dict`` and is documented there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

#: The kinds of value a key holds.
#:
#: ``number`` a real (``finite=False``: ±inf allowed), ``integer``, ``boolean``, ``string``
#: (``choices``: one of them), ``strings`` a list of strings, ``vector`` a list of numbers
#: (``finite=False``: ``null`` / ±inf entries mean unlimited; ``gt``/``ge``/``le`` bound every
#: entry), ``matrix`` a list of rows, ``direction`` one of ``choices`` or an angle [rad],
#: ``table`` a table of the keys in ``table``, ``tables`` a non-empty list of them, ``ignored``
#: any table (not read).
Kind = Literal["number", "integer", "boolean", "string", "strings", "vector", "matrix",
               "direction", "table", "tables", "ignored"]

#: Largest magnitude of any finite number in a model file (SI units): a length of 1e300 m is a
#: mistake, and squaring it overflows.
MAX_MAGNITUDE = 1e6


@dataclass(frozen=True)
class Key:
    """One key of a model-file table (or of a run configuration: :mod:`poise.controller.config`
    declares its keys with the same class).

    Attributes:
        kind: what the value is (:data:`Kind`).
        doc: what it means, with its unit (shown by editors).
        required: the file must give it.
        default: the value when absent, if it is a constant (``None``: required, or computed
            by the family from other keys, e.g. ``com = length / 2``; ``doc`` says how).
        gt, ge: lower bound (``> gt`` / ``>= ge``) of a number, integer or vector entries.
        le: upper bound (``<= le``) of the same. Run configurations use it; model files bound
            every number by :data:`MAX_MAGNITUDE` instead, and their validator
            (:class:`~poise.models.registry.Fields`) reads neither ``le`` nor ``boolean``.
        finite: ±inf (and ``null`` in vectors) refused.
        choices: allowed strings (``string``, ``direction``) or integers (``integer``); for a
            ``number`` (run configurations), words allowed instead of a number.
        size: fixed length of a vector.
        table: the keys of a ``table`` / each of ``tables``.
    """

    kind: Kind
    doc: str
    required: bool = False
    default: Any = None
    gt: float | None = None
    ge: float | None = None
    le: float | None = None
    finite: bool = True
    choices: tuple[Any, ...] = ()
    size: int | None = None
    table: Mapping[str, Key] | None = None


#: A table of a model file: key name → :class:`Key`, in documentation order.
Table = Mapping[str, Key]

#: Angles of ``zero_direction`` given by name [rad from +x].
DIRECTIONS = {"+x": 0.0, "up": math.pi / 2, "-x": math.pi, "down": -math.pi / 2}


def common_keys(family: str, *, name_default: str | None = None) -> dict[str, Key]:
    """Keys of every family's top level: ``family``, ``name``, ``description``, ``aliases``.

    Args:
        family: the value ``family`` must have.
        name_default: how the family names a file without ``name`` (``None``: required).
    """
    name = (Key("string", "model name (built-ins: the file stem)", required=True)
            if name_default is None else
            Key("string", f"model name (default: {name_default})"))
    return {
        "family": Key("string", "kinematic family: selects the model class", required=True,
                      choices=(family,)),
        "name": name,
        "description": Key("string", "free text", default=""),
        "aliases": Key("strings", "other names load_model accepts (built-in models only)",
                       default=[]),
    }


def limit_keys(unit: str) -> dict[str, Key]:
    """``q_min`` / ``q_max`` of one coordinate (absent: unlimited)."""
    return {
        "q_min": Key("number", f"lower joint limit [{unit}] (default: unlimited)",
                     default=-math.inf, finite=False),
        "q_max": Key("number", f"upper joint limit [{unit}], >= q_min (default: unlimited)",
                     default=math.inf, finite=False),
    }


#: Top-level keys of the planar families (``planar_tree``, ``planar_pcc``).
PLANAR_KEYS: dict[str, Key] = {
    "gravity": Key("number", "g [m/s²], acting along -y", default=9.81, ge=0),
    "base": Key("vector", "base position (x, y) [m]", default=[0.0, 0.0], size=2),
    "zero_direction": Key("direction", "direction of the first body / segment at q = 0: "
                          "a name or an angle from +x [rad]", default="+x",
                          choices=tuple(DIRECTIONS)),
}

#: ``[actuation]`` of the planar families.
ACTUATION_KEYS: dict[str, Key] = {
    "m": Key("integer", "number of actuators, 1 <= m <= n", required=True, ge=1),
    "C": Key("matrix", "n × n change of coordinates [qa; qu] = C q (invertible); rows :m are "
             "A, the actuator force is Aᵀ τ", required=True),
    "qa_min": Key("vector", "m lower actuator limits [m for tendons, rad for motors] "
                  "(null or -inf: unlimited; default: unlimited)", finite=False),
    "qa_max": Key("vector", "m upper actuator limits, >= qa_min (null or inf: unlimited; "
                  "default: unlimited)", finite=False),
}

#: Top-level keys the loader ignores (:data:`poise.models.registry.IGNORED_KEYS`): derived
#: quantities of ``poise model show --json``, the table ``poise calibrate`` adds, and the
#: ``$schema`` an editor may put into a JSON model file.
IGNORED: dict[str, Key] = {
    "derived": Key("ignored", "derived quantities written by `poise model show --json` "
                   "(ignored when loading)"),
    "calibration": Key("ignored", "parameters, uncertainties and provenance written by "
                       "`poise calibrate` (ignored by the model loader)"),
    "$schema": Key("string", "the JSON Schema of this file, for editors (ignored)"),
    "plant": Key("ignored", "the simulated robot's imperfections (friction, dead band, "
                 "tendons, hysteresis, sensors, delays; poise.sim.imperfections, "
                 "docs/simulator.md; ignored by the model loader)"),
}


__all__ = ["ACTUATION_KEYS", "DIRECTIONS", "IGNORED", "MAX_MAGNITUDE", "PLANAR_KEYS", "Key",
           "Kind", "Table", "common_keys", "limit_keys"]
