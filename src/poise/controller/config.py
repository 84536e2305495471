"""The controller's configuration: one TOML file, validated at load into frozen dataclasses.

Layout (every table and key optional; the defaults are the embedded ``poise run`` demo)::

    [device]      port = "sim" | "/dev/ttyACM0" | "dynamixel:/dev/ttyUSB0", baud, timeout,
                  sim_model, sim_params, sim_args, watchdog_ms, protocol, sensors, timeout_ms,
                  retries, [[device.servos]] (id, radius, sign, zero, mode, current_limit, ...)
    [model]       name (built-in name or file), calibration (file), gravity (override)
    [algorithm]   name, update, gamma, gamma_z, gamma_e, damping, target, tolerance
    [loop]        rate, mode ("ff" | "fb"), pacing ("device" | "host"), effort_feedforward,
                  switch_interval, compiled, priority, process ("own" | "shared"), busy_poll, wire,
                  cpu
    [limits]      qa_min, qa_max, qa_rate, sensor_hold, sensor_fault
    [mqtt]        enabled, url, robot_id, username, password, tls, ca_file, joint_states_hz
    [log]         path

Each key is declared once (:mod:`poise.controller.config_spec`): on its dataclass field below
(``setting(default, kind, doc, range)``), or in ``MQTT_KEYS`` / ``SERVO_KEYS``. The validator
here reads every value by its declaration, and :mod:`poise.controller.config_schema` turns the
same declarations into the JSON Schema editors use (docs/config.md); a default is changed in one
place, its field. Every error names the file, the key, the value and what is allowed, e.g.
``run.toml: loop.rate = 5000: must be in [10, 1000] Hz``; a value that came from the command
line is named by its flag instead of the file.
"""

from __future__ import annotations

import contextlib
import math
import pathlib
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from poise.api.mqtt_config import MqttConfig
from poise.api.rules import (
    ALGORITHMS,
    AUTO,
    DEFAULT_LOOP_PRIORITY,
    GAIN_KEYS,
    MAX_DAMPING,
    MAX_RATE,
    MIN_RATE,
    MODE_CHANGE,
    MODES,
    PACINGS,
    PROCESSES,
    PROTOCOLS,
    SHAPERS,
    UPDATES,
    ZETA_SHAPED,
    RuleError,
    check_gain,
    check_rate,
    split_device,
)
from poise.api.topics import check_robot_id
from poise.controller.config_spec import (
    MQTT_KEYS,
    SERVO_KEYS,
    may_be_empty,
    setting,
    table_keys,
)
from poise.devices.dynamixel_config import ServoConfig, servos_from_config
from poise.firmware_bridge.device import WATCHDOG_RANGE_MS
from poise.models.spec import Key, Table


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names file, key, value and rule."""


@dataclass(frozen=True)
class DeviceConfig:
    """``[device]``: where the robot is (the wire protocol, or a Dynamixel servo bus)."""

    port: str = setting(
        "sim", "string", "serial device path (poise protocol), 'sim' to spawn `poise device "
        "sim` (a virtual device on a pseudo-terminal, a separate process), or "
        "'dynamixel:/dev/ttyUSB0' (a Dynamixel bus; docs/devices.md)")
    baud: int = setting(1_000_000, "integer", "baud rate [bit/s] (ignored by USB-CDC devices "
                        "and ptys)", ge=1)
    timeout: float = setting(2.0, "number", "handshake / acknowledgement timeout [s]", gt=0)
    sim_model: str | None = setting(None, "string", "model the virtual device simulates "
                                    "(default: model.name)")
    sim_params: str | None = setting(None, "string", "the simulated robot's true parameters, a "
                                     "model file (`poise device sim --params`; relative to "
                                     "this file)")
    sim_args: tuple[str, ...] = setting((), "strings", "extra `poise device sim` flags, e.g. "
                                        "[\"--corrupt\", \"0.02\"] (fault injection)")
    watchdog_ms: int | None = setting(
        None, "integer", "device watchdog set at connect [ms] (default: the device's own)",
        ge=WATCHDOG_RANGE_MS[0], le=WATCHDOG_RANGE_MS[1])
    protocol: str = setting("poise", "string", "'poise' (the wire protocol: our firmware, the "
                            "virtual device) or 'dynamixel' (a Dynamixel Protocol 2.0 servo "
                            "bus); a port written 'dynamixel:…' selects it too",
                            choices=PROTOCOLS)
    sensors: str | None = setting(None, "string", "port of a poise-protocol joint-sensor board "
                                  "measuring q beside a Dynamixel bus (protocol 'dynamixel' "
                                  "only; default: q is not measured by a servo bus)")
    servos: tuple[ServoConfig, ...] = setting(
        (), "tables", "the Dynamixel actuator table, [[device.servos]] (protocol 'dynamixel' "
        "only; default: IDs 1 … m with the defaults of docs/devices.md)", table=SERVO_KEYS)
    timeout_ms: float | None = setting(None, "number", "Dynamixel status-packet timeout [ms] "
                                       "(default: the SDK's)", gt=0)
    retries: int = setting(1, "integer", "Dynamixel sync reads repeated after a failed one "
                           "before it is a bad read (answered with the previous sample)",
                           ge=0)


@dataclass(frozen=True)
class ModelConfig:
    """``[model]``: the controller's (statics) model."""

    name: str = setting("double_pendulum", "string", "built-in model name or a model file "
                        "(.toml/.json, relative to this file)")
    calibration: str | None = setting(
        None, "string", "a calibration file (model schema plus a 'calibration' metadata "
        "table): with 'family' it replaces the model, without it overrides the model's keys")
    gravity: float | None = setting(None, "number", "override the statics model's gravity "
                                    "[m/s²] (e.g. 0: the paper's 'model that neglects gravity' "
                                    "experiment; default: the model's)", ge=0)


