"""Live parameters: what commands may change between two cycles, and their validation.

The loop reads ``controller.params`` (one immutable :class:`LiveParams`) once per cycle; a
command builds a new, validated ``LiveParams`` and swaps the reference, so every cycle sees
either all of a change or none of it.

Gains are checked twice: by the static rules (:func:`~poise.api.rules.check_gains`:
``(0, rate]`` 1/s) and against the feedback loop's stability bound at the current target
(:mod:`poise.motion.stability`, :mod:`poise.motion.bounds`), which the parameters
carry in :attr:`LiveParams.stability` once a target has been planned. Gains given as
``"auto"`` (the default) follow the bound: a stated fraction of it, recomputed whenever the
target, the algorithm, the mode, the update rule or λ changes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from poise.api.rules import (
    ALGORITHMS,
    AUTO,
    MODES,
    RATE_GAINS,
    RuleError,
    check_choice,
    check_gain_bound,
    check_gains,
    check_target,
)
from poise.models.base import FloatArray
from poise.motion.bounds import StabilityReport, assess
from poise.motion.options import RunSettings
from poise.motion.stability import ALGORITHM_GAINS, IKGains, LoopLinearisation

#: The value an automatic gain has before any bound is known (no target planned yet) [1/s]:
#: small enough for every reference robot's feedback loop.
PROVISIONAL_GAIN = {"gamma": 0.1, "gamma_z": 0.1, "gamma_e": 20.0}


class ParamError(ValueError):
    """A command value that is refused; the message is the refusal reason.

    Attributes:
        what: the dotted name of the refused value when one is (``gains.gamma``), else ''.
    """

    def __init__(self, message: str, what: str = "") -> None:
        super().__init__(message)
        self.what = what


@dataclass(frozen=True)
class LiveParams:
    """The live-tunable parameters (the configuration's ``[algorithm]``).

    Attributes:
        algorithm: ``alg1`` | ``alg2`` | ``plain``.
        update: Algorithm 1's update (``dls``, ``pinv``, ``inverse``, ``transpose``).
        gamma, gamma_z, gamma_e: gains [1/s].
        damping: λ.
        target: x̄ (task_dim,) [task units].
        mode: ``ff`` | ``fb``.
        auto: the rate gains that follow the stability bound (given as ``"auto"``).
        stability: the bounds at the current target (None: no target planned yet).
    """

    algorithm: str
    update: str
    gamma: float
    gamma_z: float
    gamma_e: float
    damping: float
    target: FloatArray
    mode: str
    auto: frozenset[str] = frozenset()
    stability: StabilityReport | None = None

    @classmethod
    def from_config(cls, cfg: RunSettings, target: FloatArray) -> LiveParams:
        """The parameters of a run's configuration (``cfg.algorithm``, ``cfg.loop.mode``;
        any :class:`~poise.motion.options.RunSettings`); gains given as ``"auto"`` hold
        :data:`PROVISIONAL_GAIN` until a target's plan brings its bound
        (:func:`with_plan`)."""
        a = cfg.algorithm
        auto = frozenset(k for k in RATE_GAINS if getattr(a, k) == AUTO)
        gains = {k: PROVISIONAL_GAIN[k] if k in auto else float(getattr(a, k))
                 for k in RATE_GAINS}
        return cls(a.name, a.update, gains["gamma"], gains["gamma_z"], gains["gamma_e"],
                   a.damping, np.asarray(target, dtype=float), cfg.loop.mode, auto)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LiveParams:
        """The inverse of :meth:`as_dict` (the stability report without its linearisation:
        a mirror of another process's parameters)."""
        stability = d.get("stability")
        return cls(d["algorithm"], d["update"], d["gamma"], d["gamma_z"], d["gamma_e"],
                   d["damping"], np.asarray(d["target"], dtype=float), d["mode"],
                   frozenset(d.get("auto", ())),
                   None if stability is None else StabilityReport.from_dict(stability))

    def gains(self) -> dict[str, Any]:
        return {"gamma": self.gamma, "gamma_z": self.gamma_z, "gamma_e": self.gamma_e,
                "damping": self.damping, "update": self.update}

    def as_dict(self) -> dict[str, Any]:
        out = {"algorithm": self.algorithm, "mode": self.mode,
               "target": [float(x) for x in self.target], **self.gains(),
               "auto": sorted(self.auto)}
        if self.stability is not None:
            out["stability"] = self.stability.as_dict()
        return out


def with_stability(p: LiveParams, loop: LoopLinearisation | None = None, *,
                   what: str = "gains") -> LiveParams:
    """``p`` with its stability report (re)computed from ``loop`` (default: the one ``p``
    carries; none: ``p`` unchanged): automatic gains set, explicit ones checked against the
    bound in the current mode.

    Raises:
        ParamError: an explicit gain of the live algorithm at or above its bound; the message
            is ``gains.<key> = <value>: must be below <bound> 1/s, the stability bound: …``.
    """
    loop = loop if loop is not None else (p.stability.loop if p.stability else None)
    if loop is None:
        return p
    live, report = assess(loop, IKGains.of(p), p.auto)
    for key in ALGORITHM_GAINS.get(p.algorithm, ()):
        if key not in p.auto:
            try:
                check_gain_bound(key, getattr(p, key), report.limit(key), report.why(),
                                 what=what)
            except RuleError as exc:
                raise ParamError(str(exc), exc.what) from None
    return replace(p, gamma=live.gamma, gamma_z=live.gamma_z, gamma_e=live.gamma_e,
                   stability=report)


def gains_automatic(p: LiveParams) -> bool:
    """Whether every rate gain of ``p``'s algorithm follows the stability bound (``"auto"``):
    then no gain can be refused at a new target, whose bound may be computed after the
    target was adopted."""
    return set(ALGORITHM_GAINS.get(p.algorithm, ())) <= p.auto


def with_plan(p: LiveParams, plan: Any) -> LiveParams:
    """``p`` at the target of ``plan`` (a :class:`~poise.motion.planner.TargetPlan`),
    with the stability report of the plan's linearisation when it has one.

    Raises:
        ParamError: an explicit gain at or above the bound at the new target.
    """
    new = replace(p, target=plan.live_target)
    loop = getattr(plan, "loop", None)
    return with_stability(new, loop) if loop is not None else new


def with_gains(p: LiveParams, value: Any, period: float) -> LiveParams:
    """Validate a ``gains`` command (a mapping with any of
    :data:`~poise.api.rules.GAIN_KEYS`) by :func:`~poise.api.rules.check_gains`
    (rate gains in ``(0, 1/period]`` 1/s or ``"auto"``, damping in ``[0, MAX_DAMPING]``),
    then against the stability bound (:func:`with_stability`)."""
    try:
        checked = check_gains(value, 1.0 / period)
    except RuleError as exc:
        raise ParamError(str(exc)) from None
    auto = set(p.auto)
    numbers: dict[str, Any] = {}
    for key, v in checked.items():
        if v == AUTO:
            auto.add(key)
        else:
            auto.discard(key)
            numbers[key] = v
    return with_stability(replace(p, **numbers, auto=frozenset(auto)))


def with_algorithm(p: LiveParams, value: Any, m: int, task_dim: int) -> LiveParams:
    try:
        check_choice(value, ALGORITHMS, "algorithm")
    except RuleError as exc:
        raise ParamError(str(exc)) from None
    if value == "alg1" and p.update == "inverse" and m != task_dim:
        raise ParamError(f"algorithm = 'alg1' with update 'inverse' needs as many actuators "
                         f"({m}) as task rows ({task_dim}); set gains.update to 'dls'")
    try:
        return with_stability(replace(p, algorithm=value))
    except ParamError as exc:
        raise ParamError(f"algorithm = {value!r}: {exc}; lower it first (or set it to "
                         f"'{AUTO}')") from None


def with_mode(p: LiveParams, value: Any) -> LiveParams:
    try:
        mode = check_choice(value, MODES, "mode")
    except RuleError as exc:
        raise ParamError(str(exc)) from None
    try:
        return with_stability(replace(p, mode=mode))
    except ParamError as exc:
        raise ParamError(f"mode = {value!r}: {exc}; lower it first (or set it to "
                         f"'{AUTO}')") from None


def parse_target(value: Any, task_dim: int, reach: float | None = None) -> FloatArray:
    """A target vector of ``task_dim`` finite numbers within reach of the base (a bare number
    when task_dim is 1): :func:`~poise.api.rules.check_target`."""
    try:
        return np.asarray(check_target(value, task_dim, reach), dtype=float)
    except RuleError as exc:
        raise ParamError(str(exc)) from None
