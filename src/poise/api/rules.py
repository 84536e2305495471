"""The one owner of the controller's names and value rules.

Every entry point — the configuration file, the ``poise run`` flags, MQTT commands, the
dashboard and the Python API — checks values with the functions here, so a value refused in
one place is refused in all of them with the same reason.

Names: :data:`COMMAND_NAMES`, :data:`ALGORITHMS`, :data:`UPDATES`, :data:`MODES`,
:data:`PACINGS`, :data:`RUN_VALUES`, :data:`GAIN_KEYS`. Ranges: loop rate
``[MIN_RATE, MAX_RATE]`` Hz, run duration ``(0, MAX_DURATION]`` s, gains ``(0, rate]`` 1/s
(``Γ · period ≤ 1``: a larger explicit Euler step overshoots) or :data:`AUTO`, target
components within :func:`target_bound` of the base (``TARGET_REACH_FACTOR`` × the robot's
reach).

One range depends on the robot, the target and the rate, so it cannot be static: the
feedback loop's stability bound (:mod:`poise.motion.stability`). Whoever knows it (the
controller when a command arrives, the dashboard from the published ``params``, ``poise run``
before it starts) checks a gain with :func:`check_gain_bound`, so the refusal reads the same
everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

#: Command names accepted on ``poise/<robot_id>/set/<name>`` and by ``Controller.submit``.
COMMAND_NAMES = (
    "target",     # value: list of task_dim floats [task units]
    "gains",      # value: {"gamma": float, "gamma_z": float, "gamma_e": float, "damping": float}
    "algorithm",  # value: "alg1" | "alg2" | "plain"
    "mode",       # value: "ff" | "fb"
    "run",        # value: "start" | "stop"
    "estop",      # value: anything (latches the e-stop)
    "clear",      # value: anything (clears a latched fault or e-stop, then re-arms on start)
    "reference",  # value: time-stamped samples of a streamed reference (check_reference)
    "trajectory",  # value: waypoints with times (poise.motion.trajectory), or "stop"
)
#: How a ``target`` command is taken (``[loop] targets``; a command's ``stream`` flag
#: overrides it): ``move``: planned, the arm moves to it and holds it; ``stream``: a sample
#: of a moving reference, followed cycle by cycle (:mod:`poise.motion.streaming`).
TARGET_MODES = ("move", "stream")
#: Most samples in one ``reference`` command.
MAX_REFERENCE_SAMPLES = 1000
#: Held-configuration algorithms and the classic baseline the loop can run.
ALGORITHMS = ("alg1", "alg2", "plain")
#: ... of which those restricted to configurations the robot holds (``G_u(q) = 0``).
HELD_ALGORITHMS = ALGORITHMS[:2]
#: Actuator updates of Algorithm 1 (see :func:`poise.ik.held.algorithm1_step`).
UPDATES = ("inverse", "pinv", "dls", "transpose")
MODES = ("ff", "fb")
PACINGS = ("device", "host")
#: The loop thread's default SCHED_FIFO priority (``loop.priority``); a virtual device runs
#: one below it.
DEFAULT_LOOP_PRIORITY = 20
#: Where the controller runs (``[loop] process``): a process of its own, or the caller's.
PROCESSES = ("own", "shared")
#: Input shapers of the moves to a target (``[loop] shaper``, :func:`poise.motion.shaping.
#: shaper_for`): chosen from the modes' damping, or one kind for the slowest mode, or none.
SHAPERS = ("auto", "zv", "zvd", "zvdd", "off")
#: When the balance controller by state feedback holds a centre-of-mass target on passive
#: joints in fb (``[loop] balance``, :mod:`poise.motion.balance`): ``auto`` once the resting
#: windows showed friction and the masses' estimate pins the centre of mass, ``on`` at
#: every target, ``off`` never.
BALANCE_MODES = ("auto", "on", "off")
#: Modes with a damping ratio below this are lightly damped: the slowest gets a ZVDD shaper
#: (the soft arms, ζ ≈ 0.05–0.09, ring for many periods). Above it a ZV shaper, half a damped
#: period instead of 1.5: the double pendulum (ζ 0.22) then reaches the demo's target within
#: the 3 s of ``poise run --duration 3`` (:mod:`poise.motion.shaping`).
ZETA_SHAPED = 0.15
#: The stiffness uncertainty the automatic feedback gains' bound holds for by default
#: (``[loop] gain_uncertainty``; :class:`poise.motion.stability.LoopLinearisation`): the
#: plant's springs within ±20 % of the model's.
GAIN_UNCERTAINTY = 0.2
#: A shaper designed at one end of a move cancels its mode within about this relative error
#: of the mode's frequency (ZVDD: ±25 %); where the slowest mode's frequency differs more
#: between the ends, the move is chosen on the model
#: (:func:`poise.motion.reference.shapers_fall_short`).
MODE_CHANGE = 0.25
#: Device protocols (``[device] protocol``): the poise wire protocol or a Dynamixel servo bus.
PROTOCOLS = ("poise", "dynamixel")
#: A device string with this prefix is a Dynamixel bus: ``dynamixel:/dev/ttyUSB0``.
DYNAMIXEL_PREFIX = "dynamixel:"


def split_device(port: str, protocol: str = "poise") -> tuple[str, str]:
    """``(protocol, port)`` of a device string: ``dynamixel:/dev/ttyUSB0`` selects the
    Dynamixel protocol whatever ``protocol`` says; anything else keeps ``protocol``."""
    if port.startswith(DYNAMIXEL_PREFIX):
        return "dynamixel", port[len(DYNAMIXEL_PREFIX):]
    return protocol, port
RUN_VALUES = ("start", "stop")
#: Keys of a ``gains`` value: rates Γ [1/s], the damping λ, Algorithm 1's update rule.
GAIN_KEYS = ("gamma", "gamma_z", "gamma_e", "damping", "update")
#: The gains that are rates [1/s] (bounded by the loop rate).
RATE_GAINS = ("gamma", "gamma_z", "gamma_e")
#: A rate gain given as this follows the stability bound: a stated fraction of it
#: (:data:`poise.motion.bounds.DEFAULT_FRACTION`), recomputed with the target.
AUTO = "auto"
#: Largest damping λ accepted (dimensionless; beyond it the step is ~0).
MAX_DAMPING = 1e3

#: Loop rate range [Hz]: below MIN_RATE the device's timeouts (handshake, watchdog) no
#: longer fit one period; above MAX_RATE the loop cannot keep up.
MIN_RATE = 10.0
MAX_RATE = 1000.0
#: Longest ``poise run --duration`` [s] (30 days).
MAX_DURATION = 30 * 24 * 3600.0
#: A target component may lie at most this many reaches from the base (a unit mistake, mm for
#: m, is refused; a target just out of reach is accepted and the arm goes as close as it can).
TARGET_REACH_FACTOR = 2.0


class RuleError(ValueError):
    """A value that breaks a rule: ``"<what> = <value>: <rule>"``.

    Attributes:
        what: the name of the value (``"gains.gamma"``, ``"target[0]"``).
        value: the value given.
        rule: what would be valid (``"must be in (0, 500] 1/s"``).
    """

    def __init__(self, what: str, value: Any, rule: str) -> None:
        super().__init__(f"{what} = {value!r}: {rule}")
        self.what, self.value, self.rule = what, value, rule


def _finite(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RuleError(what, value, "must be a finite number")
    x = float(value)
    if not math.isfinite(x):
        raise RuleError(what, value, "must be a finite number")
    return x


def check_rate(value: Any, what: str = "loop.rate") -> float:
    """The loop rate [Hz], in ``[MIN_RATE, MAX_RATE]``."""
    x = _finite(value, what)
    if not MIN_RATE <= x <= MAX_RATE:
        raise RuleError(what, value, f"must be in [{MIN_RATE:g}, {MAX_RATE:g}] Hz")
    return x


def check_duration(value: Any, what: str = "--duration") -> float:
    """A run duration [s], in ``(0, MAX_DURATION]``."""
    x = _finite(value, what)
    if not 0 < x <= MAX_DURATION:
        raise RuleError(what, value, f"must be in (0, {MAX_DURATION:g}] s (leave it out "
                        "to run until Ctrl-C)")
    return x


def check_gain(key: str, value: Any, rate: float, what: str = "gains") -> float | str:
    """One gain: a rate gain in ``(0, rate]`` 1/s or :data:`AUTO`, ``damping`` in
    ``[0, MAX_DAMPING]``, ``update`` one of :data:`UPDATES`."""
    name = f"{what}.{key}"
    if key not in GAIN_KEYS:
        raise RuleError(name, value, f"unknown gain; allowed: {', '.join(GAIN_KEYS)}")
    if key == "update":
        if value not in UPDATES:
            raise RuleError(name, value, f"must be one of {', '.join(UPDATES)}")
        return str(value)
    if value == AUTO and key in RATE_GAINS:
        return AUTO
    x = _finite(value, name)
    if key == "damping":
        if not 0 <= x <= MAX_DAMPING:
            raise RuleError(name, value, f"must be in [0, {MAX_DAMPING:g}]")
        return x
    if not 0 < x <= rate:
        raise RuleError(name, value, f"must be in (0, {rate:g}] 1/s (gain × period ≤ 1 at "
                        f"{rate:g} Hz) or '{AUTO}'")
    return x


def check_gain_bound(key: str, value: Any, bound: float, why: str = "",
                     what: str = "gains") -> None:
    """A rate gain below the feedback loop's stability ``bound`` [1/s] (``inf``: no bound;
    :data:`AUTO` always passes). ``why`` says where the bound comes from."""
    if value == AUTO or not math.isfinite(bound):
        return
    if not float(value) < bound:
        raise RuleError(f"{what}.{key}", value, f"must be below {bound:.4g} 1/s, the "
                        f"stability bound" + (f": {why}" if why else ""))


def check_gains(value: Any, rate: float, what: str = "gains") -> dict[str, float | str]:
    """A ``gains`` table: a non-empty mapping of :data:`GAIN_KEYS` to values."""
    if not isinstance(value, Mapping) or not value:
        raise RuleError(what, value, f"must be a table with some of {', '.join(GAIN_KEYS)}")
    return {str(k): check_gain(str(k), v, rate, what) for k, v in value.items()}


def check_choice(value: Any, choices: Sequence[str], what: str) -> str:
    """One of ``choices``."""
    if value not in choices:
        raise RuleError(what, value, f"must be one of {', '.join(choices)}")
    return str(value)


def target_bound(reach: float | None) -> float:
    """Largest |target component| accepted for a robot of ``reach`` [m] (1e3 if unknown)."""
    if reach is None or not math.isfinite(reach) or reach <= 0:
        return 1e3
    return TARGET_REACH_FACTOR * reach


def check_target(value: Any, task_dim: int | None, reach: float | None = None,
                 what: str = "target") -> list[float]:
    """A target: ``task_dim`` finite numbers (a bare number for a 1-D task), each within
    :func:`target_bound` of the base. Anything else (an object, a string, NaN) is refused."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, list | tuple) or not value:
        raise RuleError(what, value, "must be a non-empty list of numbers [task units]")
    if task_dim is not None and len(value) != task_dim:
        raise RuleError(what, list(value), f"must have {task_dim} components (the task's "
                        f"dimension), not {len(value)}")
    bound = target_bound(reach)
    out = []
    for i, v in enumerate(value):
        x = _finite(v, f"{what}[{i}]")
        if abs(x) > bound:
            raise RuleError(f"{what}[{i}]", x, f"farther than {bound:g} from the base "
                            f"({TARGET_REACH_FACTOR:g} × the robot's reach"
                            + (f" of {reach:g}" if reach else "") + "); wrong units?")
        out.append(x)
    return out


