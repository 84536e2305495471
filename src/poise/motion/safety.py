"""The safety layer every setpoint passes: position limits, rate limits and a NaN/Inf guard.

Limits are enforced by the framework, not left to each algorithm (ros2_control): whatever
the IK proposes, the setpoint sent is ``clip(qa_prev + clip(qa − qa_prev, ±rate·Δt),
qa_min, qa_max)``. Sensor timeouts, device faults and the e-stop are handled by the loop
(:mod:`poise.controller.service`), which owns the state machine.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from poise.models.base import FloatArray

#: Without a configured acceleration limit, an actuator may reach its rate limit in this
#: long [s]: ``qa_accel = qa_rate / RAMP_S``.
RAMP_S = 0.1


@dataclass(frozen=True)
class SafetyLimits:
    """Actuator limits [actuator units], rate limits [actuator units/s] and acceleration
    limits [actuator units/s²] (``inf``: none).

    The position and rate limits are enforced on every setpoint (:func:`limit_setpoint`); the
    acceleration limit is what the profiles of moves, streamed references and trajectories
    are made within (:mod:`poise.motion.streaming`, :mod:`poise.motion.trajectory`). Default:
    ``qa_rate / RAMP_S``.
    """

    qa_min: FloatArray
    qa_max: FloatArray
    qa_rate: FloatArray
    qa_accel: FloatArray | None = None

    def __post_init__(self) -> None:
        if self.qa_accel is None:
            object.__setattr__(self, "qa_accel",
                               np.asarray(self.qa_rate, dtype=float) / RAMP_S)

    @property
    def accel(self) -> FloatArray:
        """The acceleration limits (m,) [actuator units/s²] (``inf``: none)."""
        assert self.qa_accel is not None
        return self.qa_accel

    @classmethod
    def build(cls, m: int, model_min: FloatArray, model_max: FloatArray,
              qa_min: Sequence[float] | None, qa_max: Sequence[float] | None,
              qa_rate: Sequence[float] | None,
              device_min: Sequence[float] | None = None,
              device_max: Sequence[float] | None = None,
              qa_accel: Sequence[float] | None = None) -> SafetyLimits:
        """Intersect the configured, model and device limits; one value broadcasts to all
        (``qa_accel`` None: ``qa_rate / RAMP_S``).

        Raises:
            ValueError: a vector of the wrong length, or min > max after intersecting.
        """
        def vec(v, default, what):
            if v is None:
                return np.full(m, default)
            a = np.asarray(v, dtype=float)
            if a.size == 1:
                a = np.full(m, float(a[0]))
            if a.size != m:
                raise ValueError(f"limits.{what}: expected 1 or {m} values (one per "
                                 f"actuator), got {a.size}")
            return a

        lo = np.maximum(vec(qa_min, -math.inf, "qa_min"), np.asarray(model_min, dtype=float))
        hi = np.minimum(vec(qa_max, math.inf, "qa_max"), np.asarray(model_max, dtype=float))
        if device_min is not None:
            lo = np.maximum(lo, np.asarray(device_min, dtype=float))
        if device_max is not None:
            hi = np.minimum(hi, np.asarray(device_max, dtype=float))
        if np.any(lo > hi):
            raise ValueError(f"limits: qa_min {lo.tolist()} > qa_max {hi.tolist()} after "
                             "intersecting the configured, model and device limits")
        rate = vec(qa_rate, math.inf, "qa_rate")
        accel = rate / RAMP_S if qa_accel is None else vec(qa_accel, math.inf, "qa_accel")
        return cls(lo, hi, rate, accel)

    def as_dict(self) -> dict[str, list[float | None]]:
        def out(a):
            return [None if math.isinf(x) else float(x) for x in a]

        return {"qa_min": out(self.qa_min), "qa_max": out(self.qa_max),
                "qa_rate": out(self.qa_rate), "qa_accel": out(self.accel)}


def limit_setpoint(limits: SafetyLimits, qa_prev: FloatArray, qa: FloatArray, dt: float
                   ) -> tuple[FloatArray, bool, bool]:
    """Apply the rate limit (``|Δqa| ≤ rate·dt``) then the position limits.

    A step over the rate limit is scaled down as a whole (its direction kept, so a descent
    direction of the IK stays one), then each actuator is clipped to its position limits.

    Returns:
        ``(qa_safe, rate_limited, position_limited)``.
    """
    step = qa - qa_prev
    bound = limits.qa_rate * dt
    ratio = float(np.max(np.abs(step) / bound)) if step.size else 0.0
    rate_hit = ratio > 1.0
    step_c = step / ratio if rate_hit else step  # scale, keeping the step's direction
    out = np.clip(qa_prev + step_c, limits.qa_min, limits.qa_max)
    pos_hit = bool(np.any(out != qa_prev + step_c))
    return out, rate_hit, pos_hit


def all_finite(*arrays: FloatArray | Sequence[float] | None) -> bool:
    """The NaN/Inf guard: every value of every (non-None) array is finite."""
    return all(a is None or bool(np.all(np.isfinite(a))) for a in arrays)
