"""Live parameters: what commands may change between two cycles, and their validation.

The loop reads ``controller.params`` (one immutable :class:`LiveParams`) once per cycle; a
command builds a new, validated ``LiveParams`` and swaps the reference, so every cycle sees
either all of a change or none of it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from poise.controller.config import ALGORITHMS, MODES, UPDATES, Config
from poise.models.base import FloatArray


class ParamError(ValueError):
    """A command value that is refused; the message is the refusal reason."""


@dataclass(frozen=True)
class LiveParams:
    """The live-tunable parameters (see :class:`~poise.controller.config.AlgorithmConfig`).

    Attributes:
        algorithm: ``alg1`` | ``alg2`` | ``plain``.
        update: Algorithm 1's update (``dls``, ``pinv``, ``inverse``, ``transpose``).
        gamma, gamma_z, gamma_e: gains [1/s].
        damping: λ.
        target: x̄ (task_dim,) [task units].
        mode: ``ff`` | ``fb``.
    """

    algorithm: str
    update: str
    gamma: float
    gamma_z: float
    gamma_e: float
    damping: float
    target: FloatArray
    mode: str

    @classmethod
    def from_config(cls, cfg: Config, target: FloatArray) -> LiveParams:
        a = cfg.algorithm
        return cls(a.name, a.update, a.gamma, a.gamma_z, a.gamma_e, a.damping,
                   np.asarray(target, dtype=float), cfg.loop.mode)

    def gains(self) -> dict[str, Any]:
        return {"gamma": self.gamma, "gamma_z": self.gamma_z, "gamma_e": self.gamma_e,
                "damping": self.damping, "update": self.update}

    def as_dict(self) -> dict[str, Any]:
        return {"algorithm": self.algorithm, "mode": self.mode,
                "target": [float(x) for x in self.target], **self.gains()}


GAIN_KEYS = ("gamma", "gamma_z", "gamma_e", "damping", "update")


def with_gains(p: LiveParams, value: Any, period: float) -> LiveParams:
    """Validate a ``gains`` command (a mapping with any of :data:`GAIN_KEYS`).

    Gains must be finite and > 0 with ``Γ · period ≤ 1`` (a larger explicit Euler step
    overshoots); damping finite and ≥ 0.
    """
    if not isinstance(value, Mapping) or not value:
        raise ParamError(f"gains: expected a table with some of {', '.join(GAIN_KEYS)}, "
                         f"got {value!r}")
    changes: dict[str, Any] = {}
    for key, v in value.items():
        if key not in GAIN_KEYS:
            raise ParamError(f"gains.{key}: unknown gain; allowed: {', '.join(GAIN_KEYS)}")
        if key == "update":
            if v not in UPDATES:
                raise ParamError(f"gains.update = {v!r}: must be one of {', '.join(UPDATES)}")
            changes[key] = v
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ParamError(f"gains.{key} = {v!r}: must be a finite number")
        if key == "damping":
            if v < 0:
                raise ParamError(f"gains.damping = {v!r}: must be >= 0")
        elif not 0 < v <= 1.0 / period:
            raise ParamError(f"gains.{key} = {v!r}: must be in (0, {1.0 / period:g}] 1/s "
                             f"(gain × period ≤ 1 at {1.0 / period:g} Hz)")
        changes[key] = float(v)
    return replace(p, **changes)


def with_algorithm(p: LiveParams, value: Any, m: int, task_dim: int) -> LiveParams:
    if value not in ALGORITHMS:
        raise ParamError(f"algorithm = {value!r}: must be one of {', '.join(ALGORITHMS)}")
    if value == "alg1" and p.update == "inverse" and m != task_dim:
        raise ParamError(f"algorithm = 'alg1' with update 'inverse' needs as many actuators "
                         f"({m}) as task rows ({task_dim}); set gains.update to 'dls'")
    return replace(p, algorithm=value)


def with_mode(p: LiveParams, value: Any) -> LiveParams:
    if value not in MODES:
        raise ParamError(f"mode = {value!r}: must be one of {', '.join(MODES)}")
    return replace(p, mode=value)


def parse_target(value: Any, task_dim: int) -> FloatArray:
    """A target vector of ``task_dim`` finite numbers (a bare number when task_dim is 1)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = [value]
    if isinstance(value, Mapping) and "x" in value:
        value = value["x"]
    ok = isinstance(value, (list, tuple)) and len(value) == task_dim and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        for v in value)
    if not ok:
        raise ParamError(f"target = {value!r}: must be a list of {task_dim} finite numbers "
                         "[task units]")
    return np.asarray(value, dtype=float)
