"""The MQTT settings: one definition for the ``[mqtt]`` table of a run configuration, the
service's bridge, the benchmarks and the tests (:class:`MqttConfig`).

Light on purpose (no aiomqtt at import): the configuration loader imports it.
"""

from __future__ import annotations

import dataclasses
import socket
import ssl
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from poise.api.topics import check_robot_id

#: Most telemetry messages per second the bridge will send.
MAX_RATE_HZ = 100.0
#: The values of ``MqttConfig.protocol``.
PROTOCOLS = ("auto", "5", "3.1.1")
#: CONNACK codes that refuse a client for good (MQTT 3.1.1: bad user name or password, not
#: authorised; MQTT 5: 0x86, 0x87): retrying cannot help.
AUTH_REFUSALS = (4, 5, 0x86, 0x87)
#: CONNACK codes of a broker that does not speak the protocol version asked for.
PROTOCOL_REFUSALS = (1, 0x84)


@dataclass(frozen=True)
class MqttConfig:
    """Where and how to connect, and how fast to publish.

    Attributes:
        host, port: the broker (``mqtt://host:port``; ``mqtts://`` defaults to 8883 and TLS).
        robot_id: the topic level under ``poise/``.
        username, password: optional credentials.
        tls: connect with TLS; ``ca_certs`` / ``certfile`` / ``keyfile`` as for ``ssl``;
            ``tls_insecure`` skips certificate and host-name checks (test benches only).
        rate_hz: telemetry messages per second (each carries every sample since the last) [Hz].
        max_batch: most samples in one telemetry message (older ones are dropped and counted).
        keepalive: MQTT keep-alive [s]; a silent broker is declared lost after ~1.5× this.
        joint_states_hz: one-record-per-cycle messages on ``joint_states`` and ``task``, at
            most this many per second of cycle time [Hz]; 0 (default): off.
        enabled: a run publishes and takes commands over MQTT (``[mqtt] enabled``).
        embedded: no broker was named (``[mqtt]`` without ``url``): ``poise run`` starts an
            embedded broker on loopback and connects there (``host``/``port`` are then
            placeholders until it has).
        protocol: the bridge's MQTT version: ``"auto"`` (5, or 3.1.1 where the broker
            refuses 5, as the embedded amqtt does), ``"5"`` or ``"3.1.1"``. Under 5 the
            bridge subscribes with *retain as published*, so a command published retained
            is refused even when it arrives live.
    """

    host: str = "127.0.0.1"
    port: int = 1883
    robot_id: str = "poise"
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: bool = False
    ca_certs: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    tls_insecure: bool = False
    rate_hz: float = 50.0
    max_batch: int = 1000
    keepalive: int = 5
    transport: str = "tcp"
    websocket_path: str | None = None
    joint_states_hz: float = 0.0
    enabled: bool = True
    embedded: bool = False
    protocol: str = "auto"

    def __post_init__(self) -> None:
        check_robot_id(self.robot_id)
        if not 0 < self.rate_hz <= MAX_RATE_HZ:
            raise ValueError(f"mqtt rate_hz = {self.rate_hz} must be in (0, {MAX_RATE_HZ:g}]")
        if not 0 <= self.joint_states_hz <= MAX_RATE_HZ:
            raise ValueError(f"mqtt joint_states_hz = {self.joint_states_hz} must be in "
                             f"[0, {MAX_RATE_HZ:g}] (0: off)")
        if not 0 < self.port < 65536:
            raise ValueError(f"mqtt port {self.port} out of range")
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"mqtt protocol {self.protocol!r} must be one of "
                             f"{', '.join(PROTOCOLS)}")

    @property
    def url(self) -> str:
        """The broker address without credentials (``mqtt://host:port``)."""
        scheme = ("wss" if self.tls else "ws") if self.transport == "websockets" else (
            "mqtts" if self.tls else "mqtt")
        return f"{scheme}://{self.host}:{self.port}{self.websocket_path or ''}"

    @classmethod
    def from_url(cls, url: str, **overrides: Any) -> MqttConfig:
        """Parse ``mqtt[s]://[user[:password]@]host[:port]``; ``overrides`` win."""
        parts = urllib.parse.urlsplit(url if "://" in url else f"mqtt://{url}")
        if parts.scheme not in ("mqtt", "mqtts", "tcp", "ssl", "ws", "wss"):
            raise ValueError(f"mqtt url {url!r}: scheme must be mqtt://, mqtts://, ws:// or "
                             "wss://")
        tls = parts.scheme in ("mqtts", "ssl", "wss")
        ws = parts.scheme in ("ws", "wss")
        default_port = (443 if tls else 80) if ws else (8883 if tls else 1883)
        kw: dict[str, Any] = {"host": parts.hostname or "127.0.0.1", "tls": tls,
                              "port": parts.port or default_port,
                              "transport": "websockets" if ws else "tcp",
                              "websocket_path": parts.path or None}
        if parts.username:
            kw["username"] = urllib.parse.unquote(parts.username)
        if parts.password:
            kw["password"] = urllib.parse.unquote(parts.password)
        kw.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**kw)

    @classmethod
    def from_settings(cls, section: Any, **overrides: Any) -> MqttConfig:
        """From the controller's ``[mqtt]`` table: a mapping or an object with the same names
        (an :class:`MqttConfig`: only ``overrides`` apply): ``url``, ``robot_id``, ``username``,
        ``password``, ``tls`` (bool, or a table with ``ca_certs``, ``certfile``, ``keyfile``,
        ``insecure``), ``ca_file``, ``rate_hz``, ``max_batch``, ``keepalive``,
        ``joint_states_hz`` (``enabled`` is the caller's business). ``overrides`` (CLI flags)
        win where not None. Unknown keys of a mapping are an error naming them."""
        if isinstance(section, MqttConfig):  # already parsed: a URL and flags override it
            out, url = section, overrides.pop("url", None)
            if url is not None:
                at = cls.from_url(url)
                out = replace(out, host=at.host, port=at.port, transport=at.transport,
                              websocket_path=at.websocket_path, tls=at.tls or out.tls,
                              username=at.username or out.username,
                              password=at.password or out.password, embedded=False)
            return replace(out, **{k: v for k, v in overrides.items() if v is not None})
        if dataclasses.is_dataclass(section) and not isinstance(section, type):
            section = dataclasses.asdict(section)
        section = dict(section or {})
        known = {"url", "robot_id", "username", "password", "tls", "ca_file", "rate_hz",
                 "max_batch", "keepalive", "joint_states_hz", "enabled"}
        unknown = sorted(set(section) - known)
        if unknown:
            raise ValueError(f"[mqtt]: unknown key(s) {', '.join(unknown)}; "
                             f"known: {', '.join(sorted(known))}")
        kw: dict[str, Any] = {k: section[k] for k in
                              ("robot_id", "username", "password", "rate_hz", "max_batch",
                               "keepalive", "joint_states_hz") if section.get(k) is not None}
        tls = section.get("tls")
        if isinstance(tls, Mapping):
            kw.update(tls=True, ca_certs=tls.get("ca_certs"), certfile=tls.get("certfile"),
                      keyfile=tls.get("keyfile"), tls_insecure=bool(tls.get("insecure", False)))
        elif tls:
            kw["tls"] = True
        if section.get("ca_file"):
            kw["ca_certs"] = section["ca_file"]
        url = overrides.pop("url", None) or section.get("url")
        kw["enabled"] = bool(section.get("enabled", True))
        kw["embedded"] = url is None
        kw.update({k: v for k, v in overrides.items() if v is not None})
        return replace(cls.from_url(url or "mqtt://127.0.0.1:1883"), **kw)

    def tls_context(self) -> ssl.SSLContext | None:
        """The client TLS context, or None without TLS."""
        if not self.tls:
            return None
        ctx = ssl.create_default_context(cafile=self.ca_certs)
        if self.certfile:
            ctx.load_cert_chain(self.certfile, self.keyfile)
        if self.tls_insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        return ctx


