"""Replay a logged run to MQTT on the live topics, so the dashboard shows it as if it ran now.

The replay feeds the recorded cycles and events, paced by their own timestamps (÷ ``speed``),
into the same :class:`~poise.telemetry.mqtt.MqttBridge` a live run uses: ``$state`` (with
``device = "replay:<file>"``), ``params``, ``model``, ``telemetry`` and ``events`` look exactly as
they did. Commands are answered, and refused: a recording cannot be steered.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from poise.api.bus import Command, CommandResponse, CycleSample, Event, SampleQueue
from poise.telemetry.mqtt import MqttBridge, MqttConfig
from poise.telemetry.reader import LogContents

_FIELDS = CycleSample.__dataclass_fields__


def sample_from_row(row: dict[str, Any]) -> CycleSample:
    """Rebuild a :class:`CycleSample` from a joined log row (``None`` → NaN)."""
    kw: dict[str, Any] = {}
    for name in _FIELDS:
        v = row.get(name)
        if name in ("seq",):
            kw[name] = int(v)
        elif name == "state":
            kw[name] = str(v or "")
        elif isinstance(v, list):
            kw[name] = tuple(math.nan if x is None else float(x) for x in v)
        elif v is None:
            kw[name] = () if name == "tau_ff" else math.nan
        else:
            kw[name] = float(v)
    return CycleSample(**kw)


class ReplayHandler:
    """The command handler of a replay: state and params follow the log; commands refused."""

    def __init__(self, params: dict[str, Any] | None = None, state: str = "idle") -> None:
        self.state = state
        self._params = dict(params or {})

    def params(self) -> dict[str, Any]:
        return dict(self._params)

    def update_params(self, data: dict[str, Any]) -> None:
        full = data.get("params")
        self._params = dict(full) if isinstance(full, dict) else {**self._params, **data}

    def submit(self, command: Command) -> CommandResponse:
        return CommandResponse(command.id, command.name, False,
                               "replay: this is a recorded run; commands are not accepted")


def timeline(contents: LogContents) -> Iterator[tuple[float, str, Any]]:
    """``(t, kind, item)`` in time order: ``("sample", CycleSample)``, ``("state", msg)``,
    ``("params", msg)``, ``("event", msg)``."""
    items: list[tuple[float, int, str, Any]] = []
    for i, row in enumerate(contents.samples()):
        items.append((row["t"], i, "sample", row))
    for kind, topic in (("state", "/state"), ("params", "/params"), ("event", "/events")):
        for i, m in enumerate(contents.topic(topic)):
            if kind == "params" and m.get("kind") == "initial":
                continue  # applied before the replay starts, whenever it was recorded
            items.append((m["t"], i, kind, m))
    items.sort(key=lambda x: (x[0], x[1]))
    for t, _, kind, item in items:
        yield t, kind, (sample_from_row(item) if kind == "sample" else item)


def replay(contents: LogContents, config: MqttConfig, *, speed: float = 1.0,
           stop: threading.Event | None = None,
           progress: Callable[[float, float], None] | None = None) -> dict[str, Any]:
    """Publish ``contents`` on ``config``'s broker as robot ``config.robot_id``; returns counts.

    Args:
        speed: playback speed (2 = twice as fast).
        stop: set it to end early.
        progress: called about once a second with (log seconds played, total).
    """
    if speed <= 0:
        raise ValueError(f"speed {speed} must be > 0")
    stop = stop or threading.Event()
    items = list(timeline(contents))
    if not items:
        raise ValueError(f"{contents.path}: nothing to replay")
    initial = next((m["data"] for m in contents.topic("/params") if m["kind"] == "initial"), {})
    first_state = next((m["from"] for m in contents.topic("/state")), None)
    has_states = first_state is not None
    first_sample = next((it for _, k, it in items if k == "sample"), None)
    handler = ReplayHandler(initial, first_state or (first_sample.state if first_sample else
                                                     "idle"))
    samples: SampleQueue[CycleSample] = SampleQueue(100_000)
    events: SampleQueue[Event] = SampleQueue(100_000)
    model = contents.metadata.get("model")
    name = contents.path.rsplit("/", 1)[-1]
    bridge = MqttBridge(handler, samples, events, config, model=model, device=f"replay:{name}")
    counts = {"samples": 0, "events": 0, "duration_s": items[-1][0] - items[0][0]}
    with bridge:
        bridge.wait_connected(10)
        t_log0, t_wall0 = items[0][0], time.monotonic()
        last_progress = t_wall0
        for t, kind, item in items:
            due = t_wall0 + (t - t_log0) / speed
            delay = due - time.monotonic()
            if delay > 0 and stop.wait(delay):
                break
            if stop.is_set():
                break
            if kind == "sample":
                samples.put(item)
                if not has_states:  # no transitions recorded: follow the samples
                    handler.state = item.state or handler.state
                counts["samples"] += 1
                continue
            if kind == "state":
                handler.state = item["to"]
                ev = Event(t, "state", {"from": item["from"], "to": item["to"],
                                        "cause": item["cause"]})
            elif kind == "params":
                handler.update_params(item["data"])
                ev = Event(t, "param", item["data"])
            else:
                ev = Event(t, item["kind"], item["data"])
            events.put(ev)
            counts["events"] += 1
            if progress is not None and time.monotonic() - last_progress >= 1.0:
                last_progress = time.monotonic()
                progress(t - t_log0, counts["duration_s"])
        time.sleep(3.0 / config.rate_hz)  # let the last batch go out
    counts["batches"] = bridge.stats.batches
    counts["connected"] = bridge.stats.connects > 0
    return counts
