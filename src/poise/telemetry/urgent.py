"""The e-stop's own MQTT connection: subscribed to :data:`URGENT_TOPICS` only, in a thread and
event loop of its own, so an e-stop is never behind a flood of other commands in one socket,
one receive queue or one event loop.

:class:`UrgentListener` parses each message (:func:`parse_message`, the same checks as every
other command) and hands the command to ``post(command, reply)``; ``reply`` answers it: by
default on this very connection (QoS 1, published at once), or through ``answer`` when the
owner publishes answers itself. Where it runs is the owner's choice: the MQTT bridge runs one
beside an in-process controller; with the real-time process
(:class:`~poise.controller.realtime.RealtimeController`) it runs *in* that process, so the
e-stop goes from the socket to the device without waiting for the service process's GIL,
which the command flood holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import aiomqtt

from poise.api.bus import Command, CommandResponse, Event, SampleQueue
from poise.api.mqtt_config import MqttConfig
from poise.api.topics import Topics, dumps, state_dict
from poise.telemetry import commands as cmds
from poise.telemetry.mqtt_client import mqtt_client

#: Commands served on a connection of their own, so a flood on ``set/#`` never delays them.
URGENT_TOPICS = ("estop",)
#: How long a stop waits for a connect in progress to finish before abandoning it [s].
CONNECT_GRACE = 1.0

Reply = Callable[[CommandResponse], None]
Post = Callable[[Command, Reply], None]


def parse_message(name: str, message: aiomqtt.Message,
                  limits: cmds.Limits | None = None) -> Command | CommandResponse:
    """A received ``set/<name>`` message as a checked :class:`Command`, or its refusal. A
    retained command is never executed (it would move the arm at every reconnect): it is
    refused with its own id. The bridge's connection sees the retain flag of live publishes
    too where the broker speaks MQTT 5 (retain as published)."""
    payload = message.payload
    raw = payload if isinstance(payload, bytes | bytearray) else str(payload).encode()
    parsed = cmds.parse(name, bytes(raw), limits or cmds.Limits())
    if message.retain:
        return CommandResponse(id=parsed.id, command=name, accepted=False,
                               reason="retained command ignored: publish commands with "
                                      "retain=false")
    return parsed


#: States published by the e-stop's connection the moment they are entered.
LATCHED_STATES = ("estop", "fault")

StatePayload = Callable[[Event], dict[str, Any]]


def state_payload(handler: Any, device: str, broker: str) -> StatePayload:
    """The ``$state`` document for a state event of ``handler`` (its ``target_status`` read
    when it is published)."""

    def payload(event: Event) -> dict[str, Any]:
        target = getattr(handler, "target_status", "")
        return state_dict(str(event.data.get("to", "")), str(event.data.get("cause", "")),
                          t=time.time(), device=device, broker=broker,
                          target=target if isinstance(target, str) else "")

    return payload


def serve_in_process(config: MqttConfig, handler: Any, post: Callable[..., None], *,
                     priority: int, device: str,
                     on_connected: Callable[[bool], None] | None = None,
                     observe: Callable[[CommandResponse], None] | None = None
                     ) -> UrgentListener:
    """Start the e-stop's listener in the process that runs ``handler`` (a controller): the
    real-time process calls it (the bridge hands it over, so the controller layer never
    imports this one); it publishes ``$state`` from ``handler``'s state events."""
    return UrgentListener(
        config, post, priority=priority, on_connected=on_connected, observe=observe,
        states=(handler.events(history=False), state_payload(handler, device, config.url))
    ).start()


async def collect_abandoned_clients() -> None:
    """An aiomqtt client abandoned while connecting (cancelled) keeps a reference cycle and its
    socket open; were it garbage-collected after ``asyncio.run`` closed the loop, its socket
    callback would print "Event loop is closed" (aiomqtt issue #377). Collecting it here, and
    letting the loop run the cancellation it schedules, ends it cleanly."""
    gc.collect()
    for _ in range(3):
        await asyncio.sleep(0)