def _connack_code(exc: BaseException) -> int | None:
    """The CONNACK code of a refused connection (aiomqtt's ``MqttCodeError.rc``), or None."""
    rc = getattr(exc, "rc", None)
    value = getattr(rc, "value", rc)
    return value if isinstance(value, int) else None


def connect_refusal(exc: BaseException) -> str:
    """Why the broker refused us for good (bad credentials, not authorised), as text; ""
    for any other failure (unreachable, lost: worth retrying)."""
    return f"the broker refused the connection: {exc}" \
        if _connack_code(exc) in AUTH_REFUSALS else ""


def unsupported_protocol(exc: BaseException) -> bool:
    """Whether the broker refused the MQTT version asked for."""
    return _connack_code(exc) in PROTOCOL_REFUSALS


#: Options of the service's own sockets (the bridge's and the e-stop listener's):
#: ``TCP_NODELAY``. With Nagle's algorithm (the default) a small packet waits for the
#: acknowledgement of the one before, and the broker delays that acknowledgement (Linux:
#: 40 ms) when it has nothing to send back, as after a QoS-0 telemetry batch: a target's
#: retained ``$state`` waited 36 ms for it, its answer behind it; the e-stop listener's
#: ``$state`` reached a dashboard 40-80 ms after the e-stop instead of 5-10 ms. (A stream
#: stamped on arrival then arrived in pairs more often, which the streamed reference's
#: extrapolation now takes in its stride: :data:`poise.motion.streaming.SLOPE_SPAN_S`.)
SOCKET_OPTIONS = ((socket.IPPROTO_TCP, socket.TCP_NODELAY, 1),)


__all__ = ["AUTH_REFUSALS", "MAX_RATE_HZ", "PROTOCOLS", "SOCKET_OPTIONS", "MqttConfig",
           "connect_refusal", "unsupported_protocol"]
