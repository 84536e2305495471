"""The one result type every solver in :mod:`poise.ik` returns.

A solver never returns ``None`` or a bare array: it returns an :class:`IKResult` whose
``success`` is ``True`` only when the stopping tolerance was met (and, for held-configuration
solvers, the statics hold and any stability requirement is satisfied). An unreachable target
returns the closest configuration found with ``success = False``.

Invalid input (wrong dimension, NaN/Inf) is refused by raising :class:`InvalidInputError`
before any iteration; callers that must not raise (the CLI's JSON output, the controller)
turn that error into a result with :meth:`IKResult.refused`.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

FloatArray = NDArray[np.float64]


class InvalidInputError(ValueError):
    """A target, start configuration or option that no solver can use.

    The message says what was wrong and where (argument name, expected shape or range).
    """


class Status(enum.StrEnum):
    """Why a solver stopped."""

    CONVERGED = "converged"
    """Task error (and statics residual, where relevant) below tolerance."""
    ITERATION_CAP = "iteration_cap"
    """The iteration limit was reached before the tolerance."""
    STALLED = "stalled"
    """The residual stopped decreasing (local minimum or joint limit) before the tolerance."""
    UNREACHABLE = "unreachable"
    """The target lies outside the reachable set; ``q`` is the closest configuration found."""
    SINGULAR = "singular"
    """A matrix the method must invert became singular and no damped fallback was allowed."""
    INVALID_INPUT = "invalid_input"
    """The input was refused (see ``message``)."""
    UNSTABLE = "unstable"
    """A held configuration was found but it is an unstable equilibrium (``H_uu`` not ≻ 0)."""
    DEADLOCK = "deadlock"
    """A continuum segment bent past 2π (coiled); the CC model treats that as infeasible."""


def _as_list(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else (1e308 if value > 0 else -1e308)
    if isinstance(value, enum.Enum):
        return value.value
    return value


@dataclass(frozen=True)
class IKResult:
    """Outcome of one inverse-kinematics solve.

    Attributes:
        q: final configuration (n,), the closest one found when ``success`` is false.
        success: the stopping tolerance was met (and the held-configuration conditions hold).
        status: why the solver stopped, see :class:`Status`.
        iterations: iterations of the last (successful or best) attempt.
        restarts: random restarts used (0 when the first attempt succeeded).
        position_error: norm of the task / position error at ``q`` [task units, m for positions].
        orientation_error: norm of the orientation error at ``q`` [rad]; 0 for position tasks.
        residual_history: the scalar residual per iteration of the returned attempt.
        sigma_min: smallest singular value of the Jacobian used at the end.
        wall_time: time spent in the solver [s].
        x: the task value reached, ``h(q)``.
        message: human-readable detail (always set for failures).
        qa, qu: actuated / unactuated coordinates of ``q`` (held-configuration solvers).
        statics_residual: ``‖G_u(q)‖`` (held-configuration solvers) [N·m or N].
        min_eig_Huu: smallest eigenvalue of ``H_uu`` at ``q``.
        stable: ``H_uu ≻ 0`` at ``q`` (None where the notion does not apply).
        path: iterates of ``q`` (k, n) when requested.
    """

    q: FloatArray
    success: bool
    status: Status
    iterations: int = 0
    restarts: int = 0
    position_error: float = math.nan
    orientation_error: float = 0.0
    residual_history: FloatArray = field(default_factory=lambda: np.zeros(0))
    sigma_min: float = math.nan
    wall_time: float = 0.0
    x: FloatArray | None = None
    message: str = ""
    qa: FloatArray | None = None
    qu: FloatArray | None = None
    statics_residual: float | None = None
    min_eig_Huu: float | None = None
    stable: bool | None = None
    path: FloatArray | None = None

    @property
    def task_error(self) -> float:
        """Combined task error: ``sqrt(position_error² + orientation_error²)``."""
        return math.hypot(self.position_error, self.orientation_error)

    def with_updates(self, **changes: Any) -> IKResult:
        """A copy with some fields replaced."""
        return replace(self, **changes)

    @classmethod
    def refused(cls, q: ArrayLike | None, message: str) -> IKResult:
        """The result for an input that was refused (status ``invalid_input``)."""
        q_arr = np.asarray(q, dtype=float) if q is not None else np.zeros(0)
        return cls(q=q_arr, success=False, status=Status.INVALID_INPUT, message=message)

    def to_dict(self, include_history: bool = False) -> dict[str, Any]:
        """JSON-ready dictionary (arrays as lists, NaN as ``None``)."""
        keys = [
            "success", "status", "q", "x", "task_error", "position_error",
            "orientation_error", "iterations", "restarts", "sigma_min", "wall_time",
            "message", "qa", "qu", "statics_residual", "min_eig_Huu", "stable",
        ]
        out = {k: _as_list(getattr(self, k)) for k in keys}
        if include_history:
            out["residual_history"] = _as_list(self.residual_history)
            if self.path is not None:
                out["path"] = _as_list(self.path)
        return out


def as_vector(value: ArrayLike, size: int | None, name: str) -> FloatArray:
    """Validate and convert an input vector, raising :class:`InvalidInputError` when unusable.

    Args:
        value: the user's input.
        size: required length (None: any length ≥ 1).
        name: the argument name, used in the error message.
    """
    try:
        arr = np.asarray(value, dtype=float).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"{name}: cannot be read as numbers ({exc})") from None
    if size is not None and arr.size != size:
        raise InvalidInputError(f"{name}: expected {size} values, got {arr.size}")
    if arr.size == 0:
        raise InvalidInputError(f"{name}: empty")
    if not np.all(np.isfinite(arr)):
        bad = [i for i, v in enumerate(arr) if not math.isfinite(v)]
        raise InvalidInputError(f"{name}: non-finite value at index {bad} ({arr.tolist()})")
    return arr
