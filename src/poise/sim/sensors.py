"""Sensor models: joint encoders, actuator position sensors, actuator effort sensors.

* Joint encoders (one per coordinate ``q_i``): ``q̃ = round((q + b_q + n_q) · c) / c`` with
  ``c`` counts per radian and ``n_q ~ N(0, σ_q²)`` the jitter ahead of the counter, so every
  reading is a whole number of counts (step ``1 / c`` rad).
* Actuator position sensors (tendon lengths, motor encoders): ``q̃a = A q + b_a + n_a``.
* Actuator efforts (tendon tensions, motor torques): ``τ̃ = τ + b_τ + n_τ``.

Noise and bias are settable per channel (a scalar applies to all); all noise is drawn from one
``numpy.random.Generator`` seeded at construction, so a run is reproducible. The standard normals
are drawn in blocks (:meth:`Sensors.normals`) and used in the order the readings ask for them:
numpy's generator gives the same stream whatever the block size, so the readings are those of
one draw per call.

Status bits of a plant's sensor frame (``SimPlant.read_sensors``): :data:`STATUS_SATURATED` an
effort at its limit, :data:`STATUS_QA_LIMIT` an actuator outside its limits,
:data:`STATUS_Q_LIMIT` a coordinate outside its limits, :data:`STATUS_NONFINITE` the state is
not finite (the simulation blew up).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from poise.models.base import FloatArray

#: Default encoder resolution: 2¹⁴ counts per revolution [counts/rad].
COUNTS_PER_RAD = 2**14 / (2 * math.pi)

_NOISE_KEYS = ("q_noise", "qa_noise", "effort_noise")
#: Standard normals drawn at a time (:meth:`Sensors.normals`).
NORMALS_BLOCK = 4096

STATUS_SATURATED = 1 << 0
STATUS_QA_LIMIT = 1 << 1
STATUS_Q_LIMIT = 1 << 2
STATUS_NONFINITE = 1 << 3
#: An effort within this fraction of its limit counts as saturated (:data:`STATUS_SATURATED`).
SATURATION_TOL = 1e-9


@dataclass(frozen=True)
class SensorConfig:
    """Noise, bias and resolution of the simulated sensors (SI units of each channel).

    Attributes:
        counts_per_rad: joint encoder resolution [counts/rad]; ``0`` or ``inf``: no quantisation.
        q_noise: joint encoder jitter σ [rad] (scalar or per coordinate).
        q_bias: joint encoder offset [rad].
        qa_noise: actuator position noise σ [m or rad].
        qa_bias: actuator position offset [m or rad].
        effort_noise: actuator effort noise σ [N or N·m].
        effort_bias: actuator effort offset [N or N·m].
    """

    counts_per_rad: float = COUNTS_PER_RAD
    q_noise: float | tuple[float, ...] = 1e-4
    q_bias: float | tuple[float, ...] = 0.0
    qa_noise: float | tuple[float, ...] = 1e-5
    qa_bias: float | tuple[float, ...] = 0.0
    effort_noise: float | tuple[float, ...] = 0.05
    effort_bias: float | tuple[float, ...] = 0.0

    def __post_init__(self) -> None:
        if not (self.counts_per_rad >= 0):
            raise ValueError(f"sensors: counts_per_rad = {self.counts_per_rad}: must be >= 0")
        for key in _NOISE_KEYS:
            if np.any(np.asarray(getattr(self, key), dtype=float) < 0):
                raise ValueError(f"sensors: {key} = {getattr(self, key)}: must be >= 0")

    def noiseless(self) -> SensorConfig:
        """The same sensors without random noise (quantisation and bias stay)."""
        return replace(self, q_noise=0.0, qa_noise=0.0, effort_noise=0.0)


def _per_channel(value: float | tuple[float, ...], size: int, what: str) -> FloatArray:
    arr = np.asarray(value, dtype=float).reshape(-1)
    if arr.size == 1:
        return np.full(size, float(arr[0]))
    if arr.size != size:
        raise ValueError(f"sensors: {what} has {arr.size} entries, expected 1 or {size}")
    return arr


class Sensors:
    """Reads noisy, quantised measurements from the true state (see the module docstring).

    Attributes:
        noise_scale: σ per channel ``[q (n) | qa (m) | τ (m)]``; ``q_noise``, ``qa_noise``,
            ``effort_noise`` are views of its parts.
        bias: offset per channel, same layout; ``q_bias``, ``qa_bias``, ``effort_bias`` views.
        counts_per_rad: encoder resolution [counts/rad], ``0`` for none.
    """

    def __init__(self, config: SensorConfig, n: int, m: int, seed: int | None = 0) -> None:
        self.config = config
        self.rng = np.random.default_rng(seed)
        self.n, self.m = n, m
        c = config
        self.noise_scale = np.concatenate([_per_channel(c.q_noise, n, "q_noise"),
                                           _per_channel(c.qa_noise, m, "qa_noise"),
                                           _per_channel(c.effort_noise, m, "effort_noise")])
        self.bias = np.concatenate([_per_channel(c.q_bias, n, "q_bias"),
                                    _per_channel(c.qa_bias, m, "qa_bias"),
                                    _per_channel(c.effort_bias, m, "effort_bias")])
        self.q_noise, self.qa_noise, self.effort_noise = np.split(self.noise_scale, [n, n + m])
        self.q_bias, self.qa_bias, self.effort_bias = np.split(self.bias, [n, n + m])
        cpr = float(c.counts_per_rad)
        self.counts_per_rad = cpr if 0 < cpr < math.inf else 0.0
        self._normals = np.empty(0)
        self._next = 0

    def normals(self, count: int) -> FloatArray:
        """The next ``count`` standard normals of the seeded stream (drawn in blocks of
        :data:`NORMALS_BLOCK`); a view, valid until the next call."""
        start = self._next
        if start + count > self._normals.size:
            rest = self._normals[start:]
            fresh = self.rng.standard_normal(max(NORMALS_BLOCK, count))
            self._normals = np.concatenate([rest, fresh])
            start = 0
        self._next = start + count
        return self._normals[start:start + count]

    def encoders(self, q: FloatArray) -> FloatArray:
        """Joint encoder readings (n,) [rad]: whole counts when quantised."""
        value = q + self.q_bias + self.q_noise * self.normals(self.n)
        if self.counts_per_rad:
            return np.round(value * self.counts_per_rad) / self.counts_per_rad
        return value

    def actuator_positions(self, qa: FloatArray) -> FloatArray:
        """Actuator position readings (m,) [m or rad]."""
        return qa + self.qa_bias + self.qa_noise * self.normals(self.m)

    def efforts(self, tau: FloatArray) -> FloatArray:
        """Actuator effort readings (m,) [N or N·m]."""
        return tau + self.effort_bias + self.effort_noise * self.normals(self.m)


__all__ = ["COUNTS_PER_RAD", "NORMALS_BLOCK", "SATURATION_TOL", "STATUS_NONFINITE",
           "STATUS_QA_LIMIT", "STATUS_Q_LIMIT", "STATUS_SATURATED", "SensorConfig", "Sensors"]
