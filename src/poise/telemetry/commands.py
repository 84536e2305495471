"""Parse and validate commands arriving on ``poise/<robot_id>/set/<name>``.

This is the edge check (JSON, types, shapes, ranges that need no controller state). What depends
on the controller's state (may we start now? is that algorithm loaded?) is decided by the
controller's ``submit``. Either way every command gets exactly one :class:`CommandResponse`.

Payload: ``{"id": "abc", "value": ...}``; any other JSON value (or an object without a
``"value"`` key) is taken as a bare value with an empty id. ``estop`` and ``clear`` accept an empty
payload.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from poise.controller.bus import COMMAND_NAMES, Command, CommandResponse

#: Largest payload accepted [bytes].
MAX_PAYLOAD = 65_536

#: Keys accepted in a ``gains`` value: finite floats ≥ 0, and ``update`` (Algorithm 1's update
#: rule, a name the controller checks).
GAIN_KEYS = ("gamma", "gamma_z", "gamma_e", "damping", "update")

#: Upper bound on a gain (well beyond any sensible value; the controller may refuse lower ones).
MAX_GAIN = 1e6

#: Upper bound on |target component| [task units]: catches unit mistakes (mm for m).
MAX_TARGET = 1e3

MODES = ("ff", "fb")
RUN_VALUES = ("start", "stop")


@dataclass(frozen=True, slots=True)
class Limits:
    """What the edge check knows of the running controller (all optional).

    Attributes:
        task_dim: required length of a ``target`` (None: any non-empty length).
        algorithms: names accepted by ``algorithm`` (None: any short identifier).
    """

    task_dim: int | None = None
    algorithms: tuple[str, ...] | None = None

    @classmethod
    def from_params(cls, params: Mapping[str, Any] | None) -> Limits:
        """Limits read from a ``params`` dictionary (``task_dim``, ``algorithms``), if present."""
        if not params:
            return cls()
        task_dim = params.get("task_dim")
        algorithms = params.get("algorithms")
        return cls(task_dim=int(task_dim) if isinstance(task_dim, int) else None,
                   algorithms=tuple(algorithms) if isinstance(algorithms, list | tuple) else None)


class Refused(ValueError):
    """A command that fails the edge check; the message is the reason sent back."""


def _number(value: Any, what: str, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Refused(f"{what} must be a number, got {type(value).__name__}")
    x = float(value)
    if not math.isfinite(x):
        raise Refused(f"{what} must be finite, got {value!r}")
    if not lo <= x <= hi:
        raise Refused(f"{what} = {x:g} out of range [{lo:g}, {hi:g}]")
    return x


def validate(name: str, value: Any, limits: Limits = Limits()) -> Any:
    """Check ``value`` for command ``name`` and return it normalised; raise :class:`Refused`."""
    if name not in COMMAND_NAMES:
        raise Refused(f"unknown command {name!r}; known: {', '.join(COMMAND_NAMES)}")
    if name == "target":
        if isinstance(value, dict) and "x" in value:
            value = value["x"]
        if isinstance(value, int | float) and not isinstance(value, bool):
            value = [value]  # a bare number for a 1-D task
        if not isinstance(value, list | tuple) or not value:
            raise Refused("target must be a non-empty list of numbers")
        if limits.task_dim is not None and len(value) != limits.task_dim:
            raise Refused(f"target has {len(value)} components, the task has {limits.task_dim}")
        return [_number(v, f"target[{i}]", -MAX_TARGET, MAX_TARGET) for i, v in enumerate(value)]
    if name == "gains":
        if not isinstance(value, dict) or not value:
            raise Refused(f"gains must be an object with some of {', '.join(GAIN_KEYS)}")
        unknown = sorted(set(value) - set(GAIN_KEYS))
        if unknown:
            raise Refused(f"unknown gain {', '.join(unknown)}; known: {', '.join(GAIN_KEYS)}")
        out: dict[str, Any] = {}
        for k, v in value.items():
            if k == "update":
                if not isinstance(v, str) or not v or len(v) > 32:
                    raise Refused("update must be a name (e.g. \"dls\")")
                out[k] = v
            else:
                out[k] = _number(v, k, 0.0, MAX_GAIN)
        return out
    if name == "algorithm":
        if not isinstance(value, str) or not value or len(value) > 64:
            raise Refused("algorithm must be a non-empty name (at most 64 characters)")
        if limits.algorithms is not None and value not in limits.algorithms:
            raise Refused(f"unknown algorithm {value!r}; known: {', '.join(limits.algorithms)}")
        return value
    if name == "mode":
        if value not in MODES:
            raise Refused(f"mode must be one of {', '.join(MODES)}, got {value!r}")
        return value
    if name == "run":
        if value not in RUN_VALUES:
            raise Refused(f"run must be one of {', '.join(RUN_VALUES)}, got {value!r}")
        return value
    return value  # estop, clear: any value


def parse(name: str, payload: bytes, limits: Limits = Limits(),
          source: str = "mqtt") -> Command | CommandResponse:
    """Turn a ``set/<name>`` message into a validated :class:`Command`, or a refusal.

    Never raises: a bad message yields ``CommandResponse(accepted=False, reason=...)`` with the
    sender's id when it could be read.
    """
    ident = ""
    try:
        if len(payload) > MAX_PAYLOAD:
            raise Refused(f"payload of {len(payload)} bytes exceeds {MAX_PAYLOAD}")
        text = payload.decode("utf-8").strip()
        if not text:
            if name in ("estop", "clear"):
                return Command(name=name, value=None, id="", source=source)
            raise Refused("empty payload: send {\"id\": ..., \"value\": ...}")
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise Refused(f"malformed JSON: {exc}") from None
        if isinstance(doc, dict) and "value" in doc:
            raw_id = doc.get("id", "")
            if isinstance(raw_id, bool) or not isinstance(raw_id, str | int):
                raise Refused("id must be a string")
            ident = str(raw_id)[:128]
            value = doc["value"]
        else:
            value = doc
        return Command(name=name, value=validate(name, value, limits), id=ident, source=source)
    except UnicodeDecodeError:
        return CommandResponse(id=ident, command=name, accepted=False,
                               reason="malformed JSON: payload is not UTF-8")
    except Refused as exc:
        return CommandResponse(id=ident, command=name, accepted=False, reason=str(exc))
