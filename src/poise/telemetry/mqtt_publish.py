"""What the MQTT bridge publishes: telemetry batches, ``joint_states``/``task`` records, the
retained ``$state`` and ``params``, and the QoS-1 messages it owes (events, responses).

:class:`TelemetryPublisher` does one tick of the bridge's pump (:meth:`~TelemetryPublisher.
tick`): the events since the last tick (a ``$state`` for every state entered, however briefly),
``$state`` and ``params`` when they changed, the owed messages (:class:`Outbox`: each leaves
only once the broker acknowledged it, so a message lost with the connection is sent again), and
one columnar batch of the samples since the last tick (QoS 0). The session around it is
:class:`~poise.telemetry.mqtt.MqttBridge`'s.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiomqtt

from poise.api.bus import CycleSample, Event, SampleQueue
from poise.api.mqtt_config import MqttConfig
from poise.api.topics import Topics, dumps, encode_batch, state_dict
from poise.telemetry import commands as cmds
from poise.telemetry import records
from poise.telemetry.clock import ClockAnchor, Decimator

log = logging.getLogger("poise.telemetry.mqtt")

#: Owed QoS-1 messages published at once (aiomqtt warns past its pending-calls threshold,
#: which the bridge raises to this).
WINDOW = 64


@dataclass
class BridgeStats:
    """Counters of one bridge (read them from any thread; they only grow)."""

    connects: int = 0
    connect_failures: int = 0
    batches: int = 0
    samples_sent: int = 0
    samples_discarded: int = 0
    events: int = 0
    commands: int = 0
    accepted: int = 0
    refused: int = 0
    last_error: str = ""


def state_name(state: Any) -> str:
    """A controller state as a plain string (enums by value, else name, else ``str``)."""
    if isinstance(state, str):
        return str(state)  # a StrEnum's str() is its value
    value = getattr(state, "value", None)
    if isinstance(value, str):
        return value
    name = getattr(state, "name", None)
    return name.lower() if isinstance(name, str) else str(state)


def static_params(handler: Any) -> dict[str, Any]:
    """What a ``params`` message carries besides the live values, read off a controller-like
    object if it has it: model name, ``n``, ``m``, ``task_dim``, loop ``rate``, the
    algorithms it can run (``poise.api.rules.ALGORITHMS``)."""
    out: dict[str, Any] = {}
    model = getattr(handler, "model", None)
    for key in ("name", "n", "m", "task_dim"):
        value = getattr(model, key, None)
        if isinstance(value, str | int) and not isinstance(value, bool):
            out["model" if key == "name" else key] = value
    rate = getattr(getattr(getattr(handler, "config", None), "loop", None), "rate", None)
    if isinstance(rate, int | float):
        out["rate"] = float(rate)
    reach = getattr(handler, "reach", None)
    if isinstance(reach, int | float) and not isinstance(reach, bool):
        out["reach"] = float(reach)
    if out:
        with contextlib.suppress(ImportError):
            from poise.api.rules import ALGORITHMS

            out["algorithms"] = list(ALGORITHMS)
    return out


class Outbox:
    """Owed QoS-1 messages (responses, events), in order: each is removed only once the broker
    has acknowledged it (at least once)."""

    def __init__(self) -> None:
        self._owed: collections.deque[tuple[str, bytes]] = collections.deque(maxlen=100_000)
        self._lock: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Set (on the bridge's event loop) when something is owed (:meth:`wait_owed`).
        self._pending: asyncio.Event | None = None

    def append(self, topic: str, payload: bytes) -> None:
        """Owe ``payload`` on ``topic`` (any thread); the bridge's pump is woken for it."""
        self._owed.append((topic, payload))
        self.wake()

    def wake(self) -> None:
        """End a :meth:`wait_owed` now (any thread)."""
        loop, pending = self._loop, self._pending
        if loop is not None and pending is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed: the next one flushes
                loop.call_soon_threadsafe(pending.set)

    def bind(self) -> None:
        """Make the lock of :meth:`flush` and the event of :meth:`wait_owed` on the running
        event loop (the bridge's)."""
        self._lock = asyncio.Lock()
        self._pending = asyncio.Event()
        self._loop = asyncio.get_running_loop()

    async def wait_owed(self, timeout: float, stop: Callable[[], bool] = lambda: False
                        ) -> bool:
        """Wait up to ``timeout`` s until something is owed or ``stop()`` holds (checked
        when :meth:`wake` is called); whether something is owed and no stop was asked."""
        pending = self._pending
        assert pending is not None
        end = time.monotonic() + timeout
        while not self._owed and not stop():
            pending.clear()
            if self._owed:  # owed between the check and the clear (its wake-up then follows)
                break
            remaining = end - time.monotonic()
            if remaining <= 0:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(pending.wait(), remaining)
        return bool(self._owed) and not stop()

    async def flush(self, client: aiomqtt.Client,
                    before: Callable[[], Awaitable[None]] | None = None) -> None:
        """Publish owed QoS-1 messages in order, up to :data:`WINDOW` in flight; each leaves
        the queue once acknowledged (a message lost with the connection is sent again).
        ``before`` is awaited before each window leaves (the publisher's states: what the
        controller entered meanwhile goes out ahead of the answers owed since)."""
        assert self._lock is not None
        async with self._lock:
            while self._owed:
                if before is not None:
                    await before()
                window = [self._owed.popleft() for _ in range(min(WINDOW, len(self._owed)))]
                results = await asyncio.gather(
                    *(client.publish(topic, payload, qos=1, timeout=5)
                      for topic, payload in window), return_exceptions=True)
                # the acknowledged ones are done; the others go back, in order, at the front
                failed = [(m, r) for m, r in zip(window, results, strict=True)
                          if isinstance(r, BaseException)]
                if failed:
                    self._owed.extendleft(reversed([m for m, _ in failed]))
                    raise failed[0][1]


