"""MQTT bridge: telemetry out, commands in, off the control thread (aiomqtt 2.x).

:class:`MqttBridge` runs its own asyncio loop in its own thread. Every ``1/rate_hz`` seconds
(≤ 100 messages/s) it drains the controller's :class:`SampleQueue` and publishes one columnar
batch of all samples since the last on ``telemetry`` (QoS 0) — and, with ``joint_states_hz``,
one record per decimated cycle on ``joint_states`` and ``task`` (:mod:`poise.telemetry.records`,
for PlotJuggler and ROS 2 bridges); it republishes ``$state`` and
``params`` (retained) when they change and forwards events (QoS 1). Commands arriving on
``set/<name>`` are parsed and checked (:mod:`poise.telemetry.commands`) as they arrive — an
e-stop comes on a second connection of its own, so it is never behind a flood of commands in
one socket, and a stop overtakes every message still waiting in the receive queue — and posted
to the handler's :class:`~poise.controller.dispatch.CommandDispatcher` (``handler.post``, or one
the bridge builds around ``handler.submit``): the e-stop and stop act at once, the rest are
coalesced and applied in order in its worker thread, so nothing slow ever sits on the receive
path. Each command is answered exactly once on ``response`` (QoS 1).

Losing the broker never reaches the control loop: the loop only ever ``put`` s into bounded
drop-oldest queues. The bridge reconnects with exponential backoff (0.2 s … 5 s), resubscribes,
republishes the retained topics, discards telemetry that went stale while disconnected (counted
in ``dropped``), and sends responses and events still owed (they stay queued until the broker
acknowledges them). A command is therefore either answered, or — if the broker was down — never
received; commands received but not yet handled when the connection drops are answered "send it
again", and when the service stops, "service stopping". Retained messages on ``set/…`` are
refused, never executed: a stale retained command must not move the arm at every reconnect.

The command handler is duck-typed: anything with ``submit(Command) -> CommandResponse``
(thread-safe) and a ``state`` attribute (a string, or an enum whose ``value``/``name`` is one);
optionally ``post(Command, reply)``, ``params()`` (or a ``params`` mapping) for the live
parameters, and ``target_status`` (published in ``$state``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import random
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

import aiomqtt
from paho.mqtt.subscribeoptions import SubscribeOptions

from poise.api.bus import (
    ESTOP_CANCELLED,
    Command,
    CommandResponse,
    CycleSample,
    Event,
    SampleQueue,
)
from poise.api.mqtt_config import MqttConfig, connect_refusal, unsupported_protocol
from poise.api.topics import LOST, Topics, dumps, encode_batch, state_dict
from poise.controller.dispatch import CommandDispatcher
from poise.telemetry import commands as cmds
from poise.telemetry import records
from poise.telemetry.clock import ClockAnchor, Decimator
from poise.telemetry.fence import EstopFence
from poise.telemetry.mqtt_client import mqtt_client
from poise.telemetry.urgent import (
    CONNECT_GRACE,
    URGENT_TOPICS,
    UrgentListener,
    collect_abandoned_clients,
    parse_message,
    serve_in_process,
    state_payload,
)

log = logging.getLogger(__name__)

#: Longest another thread of this process holds the GIL while the bridge's threads wait for it,
#: as long as a bridge runs (``sys.setswitchinterval``; Python's default is 5 ms): an e-stop
#: served here takes several turns of the GIL on its way to the device, and the command thread
#: must read a flood as fast as the broker delivers it (Mosquitto drops what queues beyond
#: ``max_queued_messages``, 1,000 by default: with 5 ms turns beside the target planner, ~10 %
#: of a 2,000-command flood was lost) [s].
URGENT_SWITCH_INTERVAL = 5e-4
#: Owed QoS-1 messages published at once (aiomqtt warns past its pending-calls threshold,
#: which the bridge raises to this).
WINDOW = 64


class CommandHandler(Protocol):
    """What the bridge needs of a controller."""

    state: Any

    def submit(self, command: Command) -> CommandResponse: ...


def state_name(state: Any) -> str:
    """A controller state as a plain string (enums by value, else name, else ``str``)."""
    if isinstance(state, str):
        return str(state)  # a StrEnum's str() is its value
    value = getattr(state, "value", None)
    if isinstance(value, str):
        return value
    name = getattr(state, "name", None)
    return name.lower() if isinstance(name, str) else str(state)


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


def static_params(handler: Any) -> dict[str, Any]:
    """What a ``params`` message carries besides the live values, read off a controller-like
    object if it has it: model name, ``n``, ``m``, ``task_dim``, loop ``rate``, the
    algorithms it can run (``poise.controller.config.ALGORITHMS``)."""
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


class MqttBridge:
    """Publish a controller's telemetry and serve its commands over MQTT, in its own thread.

    Args:
        handler: the command handler (``submit``, ``state``; optionally ``params``).
        samples: the handler's sample queue (``controller.subscribe()``), or None.
        events: the handler's event queue (``controller.events()``), or None.
        config: broker, robot id, rate.
        params: returns the live parameters (defaults to ``handler.params``).
        model: the robot description published retained on ``model`` (``model.describe()``).
        device: what drives the loop, for ``$state`` (``/dev/ttyACM0``, ``sim:planar3``).
        joint_names: the ``name`` s of ``joint_states`` (one per coordinate; default
            ``q1 … qn``).
        urgent_priority: ``SCHED_FIFO`` priority of the e-stop thread where the OS grants
            it (the controller's ``loop.priority``; 0: the normal scheduler).

    Use ``start()`` / ``stop()`` or a ``with`` block. ``connected`` is a ``threading.Event``.
    """

    def __init__(self, handler: CommandHandler, samples: SampleQueue[CycleSample] | None = None,
                 events: SampleQueue[Event] | None = None, config: MqttConfig | None = None, *,
                 params: Callable[[], Mapping[str, Any]] | None = None,
                 model: Mapping[str, Any] | None = None, device: str = "",
                 joint_names: list[str] | None = None, urgent_priority: int = 0) -> None:
        self.handler = handler
        self.urgent_priority = urgent_priority
        self.samples = samples
        self.events = events
        self.config = config or MqttConfig()
        self.topics = Topics(self.config.robot_id)
        self._params_fn = params
        self.model = dict(model) if model is not None else None
        self.device = device
        self.stats = BridgeStats()
        self.connected = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._started = threading.Event()
        # Commands go to the handler's dispatcher, or to one of our own around its submit.
        post = getattr(handler, "post", None)
        self._own_dispatcher = None if callable(post) else CommandDispatcher(handler.submit)
        self._post = post if callable(post) else self._own_dispatcher.post  # type: ignore[union-attr]
        self._rx: _ReceiveQueue | None = None
        # commands still on their way when an e-stop latches are void (poise.telemetry.fence)
        self._fence = EstopFence(lambda: getattr(handler, "estops", None))
        self._fence_topic = f"{self.topics.base}/$fence/{uuid.uuid4().hex[:12]}"
        self._client: aiomqtt.Client | None = None
        # MQTT 5 (the retain flag of live publishes is seen) unless the broker refuses it
        # (None: not known yet, asked at the first connect)
        self._v5: bool | None = {"5": True, "3.1.1": False}.get(self.config.protocol)
        #: Why the broker refused this bridge's connection ("": it did not), e.g. bad
        #: credentials: ``poise run`` does not arm without its command channel.
        self.refused = ""
        # e-stops come on a connection and a thread of their own (in the real-time process
        # when there is one): never behind a flood of other commands (see start)
        self._urgent: Any = None
        # Owed QoS-1 messages (responses, events): removed only once the broker has them.
        self._owed: collections.deque[tuple[str, bytes]] = collections.deque(maxlen=100_000)
        self._owed_lock: asyncio.Lock | None = None
        self._params_dirty = True
        self._last_state: str | None = None
        self._state_reason = "started"
        self._limits = cmds.Limits()
        self._static = static_params(handler)
        self._joint_names = joint_names
        self._anchor = ClockAnchor.now()
        self._records = Decimator(self.config.joint_states_hz) \
            if self.config.joint_states_hz > 0 else None

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> MqttBridge:
        """Start the bridge thread (returns at once; see ``connected``)."""
        if self._thread is not None:
            return self
        self._thread = threading.Thread(target=self._thread_main, name="poise-mqtt", daemon=True)
        # no other thread of this process holds the GIL long while a command or an e-stop
        # waits for it (the command thread must keep up with a flood: the broker drops what
        # it cannot deliver)
        self._switch = sys.getswitchinterval()
        sys.setswitchinterval(min(self._switch, URGENT_SWITCH_INTERVAL))
        self._thread.start()
        self._urgent = self._start_urgent()
        self._started.wait(5)
        return self

    def _start_urgent(self) -> Any:
        """The e-stop's listener: in the handler's real-time process if it serves one there
        (``serve_urgent(config, priority, on_answer, starter=…)``: it runs
        :func:`~poise.telemetry.urgent.serve_in_process` there; answers published by that
        process and reported here to be counted), else a thread of this process."""
        serve = getattr(self.handler, "serve_urgent", None)
        if callable(serve):
            with contextlib.suppress(Exception):  # a gone child: e-stops then come this way
                return serve(self.config, self.urgent_priority, self._count,
                             device=self.device, starter=serve_in_process)
        events = getattr(self.handler, "events", None)
        states = (events(history=False), state_payload(self.handler, self.device,
                                                       self.config.url)) \
            if callable(events) else None
        return UrgentListener(self.config, self._post, priority=self.urgent_priority,
                              observe=self._count, states=states).start()

    def stop(self, timeout: float = 5.0) -> None:
        """Publish ``$state`` offline, disconnect cleanly and join the thread."""
        if self._thread is None:
            return
        if self._loop is not None and self._stopping is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._stopping.set)
        if self._urgent is not None:
            self._urgent.stop(timeout)
        self._thread.join(timeout)
        self._thread = None
        if sys.getswitchinterval() == min(self._switch, URGENT_SWITCH_INTERVAL):
            sys.setswitchinterval(self._switch)  # unless someone else changed it since
        if self._own_dispatcher is not None:
            self._own_dispatcher.close()

    def __enter__(self) -> MqttBridge:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def notify_params(self) -> None:
        """Ask for ``params`` to be republished (thread-safe; e.g. after a local change)."""
        self._params_dirty = True

    def wait_connected(self, timeout: float) -> bool:
        """Wait until connected to the broker; True if so."""
        return self.connected.wait(timeout)

    # -- the loop -----------------------------------------------------------------------------
    def _thread_main(self) -> None:
        try:
            asyncio.run(self._main())
        except Exception:  # pragma: no cover - last resort, never kill the process
            log.exception("MQTT bridge stopped on an unexpected error")

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        self._owed_lock = asyncio.Lock()
        self._started.set()
        backoff = 0.2
        stopper = asyncio.create_task(self._stopping.wait())
        while not self._stopping.is_set():
            was_connected = False
            try:
                was_connected = await self._session_or_stop(stopper)
            except (aiomqtt.MqttError, OSError) as exc:
                was_connected = self.connected.is_set()
                self.refused = connect_refusal(exc)
                self._note_error(exc)
            except Exception as exc:  # never let the bridge thread die: log, back off, retry
                was_connected = self.connected.is_set()
                log.exception("MQTT bridge session failed")
                self._note_error(exc)
            self.connected.clear()
            if self._stopping.is_set():
                break
            backoff = 0.2 if was_connected else min(backoff * 2, 5.0)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), backoff * random.uniform(0.8, 1.2))
        await collect_abandoned_clients()

    async def _session_or_stop(self, stopper: asyncio.Task[Any]) -> bool:
        """Run a session; a stop requested before it connected abandons the attempt (a
        connected session ends itself cleanly, publishing ``offline``)."""
        session = asyncio.create_task(self._session())
        await asyncio.wait({session, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if not session.done() and not self.connected.is_set():
            # a connect in progress is let finish (ms on a reachable broker): cancelling
            # aiomqtt inside Client.__aenter__ leaks paho's socket (aiomqtt issue #377)
            await asyncio.wait({session}, timeout=CONNECT_GRACE)
        if not session.done() and not self.connected.is_set():
            session.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await session
            return False
        return await session

    def _note_error(self, exc: BaseException) -> None:
        msg = f"{type(exc).__name__}: {exc}"
        if not self.connected.is_set():
            self.stats.connect_failures += 1
        if msg != self.stats.last_error:
            log.warning("MQTT %s: %s (reconnecting)", self.config.url, msg)
        self.stats.last_error = msg

    async def _session(self) -> bool:
        """One connection: returns True after a clean stop, raises MqttError when lost."""
        cfg, topics = self.config, self.topics
        will = aiomqtt.Will(topics.state, dumps(LOST), qos=1, retain=True)
        ident = f"poise-{cfg.robot_id}-{os.getpid()}-{random.randrange(1 << 32):08x}"
        if self._v5 is None:
            self._v5 = await self._speaks_v5(ident)
        async with mqtt_client(cfg, will=will, identifier=ident, queue_type=self._queue_type(),
                              v5=self._v5) as client:
            client.pending_calls_threshold = WINDOW + 16  # our window, not a warning per call
            if self._v5:  # live retained commands arrive flagged, so they are refused too
                await client.subscribe(topics.set_filter, options=SubscribeOptions(
                    qos=1, retainAsPublished=True))
            else:
                await client.subscribe(topics.set_filter, qos=1)
            await client.subscribe(self._fence_topic, qos=1)
            self._fence.reset()  # a new session: nothing from before it is in transit
            self._client, self.refused = client, ""
            self._discard_stale()
            self._last_state = None
            self._params_dirty = True
            if self.model is not None:
                await client.publish(topics.model, dumps(self.model), qos=1, retain=True,
                                     timeout=5)
            await self._publish_status(client)  # retained $state and params first ...
            for _ in range(50):  # ... e-stops served (up to 5 s) ...
                if self._urgent is not None and self._urgent.connected.is_set():
                    break
                await asyncio.sleep(0.1)
            self.connected.set()  # ... so "connected" means "announced"
            self.stats.connects += 1
            self.stats.last_error = ""
            log.info("MQTT connected to %s as %s", cfg.url, topics.base)
            # the message iterator raises as soon as the connection drops, so the session
            # ends then even while the pump waits for an acknowledgement
            tasks = {asyncio.create_task(self._pump(client)),
                     asyncio.create_task(self._serve_commands(client))}
            try:
                done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                self._client = None
            failed = [t.exception() for t in done if t.exception() is not None]
            self._refuse_unprocessed(
                "connection to the broker lost before the command was handled; send it again"
                if failed else "service stopping: command not applied")
            if failed:
                raise failed[0]  # type: ignore[misc]
            # clean stop: answer what is in hand, tell the world, disconnect (no will)
            await self._flush_owed(client)
            await client.publish(topics.state, dumps(self._state_payload("offline",
                                 "service stopped")), qos=1, retain=True, timeout=2)
            return True

    async def _speaks_v5(self, ident: str) -> bool:
        """Whether the broker takes MQTT 5: a bare CONNECT (no will: amqtt, which speaks
        3.1.1 only, refuses a bare one at once but chokes on a will in 5's layout)."""
        try:
            async with mqtt_client(self.config, identifier=ident, v5=True):
                return True
        except aiomqtt.MqttError as exc:
            if unsupported_protocol(exc):
                return False
            raise

    def _discard_stale(self) -> None:
        if self.samples is not None:
            self.stats.samples_discarded += len(self.samples.drain())

    def _state_payload(self, state: str, reason: str, target: str = "") -> dict[str, Any]:
        return state_dict(state, reason, t=time.time(), device=self.device,
                          broker=self.config.url, target=target)

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

    async def _pump(self, client: aiomqtt.Client) -> None:
        """Every tick: events, $state, params, owed messages, one telemetry batch."""
        assert self._stopping is not None
        period = 1.0 / self.config.rate_hz
        topics = self.topics
        next_t = time.monotonic()
        while not self._stopping.is_set():
            self._fence.poll()  # an e-stop latched: fence what is still on its way
            self._send_marker(client)
            if self.events is not None:
                for event in self.events.drain():
                    self.stats.events += 1
                    self._owed.append((topics.events, dumps(event.as_dict())))
                    if event.kind == "state":
                        self._state_reason = str(event.data.get("cause", ""))
                        await self._publish_transition(client, event)
                    elif event.kind == "param":
                        self._params_dirty = True
            await self._publish_status(client)
            await self._flush_owed(client)
            if self.samples is not None:
                batch = self.samples.drain()
                if batch:
                    if len(batch) > self.config.max_batch:
                        self.stats.samples_discarded += len(batch) - self.config.max_batch
                        batch = batch[-self.config.max_batch:]
                    dropped = self.samples.dropped + self.stats.samples_discarded
                    await client.publish(topics.telemetry, encode_batch(batch, dropped), qos=0)
                    self.stats.batches += 1
                    self.stats.samples_sent += len(batch)
                    if self._records is not None:
                        await self._publish_records(client, batch)
            next_t += period
            delay = next_t - time.monotonic()
            if delay < 0:  # fell behind (slow broker): keep the rate, skip the backlog
                next_t = time.monotonic()
                delay = 0
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)

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
        follows in :meth:`_publish_status` if it differs."""
        state = str(event.data.get("to", ""))
        key = f"{state}/"
        if state and key != self._last_state:
            await client.publish(self.topics.state, dumps(self._state_payload(
                state, self._state_reason)), qos=1, retain=True, timeout=5)
            self._last_state = key

    def _send_marker(self, client: aiomqtt.Client) -> None:
        """Publish the fence's marker if one is due (see :mod:`poise.telemetry.fence`)."""
        number = self._fence.due()
        if number is not None:
            task = asyncio.get_running_loop().create_task(
                client.publish(self._fence_topic, str(number).encode(), qos=1))
            task.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def _publish_status(self, client: aiomqtt.Client) -> None:
        """Republish the retained ``$state`` and ``params`` if they changed."""
        state = state_name(self.handler.state)
        target = getattr(self.handler, "target_status", "")
        target = target if isinstance(target, str) else ""
        key = f"{state}/{target}"
        if key != self._last_state:
            reason = self._reason()
            note = getattr(self.handler, "target_note", "")
            if target == "unreachable" and isinstance(note, str) and note and \
                    state not in ("fault", "estop"):
                reason = note  # why it is not where it was sent
            await client.publish(self.topics.state,
                                 dumps(self._state_payload(state, reason, target)),
                                 qos=1, retain=True, timeout=5)
            self._last_state = key
        if self._params_dirty:
            self._params_dirty = False
            params = self._params()
            if params is not None:
                self._limits = cmds.Limits.from_params(params)
                await client.publish(self.topics.params, dumps(params), qos=1, retain=True,
                                     timeout=5)

    async def _flush_owed(self, client: aiomqtt.Client) -> None:
        """Publish owed QoS-1 messages in order, up to 64 in flight; each leaves the queue once
        acknowledged (a message lost with the connection is sent again: at least once)."""
        assert self._owed_lock is not None
        async with self._owed_lock:
            while self._owed:
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

    async def _serve_commands(self, client: aiomqtt.Client) -> None:
        """Parse each command as it arrives and post it (never waits for the handler)."""
        async for message in client.messages:
            self._take(message)

    def _take(self, message: aiomqtt.Message, refuse: str = "") -> None:
        """One received message: answered at once if it is malformed (or ``refuse`` is
        given), else posted to the dispatcher. While the urgent connection is up, the main
        one (which sees e-stops too, through ``set/#``) leaves them to it."""
        topic = str(message.topic)
        if topic == self._fence_topic:
            payload = message.payload
            self._fence.passed(payload if isinstance(payload, bytes) else b"")
            return
        name = self.topics.command_name(topic)
        if name is None or (name in URGENT_TOPICS and self._urgent is not None and
                            self._urgent.connected.is_set()):
            return
        self.stats.commands += 1
        parsed = parse_message(name, message, self._limits)
        if isinstance(parsed, CommandResponse):
            self._answer(parsed)
            return
        if refuse:
            self._answer(CommandResponse(parsed.id, name, False, refuse))
            return
        estops, void = self._fence.stamp()
        if void and name not in URGENT_TOPICS:  # received before an e-stop that latched
            self._answer(CommandResponse(parsed.id, name, False, ESTOP_CANCELLED))
        else:
            self._post(replace(parsed, estops=estops), self._answer)
        if self._client is not None:
            self._send_marker(self._client)

    def _queue_type(self) -> type[asyncio.Queue[aiomqtt.Message]]:
        """aiomqtt's receive queue class (its ``queue_type`` option): e-stop and ``run``
        messages first; the bridge keeps the instance to answer what is left in it."""
        bridge = self

        class Queue(_ReceiveQueue):
            def __init__(self, maxsize: int = 0) -> None:
                super().__init__(maxsize)
                bridge._rx = self

        return Queue

    def _refuse_unprocessed(self, reason: str) -> None:
        """Answer the commands received but not yet handled when the session ended."""
        rx, self._rx = self._rx, None
        while rx is not None and not rx.empty():
            self._take(rx.get_nowait(), refuse=reason)

    def _answer(self, response: CommandResponse) -> None:
        self._tally(response)
        self._owed.append((self.topics.response, dumps(response.as_dict())))

    def _tally(self, response: CommandResponse) -> None:
        if response.accepted:
            self.stats.accepted += 1
            self._params_dirty = True
        else:
            self.stats.refused += 1

    def _count_command(self, _response: CommandResponse) -> None:
        self.stats.commands += 1

    def _count(self, response: CommandResponse) -> None:
        """A command served and answered in the real-time process, counted here."""
        self._count_command(response)
        self._tally(response)


class _ReceiveQueue(asyncio.PriorityQueue):  # type: ignore[type-arg]
    """A FIFO of received messages in which stops (``set/run`` with ``"stop"``) and e-stops go
    first (aiomqtt's documented way to prioritise messages: a ``queue_type`` that orders
    them)."""

    def __init__(self, maxsize: int = 0) -> None:
        super().__init__(maxsize)
        self._count = 0

    def _put(self, item: aiomqtt.Message) -> None:  # type: ignore[override]
        topic = str(item.topic)
        payload = item.payload if isinstance(item.payload, bytes) else b""
        urgent = topic.endswith("/set/estop") or (
            topic.endswith("/set/run") and b'"stop"' in payload)
        self._count += 1
        super()._put((0 if urgent else 1, self._count, item))

    def _get(self) -> aiomqtt.Message:  # type: ignore[override]
        return super()._get()[2]
