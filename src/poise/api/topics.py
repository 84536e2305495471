"""The MQTT topic contract (``docs/mqtt.md``): topic names and JSON payload encoders.

Everything lives under ``poise/<robot_id>/``:

=====================  ======  ========  ================================================
topic                  QoS     retained  payload
=====================  ======  ========  ================================================
``$state``             1       yes       ``{"state", "reason", "t", "device", "broker"}``;
                                         last will ``{"state": "lost"}``
``telemetry``          0       no        columnar batch of every sample since the last
``joint_states``       0       no        one cycle as ``sensor_msgs/JointState`` (optional,
                                         decimated; :mod:`poise.telemetry.records`)
``task``               0       no        the same cycle's task-space record (optional)
``params``             1       yes       the current live parameters
``model``              1       yes       ``model.describe()``
``set/<name>``         (in)              ``{"id": "...", "value": ...}`` or a bare value
``response``           1       no        ``CommandResponse.as_dict()``
``events``             1       no        ``Event.as_dict()``
=====================  ======  ========  ================================================

The encoders here are pure functions (no I/O) shared by the live bridge and ``poise log replay``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from poise.api.bus import COMMAND_NAMES, CycleSample

#: Root of every topic.
PREFIX = "poise"

#: Robot ids become one topic level: no separator, wildcards, control characters or ``$`` prefix.
_ROBOT_ID = re.compile(r"^(?!\$)[^/+#\x00-\x1f\x7f]{1,64}$")

#: CycleSample fields that go into a telemetry batch, in this order (``seq`` becomes ``seq0``).
BATCH_FIELDS = ("t", "q", "q_bar", "qa_ref", "target", "x", "task_error", "statics_residual",
                "latency_us", "lateness_us", "compute_us")

#: Payload of the last will on ``$state``.
LOST = {"state": "lost"}


def check_robot_id(robot_id: str) -> str:
    """Return ``robot_id`` if it is a valid single topic level, else raise ``ValueError``."""
    if not isinstance(robot_id, str) or not _ROBOT_ID.match(robot_id):
        raise ValueError(f"robot id {robot_id!r}: must be 1-64 characters without '/', '+', "
                         "'#' or control characters, not starting with '$'")
    return robot_id


class Topics:
    """Topic names of one robot: ``Topics("arm1").telemetry == "poise/arm1/telemetry"``."""

    def __init__(self, robot_id: str, prefix: str = PREFIX) -> None:
        self.robot_id = check_robot_id(robot_id)
        self.base = f"{prefix}/{robot_id}"
        self.state = f"{self.base}/$state"
        self.telemetry = f"{self.base}/telemetry"
        self.joint_states = f"{self.base}/joint_states"
        self.task = f"{self.base}/task"
        self.params = f"{self.base}/params"
        self.model = f"{self.base}/model"
        self.response = f"{self.base}/response"
        self.events = f"{self.base}/events"
        self.set_prefix = f"{self.base}/set/"
        self.set_filter = f"{self.base}/set/#"

    def set(self, name: str) -> str:
        """Command topic for ``name`` (one of ``COMMAND_NAMES``)."""
        return self.set_prefix + name

    def command_name(self, topic: str) -> str | None:
        """The command name of a ``set/<name>`` topic, or None for any other topic."""
        if topic.startswith(self.set_prefix):
            return topic[len(self.set_prefix):]
        return None


def topic(robot_id: str, leaf: str) -> str:
    """``poise/<robot_id>/<leaf>``."""
    return f"{PREFIX}/{robot_id}/{leaf}"


def split_topic(name: str) -> tuple[str, str] | None:
    """``poise/<robot_id>/<leaf...>`` → ``(robot_id, leaf)``; None for foreign topics."""
    parts = name.split("/", 2)
    if len(parts) != 3 or parts[0] != PREFIX or not parts[1]:
        return None
    return parts[1], parts[2]


def command_topic(robot_id: str, name: str) -> str:
    """``poise/<robot_id>/set/<name>``; raises ValueError for an unknown command."""
    if name not in COMMAND_NAMES:
        raise ValueError(f"unknown command {name!r}; one of {', '.join(COMMAND_NAMES)}")
    return Topics(robot_id).set(name)


def decode(payload: bytes) -> Any:
    """JSON payload → Python object; None if it is not valid JSON (counted by the caller)."""
    try:
        return json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        return None


def _finite(value: Any) -> Any:
    """Replace NaN/±inf (not valid JSON) by None, recursively."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def dumps(obj: Any) -> bytes:
    """Compact strict JSON (NaN and infinities become ``null``), UTF-8 encoded."""
    try:
        text = json.dumps(obj, separators=(",", ":"), allow_nan=False)
    except ValueError:
        text = json.dumps(_finite(obj), separators=(",", ":"), allow_nan=False)
    return text.encode()


def batch_dict(samples: Sequence[CycleSample], dropped: int) -> dict[str, Any]:
    """Columnar telemetry batch of ``samples`` (oldest first, non-empty).

    ``seq0`` is the first sample's sequence number and ``n`` the count; the arrays are the
    :data:`BATCH_FIELDS` of every sample in order; ``dropped`` is the running total of samples
    that never reached MQTT; ``state`` is the last sample's state. Sample ``i`` has sequence
    number ``seq0 + i``; should the producer's numbering skip inside a batch, an extra ``seq``
    array carries every number.
    """
    out: dict[str, Any] = {"seq0": samples[0].seq, "n": len(samples), "dropped": int(dropped)}
    for name in BATCH_FIELDS:
        out[name] = [getattr(s, name) for s in samples]
    if samples[-1].seq - samples[0].seq != len(samples) - 1:
        out["seq"] = [s.seq for s in samples]  # only when the batch is not contiguous
    out["state"] = samples[-1].state
    return out


def encode_batch(samples: Sequence[CycleSample], dropped: int) -> bytes:
    """JSON bytes of :func:`batch_dict`."""
    return dumps(batch_dict(samples, dropped))


def state_dict(state: str, reason: str = "", *, t: float, device: str = "",
               broker: str = "", target: str = "") -> dict[str, Any]:
    """Payload of the retained ``$state`` topic (``t`` in Unix seconds; ``target``:
    ``reachable``, ``unreachable`` or ``""`` when the controller does not say)."""
    return {"state": state, "reason": reason, "t": t, "device": device, "broker": broker,
            "target": target}


def samples_from_batch(batch: Mapping[str, Any]) -> Iterable[dict[str, Any]]:
    """Rows of a decoded telemetry batch (inverse of :func:`batch_dict`, for subscribers)."""
    n = int(batch["n"])
    seqs = batch.get("seq") or range(int(batch["seq0"]), int(batch["seq0"]) + n)
    for i in range(n):
        row = {"seq": seqs[i]}
        for name in BATCH_FIELDS:
            row[name] = batch[name][i]
        yield row
