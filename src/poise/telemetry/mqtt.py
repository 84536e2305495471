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

The bridge itself is the session: the thread, the connection (MQTT 5 where the broker takes it,
else 3.1.1), reconnects and a clean stop. What it publishes is its
:class:`~poise.telemetry.mqtt_publish.TelemetryPublisher`'s, what it receives its
:class:`~poise.telemetry.mqtt_intake.CommandIntake`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import aiomqtt
from paho.mqtt.subscribeoptions import SubscribeOptions

from poise.api.bus import Command, CommandResponse, CycleSample, Event, SampleQueue
from poise.api.mqtt_config import MqttConfig, connect_refusal, unsupported_protocol
from poise.api.topics import LOST, Topics, dumps
from poise.controller.dispatch import CommandDispatcher
from poise.telemetry.mqtt_client import mqtt_client
from poise.telemetry.mqtt_intake import CommandIntake
from poise.telemetry.mqtt_publish import (
    WINDOW,
    BridgeStats,
    Outbox,
    TelemetryPublisher,
    state_name,
    static_params,
)
from poise.telemetry.urgent import (
    CONNECT_GRACE,
    UrgentListener,
    collect_abandoned_clients,
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


class CommandHandler(Protocol):
    """What the bridge needs of a controller."""

    state: Any

    def submit(self, command: Command) -> CommandResponse: ...


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
        self.model = dict(model) if model is not None else None
        self.device = device
        self.stats = BridgeStats()
        self.connected = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._started = threading.Event()
        # Owed QoS-1 messages (responses, events): removed only once the broker has them.
        self.outbox = Outbox()
        self.publisher = TelemetryPublisher(handler, samples, events, self.config, self.topics,
                                            self.stats, self.outbox, params=params,
                                            device=device, joint_names=joint_names)
        # Commands go to the handler's dispatcher, or to one of our own around its submit.
        post = getattr(handler, "post", None)
        self._own_dispatcher = None if callable(post) else CommandDispatcher(handler.submit)
        # commands still on their way when an e-stop latches are void (poise.telemetry.fence)
        self.intake = CommandIntake(
            self.topics, self.stats, self.outbox,
            post if callable(post) else self._own_dispatcher.post,  # type: ignore[union-attr]
            estops=lambda: getattr(handler, "estops", None),
            limits=lambda: self.publisher.limits,
            urgent_up=lambda: self._urgent is not None and self._urgent.connected.is_set(),
            on_accepted=self.notify_params)
        # MQTT 5 (the retain flag of live publishes is seen) unless the broker refuses it
        # (None: not known yet, asked at the first connect)
        self._v5: bool | None = {"5": True, "3.1.1": False}.get(self.config.protocol)
        #: Why the broker refused this bridge's connection ("": it did not), e.g. bad
        #: credentials: ``poise run`` does not arm without its command channel.
        self.refused = ""
        # e-stops come on a connection and a thread of their own (in the real-time process
        # when there is one): never behind a flood of other commands (see start)
        self._urgent: Any = None

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
                return serve(self.config, self.urgent_priority, self.intake.count,
                             device=self.device, starter=serve_in_process)
        events = getattr(self.handler, "events", None)
        states = (events(history=False), state_payload(self.handler, self.device,
                                                       self.config.url)) \
            if callable(events) else None
        return UrgentListener(self.config, self.intake.post, priority=self.urgent_priority,
                              observe=self.intake.count, states=states).start()

    def stop(self, timeout: float = 5.0) -> None:
        """Publish ``$state`` offline, disconnect cleanly and join the thread."""
        if self._thread is None:
            return
        if self._loop is not None and self._stopping is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._stopping.set)
            self.outbox.wake()  # the pump waits for owed messages between its ticks
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
        self.publisher.params_dirty = True

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
        self.outbox.bind()
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
        async with mqtt_client(cfg, will=will, identifier=ident, no_delay=True,
                               queue_type=self.intake.queue_type(), v5=self._v5) as client:
            client.pending_calls_threshold = WINDOW + 16  # our window, not a warning per call
            if self._v5:  # live retained commands arrive flagged, so they are refused too
                await client.subscribe(topics.set_filter, options=SubscribeOptions(
                    qos=1, retainAsPublished=True))
            else:
                await client.subscribe(topics.set_filter, qos=1)
            await client.subscribe(self.intake.fence_topic, qos=1)
            self.intake.attach(client)  # a new session: nothing from before it is in transit
            self.refused = ""
            self.publisher.new_session()
            if self.model is not None:
                await client.publish(topics.model, dumps(self.model), qos=1, retain=True,
                                     timeout=5)
            await self.publisher.publish_status(client)  # retained $state and params first ...
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
                     asyncio.create_task(self.intake.serve(client))}
            try:
                done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                self.intake.attach(None)
            failed = [t.exception() for t in done if t.exception() is not None]
            self.intake.refuse_unprocessed(
                "connection to the broker lost before the command was handled; send it again"
                if failed else "service stopping: command not applied")
            if failed:
                raise failed[0]  # type: ignore[misc]
            # clean stop: answer what is in hand, tell the world, disconnect (no will)
            await self.outbox.flush(client)
            await client.publish(topics.state, dumps(self.publisher.state_payload(
                "offline", "service stopped")), qos=1, retain=True, timeout=2)
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

    async def _pump(self, client: aiomqtt.Client) -> None:
        """Every tick (``1/rate_hz``): the fence's turn, then the publisher's."""
        assert self._stopping is not None
        period = 1.0 / self.config.rate_hz
        next_t = time.monotonic()
        while not self._stopping.is_set():
            self.intake.tick(client)
            await self.publisher.tick(client)
            next_t += period
            if next_t < time.monotonic():  # fell behind (slow broker): keep the rate, skip
                next_t = time.monotonic()  # the backlog
            # until the next tick, an answer owed goes out at once (with the events and the
            # $state before it), not up to a telemetry period later
            while not self._stopping.is_set() and \
                    await self.outbox.wait_owed(next_t - time.monotonic(),
                                                self._stopping.is_set):
                await self.publisher.owed(client)


__all__ = ["URGENT_SWITCH_INTERVAL", "WINDOW", "BridgeStats", "CommandHandler", "MqttBridge",
           "MqttConfig", "state_name", "static_params"]
