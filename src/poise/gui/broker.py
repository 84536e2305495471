"""The dashboard's side of MQTT: which broker (:class:`BrokerURL`) and which robot to follow
(no Qt, no network). The topic contract itself has one module, :mod:`poise.api.topics`
(service and dashboard alike); its contents, for reference:

Everything lives under ``poise/<robot_id>/``:

======================  ===========================================================
``$state``              retained ``{"state", "reason", "t", "device", "broker"}``;
                        last will ``{"state": "lost"}``
``telemetry``           QoS 0 columnar batches ``{"seq0", "n", "dropped", "t": [...], ...}``
``params``              retained live parameters (algorithm, mode, target, gains, ...)
``model``               retained ``model.describe()``
``set/<name>``          commands ``{"id", "value"}`` (names: ``COMMAND_NAMES``)
``response``            ``{"id", "command", "accepted", "reason"}`` for every command
``events``              JSON events
======================  ===========================================================
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from poise.api.mqtt_config import MqttConfig

#: Topics of the selected robot the dashboard subscribes to (besides ``+/$state``).
ROBOT_TOPICS = ("telemetry", "params", "model", "response", "events")
DEFAULT_URL = "mqtt://127.0.0.1:1883"
#: ``$state`` values of a robot with no service running: ``offline`` (it said goodbye), ``lost``
#: (its last will: it vanished) and ``gone`` (the dashboard's name for a cleared ``$state``).
NOT_LIVE = frozenset({"offline", "lost", "gone"})


def is_live(state: str) -> bool:
    """Whether a robot in ``$state`` ``state`` has a service running (anything but
    :data:`NOT_LIVE`)."""
    return state not in NOT_LIVE


def choose_robot(states: Mapping[str, str], current: str | None) -> str | None:
    """The robot a dashboard started without ``--robot`` follows.

    The current one while it is live; else the first live robot seen (``states`` in the order
    robots appeared); else the current one (a robot that went offline stays on screen until a
    live one appears). Never picks a robot that is not live: retained topics of a stopped
    service would show a stale run as if it were the current one.
    """
    if current is not None and is_live(states.get(current, "gone")):
        return current
    live = next((robot for robot, state in states.items() if is_live(state)), None)
    return live if live is not None else current


@dataclass(frozen=True)
class BrokerURL:
    """Where the broker is: ``mqtt://[user[:password]@]host[:port]`` (``mqtts://`` for TLS)."""

    host: str = "127.0.0.1"
    port: int = 1883
    tls: bool = False
    username: str | None = None
    password: str | None = None

    @classmethod
    def parse(cls, url: str) -> BrokerURL:
        """Parse a URL; a bare ``host`` or ``host:port`` is accepted too (the service's one
        parser, :meth:`poise.api.mqtt_config.MqttConfig.from_url`)."""
        try:
            at = MqttConfig.from_url(url)
        except ValueError as exc:
            raise ValueError(f"broker URL {url!r}: {exc}") from None
        if at.transport != "tcp":
            raise ValueError(f"broker URL {url!r}: scheme must be mqtt:// or mqtts://")
        return cls(host=at.host, port=at.port, tls=at.tls, username=at.username,
                   password=at.password)

    def __str__(self) -> str:
        user = f"{self.username}@" if self.username else ""
        return f"{'mqtts' if self.tls else 'mqtt'}://{user}{self.host}:{self.port}"