#: How a rate gain given as ``"auto"`` behaves (:data:`poise.api.rules.AUTO`).
_AUTO_DOC = f", or '{AUTO}': a fraction of the feedback loop's stability bound"


@dataclass(frozen=True)
class AlgorithmConfig:
    """``[algorithm]``: the IK law and its gains (live-tunable by command); a rate gain is also
    bounded by the loop rate, ``Γ · period ≤ 1``."""

    name: str = setting("alg1", "string", "alg1 (statics solved beforehand), alg2 (statics "
                        "online) or plain (classic DLS CLIK that treats every coordinate as "
                        "actuated)", choices=ALGORITHMS)
    update: str = setting("dls", "string", "Algorithm 1's actuator update", choices=UPDATES)
    gamma: float | str = setting(AUTO, "number", "Γ of Algorithm 1 and plain CLIK [1/s], <= "
                                 f"loop.rate{_AUTO_DOC}", gt=0, le=MAX_RATE, choices=(AUTO,))
    gamma_z: float | str = setting(AUTO, "number", "ΓZ of Algorithm 2, task error decay rate "
                                   f"[1/s], <= loop.rate{_AUTO_DOC}", gt=0, le=MAX_RATE,
                                   choices=(AUTO,))
    gamma_e: float | str = setting(AUTO, "number", "ΓE of Algorithm 2, statics residual decay "
                                   f"rate [1/s], <= loop.rate{_AUTO_DOC}", gt=0, le=MAX_RATE,
                                   choices=(AUTO,))
    damping: float = setting(1e-2, "number", "λ of the damped inverses [task units]", ge=0,
                             le=MAX_DAMPING)
    target: tuple[float, ...] | None = setting(
        None, "vector", "x̄ [task units] (default: hold the task value where the robot starts)")
    tolerance: float = setting(2e-3, "number", "task error below which the target counts as "
                               "reached [task units]", gt=0)