def check_reference(value: Any, task_dim: int | None, reach: float | None = None
                    ) -> list[tuple[float, list[float], list[float] | None]]:
    """The samples of a ``reference`` command as ``(t, x, v or None)``: a list (or
    ``{"samples": [...]}``) of ``{"t": s, "x": [...], "v": [...]}`` objects or of
    ``[t, x0, x1, ...]`` rows; times [s, the sender's clock] strictly increasing, each ``x``
    a target (:func:`check_target`), ``v`` [task units/s] finite; at most
    :data:`MAX_REFERENCE_SAMPLES`."""
    if isinstance(value, dict) and "samples" in value:
        value = value["samples"]
    if not isinstance(value, list | tuple) or not value:
        raise RuleError("reference", value, 'must be a non-empty list of samples '
                        '{"t": s, "x": [...]} or [t, x0, ...] rows')
    if len(value) > MAX_REFERENCE_SAMPLES:
        raise RuleError("reference", f"{len(value)} samples",
                        f"at most {MAX_REFERENCE_SAMPLES} per command")
    out: list[tuple[float, list[float], list[float] | None]] = []
    for i, sample in enumerate(value):
        where = f"reference[{i}]"
        if isinstance(sample, dict):
            if "t" not in sample or "x" not in sample:
                raise RuleError(where, sample, 'must have "t" [s] and "x"')
            t, x, v = sample["t"], sample["x"], sample.get("v")
        elif isinstance(sample, list | tuple) and len(sample) >= 2:
            t, x, v = sample[0], list(sample[1:]), None
        else:
            raise RuleError(where, sample, 'must be {"t": s, "x": [...]} or [t, x0, ...]')
        t = _finite(t, f"{where}.t")
        if out and not t > out[-1][0]:
            raise RuleError(f"{where}.t", t, f"must be later than the sample before "
                            f"({out[-1][0]:g} s)")
        xs = check_target(x, task_dim, reach, what=f"{where}.x")
        vs = None if v is None else [
            _finite(c, f"{where}.v[{k}]") for k, c in enumerate(
                v if isinstance(v, list | tuple) else [v])]
        if vs is not None and len(vs) != len(xs):
            raise RuleError(f"{where}.v", v, f"must have {len(xs)} components, like x")
        out.append((t, xs, vs))
    return out


__all__ = [
    "ALGORITHMS",
    "AUTO",
    "BALANCE_MODES",
    "COMMAND_NAMES",
    "DYNAMIXEL_PREFIX",
    "GAIN_KEYS",
    "GAIN_UNCERTAINTY",
    "HELD_ALGORITHMS",
    "MAX_DURATION",
    "MAX_RATE",
    "MAX_REFERENCE_SAMPLES",
    "MIN_RATE",
    "MODES",
    "PACINGS",
    "PROCESSES",
    "PROTOCOLS",
    "RUN_VALUES",
    "SHAPERS",
    "TARGET_MODES",
    "UPDATES",
    "RuleError",
    "check_choice",
    "check_duration",
    "check_gain",
    "check_gain_bound",
    "check_gains",
    "check_rate",
    "check_reference",
    "check_target",
    "split_device",
    "target_bound",
]
