"""The controller's configuration: one TOML file, validated at load into frozen dataclasses.

Layout (every table and key optional; the defaults are the embedded ``poise run`` demo)::

    [device]      port = "sim" | "/dev/ttyACM0" | "dynamixel:/dev/ttyUSB0", baud, timeout,
                  sim_model, sim_params, sim_args, watchdog_ms, protocol, sensors, timeout_ms,
                  retries, [[device.servos]] (id, radius, sign, zero, mode, current_limit, ...)
    [model]       name (built-in name or file), calibration (file), gravity (override),
                  total_mass (weighed)
    [algorithm]   name, update, gamma, gamma_z, gamma_e, damping, target, tolerance
    [loop]        rate, mode ("ff" | "fb"), pacing ("device" | "host"), effort_feedforward,
                  shaper, gain_uncertainty, follow_model, choose_move, targets,
                  live_targets, replan_on_stall, ring_watch, balance, plan_budget,
                  switch_interval,
                  compiled, priority, process ("own" | "shared"), busy_poll, wire, cpu
    [limits]      qa_min, qa_max, qa_rate, qa_accel, sensor_hold, sensor_fault
    [mqtt]        enabled, url, robot_id, username, password, tls, ca_file, joint_states_hz
    [log]         path

Each key is declared once (:mod:`poise.controller.config_spec`): on its dataclass field
(``setting(default, kind, doc, range)``; :mod:`poise.controller.config_tables`, ``[device]``:
:mod:`poise.devices.config`), or in ``MQTT_KEYS`` / ``SERVO_KEYS``. The loader here reads every
table by its declarations (:class:`~poise.controller.config_reader.TableReader`) and checks
the rules across keys; :mod:`poise.controller.config_schema` turns the same declarations into
the JSON Schema editors use (docs/config.md); a default is changed in one place, its field.
Every error names the file, the key, the value and what is allowed, e.g. ``run.toml: loop.rate
= 5000: must be in [10, 1000] Hz``; a value that came from the command line is named by its
flag instead of the file. The model a configuration names is built by
:func:`~poise.controller.config_model.build_model`. Everything is importable from here.
"""

from __future__ import annotations

import pathlib
import tomllib
from collections.abc import Mapping
from typing import Any

from poise.api.mqtt_config import MqttConfig
from poise.api.rules import GAIN_KEYS, RuleError, check_gain, check_rate, split_device
from poise.api.topics import check_robot_id
from poise.controller.config_model import ControllerModel, build_model
from poise.controller.config_reader import ConfigError, TableReader
from poise.controller.config_tables import (
    TABLE_KEYS,
    TABLES,
    AlgorithmConfig,
    Config,
    DeviceConfig,
    LimitsConfig,
    LogConfig,
    LoopConfig,
    ModelConfig,
)
from poise.devices.dynamixel_config import servos_from_config


def _device(t: TableReader, base: pathlib.Path | None) -> DeviceConfig:
    t.check_keys()
    protocol, port = split_device(t.get("port"), t.get("protocol"))
    tables = t.get("servos")  # each key checked by its declaration
    try:
        servos = servos_from_config(tables, where=f"{t.name}.servos")
    except ValueError as exc:  # the rules across a servo's keys and between servos
        raise ConfigError(f"{t.source}: {exc}") from None
    if protocol != "dynamixel" and (servos or t.data.get("sensors") is not None):
        bad = "servos" if servos else "sensors"
        raise t.fail(bad, t.data[bad], "goes with protocol = 'dynamixel' (a servo bus)")
    if protocol == "dynamixel" and port == "sim":
        raise t.fail("port", port, "protocol 'dynamixel' needs the bus's serial port "
                     "(start a virtual bus with 'poise device sim --protocol dynamixel')")
    return DeviceConfig(
        port=port, baud=t.get("baud"), timeout=t.get("timeout"), sim_model=t.get("sim_model"),
        sim_params=t.path("sim_params", base), sim_args=t.get("sim_args"),
        watchdog_ms=t.get("watchdog_ms"), protocol=protocol, sensors=t.get("sensors"),
        servos=servos, timeout_ms=t.get("timeout_ms"), retries=t.get("retries"),
    )


def _model(t: TableReader, base: pathlib.Path | None) -> ModelConfig:
    t.check_keys()
    name = t.get("name")
    if name.endswith((".toml", ".json")) or "/" in name:
        name = t.path("name", base) or name
    return ModelConfig(name=name, calibration=t.path("calibration", base),
                       gravity=t.get("gravity"), total_mass=t.get("total_mass"))


def _algorithm(t: TableReader, rate: float) -> AlgorithmConfig:
    """``[algorithm]``; the gains are checked by :mod:`poise.api.rules` against the
    loop ``rate`` (the same rule as a ``gains`` command)."""
    t.check_keys()
    gains: dict[str, Any] = {}
    for key in GAIN_KEYS:
        value = t.value(key)
        try:
            gains[key] = check_gain(key, value, rate, "algorithm")
        except RuleError as exc:
            raise t.fail(key, value, exc.rule) from None
    return AlgorithmConfig(name=t.get("name"), target=t.get("target"),
                           tolerance=t.get("tolerance"), **gains)


def _rate(t: TableReader) -> float:
    value = t.value("rate")
    try:
        return check_rate(value)
    except RuleError as exc:
        raise t.fail("rate", value, exc.rule) from None