@dataclass(frozen=True)
class LoopConfig:
    """``[loop]``: rate, mode and pacing of the control loop."""

    rate: float = setting(500.0, "number", "loop rate = device sensor rate [Hz]",
                          ge=MIN_RATE, le=MAX_RATE)
    mode: str = setting("fb", "string", "fb: task error from the measured q; ff: from the "
                        "predicted q̄", choices=MODES)
    pacing: str = setting("device", "string", "device: answer each sensor frame; host: own "
                          "clock, latest frame (polled devices)", choices=PACINGS)
    effort_feedforward: bool = setting(True, "boolean", "send τ_ff = G_a(q̄) with each "
                                       "setpoint")
    shaper: str = setting("auto", "string", "input shaper of the move to each target, on the "
                          "slowest structural mode (the next one gets ZV): auto: ZVDD when it "
                          f"is lightly damped (ζ < {ZETA_SHAPED:g}), else ZV; zv, zvd, zvdd: "
                          f"that one (ZVDD: robust to ±{MODE_CHANGE * 100:g} % in the "
                          "frequency, for a robot whose modes "
                          "change along its moves, one damped period longer than ZV); off: "
                          "unshaped (docs/controller.md)", choices=SHAPERS)
    follow_model: bool = setting(True, "boolean", "in fb, after a move to a target the task "
                                 "error is measured against the model's predicted response to "
                                 "the move (its sway included), not the fixed target, so "
                                 "feedback integrates only what the model did not predict "
                                 "(poise.motion.reference); false: against the target")
    choose_move: bool = setting(
        True, "boolean",
        f"where the slowest structural mode is lightly damped (ζ < {ZETA_SHAPED:g}) "
        f"or changes its frequency by more than {MODE_CHANGE * 100:g} % between the "
        "move's ends, each "
        "target's move is chosen on the model: ZV, ZVD or ZVDD at 1, 0.7 or 0.5 "
        "× the speed, slowed where the held configuration moves fast "
        "(poise.motion.warp) or, with one passive coordinate, paused on the "
        "way as timed on the model so that nothing sways "
        "(poise.motion.dwell): the one whose predicted response settles "
        "first (a few seconds of planning; poise.motion.reference); false: "
        "the configured shaper at full speed")
    switch_interval: float = setting(
        2e-4, "number", "sys.setswitchinterval while the loop runs [s]: how long another "
        "Python thread may hold the GIL before the loop thread gets it; 0 leaves it", ge=0,
        le=0.1)
    compiled: bool = setting(True, "boolean", "run the cycle on the compiled kernels "
                             "(poise.kernels, compiled or loaded from the cache at connect) "
                             "where the model's family has them; false: the numpy reference")
    priority: int = setting(DEFAULT_LOOP_PRIORITY, "integer",
                            "SCHED_FIFO real-time priority of the loop thread and, with "
                            "process = 'own', of the whole real-time process and its "
                            "virtual device (1-99, where the OS grants it, else the normal "
                            "scheduler and the summary says why; docs/controller.md); 0: the "
                            "normal scheduler", ge=0, le=99)
    busy_poll: bool = setting(False, "boolean", "the loop thread polls the serial port "
                              "without sleeping between frames (a whole core at its priority; "
                              "lower latency: no wake-up, its caches stay warm); false: it "
                              "sleeps in select until the next frame; devices on a serial "
                              "port in the poise protocol only")
    wire: bool = setting(True, "boolean", "a device on a serial port in the poise protocol "
                         "is answered on the wire path: the sensor frame's bytes to the "
                         "setpoint frame's bytes in one compiled call, the bookkeeping after "
                         "the write (poise.controller.wirepath; needs compiled); false: each "
                         "frame is decoded into objects first")
    cpu: int = setting(-1, "integer", "the CPU the loop thread runs on; the virtual device "
                       "runs on the others (Linux; poise.devices.affinity). -1: the last "
                       "CPU this process may use, when it may use three or more; -2: pin "
                       "nothing", ge=-2)
    process: str = setting("own", "string", "own: the controller runs in a process of its own, "
                           "telemetry, the log and the broker in the first one; shared: all in "
                           "one process", choices=PROCESSES)


@dataclass(frozen=True)
class LimitsConfig:
    """``[limits]``: safety limits enforced on every setpoint (``sensor_fault >= sensor_hold``).
    """

    qa_min: tuple[float, ...] | None = setting(
        None, "vector", "actuator lower position limits [actuator units] (default: the "
        "model's, intersected with the device's channel limits)")
    qa_max: tuple[float, ...] | None = setting(
        None, "vector", "actuator upper position limits [actuator units] (default: the "
        "model's, intersected with the device's channel limits)")
    qa_rate: tuple[float, ...] | None = setting(
        (0.5,), "vector", "max |Δqa| per second, one value for all actuators or one each "
        "[actuator units/s]", gt=0)
    sensor_hold: float = setting(0.05, "number", "no sensor frame for this long: hold the last "
                                 "setpoint [s]", gt=0)
    sensor_fault: float = setting(0.5, "number", "no sensor frame for this long: fault "
                                  "(latched) [s], >= sensor_hold", gt=0)


@dataclass(frozen=True)
class LogConfig:
    """``[log]``: the experiment log."""

    path: str | None = setting(None, "string", "log file (MCAP; relative to this file); "
                               "default: no log")


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


