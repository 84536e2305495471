"""What a run's plans depend on besides the model and the limits, as plain motion-level values.

:class:`MotionOptions` is what :class:`~poise.motion.motion_planner.MotionPlanner`,
:func:`~poise.motion.reference.choose_move` and :func:`~poise.motion.reference.predicts`
take: the loop period, the tolerance, the delay the stability analysis assumes, the shaper
and the model-prediction switches. The controller builds it from its configuration with
:meth:`MotionOptions.from_config`, which reads a configuration through the structural
:class:`RunSettings` (``config.loop`` / ``config.algorithm``): nothing in :mod:`poise.motion`
imports :mod:`poise.controller`, not even for typing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from poise.api.rules import GAIN_UNCERTAINTY


class LoopSettings(Protocol):
    """The ``[loop]`` settings plans and live parameters read (read-only)."""

    @property
    def rate(self) -> float: ...  # [Hz]

    @property
    def mode(self) -> str: ...

    @property
    def effort_feedforward(self) -> bool: ...

    @property
    def shaper(self) -> str: ...

    @property
    def follow_model(self) -> bool: ...

    @property
    def choose_move(self) -> bool: ...

    @property
    def compiled(self) -> bool: ...


class AlgorithmSettings(Protocol):
    """The ``[algorithm]`` settings plans and live parameters read (read-only)."""

    @property
    def name(self) -> str: ...

    @property
    def update(self) -> str: ...

    @property
    def gamma(self) -> float | str: ...

    @property
    def gamma_z(self) -> float | str: ...

    @property
    def gamma_e(self) -> float | str: ...

    @property
    def damping(self) -> float: ...

    @property
    def tolerance(self) -> float: ...


class RunSettings(Protocol):
    """A run's configuration as motion reads it (``poise.controller.config.Config`` is
    one)."""

    @property
    def loop(self) -> LoopSettings: ...

    @property
    def algorithm(self) -> AlgorithmSettings: ...


@dataclass(frozen=True)
class MotionOptions:
    """How a run plans its targets (see the module docstring).

    Attributes:
        period: the loop period Δt [s].
        tolerance: task error below which a target counts as reached [task units].
        delay: the sensor-to-setpoint delay the stability analysis assumes [whole periods]:
            1 for a device, 0 for an in-process plant stepped in simulated time
            (:func:`~poise.motion.stability.delay_periods`).
        effort_feedforward: setpoints carry ``τ_ff = G_a(q̄)``.
        shaper: the input shaper of the moves (``[loop] shaper``).
        choose_move: choose each move on the model where the shapers fall short
            (:func:`~poise.motion.reference.choose_move`).
        follow_model: in feedback, follow the model's predicted response after a move.
        compiled: the predictions run on the compiled kernels where the model has them.
        gain_uncertainty: the feedback bound holds for the plant's springs within ``1 ±``
            this × the model's (``[loop] gain_uncertainty``).
    """

    period: float
    tolerance: float
    delay: int = 1
    effort_feedforward: bool = True
    shaper: str = "auto"
    choose_move: bool = True
    follow_model: bool = True
    compiled: bool = True
    gain_uncertainty: float = GAIN_UNCERTAINTY

    @classmethod
    def from_config(cls, config: RunSettings, *, delay: int = 1) -> MotionOptions:
        """The options of a run's configuration (``config.loop``, ``config.algorithm``)."""
        loop = config.loop
        return cls(1.0 / loop.rate, config.algorithm.tolerance, delay,
                   loop.effort_feedforward, loop.shaper, loop.choose_move,
                   loop.follow_model, loop.compiled,
                   float(getattr(loop, "gain_uncertainty", GAIN_UNCERTAINTY)))

    @classmethod
    def of(cls, options: MotionOptions | RunSettings) -> MotionOptions:
        """``options`` itself, or the options of a configuration (the call path of callers
        that still pass their ``Config``)."""
        return options if isinstance(options, MotionOptions) else cls.from_config(options)


__all__ = ["AlgorithmSettings", "LoopSettings", "MotionOptions", "RunSettings"]
