"""The MQTT bridge's command intake: commands parsed and checked as they arrive, fenced
behind a latched e-stop, posted to the controller's dispatcher, answered exactly once.

:class:`CommandIntake` takes each message of ``set/#`` off the bridge's connection
(:meth:`~CommandIntake.serve`): a malformed one is answered at once, the rest posted
(``post(command, reply)``) and never waited for. Stops and e-stops overtake every message still
waiting in the receive queue (:class:`ReceiveQueue`); commands received before an e-stop that
latched are void (the fence, :mod:`poise.telemetry.fence`, with its marker on the bridge's own
topic); what is left unhandled when a session ends is answered by
:meth:`~CommandIntake.refuse_unprocessed`. Answers are owed on ``response`` (QoS 1, the
publisher's :class:`~poise.telemetry.mqtt_publish.Outbox`).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import aiomqtt

from poise.api.bus import ESTOP_CANCELLED, Command, CommandResponse
from poise.api.topics import Topics, dumps
from poise.telemetry import commands as cmds
from poise.telemetry.fence import EstopFence
from poise.telemetry.mqtt_publish import BridgeStats, Outbox
from poise.telemetry.urgent import URGENT_TOPICS, parse_message


class ReceiveQueue(asyncio.PriorityQueue):  # type: ignore[type-arg]
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


class CommandIntake:
    """Commands in, answers owed (see the module docstring).

    Args:
        topics: the robot's topics.
        stats: the bridge's counters (``commands``, ``accepted``, ``refused``).
        outbox: where answers are owed.
        post: ``post(command, reply)``: the controller's dispatcher.
        estops: the controller's e-stop count, or None (what the fence reads).
        limits: the command limits to parse by (those of the last ``params`` published).
        urgent_up: whether the e-stop's own connection is up (then this one leaves e-stops
            to it).
        on_accepted: called after each accepted command (its parameters may have changed).

    Attributes:
        fence: the e-stop fence; ``fence_topic`` its marker's topic (this bridge's own).
        post: where commands go (settable).
    """

    def __init__(self, topics: Topics, stats: BridgeStats, outbox: Outbox,
                 post: Callable[[Command, Callable[[CommandResponse], None]], Any], *,
                 estops: Callable[[], int | None], limits: Callable[[], cmds.Limits],
                 urgent_up: Callable[[], bool], on_accepted: Callable[[], None]) -> None:
        self.topics = topics
        self.stats = stats
        self.outbox = outbox
        self.post = post
        self.fence = EstopFence(estops)
        self.fence_topic = f"{topics.base}/$fence/{uuid.uuid4().hex[:12]}"
        self._limits = limits
        self._urgent_up = urgent_up
        self._on_accepted = on_accepted
        self._rx: ReceiveQueue | None = None
        self._client: aiomqtt.Client | None = None

    def attach(self, client: aiomqtt.Client | None) -> None:
        """Serve on ``client`` (a new session: nothing from before it is in transit), or on
        none (the session ended)."""
        if client is not None:
            self.fence.reset()
        self._client = client

    def tick(self, client: aiomqtt.Client) -> None:
        """The pump's turn: an e-stop latched fences what is still on its way."""
        self.fence.poll()
        self._send_marker(client)

    async def serve(self, client: aiomqtt.Client) -> None:
        """Parse each command as it arrives and post it (never waits for the handler)."""
        async for message in client.messages:
            self.take(message)

    def take(self, message: aiomqtt.Message, refuse: str = "") -> None:
        """One received message: answered at once if it is malformed (or ``refuse`` is
        given), else posted to the dispatcher. While the urgent connection is up, the main
        one (which sees e-stops too, through ``set/#``) leaves them to it."""
        topic = str(message.topic)
        if topic == self.fence_topic:
            payload = message.payload
            self.fence.passed(payload if isinstance(payload, bytes) else b"")
            return
        name = self.topics.command_name(topic)
        if name is None or (name in URGENT_TOPICS and self._urgent_up()):
            return
        self.stats.commands += 1
        parsed = parse_message(name, message, self._limits())
        if isinstance(parsed, CommandResponse):
            self.answer(parsed)
            return
        if refuse:
            self.answer(CommandResponse(parsed.id, name, False, refuse))
            return
        estops, void = self.fence.stamp()
        if void and name not in URGENT_TOPICS:  # received before an e-stop that latched
            self.answer(CommandResponse(parsed.id, name, False, ESTOP_CANCELLED))
        else:
            self.post(replace(parsed, estops=estops), self.answer)
        if self._client is not None:
            self._send_marker(self._client)

    def queue_type(self) -> type[asyncio.Queue[aiomqtt.Message]]:
        """aiomqtt's receive queue class (its ``queue_type`` option): e-stop and ``run``
        messages first; the intake keeps the instance to answer what is left in it."""
        intake = self

        class Queue(ReceiveQueue):
            def __init__(self, maxsize: int = 0) -> None:
                super().__init__(maxsize)
                intake._rx = self

        return Queue

    def refuse_unprocessed(self, reason: str) -> None:
        """Answer the commands received but not yet handled when the session ended."""
        rx, self._rx = self._rx, None
        while rx is not None and not rx.empty():
            self.take(rx.get_nowait(), refuse=reason)

    def answer(self, response: CommandResponse) -> None:
        """Count ``response`` and owe it on ``response`` (any thread)."""
        self._tally(response)
        self.outbox.append(self.topics.response, dumps(response.as_dict()))

    def count(self, response: CommandResponse) -> None:
        """A command served and answered elsewhere (the e-stop's listener), counted here."""
        self.stats.commands += 1
        self._tally(response)

    def _tally(self, response: CommandResponse) -> None:
        if response.accepted:
            self.stats.accepted += 1
            self._on_accepted()
        else:
            self.stats.refused += 1

    def _send_marker(self, client: aiomqtt.Client) -> None:
        """Publish the fence's marker if one is due (see :mod:`poise.telemetry.fence`)."""
        number = self.fence.due()
        if number is not None:
            task = asyncio.get_running_loop().create_task(
                client.publish(self.fence_topic, str(number).encode(), qos=1))
            task.add_done_callback(lambda t: t.cancelled() or t.exception())


__all__ = ["CommandIntake", "ReceiveQueue"]
