"""What a run configuration may hold, as data: one :class:`~poise.models.spec.Key` per key.

The keys of a table are declared once, where the value lands:

* the tables that become dataclasses of :mod:`poise.controller.config` (``[device]``,
  ``[model]``, ``[algorithm]``, ``[loop]``, ``[limits]``, ``[log]``) declare each key on its
  dataclass field with :func:`setting`: default, kind, range and description in one line;
* ``[mqtt]`` (read into :class:`~poise.api.mqtt_config.MqttConfig`) and
  ``[[device.servos]]`` (read into :class:`~poise.devices.dynamixel_config.ServoConfig`) are
  declared here (:data:`MQTT_KEYS`, :data:`SERVO_KEYS`), their defaults taken from those
  classes' fields.

Two readers use the declarations, so they cannot disagree: the validator
(:func:`poise.controller.config.config_from_dict`) and the JSON Schema for editors
(:mod:`poise.controller.config_schema`). Both follow the conventions of a run configuration,
which differ from a model file's (:mod:`poise.models.spec`):

* numbers are finite, bounded only as declared (no overall magnitude bound); a number's
  ``choices`` are words allowed instead of it (a rate gain's ``"auto"``);
* a string is non-empty, unless ``""`` is its default (:func:`may_be_empty`);
* a ``vector`` may be written as a bare number, a list of one (``qa_rate = 0.5``);
* ``tables`` (an array of tables) may be empty: the default;
* a key whose default is ``None`` may be left out (TOML has no null): the dataclass says what
  its absence means.

Ranges that :mod:`poise.api.rules` owns (the loop rate, the gains) are declared with its
constants; the validator then checks them with its functions, so a value refused by a ``gains``
command is refused in a file for the same reason. What one key cannot say (a gain ``<=
loop.rate``, ``sensor_fault >= sensor_hold``, servos only with ``protocol = "dynamixel"``) is
checked by the validator alone and documented in docs/config.md.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from poise.api.mqtt_config import MAX_RATE_HZ, MqttConfig
from poise.devices import dynamixel_config as dxl
from poise.models.spec import Key, Kind

#: Where :func:`setting` puts a field's declaration (``dataclasses.Field.metadata``).
DECLARATION = "poise.config.key"


def jsonable(value: Any) -> Any:
    """A default as TOML/JSON writes it: a tuple becomes a list."""
    return list(value) if isinstance(value, tuple) else value


def setting(default: Any, kind: Kind, doc: str, **rule: Any) -> Any:
    """A dataclass field that declares the configuration key of the same name.

    Args:
        default: the value when the key is absent (``None``: optional, its absence has a
            meaning the ``doc`` gives).
        kind: what the value is (:data:`poise.models.spec.Kind`).
        doc: what it means, with its unit (shown by editors).
        rule: ``gt``, ``ge``, ``le``, ``choices``, ``table`` … of :class:`Key`.
    """
    key = Key(kind, doc, default=jsonable(default), **rule)
    return dataclasses.field(default=default, metadata={DECLARATION: key})


def table_keys(cls: type) -> dict[str, Key]:
    """The declarations of a dataclass's fields (made with :func:`setting`), in field order."""
    return {f.name: f.metadata[DECLARATION] for f in dataclasses.fields(cls)
            if DECLARATION in f.metadata}


def field_default(cls: type, name: str) -> Any:
    """The default of the dataclass field ``name`` of ``cls``, as TOML writes it."""
    (f,) = (f for f in dataclasses.fields(cls) if f.name == name)
    if f.default is dataclasses.MISSING:
        raise TypeError(f"{cls.__name__}.{name} has no constant default")
    return jsonable(f.default)


def may_be_empty(key: Key) -> bool:
    """Whether ``""`` is a valid value of a ``string`` key: only where it is the default."""
    return key.default == ""


#: ``[[device.servos]]``: one Dynamixel actuator (docs/devices.md). Its cross-key rules
#: (qa_min < qa_max within the servo's ±256 turns, mode 5 needs current_limit, distinct IDs) are
#: :class:`~poise.devices.dynamixel_config.ServoConfig`'s.
SERVO_KEYS: dict[str, Key] = {
    "id": Key("integer", "servo ID on the bus", required=True, ge=0, le=dxl.MAX_ID),
    "radius": Key("number", "spool radius r [m] (1.0: qa is the shaft angle [rad])",
                  default=field_default(dxl.ServoConfig, "radius"), ge=dxl.MIN_RADIUS,
                  le=dxl.MAX_RADIUS),
    "sign": Key("integer", "+1 or -1: which shaft direction lengthens qa",
                default=field_default(dxl.ServoConfig, "sign"), choices=(1, -1)),
    "zero": Key("integer", "shaft position where qa = 0 [counts]",
                default=field_default(dxl.ServoConfig, "zero"), ge=-dxl.POSITION_RANGE,
                le=dxl.POSITION_RANGE),
    "mode": Key("integer", "Operating Mode: 4 extended position (multi-turn), 5 current-based "
                "position (needs current_limit)", default=field_default(dxl.ServoConfig, "mode"),
                choices=dxl.MODES),
    "current_limit": Key("number", "[A]; mode 5: the effort limit written to Goal Current at "
                         "arm; mode 4: written to Current Limit at connect if it differs "
                         "(default: leave the servo's setting)", gt=0),
    "qa_min": Key("number", "lower actuator limit [m, or rad with radius 1] (default: minus "
                  "one spool turn)"),
    "qa_max": Key("number", "upper actuator limit [m, or rad with radius 1], > qa_min "
                  "(default: one spool turn)"),
    "current_unit": Key("number", "Present/Goal Current unit [A per count] (XM430: 0.00269, "
                        "XL330/XC330: 0.001)",
                        default=field_default(dxl.ServoConfig, "current_unit"), gt=0),
    "torque_constant": Key("number", "k_t [N·m/A] (effort = sign · k_t · I / r)",
                           default=field_default(dxl.ServoConfig, "torque_constant"), gt=0),
    "name": Key("string", "channel name (empty or absent: servo<ID>)",
                default=field_default(dxl.ServoConfig, "name")),
}

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


__all__ = ["DECLARATION", "MQTT_DOC", "MQTT_KEYS", "SERVO_KEYS", "field_default", "jsonable",
           "may_be_empty", "setting", "table_keys"]
