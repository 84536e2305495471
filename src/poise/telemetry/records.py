"""One record per sample, for tools that read one MQTT message as one sample.

PlotJuggler's MQTT plugin and the MQTT ↔ ROS 2 bridges read each JSON message as a single
sample, so the columnar ``telemetry`` batches look like one point to them. With
``joint_states_hz`` set, :class:`~poise.telemetry.mqtt.MqttBridge` also publishes, for a
decimated subset of the cycles (at most ``joint_states_hz`` per second of cycle time), one
message per cycle on two topics (QoS 0):

``poise/<id>/joint_states`` — shaped exactly like ``sensor_msgs/msg/JointState``::

    {"header": {"stamp": {"sec": 1796..., "nanosec": 123456789}, "frame_id": "poise_base"},
     "name": ["link1", "link2"], "position": [0.31, -0.12], "velocity": [], "effort": []}

``position`` is the measured configuration ``q`` [rad / model units]. ``velocity`` and
``effort`` are empty (allowed by the message: "either empty or the same size as name"): the
controller measures neither per joint (its efforts are per actuator). No other keys, so
bridges that map JSON fields onto the ROS message strictly accept it.

``poise/<id>/task`` — the task-space record of the same cycle::

    {"header": {...same stamp...}, "timestamp": 1796....123, "seq": 1234, "t": 5321.004,
     "state": "running", "target": [0.5], "x": [0.49], "error": [0.01],
     "task_error": 0.01, "statics_residual": 3e-9, "q_bar": [0.30, -0.11]}

``timestamp`` is the same Unix time in seconds (PlotJuggler's "use field [timestamp]"), ``t`` the
host monotonic time of the cycle [s], ``error`` = ``target − x`` [task units], ``task_error`` its
norm. ``header.stamp`` is Unix time, from the host monotonic ``t`` through a
:class:`~poise.telemetry.clock.ClockAnchor` read when the bridge started.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from poise.api.bus import CycleSample
from poise.telemetry.clock import split_ns

#: ``header.frame_id`` of both records (the frame the Foxglove scene draws the arm in).
FRAME_ID = "poise_base"


def joint_names(names: Sequence[str] | None, n: int) -> list[str]:
    """``names`` if there is one per coordinate, else ``q1 … qn`` (the dashboard's labels)."""
    if names is not None and len(names) == n:
        return [str(v) for v in names]
    return [f"q{i + 1}" for i in range(n)]


def header(stamp_ns: int, frame_id: str = FRAME_ID) -> dict[str, Any]:
    """``std_msgs/Header``: ``stamp`` {sec, nanosec} (Unix) and ``frame_id``."""
    sec, nanosec = split_ns(stamp_ns)
    return {"stamp": {"sec": sec, "nanosec": nanosec}, "frame_id": frame_id}


def joint_state(s: CycleSample, stamp_ns: int, names: Sequence[str]) -> dict[str, Any]:
    """The ``sensor_msgs/JointState`` of cycle ``s`` (``names``: one per coordinate)."""
    return {"header": header(stamp_ns), "name": list(names), "position": list(s.q),
            "velocity": [], "effort": []}


def task_record(s: CycleSample, stamp_ns: int) -> dict[str, Any]:
    """The task-space record of cycle ``s``."""
    error = [a - b for a, b in zip(s.target, s.x, strict=True)] \
        if len(s.target) == len(s.x) else []
    return {"header": header(stamp_ns), "timestamp": stamp_ns / 1e9, "seq": s.seq, "t": s.t,
            "state": s.state, "target": list(s.target), "x": list(s.x),
            "error": [v if math.isfinite(v) else None for v in error],
            "task_error": s.task_error, "statics_residual": s.statics_residual,
            "q_bar": list(s.q_bar)}
