"""Live parameters: what commands may change between two cycles, and their validation.

The loop reads ``controller.params`` (one immutable :class:`LiveParams`) once per cycle; a
command builds a new, validated ``LiveParams`` and swaps the reference, so every cycle sees
either all of a change or none of it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from poise.controller.config import Config
from poise.controller.rules import (
    ALGORITHMS,
    MODES,
    RuleError,
    check_choice,
    check_gains,
    check_target,
)
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


def with_gains(p: LiveParams, value: Any, period: float) -> LiveParams:
    """Validate a ``gains`` command (a mapping with any of
    :data:`~poise.controller.rules.GAIN_KEYS`) by :func:`~poise.controller.rules.check_gains`:
    rate gains in ``(0, 1/period]`` 1/s, damping in ``[0, MAX_DAMPING]``."""
    try:
        return replace(p, **check_gains(value, 1.0 / period))
    except RuleError as exc:
        raise ParamError(str(exc)) from None


def with_algorithm(p: LiveParams, value: Any, m: int, task_dim: int) -> LiveParams:
    try:
        check_choice(value, ALGORITHMS, "algorithm")
    except RuleError as exc:
        raise ParamError(str(exc)) from None
    if value == "alg1" and p.update == "inverse" and m != task_dim:
        raise ParamError(f"algorithm = 'alg1' with update 'inverse' needs as many actuators "
                         f"({m}) as task rows ({task_dim}); set gains.update to 'dls'")
    return replace(p, algorithm=value)


def with_mode(p: LiveParams, value: Any) -> LiveParams:
    try:
        return replace(p, mode=check_choice(value, MODES, "mode"))
    except RuleError as exc:
        raise ParamError(str(exc)) from None


def parse_target(value: Any, task_dim: int, reach: float | None = None) -> FloatArray:
    """A target vector of ``task_dim`` finite numbers within reach of the base (a bare number
    when task_dim is 1): :func:`~poise.controller.rules.check_target`."""
    try:
        return np.asarray(check_target(value, task_dim, reach), dtype=float)
    except RuleError as exc:
        raise ParamError(str(exc)) from None
