"""The tables of a run configuration as frozen dataclasses, each key declared on its field.

``[model]``, ``[algorithm]``, ``[loop]``, ``[limits]`` and ``[log]`` are declared here with
:func:`~poise.models.settings.setting` (default, kind, range and description in one line);
``[device]`` is the devices' own :class:`~poise.devices.config.DeviceConfig`, ``[mqtt]`` the
shared :class:`~poise.api.mqtt_config.MqttConfig` (its keys: :data:`MQTT_KEYS`). The whole is a
:class:`Config`; :data:`TABLE_KEYS` gathers every table's declarations for the validator
(:mod:`poise.controller.config`) and the JSON Schema (:mod:`poise.controller.config_schema`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

from poise.api.mqtt_config import MqttConfig
from poise.api.rules import (
    ALGORITHMS,
    AUTO,
    BALANCE_MODES,
    DEFAULT_LOOP_PRIORITY,
    GAIN_UNCERTAINTY,
    MAX_DAMPING,
    MAX_RATE,
    MIN_RATE,
    MODE_CHANGE,
    MODES,
    PACINGS,
    PROCESSES,
    SHAPERS,
    TARGET_MODES,
    UPDATES,
    ZETA_SHAPED,
)
from poise.controller.config_spec import MQTT_KEYS
from poise.devices.config import DeviceConfig
from poise.models.settings import jsonable, setting, table_keys
from poise.models.spec import Table


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
    total_mass: float | None = setting(
        None, "number", "the robot's weighed total mass [kg]: where the task is the centre of "
        "mass, feedback estimates the bodies' masses from the held efforts holding it to this "
        "(statics cannot tell how heavy the robot is; default: the model's mass sum)", gt=0)


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
    gain_uncertainty: float = setting(
        GAIN_UNCERTAINTY, "number", "the automatic feedback gains follow a stability bound "
        "that holds for a plant whose springs are within 1 ± this × the model's (0.2: "
        "±20 %; 0: the model's alone; poise.motion.stability)", ge=0.0, le=0.9)
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
    live_targets: bool = setting(
        True, "boolean", "a target received while the loop runs, with every rate gain of the "
        "algorithm 'auto', is answered as soon as one solve from q̄ settles it (milliseconds): "
        "the move starts at once with the configured shaper at full speed, and the gains at "
        "the new target and (fb, follow_model) the predicted response follow from a "
        "background thread within loop.plan_budget; otherwise (and false) it is planned in "
        "full before the answer, choose_move included")
    replan_on_stall: bool = setting(
        True, "boolean", "fb: when the actuator limits keep feedback from a target (an "
        "actuator at its limit on a held configuration that cannot reach it on the true robot; "
        "event stalled_at_limit), re-plan from the measured state to another held "
        "configuration that reaches it, in a thread of its own (event replanned; once per "
        "target); false: only report the stall")
    ring_watch: bool = setting(
        True, "boolean", "fb with automatic rate gains: when the task error keeps swinging "
        "after a move (its swing over one damped period of the slowest mode ≥ 0.9 × the "
        "period before and > 3 × the tolerance), the automatic rate gains are halved, down to "
        "1/16, until the next target (event gain_backed_off; poise.motion.ringwatch); once "
        "the corrections have ended, an error driven to 2 × its least window mean stops them "
        "until the next target (gain_stopped); a static error above 1.5 × the tolerance that "
        "feedback barely moves (a window's mean > 0.8 × the one before, its swing below the "
        "tolerance) doubles them, up to 2 × (gain_raised); false: off")
    balance: str = setting(
        "auto", "string", "fb, a centre-of-mass task on passive joints (the dancer): once a "
        "move has arrived within 20 mm, a balance controller by state feedback (LQR on the "
        "model linearised where it starts, the passive joints estimated by a Kalman filter) "
        "holds the target in place of the IK, and gives up to it 40 mm off or at a position "
        "limit (poise.motion.balance); auto: once the resting windows showed friction and "
        "the masses' estimate pins the centre of mass down to the tolerance; on: at every "
        "target; off: never", choices=BALANCE_MODES)
    plan_budget: float = setting(
        5.0, "number", "how long the background part of a target answered at once may take "
        "[s]: later, its predicted response is dropped (the gains at the new target are still "
        "applied)", gt=0, le=600)
    targets: str = setting(
        "move", "string", "how a target command is taken (a command's \"stream\" flag "
        "overrides it): move: planned, the arm moves to it and holds it; stream: a sample "
        "of a moving reference, followed cycle by cycle with feedforward of its velocity "
        "through a filter within the actuator limits (poise.motion.streaming)",
        choices=TARGET_MODES)
    switch_interval: float = setting(
        2e-4, "number", "sys.setswitchinterval while the loop runs [s]: how long another "
        "Python thread may hold the GIL before the loop thread gets it; 0 leaves it", ge=0,
        le=0.1)
    compiled: bool = setting(True, "boolean", "run the cycle on the compiled kernels "
                             "(poise.kernels, compiled or loaded from the cache at connect) "
                             "where the model's family has them; false: the numpy reference")
    priority: int = setting(DEFAULT_LOOP_PRIORITY, "integer",
                            "SCHED_FIFO real-time priority of the loop thread and the "
                            "e-stop threads, the virtual device one below, the other threads "
                            "at the normal scheduler (1-99, where the OS grants it, else the "
                            "normal scheduler and the summary says why; docs/controller.md); "
                            "0: the normal scheduler", ge=0, le=99)
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
    qa_accel: tuple[float, ...] | None = setting(
        None, "vector", "max |Δ(dqa/dt)| per second, one value for all actuators or one each "
        "[actuator units/s²]: the moves, streamed references and trajectories are shaped "
        "within it (default: qa_rate / 0.1 s)", gt=0)
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
            out[f.name] = {k.name: jsonable(getattr(table, k.name)) for k in fields(table)}
        if out["mqtt"].get("password") is not None:
            out["mqtt"]["password"] = "***"
        out["source"] = self.source
        return out

    def with_changes(self, **tables: Any) -> Config:
        """A copy with some tables replaced (``cfg.with_changes(loop=replace(cfg.loop, …))``)."""
        return replace(self, **tables)




#: The declaration of every table: name → its keys (:mod:`poise.controller.config_spec`).
TABLE_KEYS: dict[str, Table] = {
    "device": table_keys(DeviceConfig), "model": table_keys(ModelConfig),
    "algorithm": table_keys(AlgorithmConfig), "loop": table_keys(LoopConfig),
    "limits": table_keys(LimitsConfig), "mqtt": MQTT_KEYS, "log": table_keys(LogConfig),
}
TABLES = tuple(TABLE_KEYS)


__all__ = ["TABLES", "TABLE_KEYS", "AlgorithmConfig", "Config", "DeviceConfig", "LimitsConfig",
           "LogConfig", "LoopConfig", "ModelConfig"]
