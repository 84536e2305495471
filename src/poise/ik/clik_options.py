"""The options of :func:`poise.ik.clik.solve`: the requested ones (:class:`SolveOptions`) and
their checked, resolved form for the iteration (:func:`resolve`: gains, weights, damping rule,
caps)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from poise.ik.damping import DampingRule, ErrorDamping, FixedDamping, SingularityDamping
from poise.ik.result import InvalidInputError
from poise.ik.secondary import SecondaryObjective
from poise.ik.targets import Target

METHODS = ("pinv", "dls", "transpose", "lm")
"""The update rules :func:`~poise.ik.clik.solve` accepts."""

DEFAULT_MAX_ITER = {"pinv": 100, "dls": 100, "lm": 100, "transpose": 1000}
"""Iteration caps per method when ``max_iter`` is not given."""

DEFAULT_GAIN = (1.0, 2.0)
"""``(k_Pp, k_Po)`` when ``gain`` is not given: ``ε_de ≈ ϑ/2`` for small errors, so ``k_Po = 2``
makes ``Δt = 1`` a full (Newton-like) step for orientation as well as for position."""


@dataclass(frozen=True)
class SolveOptions:
    """The options of :func:`~poise.ik.clik.solve` (all its keywords but ``q0``), grouped for
    the numpy path.

    Attributes:
        method: ``"pinv"``, ``"dls"``, ``"transpose"`` or ``"lm"`` (module docstring).
        tol: tolerance on ``task_error = √(‖x̃‖² + ϑ²)`` [m, rad].
        max_iter: updates per attempt (default :data:`DEFAULT_MAX_ITER`).
        restarts: extra attempts from random configurations within the limits.
        seed: seed of the restart generator.
        damping: λ [task units] for a fixed damping, or a rule from :mod:`poise.ik.damping`
            (``dls``: default ``SingularityDamping()``; ``lm``: default ``ErrorDamping()``;
            not allowed for ``pinv``/``transpose``).
        gain: ``k_P`` or ``(k_Pp, k_Po)`` [1/Δt]; default :data:`DEFAULT_GAIN` (transpose:
            adaptive α, see the module docstring).
        orientation_weight: ``w_o`` in ``W = diag(I₃, w_o I₃)`` [m²/rad²].
        secondary: objective resolved in the null space (:mod:`poise.ik.secondary`).
        secondary_tol: the null-space step must also be below this to converge [rad].
        step: ``Δt`` (1.0: full Newton-like steps).
        line_search: halve steps that increase the residual.
        stall_window, stall_rtol: the stall rule (module docstring); default 10 and 1e-4,
            on the compiled path 6 and 0.1 (:mod:`poise.ik.clik_compiled`).
        record_path: keep every iterate in ``result.path``.
        compiled: ``None`` (default): the compiled solver when it applies (``"lm"`` on a
            ``dh_chain`` model with the options it implements, see
            :func:`poise.ik.clik_compiled.unavailable_reason`), else the numpy one;
            ``False``: always the numpy reference; ``True``: the compiled solver or
            ``InvalidInputError`` saying why it does not apply.

    :func:`~poise.ik.clik.solve` builds it only on the numpy path: a frozen dataclass costs
    microseconds per call, which the compiled path (timed per solve) does not pay.
    """

    method: str = "dls"
    tol: float = 1e-6
    max_iter: int | None = None
    restarts: int = 0
    seed: int | None = 0
    damping: float | DampingRule | None = None
    gain: float | tuple[float, float] | None = None
    orientation_weight: float = 1.0
    secondary: SecondaryObjective | None = None
    secondary_tol: float = 1e-4
    step: float = 1.0
    line_search: bool = True
    stall_window: int | None = None
    stall_rtol: float | None = None
    record_path: bool = False
    compiled: bool | None = None


_DEFAULT_RULES: dict[str, DampingRule] = {"dls": SingularityDamping(), "lm": ErrorDamping()}


def positive(name: str, value: Any, allow_zero: bool = False) -> float:
    """``value`` as a finite float > 0 (≥ 0 with ``allow_zero``), else InvalidInputError."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise InvalidInputError(f"{name} = {value!r}: must be a number") from None
    if not math.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        rule = ">= 0" if allow_zero else "> 0"
        raise InvalidInputError(f"{name} = {value!r}: must be a finite number {rule}")
    return v


def integer(name: str, value: Any, minimum: int) -> int:
    """``value`` as an int ≥ ``minimum``, else InvalidInputError."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise InvalidInputError(f"{name} = {value!r}: must be an integer >= {minimum}")
    return int(value)


def damping_rule(method: str, damping: Any) -> DampingRule | None:
    """The damping rule of ``method`` from the ``damping`` argument (a number λ, a rule, or
    None for the method's default); None for ``pinv``/``transpose``."""
    if method in ("pinv", "transpose"):
        if damping is not None:
            raise InvalidInputError(f"damping applies to methods dls and lm, not {method!r}")
        return None
    if damping is None:
        return _DEFAULT_RULES[method]
    if isinstance(damping, (int, float, np.floating)) and not isinstance(damping, bool):
        return FixedDamping(positive("damping", damping, allow_zero=True))
    if hasattr(damping, "mu"):
        return damping  # type: ignore[no-any-return]
    raise InvalidInputError(f"damping = {damping!r}: must be a number (λ) or a damping "
                            "rule from poise.ik.damping")


def resolve(method: str, damping: Any, gain: Any, w_o: float, tol: float,
            max_iter: int | None, restarts: int, step: float, stall_window: int,
            stall_rtol: float, secondary_tol: float, tgt: Target) -> dict[str, Any]:
    """The checked options as the iteration reads them: the damping rule, ``W^½`` row
    weights ``sw`` and ``W^½ K_P`` ``kw`` per task row, caps and tolerances
    (InvalidInputError on a bad one)."""
    rule = damping_rule(method, damping)
    adaptive_alpha = method == "transpose" and gain is None
    if gain is None:
        k_p, k_o = DEFAULT_GAIN
    elif isinstance(gain, (tuple, list, np.ndarray)):
        if len(gain) != 2:
            raise InvalidInputError(f"gain = {gain!r}: must be k_P or (k_Pp, k_Po)")
        k_p, k_o = positive("gain[0]", gain[0]), positive("gain[1]", gain[1])
    else:
        k_p = k_o = positive("gain", gain)
    w_o = positive("orientation_weight", w_o)

    rows = 6 if tgt.is_pose else tgt.position.size
    sw = np.ones(rows)  # W^½
    kp = np.full(rows, k_p)
    if tgt.is_pose:
        sw[3:] = math.sqrt(w_o)
        kp[3:] = k_o
    return {
        "method": method, "rule": rule, "adaptive_alpha": adaptive_alpha,
        "sw": sw, "weighted": bool(np.any(sw != 1.0)), "kw": kp * sw,
        "tol": positive("tol", tol),
        "max_iter": DEFAULT_MAX_ITER[method] if max_iter is None
        else integer("max_iter", max_iter, 0),
        "restarts": integer("restarts", restarts, 0),
        "step": positive("step", step),
        "stall_window": integer("stall_window", stall_window, 1),
        "stall_rtol": positive("stall_rtol", stall_rtol, allow_zero=True),
        "secondary_tol": positive("secondary_tol", secondary_tol),
    }


__all__ = [
    "DEFAULT_GAIN",
    "DEFAULT_MAX_ITER",
    "METHODS",
    "SolveOptions",
    "damping_rule",
    "integer",
    "positive",
    "resolve",
]
