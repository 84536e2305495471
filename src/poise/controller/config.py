"""The controller's configuration: one TOML file, validated at load into frozen dataclasses.

Layout (every table and key optional; the defaults are the embedded ``poise run`` demo)::

    [device]      port = "sim" | "/dev/ttyACM0" | "dynamixel:/dev/ttyUSB0", baud, timeout,
                  sim_model, sim_params, sim_args, watchdog_ms, protocol, sensors, timeout_ms,
                  [[device.servos]] (id, radius, sign, zero, mode, current_limit, ...)
    [model]       name (built-in name or file), calibration (file), gravity (override)
    [algorithm]   name, update, gamma, gamma_z, gamma_e, damping, target, tolerance
    [loop]        rate, mode ("ff" | "fb"), pacing ("device" | "host"), effort_feedforward,
                  switch_interval, compiled, priority, process ("own" | "shared")
    [limits]      qa_min, qa_max, qa_rate, sensor_hold, sensor_fault
    [mqtt]        enabled, url, robot_id, username, password, tls, ca_file, joint_states_hz
    [log]         path

The full schema with units is in ``docs/controller.md``. Every error names the file, the key,
the value and what is allowed, e.g. ``run.toml: loop.rate = 5000: must be in (0, 1000] Hz``;
a value that came from the command line is named by its flag instead of the file.
"""

from __future__ import annotations