#: The declaration of every table: name → its keys (:mod:`poise.controller.config_spec`).
TABLE_KEYS: dict[str, Table] = {
    "device": table_keys(DeviceConfig), "model": table_keys(ModelConfig),
    "algorithm": table_keys(AlgorithmConfig), "loop": table_keys(LoopConfig),
    "limits": table_keys(LimitsConfig), "mqtt": MQTT_KEYS, "log": table_keys(LogConfig),
}
TABLES = tuple(TABLE_KEYS)


# ------------------------------------------------------------------------------ validation


class _Table:
    """One table read by its declaration; errors name the source, the dotted key and the rule.

    :meth:`get` checks a value against its :class:`~poise.models.spec.Key` (kind, range,
    choices) with the conventions of :mod:`poise.controller.config_spec`; :meth:`value` hands
    out the raw value (or the declared default) for keys a rule of
    :mod:`poise.api.rules` checks.
    """

    def __init__(self, data: Any, name: str, source: str, origins: Mapping[str, str],
                 keys: Table) -> None:
        self.name, self.source, self.origins, self.keys = name, source, origins, keys
        if not isinstance(data, Mapping):
            raise ConfigError(f"{source}: [{name}] = {data!r}: must be a table")
        self.data = data

    def where(self, key: str) -> str:
        dotted = f"{self.name}.{key}"
        origin = self.origins.get(dotted)
        return f"{origin} ({dotted})" if origin else f"{self.source}: {dotted}"

    def fail(self, key: str, value: Any, rule: str) -> ConfigError:
        return ConfigError(f"{self.where(key)} = {value!r}: {rule}")

    def check_keys(self) -> None:
        """Refuse keys not declared (typos such as ``gama``) and missing required ones."""
        for key in self.data:
            if key not in self.keys:
                raise ConfigError(f"{self.where(key)}: unknown key; allowed keys in "
                                  f"[{self.name}] are {', '.join(self.keys)}")
        for key, spec in self.keys.items():
            if spec.required and key not in self.data:
                raise ConfigError(f"{self.where(key)}: missing; {key!r} ({spec.doc}) is "
                                  "required")

    def value(self, key: str) -> Any:
        """The raw value of ``key``, or its declared default."""
        return self.data.get(key, self.keys[key].default)

    def get(self, key: str) -> Any:
        """The value of ``key`` checked against its declaration (``None``: an optional key
        left out); a ``vector`` or ``strings`` value as a tuple, ``tables`` as a list of
        checked mappings."""
        spec = self.keys[key]
        value = self.value(key)
        if value is None and spec.default is None:
            return None
        kind = spec.kind
        if kind == "number":
            return self._number(key, value, spec)
        if kind == "integer":
            return self._integer(key, value, spec)
        if kind == "boolean":
            if not isinstance(value, bool):
                raise self.fail(key, value, "must be true or false")
            return value
        if kind == "string":
            return self._string(key, value, spec)
        if kind == "strings":
            if not isinstance(value, (list, tuple)) or not all(isinstance(v, str)
                                                               for v in value):
                raise self.fail(key, value, "must be a list of strings")
            return tuple(value)
        if kind == "vector":
            return self._vector(key, value, spec)
        if kind == "tables":
            return self._tables(key, value, spec)
        raise TypeError(f"{self.name}.{key}: kind {kind!r} is not read by get()")

    def path(self, key: str, base: pathlib.Path | None) -> str | None:
        """A file name (a ``string`` key), relative to the configuration file's folder
        unless it came from the command line."""
        value = self.get(key)
        if value is None:
            return None
        p = pathlib.Path(value)
        with contextlib.suppress(RuntimeError):  # "~user" of no such user: a plain file name
            p = p.expanduser()
        if not p.is_absolute() and base is not None and self.origins.get(
                f"{self.name}.{key}") is None:
            p = base / p  # relative to the configuration file
        return str(p)

    def _number(self, key: str, value: Any, spec: Key) -> float | str:
        """A finite number within the declared bounds, or one of the declared words."""
        if spec.choices and value in spec.choices:
            return value
        rule = "must be " + " ".join(["a finite number", *_bounds(spec)]) + "".join(
            f" or {c!r}" for c in spec.choices)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(key, value, rule)
        x = float(value)
        if not math.isfinite(x) or not _within(x, spec):
            raise self.fail(key, value, rule)
        return x

    def _integer(self, key: str, value: Any, spec: Key) -> int:
        if spec.choices:
            rule = f"must be one of {', '.join(map(str, spec.choices))}"
        elif spec.ge is not None and spec.le is not None:
            rule = f"must be an integer in [{_fmt(spec.ge)}, {_fmt(spec.le)}]"
        else:
            rule = " ".join(["must be an integer", *_bounds(spec)])
        if isinstance(value, bool) or not isinstance(value, int) or not _within(value, spec) \
                or (spec.choices and value not in spec.choices):
            raise self.fail(key, value, rule)
        return value

    def _string(self, key: str, value: Any, spec: Key) -> str:
        if not isinstance(value, str) or (not value and not may_be_empty(spec)) or (
                spec.choices and value not in spec.choices):
            rule = (f"must be one of {', '.join(map(repr, spec.choices))}" if spec.choices
                    else "must be a non-empty string")
            raise self.fail(key, value, rule)
        return value

    def _vector(self, key: str, value: Any, spec: Key) -> tuple[float, ...]:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = [value]  # a bare number: a list of one
        rule = " ".join(["must be a list of finite numbers", *_bounds(spec)])
        if not isinstance(value, (list, tuple)) or not value:
            raise self.fail(key, value, rule)
        for v in value:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                    or not _within(v, spec):
                raise self.fail(key, value, rule)
        return tuple(float(v) for v in value)

    def _tables(self, key: str, value: Any, spec: Key) -> list[Mapping[str, Any]]:
        if not isinstance(value, (list, tuple)) or not all(isinstance(x, Mapping)
                                                           for x in value):
            raise self.fail(key, value, f"must be an array of tables ([[{self.name}.{key}]])")
        for i, item in enumerate(value):
            row = _Table(item, f"{self.name}.{key}[{i}]", self.source, self.origins,
                         spec.table or {})
            row.check_keys()
            for name in item:
                row.get(name)
        return list(value)


