"""What a run configuration may hold, as data: one :class:`~poise.models.spec.Key` per key.

The keys of a table are declared once, where the value lands:

* the tables that become dataclasses (``[device]``: :class:`poise.devices.config.DeviceConfig`;
  ``[model]``, ``[algorithm]``, ``[loop]``, ``[limits]``, ``[log]``:
  :mod:`poise.controller.config_tables`) declare each key on its dataclass field with
  :func:`~poise.models.settings.setting`: default, kind, range and description in one line;
* ``[[device.servos]]`` (read into :class:`~poise.devices.dynamixel_config.ServoConfig`) is
  declared beside that class (:data:`~poise.devices.dynamixel_config.SERVO_KEYS`);
* ``[mqtt]`` (read into :class:`~poise.api.mqtt_config.MqttConfig`, stdlib-only vocabulary)
  is declared here (:data:`MQTT_KEYS`), its defaults taken from that class's fields.

Two readers use the declarations, so they cannot disagree: the validator
(:func:`poise.controller.config.config_from_dict`) and the JSON Schema for editors
(:mod:`poise.controller.config_schema`), both with the conventions of a run configuration
(:mod:`poise.models.settings`).

Ranges that :mod:`poise.api.rules` owns (the loop rate, the gains) are declared with its
constants; the validator then checks them with its functions, so a value refused by a ``gains``
command is refused in a file for the same reason. What one key cannot say (a gain ``<=
loop.rate``, ``sensor_fault >= sensor_hold``, servos only with ``protocol = "dynamixel"``) is
checked by the validator alone and documented in docs/config.md.
"""

from __future__ import annotations

from poise.api.mqtt_config import MAX_RATE_HZ, MqttConfig
from poise.models.settings import field_default
from poise.models.spec import Key

#: ``[mqtt]``: telemetry and commands over MQTT (docs/mqtt.md), read into
#: :class:`~poise.api.mqtt_config.MqttConfig`; the broker URL's form is checked there.
MQTT_KEYS: dict[str, Key] = {
    "enabled": Key("boolean", "publish telemetry and take commands over MQTT",
                   default=field_default(MqttConfig, "enabled")),
    "url": Key("string", "broker: mqtt://host:port, mqtts://… (TLS), ws:// or wss://; "
               "user:password@ allowed (default: an embedded broker on loopback)"),
    "robot_id": Key("string", "topic level: topics poise/<robot_id>/…; 1-64 characters without "
                    "'/', '+', '#' or control characters, not starting with '$'",
                    default=field_default(MqttConfig, "robot_id")),
    "username": Key("string", "broker user name"),
    "password": Key("string", "broker password (redacted in summaries)"),
    "tls": Key("boolean", "connect with TLS (default: true for an mqtts:// url)"),
    "ca_file": Key("string", "CA certificate file of the broker (relative to this file)"),
    "joint_states_hz": Key("number", "one-record-per-cycle messages on joint_states and task, "
                           "at most this many per second [Hz]; 0: off",
                           default=field_default(MqttConfig, "joint_states_hz"), ge=0,
                           le=MAX_RATE_HZ),
}

#: What each table is for (the schema's descriptions of the tables).
MQTT_DOC = "[mqtt]: MQTT telemetry and commands (docs/mqtt.md)."


__all__ = ["MQTT_DOC", "MQTT_KEYS"]
