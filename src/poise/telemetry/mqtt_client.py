"""An aiomqtt client for a broker of :class:`~poise.api.mqtt_config.MqttConfig` (the
settings are the shared vocabulary; the client library belongs to this layer)."""

from __future__ import annotations

import asyncio

import aiomqtt
import paho.mqtt.client as paho
from paho.mqtt.client import MQTT_CLEAN_START_FIRST_ONLY

from poise.api.mqtt_config import SOCKET_OPTIONS, MqttConfig


def mqtt_client(config: MqttConfig, *, will: aiomqtt.Will | None = None,
                identifier: str | None = None, clean_session: bool = True,
                queue_type: type[asyncio.Queue[aiomqtt.Message]] | None = None,
                v5: bool = False, no_delay: bool = False) -> aiomqtt.Client:
    """An aiomqtt client for this broker (not yet connected); ``queue_type`` orders the
    received messages (aiomqtt's option); ``v5``: MQTT 5 (a clean start stands for
    ``clean_session``), else 3.1.1; ``no_delay``: :data:`~poise.api.mqtt_config.SOCKET_OPTIONS`
    (the e-stop listener's)."""
    version = aiomqtt.ProtocolVersion.V5 if v5 else aiomqtt.ProtocolVersion.V311
    return aiomqtt.Client(
        config.host, config.port, username=config.username, password=config.password,
        identifier=identifier, will=will,
        clean_session=None if v5 else clean_session, protocol=version,
        clean_start=clean_session if v5 else MQTT_CLEAN_START_FIRST_ONLY,
        queue_type=queue_type,
        keepalive=config.keepalive, timeout=5.0, tls_context=config.tls_context(),
        transport=config.transport,  # type: ignore[arg-type]
        websocket_path=config.websocket_path,
        tls_insecure=config.tls_insecure if config.tls else None,
        socket_options=SOCKET_OPTIONS if no_delay else ())


def paho_client(config: MqttConfig, client_id: str) -> paho.Client:
    """A paho client (a network thread of its own once ``loop_start``, as a client on another
    machine would have) for this broker, with its credentials; not connected
    (``connect(config.host, config.port, …)``)."""
    client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=client_id)
    if config.username:
        client.username_pw_set(config.username, config.password)
    return client


__all__ = ["mqtt_client", "paho_client"]