def _bounds(spec: Key) -> list[str]:
    """The declared bounds as words: ``["> 0", "<= 1000"]``."""
    out = []
    if spec.gt is not None:
        out.append(f"> {_fmt(spec.gt)}")
    if spec.ge is not None:
        out.append(f">= {_fmt(spec.ge)}")
    if spec.le is not None:
        out.append(f"<= {_fmt(spec.le)}")
    return out


def _fmt(x: float) -> str:
    """A bound as written: ``1048575``, ``0.1``, ``1e-06``."""
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def _within(x: float, spec: Key) -> bool:
    return not ((spec.gt is not None and not x > spec.gt)
                or (spec.ge is not None and not x >= spec.ge)
                or (spec.le is not None and not x <= spec.le))


def _device(t: _Table, base: pathlib.Path | None) -> DeviceConfig:
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


def _model(t: _Table, base: pathlib.Path | None) -> ModelConfig:
    t.check_keys()
    name = t.get("name")
    if name.endswith((".toml", ".json")) or "/" in name:
        name = t.path("name", base) or name
    return ModelConfig(name=name, calibration=t.path("calibration", base),
                       gravity=t.get("gravity"))


def _algorithm(t: _Table, rate: float) -> AlgorithmConfig:
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


def _rate(t: _Table) -> float:
    value = t.value("rate")
    try:
        return check_rate(value)
    except RuleError as exc:
        raise t.fail("rate", value, exc.rule) from None


def _loop(t: _Table) -> LoopConfig:
    t.check_keys()
    return LoopConfig(
        rate=_rate(t), mode=t.get("mode"), pacing=t.get("pacing"),
        effort_feedforward=t.get("effort_feedforward"), shaper=t.get("shaper"),
        follow_model=t.get("follow_model"), choose_move=t.get("choose_move"),
        switch_interval=t.get("switch_interval"),
        compiled=t.get("compiled"),
        priority=t.get("priority"), process=t.get("process"),
        busy_poll=t.get("busy_poll"), wire=t.get("wire"), cpu=t.get("cpu"),
    )


def _limits(t: _Table) -> LimitsConfig:
    t.check_keys()
    hold, fault = t.get("sensor_hold"), t.get("sensor_fault")
    if fault < hold:
        raise t.fail("sensor_fault", fault, f"must be >= limits.sensor_hold = {hold:g} s")
    return LimitsConfig(qa_min=t.get("qa_min"), qa_max=t.get("qa_max"),
                        qa_rate=t.get("qa_rate"), sensor_hold=hold, sensor_fault=fault)


def _mqtt(t: _Table, base: pathlib.Path | None) -> MqttConfig:
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


def _log(t: _Table, base: pathlib.Path | None) -> LogConfig:
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

    def table(name: str) -> _Table:
        return _Table(data.get(name, {}), name, source, origins, TABLE_KEYS[name])

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