import math
import pathlib
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from poise.controller.rules import (
    ALGORITHMS,
    MODES,
    PACINGS,
    PROCESSES,
    PROTOCOLS,
    RuleError,
    check_gain,
    check_rate,
    split_device,
)
from poise.devices.dynamixel_config import ServoConfig, servos_from_config
from poise.telemetry.mqtt_config import MqttConfig
from poise.telemetry.topics import check_robot_id


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names file, key, value and rule."""


@dataclass(frozen=True)
class DeviceConfig:
    """Where the robot is.

    Attributes:
        port: serial device path, or ``"sim"`` to spawn ``poise device sim`` (a virtual device
            on a pseudo-terminal, a separate process).
        baud: baud rate (ignored by USB-CDC devices and ptys) [bit/s].
        timeout: handshake / acknowledgement timeout [s].
        sim_model: model the virtual device simulates (default: ``model.name``).
        sim_params: the simulated robot's true parameters (``poise device sim --params``).
        sim_args: extra ``poise device sim`` flags, e.g. ``["--corrupt", "0.02"]``.
        watchdog_ms: set the device watchdog at connect [ms] (``None``: the device's own).
        protocol: ``poise`` (the wire protocol: our firmware, the virtual device) or
            ``dynamixel`` (a Dynamixel Protocol 2.0 servo bus); a port written
            ``dynamixel:/dev/ttyUSB0`` selects it too.
        sensors: port of a poise-protocol joint-sensor board measuring q (a composite
            device with the servo bus); ``None``: q is not measured by a servo bus.
        servos: the Dynamixel actuator table (``[[device.servos]]``); empty: IDs 1 … m with
            the defaults of :mod:`poise.devices.dynamixel_config`.
        timeout_ms: Dynamixel status-packet timeout [ms] (``None``: the SDK's).
        retries: Dynamixel sync reads repeated after a failed one before it is a fault.
    """

    port: str = "sim"
    baud: int = 1_000_000
    timeout: float = 2.0
    sim_model: str | None = None
    sim_params: str | None = None
    sim_args: tuple[str, ...] = ()
    watchdog_ms: int | None = None
    protocol: str = "poise"
    sensors: str | None = None
    servos: tuple[ServoConfig, ...] = ()
    timeout_ms: float | None = None
    retries: int = 1


@dataclass(frozen=True)
class ModelConfig:
    """The controller's (statics) model.

    Attributes:
        name: built-in model name or a model file path.
        calibration: a calibration file (model schema plus a ``calibration`` metadata key);
            a file with ``family`` replaces the model, one without overrides its keys.
        gravity: override the statics model's gravity [m/s²] (e.g. 0: the paper's
            "model that neglects gravity" experiment).
    """

    name: str = "double_pendulum"
    calibration: str | None = None
    gravity: float | None = None


@dataclass(frozen=True)
class AlgorithmConfig:
    """The IK law and its gains (live-tunable by command).

    Attributes:
        name: ``alg1`` (statics solved beforehand), ``alg2`` (statics online) or ``plain``
            (classic DLS CLIK that treats every coordinate as actuated).
        update: Algorithm 1's actuator update: ``dls``, ``pinv``, ``inverse``, ``transpose``.
        gamma: Γ of Algorithm 1 and plain CLIK [1/s] (``Γ · period ≤ 1``).
        gamma_z: ΓZ of Algorithm 2 (task error decay rate) [1/s].
        gamma_e: ΓE of Algorithm 2 (statics residual decay rate) [1/s].
        damping: λ of the damped inverses [task units].
        target: x̄ [task units]; ``None``: hold the task value where the robot starts.
        tolerance: task error below which the target counts as reached [task units].
    """

    name: str = "alg1"
    update: str = "dls"
    gamma: float = 2.0
    gamma_z: float = 2.0
    gamma_e: float = 20.0
    damping: float = 1e-2
    target: tuple[float, ...] | None = None
    tolerance: float = 2e-3


@dataclass(frozen=True)
class LoopConfig:
    """Rate, mode and pacing of the control loop.

    Attributes:
        rate: loop rate = device sensor rate [Hz], at most 1000.
        mode: ``fb`` (task error from the measured q) or ``ff`` (from the predicted q̄).
        pacing: ``device`` (answer each sensor frame) or ``host`` (own clock, latest frame).
        effort_feedforward: send ``τ_ff = G_a(q̄)`` with each setpoint.
        switch_interval: ``sys.setswitchinterval`` while the loop runs [s] (how long another
            Python thread may hold the GIL before the loop thread gets it); 0 leaves it.
        compiled: run the cycle on the compiled kernels (:mod:`poise.kernels`, compiled or
            loaded from the cache at connect) where the model's family has them; ``false``:
            the numpy reference.
        priority: real-time priority of the loop thread (``SCHED_FIFO``, 1–99, where the OS
            grants it; docs/controller.md); 0 (default): the normal scheduler.
        process: ``own`` (default for ``poise run``): the controller runs in a process of its
            own and telemetry, the log and the broker stay in the first one
            (:mod:`poise.controller.rtproc`); ``shared``: all in one process.
    """

    rate: float = 500.0
    mode: str = "fb"
    pacing: str = "device"
    effort_feedforward: bool = True
    switch_interval: float = 2e-4
    compiled: bool = True
    priority: int = 0
    process: str = "own"


@dataclass(frozen=True)
class LimitsConfig:
    """Safety limits enforced on every setpoint.

    Attributes:
        qa_min, qa_max: actuator position limits [actuator units]; ``None``: the model's,
            intersected with the device's channel limits.
        qa_rate: max ``|Δqa|`` per second, one value for all actuators or one each
            [actuator units/s]; ``None``: unlimited.
        sensor_hold: no sensor frame for this long → hold the last setpoint [s].
        sensor_fault: no sensor frame for this long → fault [s].
    """

    qa_min: tuple[float, ...] | None = None
    qa_max: tuple[float, ...] | None = None
    qa_rate: tuple[float, ...] | None = (0.5,)
    sensor_hold: float = 0.05
    sensor_fault: float = 0.5


@dataclass(frozen=True)
class LogConfig:
    """Experiment log.

    Attributes:
        path: log file (MCAP); ``None``: no log.
    """

    path: str | None = None


@dataclass(frozen=True)
class Config:
    """The whole, validated configuration (see the module docstring)."""

    device: DeviceConfig = field(default_factory=DeviceConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    loop: LoopConfig = field(default_factory=LoopConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    mqtt: MqttConfig = field(default_factory=lambda: MqttConfig(embedded=True))
    log: LogConfig = field(default_factory=LogConfig)
    source: str = "<defaults>"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready resolved configuration (password redacted)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name == "source":
                continue
            table = getattr(self, f.name)
            out[f.name] = {k.name: _jsonable(getattr(table, k.name)) for k in fields(table)}
        if out["mqtt"].get("password") is not None:
            out["mqtt"]["password"] = "***"
        out["source"] = self.source
        return out

    def with_changes(self, **tables: Any) -> Config:
        """A copy with some tables replaced (``cfg.with_changes(loop=replace(cfg.loop, …))``)."""
        return replace(self, **tables)


def _jsonable(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


# ------------------------------------------------------------------------------ validation


class _Table:
    """Typed access to one table; errors name the source, the dotted key and the rule."""

    def __init__(self, data: Any, name: str, source: str, origins: Mapping[str, str]) -> None:
        self.name, self.source, self.origins = name, source, origins
        if not isinstance(data, Mapping):
            raise ConfigError(f"{source}: [{name}] = {data!r}: must be a table")
        self.data = data

    def where(self, key: str) -> str:
        dotted = f"{self.name}.{key}"
        origin = self.origins.get(dotted)
        return f"{origin} ({dotted})" if origin else f"{self.source}: {dotted}"

    def fail(self, key: str, value: Any, rule: str) -> ConfigError:
        return ConfigError(f"{self.where(key)} = {value!r}: {rule}")

    def check_keys(self, allowed: Sequence[str]) -> None:
        for key in self.data:
            if key not in allowed:
                raise ConfigError(f"{self.where(key)}: unknown key; allowed keys in "
                                  f"[{self.name}] are {', '.join(allowed)}")

    def number(self, key: str, default: Any, *, gt: float | None = None,
               ge: float | None = None, le: float | None = None,
               optional: bool = False) -> Any:
        value = self.data.get(key, default)
        if value is None and optional:
            return None
        parts = ["a finite number"]
        if gt is not None:
            parts.append(f"> {gt:g}")
        if ge is not None:
            parts.append(f">= {ge:g}")
        if le is not None:
            parts.append(f"<= {le:g}")
        rule = "must be " + " ".join(parts)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(key, value, rule)
        x = float(value)
        if not math.isfinite(x) or (gt is not None and not x > gt) or (
                ge is not None and not x >= ge) or (le is not None and not x <= le):
            raise self.fail(key, value, rule)
        return x

    def integer(self, key: str, default: int, *, ge: int) -> int:
        value = self.data.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < ge:
            raise self.fail(key, value, f"must be an integer >= {ge}")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self.data.get(key, default)
        if not isinstance(value, bool):
            raise self.fail(key, value, "must be true or false")
        return value

    def string(self, key: str, default: Any, *, choices: Sequence[str] = (),
               optional: bool = False) -> Any:
        value = self.data.get(key, default)
        if value is None and optional:
            return None
        if not isinstance(value, str) or not value or (choices and value not in choices):
            rule = (f"must be one of {', '.join(map(repr, choices))}" if choices
                    else "must be a non-empty string")
            raise self.fail(key, value, rule)
        return value

    def path(self, key: str, base: pathlib.Path | None) -> str | None:
        value = self.string(key, None, optional=True)
        if value is None:
            return None
        p = pathlib.Path(value).expanduser()
        if not p.is_absolute() and base is not None and self.origins.get(
                f"{self.name}.{key}") is None:
            p = base / p  # relative to the configuration file
        return str(p)

    def vector(self, key: str, default: Any, *, positive: bool = False,
               optional: bool = True) -> tuple[float, ...] | None:
        value = self.data.get(key, default)
        if value is None and optional:
            return None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = [value]
        rule = "must be a list of finite numbers" + (" > 0" if positive else "")
        if not isinstance(value, (list, tuple)) or not value:
            raise self.fail(key, value, rule)
        out = []
        for v in value:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                    or (positive and v <= 0):
                raise self.fail(key, value, rule)
            out.append(float(v))
        return tuple(out)

    def strings(self, key: str) -> tuple[str, ...]:
        value = self.data.get(key, [])
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise self.fail(key, value, "must be a list of strings")
        return tuple(value)


def _device(t: _Table, base: pathlib.Path | None) -> DeviceConfig:
    t.check_keys(("port", "baud", "timeout", "sim_model", "sim_params", "sim_args",
                  "watchdog_ms", "protocol", "sensors", "servos", "timeout_ms", "retries"))
    wd = t.data.get("watchdog_ms")
    if wd is not None and (isinstance(wd, bool) or not isinstance(wd, int) or
                           not 10 <= wd <= 10_000):
        raise t.fail("watchdog_ms", wd, "must be an integer in [10, 10000] ms")
    port = t.string("port", "sim")
    protocol = t.string("protocol", "poise", choices=PROTOCOLS)
    protocol, port = split_device(port, protocol)
    tables = t.data.get("servos", [])
    if not isinstance(tables, list) or not all(isinstance(x, dict) for x in tables):
        raise t.fail("servos", tables, "must be an array of tables ([[device.servos]])")
    try:
        servos = servos_from_config(tables, where=f"{t.name}.servos")
    except ValueError as exc:
        raise ConfigError(f"{t.source}: {exc}") from None
    if protocol != "dynamixel" and (servos or t.data.get("sensors") is not None):
        bad = "servos" if servos else "sensors"
        raise t.fail(bad, t.data[bad], "goes with protocol = 'dynamixel' (a servo bus)")
    if protocol == "dynamixel" and port == "sim":
        raise t.fail("port", port, "protocol 'dynamixel' needs the bus's serial port "
                     "(start a virtual bus with 'poise device sim --protocol dynamixel')")
    return DeviceConfig(
        port=port,
        baud=t.integer("baud", 1_000_000, ge=1),
        timeout=t.number("timeout", 2.0, gt=0),
        sim_model=t.string("sim_model", None, optional=True),
        sim_params=t.path("sim_params", base),
        sim_args=t.strings("sim_args"), watchdog_ms=wd, protocol=protocol,
        sensors=t.string("sensors", None, optional=True), servos=servos,
        timeout_ms=t.number("timeout_ms", None, gt=0, optional=True),
        retries=t.integer("retries", 1, ge=0),
    )


def _model(t: _Table, base: pathlib.Path | None) -> ModelConfig:
    t.check_keys(("name", "calibration", "gravity"))
    name = t.string("name", "double_pendulum")
    if name.endswith((".toml", ".json")) or "/" in name:
        name = t.path("name", base) or name
    return ModelConfig(name=name, calibration=t.path("calibration", base),
                       gravity=t.number("gravity", None, ge=0, optional=True))


def _algorithm(t: _Table, rate: float) -> AlgorithmConfig:
    """``[algorithm]``; the gains are checked by :mod:`poise.controller.rules` against the
    loop ``rate`` (the same rule as a ``gains`` command)."""
    t.check_keys(("name", "update", "gamma", "gamma_z", "gamma_e", "damping", "target",
                  "tolerance"))
    defaults = {"update": "dls", "gamma": 2.0, "gamma_z": 2.0, "gamma_e": 20.0,
                "damping": 1e-2}
    gains: dict[str, Any] = {}
    for key, default in defaults.items():
        value = t.data.get(key, default)
        try:
            gains[key] = check_gain(key, value, rate, "algorithm")
        except RuleError as exc:
            raise t.fail(key, value, exc.rule) from None
    return AlgorithmConfig(
        name=t.string("name", "alg1", choices=ALGORITHMS),
        target=t.vector("target", None),
        tolerance=t.number("tolerance", 2e-3, gt=0),
        **gains,
    )


def _rate(t: _Table) -> float:
    value = t.data.get("rate", 500.0)
    try:
        return check_rate(value)
    except RuleError as exc:
        raise t.fail("rate", value, exc.rule) from None


def _loop(t: _Table) -> LoopConfig:
    t.check_keys(("rate", "mode", "pacing", "effort_feedforward", "switch_interval",
                  "compiled", "priority", "process"))
    priority = t.integer("priority", 0, ge=0)
    if priority > 99:
        raise t.fail("priority", priority, "must be in [0, 99] (0: normal scheduler)")
    return LoopConfig(
        rate=_rate(t),
        mode=t.string("mode", "fb", choices=MODES),
        pacing=t.string("pacing", "device", choices=PACINGS),
        effort_feedforward=t.boolean("effort_feedforward", True),
        switch_interval=t.number("switch_interval", 2e-4, ge=0, le=0.1),
        compiled=t.boolean("compiled", True), priority=priority,
        process=t.string("process", "own", choices=PROCESSES),
    )


def _limits(t: _Table) -> LimitsConfig:
    t.check_keys(("qa_min", "qa_max", "qa_rate", "sensor_hold", "sensor_fault"))
    hold = t.number("sensor_hold", 0.05, gt=0)
    fault = t.number("sensor_fault", 0.5, gt=0)
    if fault < hold:
        raise t.fail("sensor_fault", fault, f"must be >= limits.sensor_hold = {hold:g} s")
    return LimitsConfig(
        qa_min=t.vector("qa_min", None), qa_max=t.vector("qa_max", None),
        qa_rate=t.vector("qa_rate", [0.5], positive=True), sensor_hold=hold,
        sensor_fault=fault,
    )


def _mqtt(t: _Table, base: pathlib.Path | None) -> MqttConfig:
    """The ``[mqtt]`` table as the one :class:`~poise.telemetry.mqtt_config.MqttConfig`
    (without ``url``: an embedded broker, ``embedded = True``)."""
    t.check_keys(("enabled", "url", "robot_id", "username", "password", "tls", "ca_file",
                  "joint_states_hz"))
    url = t.string("url", None, optional=True)
    robot_id = t.string("robot_id", "poise")
    try:
        check_robot_id(robot_id)
    except ValueError as exc:
        raise t.fail("robot_id", robot_id, str(exc)) from None
    settings = {
        "enabled": t.boolean("enabled", True), "url": url, "robot_id": robot_id,
        "username": t.string("username", None, optional=True),
        "password": t.string("password", None, optional=True),
        "tls": t.boolean("tls", bool(url and url.startswith("mqtts://"))),
        "ca_file": t.path("ca_file", base),
        "joint_states_hz": t.number("joint_states_hz", 0.0, ge=0, le=100),
    }
    try:
        return MqttConfig.from_settings(settings)
    except ValueError as exc:  # the URL
        raise t.fail("url", url, str(exc)) from None


def _log(t: _Table, base: pathlib.Path | None) -> LogConfig:
    t.check_keys(("path",))
    return LogConfig(path=t.path("path", base))


TABLES = ("device", "model", "algorithm", "loop", "limits", "mqtt", "log")


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

    def table(name: str) -> _Table:
        return _Table(data.get(name, {}), name, source, origins)

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


# ------------------------------------------------------------------------------ the model


@dataclass(frozen=True)
class ControllerModel:
    """The statics model the controller runs, and where it came from.

    Attributes:
        model: the :class:`~poise.models.MechanicalModel`.
        source: built-in name or file it was loaded from.
        calibration: the calibration file's ``calibration`` metadata (empty without one).
    """

    model: Any
    source: str
    calibration: dict[str, Any] = field(default_factory=dict)


def build_model(cfg: ModelConfig) -> ControllerModel:
    """Load ``cfg.name``, apply the calibration file and the gravity override.

    A calibration file is in the model schema (``poise model show --json`` output, TOML or
    JSON) plus a ``calibration`` metadata table. With a ``family`` key it is the whole model;
    without one its keys override the base model's description.

    Raises:
        ConfigError: unknown model, unreadable or invalid calibration file.
    """
    import json

    from poise.models import ModelError, load_model, model_from_dict

    try:
        model = load_model(cfg.name)
    except ModelError as exc:
        raise ConfigError(f"model.name = {cfg.name!r}: {exc}") from None
    meta: dict[str, Any] = {}
    if cfg.calibration is not None:
        p = pathlib.Path(cfg.calibration)
        try:
            text = p.read_bytes()
            data = json.loads(text) if p.suffix == ".json" else tomllib.loads(text.decode())
        except OSError as exc:
            raise ConfigError(f"model.calibration = {str(p)!r}: cannot be read "
                              f"({exc.strerror})") from None
        except (ValueError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"model.calibration = {str(p)!r}: not valid "
                              f"{'JSON' if p.suffix == '.json' else 'TOML'} ({exc})") from None
        if not isinstance(data, dict):
            raise ConfigError(f"model.calibration = {str(p)!r}: must hold a table")
        meta = dict(data.pop("calibration", {}) or {})
        merged = data if "family" in data else {**model.describe(), **data}
        merged.pop("derived", None)
        try:
            model = model_from_dict(merged, source=p.name)
        except ModelError as exc:
            raise ConfigError(f"model.calibration = {str(p)!r}: {exc}") from None
        meta.setdefault("file", str(p))
    if cfg.gravity is not None:
        model = model.with_gravity(cfg.gravity)
    return ControllerModel(model=model, source=cfg.name, calibration=meta)
