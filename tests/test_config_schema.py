"""The JSON Schema of run configurations: generated from the declarations the loader reads by,
shipped with the package, and in agreement with ``load_config`` value by value."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import tomllib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from poise.api import rules
from poise.cli import main
from poise.controller.config import (
    TABLE_KEYS,
    Config,
    ConfigError,
    config_from_dict,
    load_config,
)
from poise.controller.config_schema import SCHEMA_FILE, config_schema, schema_text
from poise.controller.config_spec import MQTT_KEYS
from poise.devices import dynamixel_config
from poise.devices.dynamixel_config import SERVO_KEYS
from poise.examples import names, path

jsonschema = pytest.importorskip("jsonschema")
VALIDATOR = jsonschema.Draft4Validator(config_schema())


def _example(name: str) -> dict:
    with path(name).open("rb") as f:
        return tomllib.load(f)


def _schema_errors(data: dict) -> list:
    return list(VALIDATOR.iter_errors(data))


def test_the_schema_is_valid_draft_4_and_the_shipped_copy_is_current():
    jsonschema.Draft4Validator.check_schema(config_schema())
    assert SCHEMA_FILE.read_text(encoding="utf-8") == schema_text(), (
        "regenerate: poise example schema --out src/poise/controller/config.schema.json")


def test_cli_prints_and_writes_the_schema(capsys, tmp_path):
    assert main(["example", "schema"]) == 0
    assert json.loads(capsys.readouterr().out) == config_schema()
    out = tmp_path / "config.schema.json"
    assert main(["example", "schema", "--out", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == schema_text()
    assert main(["example", "schema", "--out", str(tmp_path / "no" / "s.json")]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.parametrize("name", names())
def test_every_bundled_example_validates_against_the_schema_and_loads(name):
    assert [e.message for e in _schema_errors(_example(name))] == []
    load_config(path(name))


def _set(data: dict, dotted: str, value) -> dict:
    """A copy of ``data`` with ``table.key`` (or ``device.servos.0.key``) set."""
    out = copy.deepcopy(data)
    *parents, key = dotted.split(".")
    target = out
    for part in parents:
        target = target[int(part)] if part.isdigit() else target.setdefault(part, {})
    target[key] = value
    return out


DYNAMIXEL = {"device": {"port": "dynamixel:/dev/ttyUSB0", "servos": [{"id": 1}]}}


@pytest.mark.parametrize(("base", "dotted", "value", "words"), [
    ("soft_arm_stiff", "loop.rate", 5000, ["loop.rate", "5000", "[10, 1000] Hz"]),
    ("soft_arm_stiff", "loop.rate", 5, ["loop.rate", "[10, 1000]"]),
    ("soft_arm_stiff", "loop.mode", "feedback", ["loop.mode", "'ff', 'fb'"]),
    ("soft_arm_stiff", "loop.priority", 100, ["loop.priority", "[0, 99]"]),
    ("soft_arm_stiff", "loop.switch_interval", 0.5, ["loop.switch_interval", "<= 0.1"]),
    ("soft_arm_stiff", "loop.effort_feedforward", "yes", ["loop.effort_feedforward", "true"]),
    ("soft_arm_stiff", "loop.process", "thread", ["loop.process", "'own'"]),
    ("soft_arm_stiff", "algorithm.gamma", 0, ["algorithm.gamma", "(0, 250]"]),
    ("soft_arm_stiff", "algorithm.gamma", 1001.0, ["algorithm.gamma", "1001"]),
    ("soft_arm_stiff", "algorithm.gamma_e", "fast", ["algorithm.gamma_e", "'fast'"]),
    ("soft_arm_stiff", "algorithm.damping", -1.0, ["algorithm.damping", "[0, 1000]"]),
    ("soft_arm_stiff", "algorithm.damping", 2e3, ["algorithm.damping", "[0, 1000]"]),
    ("soft_arm_stiff", "algorithm.name", "alg3", ["algorithm.name", "'alg3'"]),
    ("soft_arm_stiff", "algorithm.update", "newton", ["algorithm.update", "dls"]),
    ("soft_arm_stiff", "algorithm.target", [], ["algorithm.target", "list of finite"]),
    ("soft_arm_stiff", "algorithm.target", ["0.2", "-0.9"], ["algorithm.target", "'0.2'"]),
    ("soft_arm_stiff", "algorithm.tolerance", 0.0, ["algorithm.tolerance", "> 0"]),
    ("soft_arm_stiff", "algorithm.gama", 1.0, ["algorithm.gama", "unknown key"]),
    ("soft_arm_stiff", "limits.qa_rate", [0.0], ["limits.qa_rate", "> 0"]),
    ("soft_arm_stiff", "limits.qa_rate", -1, ["limits.qa_rate", "> 0"]),
    ("soft_arm_stiff", "limits.sensor_hold", 0, ["limits.sensor_hold", "> 0"]),
    ("soft_arm_stiff", "device.baud", 0, ["device.baud", "integer >= 1"]),
    ("soft_arm_stiff", "device.baud", 115200.5, ["device.baud", "integer"]),
    ("soft_arm_stiff", "device.watchdog_ms", 5, ["device.watchdog_ms", "[10, 10000]"]),
    ("soft_arm_stiff", "device.protocol", "can", ["device.protocol", "'dynamixel'"]),
    ("soft_arm_stiff", "device.port", "", ["device.port", "non-empty string"]),
    ("soft_arm_stiff", "device.sim_args", "--corrupt 0.1", ["device.sim_args", "list of strings"]),
    ("soft_arm_stiff", "device.timeout", -2.0, ["device.timeout", "> 0"]),
    ("soft_arm_stiff", "model.gravity", -9.81, ["model.gravity", ">= 0"]),
    ("soft_arm_stiff", "model.name", 3, ["model.name", "non-empty string"]),
    ("soft_arm_stiff", "mqtt.joint_states_hz", 200, ["mqtt.joint_states_hz", "<= 100"]),
    ("soft_arm_stiff", "mqtt.enabled", 1, ["mqtt.enabled", "true or false"]),
    ("soft_arm_stiff", "mqtt.robot_id", "", ["mqtt.robot_id", "non-empty"]),
    ("soft_arm_stiff", "mqtt.tls", "yes", ["mqtt.tls", "true or false"]),
    ("soft_arm_stiff", "log.path", 3, ["log.path", "non-empty string"]),
    (DYNAMIXEL, "device.servos.0.id", 300, ["device.servos[0].id", "[0, 252]"]),
    (DYNAMIXEL, "device.servos.0.id", True, ["device.servos[0].id", "True"]),
    (DYNAMIXEL, "device.servos.0.sign", 2, ["device.servos[0].sign", "1, -1"]),
    (DYNAMIXEL, "device.servos.0.radius", 0.0, ["device.servos[0].radius", ">= 0.0001"]),
    (DYNAMIXEL, "device.servos.0.radius", 1e4, ["device.servos[0].radius", "<= 1000"]),
    (DYNAMIXEL, "device.servos.0.mode", 3, ["device.servos[0].mode", "4, 5"]),
    (DYNAMIXEL, "device.servos.0.zero", 2**21, ["device.servos[0].zero", "1048575"]),
    (DYNAMIXEL, "device.servos.0.radus", 0.01, ["device.servos[0].radus", "unknown key"]),
])
def test_a_value_the_schema_refuses_the_loader_refuses_naming_key_value_and_rule(
        base, dotted, value, words):
    data = _set(_example(base) if isinstance(base, str) else base, dotted, value)
    errors = _schema_errors(data)
    assert errors, "the schema accepted it"
    *parents, key = dotted.split(".")
    where = [int(p) if p.isdigit() else p for p in parents]
    # the schema points at the key (or, for an unknown key, at its table naming the key)
    assert any(list(e.absolute_path) == [*where, key] or (
        list(e.absolute_path) == where and repr(key) in e.message) for e in errors), [
        (list(e.absolute_path), e.message) for e in errors]
    with pytest.raises(ConfigError) as info:
        config_from_dict(data, "run.toml")
    message = str(info.value)
    assert message.startswith("run.toml: ")
    for word in words:
        assert word in message, message


def test_missing_servo_id_and_unknown_table_are_refused_by_both():
    data = {"device": {"port": "dynamixel:/dev/ttyUSB0", "servos": [{"radius": 0.01}]}}
    assert any("'id' is a required property" in e.message for e in _schema_errors(data))
    with pytest.raises(ConfigError, match=r"device\.servos\[0\]\.id: missing; 'id'"):
        config_from_dict(data, "run.toml")
    data = {"loops": {"rate": 100}}
    assert _schema_errors(data)
    with pytest.raises(ConfigError, match=r"\[loops\]: unknown table"):
        config_from_dict(data, "run.toml")


@pytest.mark.parametrize(("data", "words"), [
    ({"loop": {"rate": 250}, "algorithm": {"gamma": 300.0}}, ["algorithm.gamma", "(0, 250]"]),
    ({"limits": {"sensor_hold": 1.0, "sensor_fault": 0.5}}, ["limits.sensor_fault", ">= "]),
    ({"device": {"servos": [{"id": 1}]}}, ["device.servos", "protocol = 'dynamixel'"]),
    ({"device": {"sensors": "/dev/ttyACM0"}}, ["device.sensors", "protocol = 'dynamixel'"]),
    ({"device": {"protocol": "dynamixel"}}, ["device.port", "serial port"]),
    ({"device": {"port": "dynamixel:/x", "servos": [{"id": 1}, {"id": 1}]}},
     ["device.servos", "more than once"]),
    ({"device": {"port": "dynamixel:/x", "servos": [{"id": 1, "mode": 5}]}},
     ["device.servos[0]", "current_limit"]),
    ({"device": {"port": "dynamixel:/x", "servos": [{"id": 1, "qa_min": 1.0, "qa_max": 0.0}]}},
     ["device.servos[0]", "qa_min < qa_max"]),
    ({"mqtt": {"url": "http://broker"}}, ["mqtt.url", "scheme"]),
    ({"mqtt": {"robot_id": "arm/1"}}, ["mqtt.robot_id", "'/'"]),
])
def test_rules_across_keys_are_the_validators_alone(data, words):
    """What docs/config.md lists as beyond a key-by-key schema: accepted by the schema, refused
    by the loader with the file, the key and the rule."""
    assert _schema_errors(data) == []
    with pytest.raises(ConfigError) as info:
        config_from_dict(data, "run.toml")
    for word in words:
        assert word in str(info.value), str(info.value)


# ------------------------------------------------------------ schema ≡ validator, per key

#: Keys whose validity depends on another key (docs/config.md): left out of the per-key
#: agreement below and covered by test_rules_across_keys_are_the_validators_alone.
CROSS_KEY = {
    "device.port": "protocol 'dynamixel' needs a serial port, not 'sim'",
    "device.protocol": "the same, from the other side",
    "device.sensors": "only with protocol 'dynamixel'",
    "device.servos": "only with protocol 'dynamixel'",
    "limits.sensor_hold": "sensor_fault >= sensor_hold",
    "limits.sensor_fault": "sensor_fault >= sensor_hold",
    "mqtt.url": "its form is MqttConfig's",
    "mqtt.robot_id": "its characters are poise.api.topics'",
    "servo.qa_min": "qa_min < qa_max, within the servo's ±256 turns",
    "servo.qa_max": "qa_min < qa_max, within the servo's ±256 turns",
    "servo.zero": "its default limits (± one turn) must stay within ±256 turns",
}
#: Loop rate at the top of its range and gains below its bottom: a gain's only bound is then
#: its declared one, and no default gain depends on the rate under test.
BASE = {"loop": {"rate": rules.MAX_RATE},
        "algorithm": {"gamma": 1.0, "gamma_z": 1.0, "gamma_e": 1.0}}
SERVO_BASE = {"device": {"port": "dynamixel:/dev/ttyUSB0",
                         "servos": [{"id": 1, "current_limit": 1.0}]}}


def _edges(key) -> list:
    """Values at and next to the declared bounds, and the declared choices."""
    out = list(key.choices)
    for bound in (key.gt, key.ge, key.le):
        if bound is not None:
            out += [bound, math.nextafter(bound, -math.inf), math.nextafter(bound, math.inf)]
            if float(bound).is_integer():
                out += [int(bound) - 1, int(bound), int(bound) + 1]
    return out


def _values(key) -> st.SearchStrategy:
    finite = st.floats(allow_nan=False, allow_infinity=False)
    numbers = st.one_of(st.integers(-10**7, 10**7), finite)
    return st.one_of(
        st.sampled_from(_edges(key) or [0]), numbers, st.booleans(), st.text(max_size=3),
        st.lists(st.one_of(numbers, st.sampled_from(_edges(key) or [1.0])), max_size=3),
        st.lists(st.text(max_size=2), max_size=2),
        st.dictionaries(st.sampled_from(["id", "x"]), st.integers(0, 3), max_size=1))


TABLE_CASES = [(t, k) for t, keys in TABLE_KEYS.items() for k in keys
               if f"{t}.{k}" not in CROSS_KEY]
SERVO_CASES = [k for k in SERVO_KEYS if f"servo.{k}" not in CROSS_KEY]


def _agree(data: dict) -> tuple[bool, str]:
    schema_ok = not _schema_errors(data)
    try:
        config_from_dict(data, "run.toml")
        loader_ok, why = True, ""
    except ConfigError as exc:
        loader_ok, why = False, str(exc)
    return schema_ok == loader_ok, f"schema {'accepts' if schema_ok else 'refuses'}, " \
        f"loader {'accepts' if loader_ok else 'refuses: ' + why}"


def test_schema_and_loader_agree_at_every_declared_bound_and_choice():
    """Each bound, the floats next to it (and the integers, for an integer bound) and each
    declared choice: the schema and the loader say the same."""
    cases = [(f"{t}.{k}", _set(BASE, f"{t}.{k}", v), v) for t, k in TABLE_CASES
             for v in _edges(TABLE_KEYS[t][k])]
    cases += [(f"device.servos[0].{k}", _set(SERVO_BASE, f"device.servos.0.{k}", v), v)
              for k in SERVO_CASES for v in _edges(SERVO_KEYS[k])]
    assert len(cases) > 100
    disagree = []
    for where, config, value in cases:
        same, what = _agree(config)
        if not same:
            disagree.append(f"{where} = {value!r}: {what}")
    assert disagree == []


@pytest.mark.parametrize(("table", "key"), TABLE_CASES)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_schema_and_loader_agree_on_every_value_of_a_key(table, key, data):
    value = data.draw(_values(TABLE_KEYS[table][key]), label=f"{table}.{key}")
    config = _set(BASE, f"{table}.{key}", value)
    same, what = _agree(config)
    assert same, f"{table}.{key} = {value!r}: {what}"


@pytest.mark.parametrize("key", SERVO_CASES)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_schema_and_loader_agree_on_every_value_of_a_servo_key(key, data):
    value = data.draw(_values(SERVO_KEYS[key]), label=f"servo.{key}")
    config = _set(SERVO_BASE, f"device.servos.0.{key}", value)
    same, what = _agree(config)
    assert same, f"device.servos[0].{key} = {value!r}: {what}"


def test_ranges_owned_by_the_rules_are_declared_with_their_constants():
    """The schema's bounds of the loop rate and the gains are those
    :mod:`poise.api.rules` enforces: at the top loop rate a gain's bound is its
    declared one, on both sides."""
    loop, algorithm = TABLE_KEYS["loop"], TABLE_KEYS["algorithm"]
    assert (loop["rate"].ge, loop["rate"].le) == (rules.MIN_RATE, rules.MAX_RATE)
    rules.check_rate(rules.MIN_RATE), rules.check_rate(rules.MAX_RATE)
    for x in (math.nextafter(rules.MIN_RATE, 0), math.nextafter(rules.MAX_RATE, math.inf)):
        with pytest.raises(rules.RuleError):
            rules.check_rate(x)
    for name in rules.RATE_GAINS:
        key = algorithm[name]
        assert (key.gt, key.le) == (0, rules.MAX_RATE)
        assert rules.check_gain(name, key.le, rules.MAX_RATE) == key.le
        for bad in (key.gt, math.nextafter(key.le, math.inf)):
            with pytest.raises(rules.RuleError):
                rules.check_gain(name, bad, rules.MAX_RATE)
    assert (algorithm["damping"].ge, algorithm["damping"].le) == (0, rules.MAX_DAMPING)
    assert algorithm["name"].choices == rules.ALGORITHMS
    assert algorithm["update"].choices == rules.UPDATES
    assert set(rules.GAIN_KEYS) <= set(algorithm)


def test_every_key_is_declared_once_and_described_in_the_schema():
    """Every field of the configuration's dataclasses is a declared key; [mqtt] declares only
    keys MqttConfig reads, [[device.servos]] exactly ServoConfig's; each key reaches the schema
    with its description."""
    for name, cls_field in ((f.name, f) for f in dataclasses.fields(Config)
                            if f.name not in ("source", "mqtt")):
        cls = cls_field.default_factory()
        assert set(TABLE_KEYS[name]) == {f.name for f in dataclasses.fields(cls)}, name
    assert set(SERVO_KEYS) == set(dynamixel_config.KEYS)
    with pytest.raises(ValueError, match="unknown"):
        from poise.api.mqtt_config import MqttConfig

        MqttConfig.from_settings({**dict.fromkeys(MQTT_KEYS), "not_a_key": 1})
    tables = config_schema()["properties"]
    for table, keys in TABLE_KEYS.items():
        props = tables[table]["properties"]
        assert set(props) == set(keys)
        assert all(props[k]["description"] == keys[k].doc for k in keys)
    servo = tables["device"]["properties"]["servos"]["items"]
    assert servo["required"] == ["id"] and set(servo["properties"]) == set(SERVO_KEYS)


def test_an_empty_file_loads_to_the_declared_defaults():
    """The loader's defaults are the schema's: one place (the declaration) gives both."""
    resolved = load_config(None).as_dict()
    for table, keys in TABLE_KEYS.items():
        if table == "mqtt":
            continue
        for key, spec in keys.items():
            if spec.default is not None:
                assert resolved[table][key] == spec.default, f"{table}.{key}"
    mqtt = load_config(None).mqtt
    for key in ("enabled", "robot_id", "joint_states_hz"):
        assert getattr(mqtt, key) == MQTT_KEYS[key].default


def test_every_boolean_and_choice_key_given_a_non_default_value_is_read():
    """A declared key the loader forgot would silently keep its default (it happened to
    ``loop.busy_poll``): every boolean key set to the opposite of its default, and every key
    with choices set to another choice, reaches the loaded configuration."""
    checked = 0
    for table, keys in TABLE_KEYS.items():
        if table == "mqtt":
            continue
        for key, spec in keys.items():
            if spec.kind == "boolean" and spec.default is not None:
                value = not spec.default
            elif spec.choices and spec.default is not None and len(spec.choices) > 1:
                value = next(c for c in spec.choices if c != spec.default)
            else:
                continue
            try:
                resolved = load_config(None, {f"{table}.{key}": (value, "test")}).as_dict()
            except ConfigError:
                continue  # a value only valid with other keys (e.g. a protocol's port)
            assert resolved[table][key] == value, f"{table}.{key}"
            checked += 1
    assert checked >= 8