def _loop(t: TableReader) -> LoopConfig:
    t.check_keys()
    return LoopConfig(
        rate=_rate(t), mode=t.get("mode"), pacing=t.get("pacing"),
        effort_feedforward=t.get("effort_feedforward"), shaper=t.get("shaper"),
        gain_uncertainty=t.get("gain_uncertainty"),
        follow_model=t.get("follow_model"), choose_move=t.get("choose_move"),
        targets=t.get("targets"),
        live_targets=t.get("live_targets"), plan_budget=t.get("plan_budget"),
        replan_on_stall=t.get("replan_on_stall"), ring_watch=t.get("ring_watch"),
        balance=t.get("balance"),
        switch_interval=t.get("switch_interval"),
        compiled=t.get("compiled"),
        priority=t.get("priority"), process=t.get("process"),
        busy_poll=t.get("busy_poll"), wire=t.get("wire"), cpu=t.get("cpu"),
    )


def _limits(t: TableReader) -> LimitsConfig:
    t.check_keys()
    hold, fault = t.get("sensor_hold"), t.get("sensor_fault")
    if fault < hold:
        raise t.fail("sensor_fault", fault, f"must be >= limits.sensor_hold = {hold:g} s")
    return LimitsConfig(qa_min=t.get("qa_min"), qa_max=t.get("qa_max"),
                        qa_rate=t.get("qa_rate"), qa_accel=t.get("qa_accel"),
                        sensor_hold=hold, sensor_fault=fault)


def _mqtt(t: TableReader, base: pathlib.Path | None) -> MqttConfig:
    """The ``[mqtt]`` table as the one :class:`~poise.api.mqtt_config.MqttConfig`
    (without ``url``: an embedded broker, ``embedded = True``)."""
    t.check_keys()
    url = t.get("url")
    robot_id = t.get("robot_id")
    try:
        check_robot_id(robot_id)
    except ValueError as exc:
        raise t.fail("robot_id", robot_id, str(exc)) from None
    tls = t.get("tls")
    settings = {
        "enabled": t.get("enabled"), "url": url, "robot_id": robot_id,
        "username": t.get("username"), "password": t.get("password"),
        "tls": bool(url and url.startswith("mqtts://")) if tls is None else tls,
        "ca_file": t.path("ca_file", base), "joint_states_hz": t.get("joint_states_hz"),
    }
    try:
        return MqttConfig.from_settings(settings)
    except ValueError as exc:  # the URL
        raise t.fail("url", url, str(exc)) from None


def _log(t: TableReader, base: pathlib.Path | None) -> LogConfig:
    t.check_keys()
    return LogConfig(path=t.path("path", base))


def config_from_dict(data: Mapping[str, Any], source: str = "<dict>",
                     base: pathlib.Path | None = None,
                     origins: Mapping[str, str] | None = None) -> Config:
    """Validate a configuration mapping (the parsed TOML) into a :class:`Config`.

    Args:
        data: ``{table: {key: value}}``.
        source: name used in error messages (the file name).
        base: directory that relative paths are resolved against (the file's).
        origins: ``{"table.key": "--flag"}`` for values set on the command line.
    """
    origins = origins or {}
    for key in data:
        if key not in TABLES:
            raise ConfigError(f"{source}: [{key}]: unknown table; allowed tables are "
                              f"{', '.join(TABLES)}")

    def table(name: str) -> TableReader:
        return TableReader(data.get(name, {}), name, source, origins, TABLE_KEYS[name])

    loop = _loop(table("loop"))
    return Config(
        device=_device(table("device"), base), model=_model(table("model"), base),
        algorithm=_algorithm(table("algorithm"), loop.rate), loop=loop,
        limits=_limits(table("limits")), mqtt=_mqtt(table("mqtt"), base),
        log=_log(table("log"), base), source=source,
    )


def load_config(path: str | pathlib.Path | None = None,
                overrides: Mapping[str, tuple[Any, str]] | None = None) -> Config:
    """Read and validate a configuration file, then apply command-line overrides.

    Args:
        path: the TOML file (``None``: the built-in defaults).
        overrides: ``{"loop.rate": (1000.0, "--rate")}``: dotted key → (value, flag name);
            validated like file values, errors name the flag.

    Raises:
        ConfigError: unreadable file, invalid TOML, unknown table or key, invalid value.
    """
    data: dict[str, Any] = {}
    source, base = "<defaults>", None
    if path is not None:
        p = pathlib.Path(path)
        source, base = str(p), p.resolve().parent
        try:
            with p.open("rb") as fh:
                data = tomllib.load(fh)
        except OSError as exc:
            raise ConfigError(f"{p}: cannot be read ({exc.strerror})") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{p}: not valid TOML ({exc})") from None
    origins: dict[str, str] = {}
    for dotted, (value, flag) in (overrides or {}).items():
        table, _, key = dotted.partition(".")
        if table not in TABLES or not key:
            raise ConfigError(f"{flag}: {dotted!r} is not a configuration key")
        section = data.setdefault(table, {})
        if not isinstance(section, dict):
            raise ConfigError(f"{source}: [{table}] = {section!r}: must be a table")
        section[key] = value
        origins[dotted] = flag
    return config_from_dict(data, source, base, origins)


def parse_override(text: str) -> tuple[str, Any]:
    """``"loop.rate=1000"`` → ``("loop.rate", 1000)`` (the value is read as TOML, else text)."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set {text!r}: expected KEY=VALUE, e.g. loop.rate=1000")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    return key.strip(), value


__all__ = ["TABLES", "TABLE_KEYS", "AlgorithmConfig", "Config", "ConfigError", "ControllerModel",
           "DeviceConfig", "LimitsConfig", "LogConfig", "LoopConfig", "ModelConfig",
           "build_model", "config_from_dict", "load_config", "parse_override"]