class UrgentListener:
    """E-stops from MQTT, on a connection and in a thread of their own (see the module
    docstring). Reconnects with backoff (0.2 s … 5 s) like the bridge.

    Args:
        config: the broker and robot id.
        post: acts on a parsed command in this thread and answers it through ``reply``
            (exactly once).
        answer: where answers (and refusals of malformed messages) go; default: published on
            ``response`` over this connection.
        priority: ``SCHED_FIFO`` priority of this thread where the OS grants it (0: normal).
        on_connected: told ``True``/``False`` as the connection comes and goes.
        observe: told every answer once it is given (a refusal of a malformed message too),
            e.g. to count it.
        states: the controller's events (``controller.events(history=False)``) and the
            ``$state`` document of a state event (:func:`state_payload`): each state of
            :data:`LATCHED_STATES` is published retained on this connection the moment it
            is entered (before the device has acknowledged the e-stop), so a dashboard sees
            it at once, however many commands the other connection is behind.
    """

    def __init__(self, config: MqttConfig, post: Post, *, answer: Reply | None = None,
                 priority: int = 0, on_connected: Callable[[bool], None] | None = None,
                 observe: Reply | None = None,
                 states: tuple[SampleQueue[Event], StatePayload] | None = None) -> None:
        self.config, self.topics = config, Topics(config.robot_id)
        self.post, self.priority = post, priority
        self._states = states
        self._quit = threading.Event()
        self._give = answer or self._publish
        self._observe = observe
        self.on_connected = on_connected
        self.connected = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._client: aiomqtt.Client | None = None
        self._ready = threading.Event()

    def start(self) -> UrgentListener:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()),
                                        name="poise-mqtt-estop", daemon=True)
        self._thread.start()
        if self._states is not None:
            threading.Thread(target=self._announce, name="poise-mqtt-latched",
                             daemon=True).start()
        self._ready.wait(5)
        return self

    def _announce(self) -> None:
        """Publish ``$state`` for every latched state the controller enters (at this
        listener's priority: it is on the e-stop's way to the dashboard)."""
        from poise.firmware_bridge.lifetime import fifo

        fifo(self.priority)
        assert self._states is not None
        events, payload = self._states
        while not self._quit.is_set():
            if not events.wait(0.2):
                continue
            for event in events.drain():
                if event.kind == "state" and event.data.get("to") in LATCHED_STATES:
                    with contextlib.suppress(Exception):  # a failing provider: not us
                        self._send(self.topics.state, dumps(payload(event)), retain=True)

    def stop(self, timeout: float = 5.0) -> None:
        self._quit.set()
        if self._loop is not None and self._stopping is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._stopping.set)
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def answer(self, response: CommandResponse) -> None:
        """Give ``response`` (the one answer to its command), then tell ``observe``."""
        self._give(response)
        if self._observe is not None:
            self._observe(response)

    def _set_connected(self, up: bool) -> None:
        (self.connected.set if up else self.connected.clear)()
        if self.on_connected is not None:
            self.on_connected(up)

    def _publish(self, response: CommandResponse) -> None:
        """Publish ``response`` on this connection (from any thread)."""
        self._send(self.topics.response, dumps(response.as_dict()))

    def _send(self, topic: str, payload: bytes, retain: bool = False) -> None:
        """Publish (QoS 1) on this connection, from any thread; dropped if it is down."""
        loop, client = self._loop, self._client
        if loop is None or client is None:
            return

        def send() -> None:
            task = loop.create_task(client.publish(topic, payload, qos=1, retain=retain))
            task.add_done_callback(lambda t: t.cancelled() or t.exception())

        with contextlib.suppress(RuntimeError):  # the loop has closed: the run is over
            loop.call_soon_threadsafe(send)

    async def _main(self) -> None:
        from poise.firmware_bridge.lifetime import fifo

        fifo(self.priority)  # this thread only: it sleeps until an e-stop
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        self._ready.set()
        backoff = 0.2
        stopper = asyncio.create_task(self._stopping.wait())
        while not self._stopping.is_set():
            session = asyncio.create_task(self._session())
            await asyncio.wait({session, stopper}, return_when=asyncio.FIRST_COMPLETED)
            if not session.done() and not self.connected.is_set():  # see CONNECT_GRACE
                await asyncio.wait({session}, timeout=CONNECT_GRACE)
            if not session.done():
                session.cancel()
            with contextlib.suppress(asyncio.CancelledError, aiomqtt.MqttError, OSError):
                await session
            del session  # nothing may keep an abandoned client alive past the loop
            self._client = None
            if self.connected.is_set():
                self._set_connected(False)
            if self._stopping.is_set():
                break
            backoff = min(backoff * 2, 5.0)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), backoff * random.uniform(0.8, 1.2))
        stopper.cancel()
        await collect_abandoned_clients()

    async def _session(self) -> None:
        cfg, topics = self.config, self.topics
        ident = f"poise-{cfg.robot_id}-{os.getpid()}-estop-{random.randrange(1 << 32):08x}"
        async with mqtt_client(cfg, identifier=ident, no_delay=True) as client:
            for name in URGENT_TOPICS:
                await client.subscribe(topics.set(name), qos=1)
            self._client = client
            self._set_connected(True)
            async for message in client.messages:
                self.take(message)

    def take(self, message: aiomqtt.Message) -> None:
        """One received message: refused if malformed, else posted."""
        name = self.topics.command_name(str(message.topic))
        if name not in URGENT_TOPICS:
            return
        parsed = parse_message(name, message)
        if isinstance(parsed, CommandResponse):
            self.answer(parsed)
        else:  # applied off this loop, which publishes $state meanwhile (see states)
            threading.Thread(target=self.post, args=(parsed, self.answer),
                             name="poise-estop-post", daemon=True).start()


__all__ = ["CONNECT_GRACE", "LATCHED_STATES", "URGENT_TOPICS", "Post", "Reply", "StatePayload",
           "UrgentListener", "collect_abandoned_clients", "parse_message", "state_payload"]
