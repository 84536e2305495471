"""Parse and validate commands arriving on ``poise/<robot_id>/set/<name>``.

This is the edge check (JSON, types, shapes, ranges that need no controller state). What depends
on the controller's state (may we start now? is that algorithm loaded?) is decided by the
controller's ``submit``. Either way every command gets exactly one :class:`CommandResponse`.

Payload: ``{"id": "abc", "value": ...}`` (a ``target`` may add ``"stream": true`` and its
time ``"t"`` [s], :class:`~poise.api.bus.Command`); any other JSON value (or an object with
neither an ``"id"`` nor a ``"value"`` key, such as a bare ``gains`` object) is taken as a bare
value with an empty id. ``estop`` and ``clear`` accept an empty payload or ``{"id": "abc"}``
alone (answered with that id); any other command's ``{"id": ...}`` without a ``"value"`` is
refused, with its id.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from poise.api import rules
from poise.api.bus import Command, CommandResponse

#: Largest payload accepted [bytes].
MAX_PAYLOAD = 65_536
#: Commands that need no value: an empty payload, or ``{"id": ...}`` alone.
VALUELESS = ("estop", "clear")


@dataclass(frozen=True, slots=True)
class Limits:
    """What the edge check knows of the running controller (all optional).

    Attributes:
        task_dim: required length of a ``target`` (None: any non-empty length).
        algorithms: names accepted by ``algorithm`` (None: :data:`~poise.api.rules.
            ALGORITHMS`).
        rate: the loop rate [Hz] that bounds the gains (None: the highest rate).
        reach: the robot's reach [m] that bounds a target (None: 1e3).
    """

    task_dim: int | None = None
    algorithms: tuple[str, ...] | None = None
    rate: float | None = None
    reach: float | None = None

    @classmethod
    def from_params(cls, params: Mapping[str, Any] | None) -> Limits:
        """Limits read from a ``params`` dictionary (``task_dim``, ``algorithms``, ``rate``,
        ``reach``), if present."""
        if not params:
            return cls()
        task_dim = params.get("task_dim")
        algorithms = params.get("algorithms")

        def number(key: str) -> float | None:
            v = params.get(key)
            ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
            return float(v) if ok and v > 0 else None

        return cls(task_dim=int(task_dim) if isinstance(task_dim, int) else None,
                   algorithms=tuple(algorithms) if isinstance(algorithms, list | tuple) else None,
                   rate=number("rate"), reach=number("reach"))


class Refused(ValueError):
    """A command that fails the edge check; the message is the reason sent back."""


def validate(name: str, value: Any, limits: Limits = Limits()) -> Any:
    """Check ``value`` for command ``name`` by the rules every entry point shares
    (:mod:`poise.api.rules`) and return it normalised; raise :class:`Refused`."""
    try:
        if name not in rules.COMMAND_NAMES:
            raise Refused(f"unknown command {name!r}; known: {', '.join(rules.COMMAND_NAMES)}")
        if name == "target":
            return rules.check_target(value, limits.task_dim, limits.reach)
        if name == "gains":
            return rules.check_gains(value, limits.rate or rules.MAX_RATE)
        if name == "algorithm":
            return rules.check_choice(value, limits.algorithms or rules.ALGORITHMS, "algorithm")
        if name == "mode":
            return rules.check_choice(value, rules.MODES, "mode")
        if name == "run":
            return rules.check_choice(value, rules.RUN_VALUES, "run")
        if name == "reference":
            rules.check_reference(value, limits.task_dim, limits.reach)
            return value
        if name == "trajectory" and not isinstance(value, dict | list | str):
            raise Refused('trajectory: must be {"points": [{"t": s, "x": [...]}, ...]}, '
                          '{"t": [...], "x": [[...], ...]}, a list of [t, x0, ...] rows, '
                          'or "stop"')
    except rules.RuleError as exc:
        raise Refused(str(exc)) from None
    return value  # estop, clear: any value


def _stream_options(name: str, doc: Any) -> tuple[bool | None, float | None]:
    """A ``target`` payload's ``"stream"`` flag and ``"t"`` (the sender's time [s]) beside
    its ``"value"``; None where absent."""
    if name != "target" or not isinstance(doc, dict) or "value" not in doc:
        return None, None
    stream, stamp = doc.get("stream"), doc.get("t")
    if stream is not None and not isinstance(stream, bool):
        raise Refused(f"stream = {stream!r}: must be true or false")
    if stamp is not None:
        if isinstance(stamp, bool) or not isinstance(stamp, int | float) or \
                not math.isfinite(stamp):
            raise Refused(f"t = {stamp!r}: must be a finite number [s]")
        stamp = float(stamp)
    return stream, stamp


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
            if name in VALUELESS:
                return Command(name=name, value=None, id="", source=source)
            raise Refused("empty payload: send {\"id\": ..., \"value\": ...}")
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise Refused(f"malformed JSON: {exc}") from None
        if isinstance(doc, dict) and ("value" in doc or "id" in doc):
            raw_id = doc.get("id", "")
            if isinstance(raw_id, bool) or not isinstance(raw_id, str | int):
                raise Refused("id must be a string")
            ident = str(raw_id)[:128]
            if "value" not in doc and name not in VALUELESS:
                raise Refused('missing "value": send {"id": ..., "value": ...}')
            value = doc.get("value")
        else:
            value = doc
        stream, stamp = _stream_options(name, doc)
        return Command(name=name, value=validate(name, value, limits), id=ident, source=source,
                       stream=stream, t=stamp)
    except UnicodeDecodeError:
        return CommandResponse(id=ident, command=name, accepted=False,
                               reason="malformed JSON: payload is not UTF-8")
    except Refused as exc:
        return CommandResponse(id=ident, command=name, accepted=False, reason=str(exc))
