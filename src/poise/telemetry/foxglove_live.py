"""A live view in Foxglove: the log's channels served over the Foxglove WebSocket protocol.

:class:`FoxgloveLive` runs the ``foxglove-sdk`` WebSocket server (``pip install
'poise[foxglove]'``; the SDK is MIT-licensed) and publishes what the experiment log writes
(:mod:`poise.telemetry.log`): the cycle channels ``/sensors``, ``/setpoints``, ``/ik``,
``/timing`` (at most ``sample_rate_hz`` cycles per second: the log keeps every cycle), the
events ``/state``, ``/params``, ``/events``, and with a drawable model the arm on ``/scene``
(≤ ``scene_rate_hz``) and ``/tf`` (once a second), with the same schemas and payloads, and message
times in Unix ns. In Foxglove: *Open connection → Foxglove WebSocket → ws://HOST:PORT*.

It is a consumer like the log writer and the MQTT bridge: it drains the controller's
:class:`~poise.api.bus.SampleQueue` s in a thread of its own, so the control loop only
ever ``put`` s into a bounded queue and never waits on it; it encodes a channel only while a
client subscribes to it, in slices with a GIL hand-off between them. The SDK's own server threads
(Rust) send the messages; a slow client loses the oldest (its backlog is bounded).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from poise.api.bus import CycleSample, Event, SampleQueue
from poise.api.topics import dumps
from poise.telemetry import scene as fox
from poise.telemetry.clock import ClockAnchor, Decimator
from poise.telemetry.log import SCHEMAS, event_message, sample_messages

log = logging.getLogger(__name__)

#: Default port (Foxglove's own default for WebSocket connections).
DEFAULT_PORT = 8765
DEFAULT_HOST = "127.0.0.1"
#: The per-cycle topics, in the order of :func:`poise.telemetry.log.sample_messages`.
CYCLE_TOPICS = ("/sensors", "/setpoints", "/ik", "/timing")


def parse_address(text: str | int | None) -> tuple[str, int]:
    """``"8765"``, ``"0.0.0.0:8765"`` or None → ``(host, port)`` (host default: loopback)."""
    if text is None:
        return DEFAULT_HOST, DEFAULT_PORT
    host, _, port = str(text).rpartition(":")
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"--foxglove {text!r}: expected PORT or HOST:PORT") from None
    if not 0 <= number < 65536:
        raise ValueError(f"--foxglove {text!r}: port out of range")
    return host or DEFAULT_HOST, number


def _sdk() -> Any:
    """The ``foxglove`` module (foxglove-sdk), or :class:`~poise.api.extras.MissingExtra` naming
    ``pip install 'poise[foxglove]'``."""
    from poise.api.extras import require

    require("foxglove", "the Foxglove live view (poise run --foxglove)")
    import foxglove

    return foxglove


class FoxgloveLive:
    """Serve a controller's samples and events to Foxglove clients, from its own thread.

    Args:
        samples: the controller's sample queue (``controller.subscribe()``), or None.
        events: the controller's event queue (``controller.events()``), or None.
        model: the robot model; when drawable, ``/scene`` and ``/tf`` draw it.
        host, port: where to listen (port 0: any free port, see :attr:`port`).
        params: returns the live parameters, published on ``/params`` once a second (so a
            client that connects late sees them).
        sample_rate_hz: most cycles per second on the cycle channels [Hz].
        scene_rate_hz: most ``/scene`` messages per second [Hz].
        name: the server name clients show.

    Use ``start()`` / ``stop()`` or a ``with`` block.
    """

    def __init__(self, samples: SampleQueue[CycleSample] | None = None,
                 events: SampleQueue[Event] | None = None, *, model: Any = None,
                 host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
                 params: Callable[[], Mapping[str, Any]] | None = None,
                 sample_rate_hz: float = 100.0, scene_rate_hz: float = 30.0,
                 name: str = "poise", slice_: int = 25) -> None:
        self.samples = samples
        self.events = events
        self.host, self._port = host, port
        self._params = params
        self.name = name
        self.slice = slice_
        self.anchor = ClockAnchor.now()
        self._scene = fox.ArmScene(model) if model is not None and fox.drawable(model) else None
        self._cycle_due = Decimator(sample_rate_hz)
        self._scene_due = Decimator(scene_rate_hz)
        self._every_second = Decimator(1.0)
        self._server: Any = None
        self._context: Any = None
        self._channels: dict[str, Any] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.published = 0

    @property
    def port(self) -> int:
        """The port the server listens on (the real one when started with port 0)."""
        return int(self._server.port) if self._server is not None else self._port

    @property
    def url(self) -> str:
        """``ws://host:port`` for Foxglove's *Open connection* dialog."""
        return f"ws://{self.host}:{self.port}"

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> FoxgloveLive:
        """Start the WebSocket server and the publishing thread.

        Raises:
            poise.api.extras.MissingExtra: foxglove-sdk is not installed (the message says
                ``pip install 'poise[foxglove]'``).
            RuntimeError: the server cannot listen (port in use).
        """
        foxglove = _sdk()
        # a context of our own (nothing else logs to these clients), kept alive with the server
        self._context = context = foxglove.Context()
        try:
            self._server = foxglove.start_server(name=self.name, host=self.host,
                                                 port=self._port, context=context)
        except Exception as exc:  # the SDK raises its own error types
            raise RuntimeError(f"Foxglove live view on {self.host}:{self._port}: {exc}") \
                from exc
        for topic, schema_name, data in self._schemas():
            schema = foxglove.Schema(name=schema_name, encoding="jsonschema", data=data)
            self._channels[topic] = foxglove.Channel(topic, schema=schema,
                                                     message_encoding="json", context=context)
        self._thread = threading.Thread(target=self._run, name="poise-foxglove", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop publishing, close the channels and the server."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()
        if self._server is not None:
            self._server.stop()
            self._server = None
        self._context = None

    def __enter__(self) -> FoxgloveLive:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the publishing thread ----------------------------------------------------------------
    def _schemas(self) -> list[tuple[str, str, bytes]]:
        out = [(topic, name, json.dumps(schema).encode())
               for topic, (name, schema) in SCHEMAS.items()]
        if self._scene is not None:
            out += [(fox.SCENE_TOPIC, fox.SCENE_SCHEMA, fox.foxglove_schema("SceneUpdate")),
                    (fox.TF_TOPIC, fox.TF_SCHEMA, fox.foxglove_schema("FrameTransforms"))]
        return out

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self._publish_events()
                if self.samples is not None:
                    while batch := self.samples.drain(self.slice):
                        self._publish_samples(batch)
                        time.sleep(0)  # hand the GIL over between slices
                    self.samples.wait(0.05)
                else:
                    self._stop.wait(0.05)
                self._publish_periodic(time.monotonic())
        except Exception:  # never take the process down: say so, stop publishing
            log.exception("Foxglove live view stopped on an unexpected error")

    def _send(self, topic: str, t: float, payload: bytes | Callable[[], bytes]) -> None:
        """Log ``payload`` on ``topic`` at host time ``t`` if a client listens (encoded only
        then, when given as a function)."""
        channel = self._channels[topic]
        if not channel.has_sinks():
            return
        data = payload() if callable(payload) else payload
        channel.log(data, log_time=self.anchor.unix_ns(t))
        self.published += 1

    def _publish_samples(self, batch: list[CycleSample]) -> None:
        for s in batch:
            if self._cycle_due.due(s.t) and any(
                    self._channels[t].has_sinks() for t in CYCLE_TOPICS):
                for topic, data in zip(CYCLE_TOPICS, sample_messages(s), strict=True):
                    self._send(topic, s.t, data)
            if self._scene is not None and self._scene_due.due(s.t):
                ns = self.anchor.unix_ns(s.t)
                self._send(fox.SCENE_TOPIC, s.t,
                           lambda s=s, ns=ns: dumps(self._scene.scene(s, ns)))

    def _publish_events(self) -> None:
        if self.events is None:
            return
        for ev in self.events.drain():
            topic, doc = event_message(ev)
            self._send(topic, ev.t, dumps(doc))

    def _publish_periodic(self, now: float) -> None:
        """Once a second: ``/tf`` and the live parameters (for clients that joined late)."""
        if not self._every_second.due(now):
            return
        ns = self.anchor.unix_ns(now)
        if self._scene is not None:
            self._send(fox.TF_TOPIC, now, lambda: dumps(self._scene.transforms(ns)))
        if self._params is not None:
            try:
                params = dict(self._params())
            except Exception as exc:  # a failing provider must not stop the view
                log.warning("params provider failed: %s", exc)
                return
            self._send("/params", now, lambda: dumps({"t": now, "kind": "initial",
                                                      "data": params}))
