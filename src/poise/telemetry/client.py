"""A small thread-friendly MQTT client for the other side of the contract.

:class:`Recorder` subscribes to a robot's topics in its own thread and keeps what arrives, with
arrival times; it can also send commands. Tests, the telemetry benchmark and simple scripts use
it; the dashboard may use it or talk to aiomqtt directly.

    with Recorder(MqttConfig.from_url("mqtt://127.0.0.1:1883", robot_id="arm1")) as rec:
        rec.command("run", "start", id="c1")
        resp = rec.wait_for(lambda m: m.name == "response" and m.json()["id"] == "c1", 2.0)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiomqtt

from poise.api.topics import Topics
from poise.telemetry.mqtt import MqttConfig
from poise.telemetry.mqtt_client import mqtt_client


@dataclass(frozen=True, slots=True)
class Received:
    """One message: ``name`` is the topic below ``poise/<robot_id>/`` (``telemetry``, …)."""

    t: float  # arrival, time.monotonic() [s]
    topic: str
    name: str
    payload: bytes
    retain: bool

    def json(self) -> Any:
        """The payload decoded as JSON."""
        return json.loads(self.payload)


class Recorder:
    """Subscribe to ``poise/<robot_id>/#`` in a thread; keep every message; send commands.

    Reconnects (every 0.2 s) when the broker goes away, so it follows a restarted broker.
    With ``keep=False`` messages only go to ``on_message`` (for long runs).
    """

    def __init__(self, config: MqttConfig, topic_filter: str | None = None,
                 on_message: Callable[[Received], None] | None = None,
                 keep: bool = True) -> None:
        self.config = config
        self.topics = Topics(config.robot_id)
        self.filter = topic_filter or f"{self.topics.base}/#"
        self.on_message = on_message
        self.keep = keep
        self.messages: list[Received] = []
        self.connected = threading.Event()
        self.connects = 0
        self.error: BaseException | None = None
        self._cond = threading.Condition()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: aiomqtt.Client | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None

    def start(self, timeout: float = 5.0) -> Recorder:
        """Start and wait (up to ``timeout``) until subscribed."""
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()),
                                        name="poise-recorder", daemon=True)
        self._thread.start()
        self.connected.wait(timeout)
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> Recorder:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        stopper = asyncio.create_task(self._stop.wait())
        while not self._stop.is_set():
            session = asyncio.create_task(self._session())
            await asyncio.wait({session, stopper}, return_when=asyncio.FIRST_COMPLETED)
            if not session.done():  # stop requested (maybe mid-connect): abandon the session
                session.cancel()
                with contextlib.suppress(BaseException):
                    await session
                break
            if isinstance(session.exception(), aiomqtt.MqttError):
                self.error = session.exception()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(stopper), 0.2)

    async def _session(self) -> None:
        try:
            async with mqtt_client(self.config) as client:
                await client.subscribe(self.filter, qos=1)
                self._client = client
                self.connects += 1
                self.connected.set()
                await self._read(client)
        finally:
            self._client = None
            self.connected.clear()

    async def _read(self, client: aiomqtt.Client) -> None:
        base = self.topics.base + "/"
        async for m in client.messages:
            topic = str(m.topic)
            payload = m.payload if isinstance(m.payload, bytes) else str(m.payload).encode()
            rec = Received(time.monotonic(), topic, topic.removeprefix(base), bytes(payload),
                           bool(m.retain))
            if self.on_message is not None:
                self.on_message(rec)
            if not self.keep:
                continue
            with self._cond:
                self.messages.append(rec)
                self._cond.notify_all()

    def publish(self, topic: str, payload: bytes | str, qos: int = 1, retain: bool = False,
                timeout: float = 5.0) -> None:
        """Publish from any thread (waits until sent); raises if not connected."""
        if self._loop is None or self._client is None:
            raise ConnectionError("recorder not connected")
        client = self._client
        fut = asyncio.run_coroutine_threadsafe(
            client.publish(topic, payload, qos=qos, retain=retain, timeout=timeout), self._loop)
        fut.result(timeout + 1)

    def command(self, name: str, value: Any = None, id: str = "", **kw: Any) -> None:
        """Send ``{"id": id, "value": value}`` to ``set/<name>``."""
        self.publish(self.topics.set(name), json.dumps({"id": id, "value": value}), **kw)

    def named(self, name: str) -> list[Received]:
        """Messages received on ``poise/<robot_id>/<name>`` so far."""
        with self._cond:
            return [m for m in self.messages if m.name == name]

    def wait_for(self, predicate: Callable[[Received], bool], timeout: float,
                 start: int = 0) -> Received | None:
        """The first message (from index ``start``) satisfying ``predicate``, waiting up to
        ``timeout`` seconds for it; None if none came."""
        deadline = time.monotonic() + timeout
        i = start
        with self._cond:
            while True:
                while i < len(self.messages):
                    if predicate(self.messages[i]):
                        return self.messages[i]
                    i += 1
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._cond.wait(remaining)


def forget(config: MqttConfig) -> None:
    """Delete a robot's retained topics (``$state``, ``params``, ``model``) from the broker, so
    dashboards stop listing it (publishes empty retained messages)."""
    topics = Topics(config.robot_id)

    async def run() -> None:
        async with mqtt_client(config) as client:
            for topic in (topics.state, topics.params, topics.model):
                await client.publish(topic, b"", qos=1, retain=True, timeout=5)

    asyncio.run(run())


def main(argv: list[str] | None = None) -> int:
    """``python -m poise.telemetry.client URL ROBOT_ID [--seconds S]``: print one line per
    message (topic, size) until interrupted or S seconds passed; a stand-in dashboard."""
    import argparse

    parser = argparse.ArgumentParser(description="subscribe to poise/<robot_id>/# and print")
    parser.add_argument("url")
    parser.add_argument("robot_id")
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument("--quiet", action="store_true", help="count only; print the total")
    args = parser.parse_args(argv)
    count = [0]

    def show(m: Received) -> None:
        count[0] += 1
        if not args.quiet:
            print(f"{m.name} {len(m.payload)} B", flush=True)

    rec = Recorder(MqttConfig.from_url(args.url, robot_id=args.robot_id), on_message=show,
                   keep=False)
    with rec, contextlib.suppress(KeyboardInterrupt):
        time.sleep(args.seconds if args.seconds is not None else 1e9)
    print(f"{count[0]} messages", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
