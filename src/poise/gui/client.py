"""The dashboard's MQTT link: paho-mqtt in its own network thread, Qt signals to the GUI.

The GUI thread never touches the socket. paho's network thread (``loop_start``) connects,
reconnects with exponential backoff (1 s doubling to ``max_backoff``) and resubscribes; its
callbacks decode JSON off the GUI thread and hand the result over:

* low-rate messages (``$state``, ``params``, ``model``, ``response``, ``events``) as queued Qt
  signals (emitted from paho's thread, delivered in the GUI thread);
* telemetry batches into a bounded deque that the GUI drains once per frame (at ~100 messages/s
  this saves a hundred signal deliveries per second; when the GUI stalls the oldest batches are
  dropped and counted, never the network thread blocked).

Commands are published with QoS 1 on ``poise/<robot>/set/<name>`` with a fresh id; a command
that cannot be sent (no broker) is refused locally with the reason, never dropped silently.
"""

from __future__ import annotations

import collections
import itertools
import json
import os
import threading
import uuid
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion
from PySide6 import QtCore

from poise.api.topics import command_topic, decode, split_topic, topic
from poise.gui.broker import ROBOT_TOPICS, BrokerURL


class MqttLink(QtCore.QObject):
    """One broker connection for one dashboard.

    Args:
        url: broker URL (``mqtt://host:port``).
        robot: robot id to follow from the start (None: the first that shows up).
        max_backoff: longest wait between reconnection attempts [s].

    Signals:
        connection(connected: bool, text: str): broker link went up or down.
        robot_state(robot: str, payload: dict): a ``poise/<robot>/$state`` message.
        message(robot: str, leaf: str, payload: object): params, model, response or events of
            the selected robot.
    """

    connection = QtCore.Signal(bool, str)
    robot_state = QtCore.Signal(str, object)
    message = QtCore.Signal(str, str, object)

    def __init__(self, url: str, robot: str | None = None, *, max_backoff: int = 8,
                 parent: QtCore.QObject | None = None) -> None:
        super().__init__(parent)
        self.url = BrokerURL.parse(url)
        self._lock = threading.Lock()
        self._robot = robot
        self._telemetry: collections.deque[tuple[str, dict[str, Any]]] = collections.deque(
            maxlen=2000)
        self.telemetry_dropped = 0
        self.malformed = 0
        self.connected = False
        self.attempts = 0
        self._ids = itertools.count(1)
        self._prefix = uuid.uuid4().hex[:6]
        self._client = paho.Client(CallbackAPIVersion.VERSION2,
                                   client_id=f"poise-dashboard-{os.getpid()}-{self._prefix}")
        self.max_backoff = max_backoff
        self._client.reconnect_delay_set(1, max_backoff)
        if self.url.username:
            self._client.username_pw_set(self.url.username, self.url.password)
        if self.url.tls:
            self._client.tls_set()
        self._client.on_connect = self._on_connect
        self._client.on_disconnect = self._on_disconnect
        self._client.on_connect_fail = self._on_connect_fail
        self._client.on_message = self._on_message
        self._started = False

    # ------------------------------------------------------------------ lifecycle (GUI thread)

    def start(self) -> None:
        """Connect in the background; returns at once (the link retries until :meth:`stop`)."""
        if self._started:
            return
        self._started = True
        self.connection.emit(False, f"connecting to {self.url}")
        self._client.connect_async(self.url.host, self.url.port, keepalive=10)
        self._client.loop_start()

    def stop(self) -> None:
        """Disconnect and join the network thread."""
        if not self._started:
            return
        self._started = False
        self._client.disconnect()
        self._client.loop_stop()

    @property
    def robot(self) -> str | None:
        """The robot whose telemetry, params, model, responses and events are followed."""
        return self._robot

    def select(self, robot: str | None) -> None:
        """Follow another robot (unsubscribes the old one's topics, subscribes the new)."""
        with self._lock:
            old, self._robot = self._robot, robot
            self._telemetry.clear()
        if old == robot or not self.connected:
            return
        if old:
            self._client.unsubscribe([topic(old, leaf) for leaf in ROBOT_TOPICS])
        if robot:
            self._subscribe_robot(robot)

    def drain_telemetry(self) -> list[dict[str, Any]]:
        """Telemetry batches of the selected robot received since the last call, oldest first."""
        with self._lock:
            robot = self._robot
            out = [batch for rid, batch in self._telemetry if rid == robot]
            self._telemetry.clear()
        return out

    def send(self, name: str, value: Any = None, **extra: Any) -> tuple[str | None, str]:
        """Publish command ``name`` to the selected robot (``extra``: more payload keys,
        e.g. ``stream=True`` for a streamed target).

        Returns:
            ``(id, "")`` when handed to the broker, ``(None, reason)`` when it could not be sent.
        """
        robot = self._robot
        if not robot:
            return None, "no robot selected"
        if not self.connected:
            return None, f"not connected to the broker {self.url}"
        try:
            name_topic = command_topic(robot, name)
        except ValueError as exc:
            return None, str(exc)
        cid = f"gui-{self._prefix}-{next(self._ids)}"
        try:
            payload = json.dumps({"id": cid, "value": value, **extra})
        except (TypeError, ValueError) as exc:
            return None, f"value is not JSON: {exc}"
        info = self._client.publish(name_topic, payload, qos=1)
        if info.rc != paho.MQTT_ERR_SUCCESS:
            return None, f"publish failed: {paho.error_string(info.rc)}"
        return cid, ""

    # ------------------------------------------------------------------ paho thread

    def _subscribe_robot(self, robot: str) -> None:
        self._client.subscribe([(topic(robot, leaf), 0) for leaf in ROBOT_TOPICS])

    def _on_connect(self, client, userdata, flags, reason_code, properties=None) -> None:
        if reason_code.is_failure:
            self.connected = False
            self.connection.emit(False, f"refused by {self.url}: {reason_code}")
            return
        self.connected = True
        self.attempts = 0
        client.subscribe("poise/+/$state", qos=0)
        robot = self._robot
        if robot:
            self._subscribe_robot(robot)
        self.connection.emit(True, f"connected to {self.url}")

    def _on_disconnect(self, client, userdata, flags, reason_code, properties=None) -> None:
        self.connected = False
        if self._started:
            self.attempts += 1
            self.connection.emit(False, f"lost {self.url} ({reason_code}); reconnecting")

    def _on_connect_fail(self, client, userdata) -> None:
        self.connected = False
        self.attempts += 1
        self.connection.emit(False, f"no broker at {self.url}; retry {self.attempts} "
                             f"(backoff ≤ {self.max_backoff} s)")

    def _on_message(self, client, userdata, msg) -> None:
        where = split_topic(msg.topic)
        if where is None:
            return
        robot, leaf = where
        payload = decode(msg.payload)
        if payload is None and msg.payload:
            self.malformed += 1
            return
        if leaf == "$state":
            if not msg.payload:  # retained state cleared
                payload = {"state": "gone"}
            if isinstance(payload, dict):
                self.robot_state.emit(robot, payload)
            return
        if robot != self._robot:
            return
        if leaf == "telemetry":
            if isinstance(payload, dict):
                with self._lock:
                    if len(self._telemetry) == self._telemetry.maxlen:
                        self.telemetry_dropped += 1
                    self._telemetry.append((robot, payload))
            return
        self.message.emit(robot, leaf, payload)