class TelemetryPublisher:
    """Publishes one controller's telemetry and status (see the module docstring).

    Args:
        handler: the controller (``state``; optionally ``params``, ``reason``,
            ``target_status``, ``target_note``).
        samples, events: its sample and event queues, or None.
        config: the bridge's (``rate_hz``, ``max_batch``, ``joint_states_hz``, ``url``).
        topics: the robot's topics.
        stats: the bridge's counters.
        outbox: where events are owed (responses too, by the command intake).
        params: returns the live parameters (default: ``handler.params``).
        device: what drives the loop, for ``$state``.
        joint_names: the ``name`` s of ``joint_states`` (default ``q1 … qn``).

    Attributes:
        params_dirty: ``params`` is to be republished at the next tick (any thread may set it).
        limits: the command limits of the last ``params`` published (the intake parses by
            them).
    """

    def __init__(self, handler: Any, samples: SampleQueue[CycleSample] | None,
                 events: SampleQueue[Event] | None, config: MqttConfig, topics: Topics,
                 stats: BridgeStats, outbox: Outbox, *,
                 params: Callable[[], Mapping[str, Any]] | None = None, device: str = "",
                 joint_names: list[str] | None = None) -> None:
        self.handler = handler
        self.samples = samples
        self.events = events
        self.config = config
        self.topics = topics
        self.stats = stats
        self.outbox = outbox
        self.device = device
        self.params_dirty = True
        self.limits = cmds.Limits()
        self._params_fn = params
        self._last_state: str | None = None
        self._state_reason = "started"
        self._static = static_params(handler)
        self._joint_names = joint_names
        self._anchor = ClockAnchor.now()
        self._records = Decimator(config.joint_states_hz) if config.joint_states_hz > 0 else None

    def new_session(self) -> None:
        """A new connection: stale telemetry discarded, ``$state`` and ``params`` due again."""
        if self.samples is not None:
            self.stats.samples_discarded += len(self.samples.drain())
        self._last_state = None
        self.params_dirty = True

    def state_payload(self, state: str, reason: str, target: str = "") -> dict[str, Any]:
        """The ``$state`` message of ``state``."""
        return state_dict(state, reason, t=time.time(), device=self.device,
                          broker=self.config.url, target=target)

    async def tick(self, client: aiomqtt.Client) -> None:
        """Events, $state, params, owed messages (:meth:`owed`), one telemetry batch."""
        await self.owed(client)
        if self.samples is not None:
            batch = self.samples.drain()
            if batch:
                if len(batch) > self.config.max_batch:
                    self.stats.samples_discarded += len(batch) - self.config.max_batch
                    batch = batch[-self.config.max_batch:]
                dropped = self.samples.dropped + self.stats.samples_discarded
                await client.publish(self.topics.telemetry, encode_batch(batch, dropped), qos=0)
                self.stats.batches += 1
                self.stats.samples_sent += len(batch)
                if self._records is not None:
                    await self._publish_records(client, batch)

    async def owed(self, client: aiomqtt.Client) -> None:
        """The events since the last call, ``$state`` and ``params`` if they changed, then
        the owed messages, in that order: a command's answer never arrives before the
        ``$state`` it brought about. The pump calls it between its ticks as soon as an answer
        is owed (:meth:`Outbox.wait_owed`), not only at the telemetry's rate.

        The events are drained again before each window of owed messages leaves: publishing
        a ``$state`` waits for the broker, and what the controller entered meanwhile must go
        out before the answers owed meanwhile. (Stalled there, a flood holding the bridge's
        event loop, the bridge sent the e-stop's refusals of older commands first and its
        ``$state`` ``estop`` only at the next call, while the ``running`` it had been
        publishing, retained, replaced the e-stop connection's ``estop``: a dashboard that
        connected after the refusals found ``running``.)"""
        await self._states(client)
        await self.outbox.flush(client, before=lambda: self._states(client))

    async def _states(self, client: aiomqtt.Client) -> None:
        """The events since the last call (a ``$state`` for each state entered), then
        ``$state`` and ``params`` if they changed."""
        if self.events is not None:
            for event in self.events.drain():
                self.stats.events += 1
                self.outbox.append(self.topics.events, dumps(event.as_dict()))
                if event.kind == "state":
                    self._state_reason = str(event.data.get("cause", ""))
                    await self._publish_transition(client, event)
                elif event.kind == "param":
                    self.params_dirty = True
        await self.publish_status(client)

    async def publish_status(self, client: aiomqtt.Client) -> None:
        """Republish the retained ``$state`` and ``params`` if they changed."""
        state = state_name(self.handler.state)
        target = getattr(self.handler, "target_status", "")
        target = target if isinstance(target, str) else ""
        key = f"{state}/{target}"
        if key != self._last_state:
            reason = self._reason()
            note = getattr(self.handler, "target_note", "")
            if target in ("unreachable", "clamped") and isinstance(note, str) and note and \
                    state not in ("fault", "estop"):
                reason = note  # why it is not where it was sent
            await client.publish(self.topics.state,
                                 dumps(self.state_payload(state, reason, target)),
                                 qos=1, retain=True, timeout=5)
            self._last_state = key
        if self.params_dirty:
            self.params_dirty = False
            params = self._params()
            if params is not None:
                self.limits = cmds.Limits.from_params(params)
                await client.publish(self.topics.params, dumps(params), qos=1, retain=True,
                                     timeout=5)

    def _params(self) -> dict[str, Any] | None:
        """Live parameters (from ``params`` or the handler), over the static description."""
        source: Any = self._params_fn or getattr(self.handler, "params", None)
        try:
            if callable(source) and not hasattr(source, "as_dict"):
                source = source()
            if hasattr(source, "as_dict"):
                source = source.as_dict()
            live = dict(source) if source is not None else {}
        except Exception as exc:  # a failing provider must not stop telemetry
            log.warning("params provider failed: %s", exc)
            return None
        if not live and not self._static:
            return None
        return {**self._static, **live}

    def _reason(self) -> str:
        """Why the handler is in its state: its own ``reason`` if it has one, else the cause
        of the last state event."""
        reason = getattr(self.handler, "reason", None)
        return reason if isinstance(reason, str) and reason else self._state_reason

    async def _publish_records(self, client: aiomqtt.Client, batch: list[CycleSample]) -> None:
        """One ``joint_states`` and one ``task`` message per decimated cycle of ``batch``."""
        assert self._records is not None
        for s in batch:
            if not self._records.due(s.t):
                continue
            stamp = self._anchor.unix_ns(s.t)
            names = records.joint_names(self._joint_names, len(s.q))
            await client.publish(self.topics.joint_states,
                                 dumps(records.joint_state(s, stamp, names)), qos=0)
            await client.publish(self.topics.task, dumps(records.task_record(s, stamp)), qos=0)

    async def _publish_transition(self, client: aiomqtt.Client, event: Event) -> None:
        """``$state`` for one state change, so that every state entered is seen, however
        briefly it lasted (an ``estop`` cleared between two ticks); the current state
        follows in :meth:`publish_status` if it differs.

        Retained only if it is still the handler's state: a state already left is news for
        those listening, not what a dashboard that connects later must find. (The e-stop's
        own connection publishes ``estop`` retained at once; a backlog of older transitions
        published after it, retained, told a dashboard connecting meanwhile ``ready``.)"""
        state = str(event.data.get("to", ""))
        key = f"{state}/"
        if state and key != self._last_state:
            current = state == state_name(self.handler.state)
            await client.publish(self.topics.state, dumps(self.state_payload(
                state, self._state_reason)), qos=1, retain=current, timeout=5)
            self._last_state = key


__all__ = ["WINDOW", "BridgeStats", "Outbox", "TelemetryPublisher", "state_name",
           "static_params"]
