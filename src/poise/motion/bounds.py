"""The feedback gains' bounds at the current target: automatic gains and the published report.

:func:`assess` turns a :class:`~poise.motion.stability.LoopLinearisation` (the loop
linearised at a target's held configuration) and the live gains into a
:class:`StabilityReport`: the bound of each gain of the live algorithm in the live mode and in
feedback, the automatic gains (:data:`DEFAULT_FRACTION` × the feedback bound), the slowest
structural mode. An automatic gain is at most that fraction of the bound, and lower where a
lower one makes the slowest closed-loop pole of the whole family decay faster
(:func:`fastest_decay`). :func:`warm` computes the bounds of the live algorithm in both modes
ahead, where a plan is made, so that adopting it and switching mode later cost microseconds.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from poise.api.rules import HELD_ALGORITHMS
from poise.motion.stability import ALGORITHM_GAINS, IKGains, LoopLinearisation, Mode

#: Default gains are this fraction of the feedback loop's (robust) stability bound (capped at the
#: loop rate): a gain margin of 3.3, and near the fastest decay of the loop around a lightly damped
#: mode (for the soft arms and the dancer the slowest closed-loop pole decays fastest at
#: 0.3–0.4 × the bound; closer to the bound the mode's own damping is used up).
DEFAULT_FRACTION = 0.3
#: ... and at most this fraction of the robust bound (the plant's springs within ``1 ±
#: uncertainty`` × the model's, :meth:`~poise.motion.stability.LoopLinearisation.bound`): the
#: same gain margin of 3.3, and so near the fastest decay, for every member of that family, not
#: only the model. At 0.6 × (a margin of 1.7) a plant near the family's edge was stable but
#: hardly damped: the double pendulum on ``mixed15`` (target 3, robust bound 6.3 /s against 611
#: at the model) swung ±3.5 mm around its target for the whole trial, its slowest pole at
#: |z| = 0.99966 per 4 ms (a 12 s decay); at 0.3 × it settles in 5.2 s. The robust bound is
#: the lower one where the family nears instability (the dancer's 0.29 against 0.42 /s at the
#: model, springs −20 %; tendon_3link's 12.8 against 341).
ROBUST_FRACTION = 0.3
#: The automatic gain is the cap (the smallest of the fractions above, :data:`AUTO_MAX` and
#: the rate) or a lower one on a grid of :data:`DECAY_POINTS` steps of ÷ :data:`DECAY_STEP`
#: whose slowest pole decays :data:`DECAY_GAIN` × faster over the family
#: (:func:`fastest_decay`).
DECAY_POINTS = 9
DECAY_STEP = math.sqrt(2.0)
DECAY_GAIN = 1.25
#: Automatic gains are also at most this [1/s]: the linearisation does not model the
#: actuators' effort limits. The double pendulum's servo saturates on any move; with the
#: anti-windup on the device's SATURATED bit (:meth:`ControlStep._anti_windup`) it settles at
#: every gain up to 0.8 × its bound (~480/s) in simulated time, but on the virtual device
#: (one period of delay more, its own sampling) Γ = 25/s settles and 50/s rings. The soft
#: arms' and the dancer's automatic gains (~0.3–1/s) are below it.
AUTO_MAX = 10.0


@dataclass(frozen=True)
class StabilityReport:
    """What the loop tolerates at the current target, for the live algorithm and mode.

    Attributes:
        algorithm, mode: what the bounds are for.
        gain_max: per gain key of the algorithm, the bound [1/s] in the current mode (the
            other gains as they are): stable below it; ``inf``: stable up to the scan's top
            (:data:`SCAN_TOP` × the rate), so only the rules' ``(0, rate]`` applies.
        gain_max_fb: the same in feedback (what defaults and a switch to ``fb`` use).
        defaults: the automatic gains: the smallest of :data:`DEFAULT_FRACTION` × the
            feedback bound at the model, :data:`ROBUST_FRACTION` × the robust one,
            :data:`AUTO_MAX` and the rate, or a lower gain whose slowest pole decays
            faster over the family (:func:`fastest_decay`).
        slowest: the slowest structural mode (None: the robot has none).
        modes: the structural modes, slowest first.
        period: the loop period [s]; ``delay``: the sensor-to-setpoint delay [periods].
        radius: spectral radius of the closed loop at the live gains (< 1: stable).
        q: the held configuration linearised at (n,).
        fraction: the automatic gains' fraction of the bound.
        uncertainty: the feedback bound holds for the plant's springs within ``1 ±`` this ×
            the model's (:class:`~poise.motion.stability.LoopLinearisation`).
        gain_max_nominal: the feedback bound at the model's own springs (≥ ``gain_max_fb``).
        left_out: the task directions feedback leaves out at this target (a plant within
            the uncertainty could answer them reversed, near a fold of the held map;
            :mod:`poise.motion.agreement`), of ``task_dim``.
        task_dim: the number of task coordinates.
        loop: the linearisation (to recompute after a command; not serialised).
    """

    algorithm: str
    mode: str
    gain_max: dict[str, float]
    gain_max_fb: dict[str, float]
    defaults: dict[str, float]
    slowest: Mode | None
    modes: tuple[Mode, ...]
    period: float
    delay: int
    radius: float
    q: tuple[float, ...] = ()
    fraction: float = DEFAULT_FRACTION
    uncertainty: float = 0.0
    robust_fraction: float = ROBUST_FRACTION
    gain_max_nominal: dict[str, float] = field(default_factory=dict)
    left_out: int = 0
    task_dim: int = 0
    loop: LoopLinearisation | None = field(default=None, compare=False, repr=False)

    def limit(self, key: str, mode: str | None = None) -> float:
        """The bound of gain ``key`` [1/s] in ``mode`` (default: the report's), ``inf`` if
        none or not one of this algorithm's gains."""
        table = self.gain_max_fb if (mode or self.mode) == "fb" else self.gain_max
        return table.get(key, math.inf)

    def why(self, mode: str | None = None) -> str:
        """The sentence a refusal gives after the bound."""
        mode = mode or self.mode
        slow = self.slowest
        around = (f" around the slowest structural mode (ω = {slow.omega:.3g} rad/s, "
                  f"ζ = {slow.zeta:.2g})" if slow is not None else "")
        robust = (f" for springs within ±{self.uncertainty * 100:g} % of the model's"
                  if self.uncertainty > 0 and mode == "fb" else "")
        auto = (f"{self.fraction:g} × this one (a gain margin of {1 / self.fraction:.2g} "
                "over that whole family)"
                if self.uncertainty > 0 and self.robust_fraction == self.fraction else
                f"the smaller of {self.fraction:g} × the bound at the model and "
                f"{self.robust_fraction:g} × this one (gain margins "
                f"{1 / self.fraction:.2g} and {1 / self.robust_fraction:.2g})"
                if self.uncertainty > 0 else
                f"{self.fraction:g} × the bound (a gain margin of {1 / self.fraction:.2g})")
        return (f"above it the {self.algorithm} {mode} loop at the current target is "
                f"unstable{around}{robust} at {1 / self.period:g} Hz with a delay of "
                f"{self.delay} period{'s' if self.delay != 1 else ''}; 'auto' sets {auto}, "
                "or less where the slowest closed-loop pole then decays faster"
                + (f"; {self.left_out_sentence()}" if self.left_out and mode == "fb" else ""))

    def left_out_sentence(self) -> str:
        """What feedback leaves out at this target, and why (:attr:`left_out`)."""
        return (f"feedback leaves out {self.left_out} of {self.task_dim} task direction"
                f"{'s' if self.task_dim != 1 else ''} here, which a plant with springs within "
                f"±{self.uncertainty * 100:g} % of the model's could answer reversed (near a "
                "fold of the held map); sampled re-targeting corrects along "
                f"{'them' if self.left_out > 1 else 'it'}")

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (``inf`` → None)."""
        def clean(d: dict[str, float]) -> dict[str, float | None]:
            return {k: (v if math.isfinite(v) else None) for k, v in d.items()}

        return {"algorithm": self.algorithm, "mode": self.mode,
                "gain_max": clean(self.gain_max), "gain_max_fb": clean(self.gain_max_fb),
                "defaults": clean(self.defaults), "fraction": self.fraction,
                "uncertainty": self.uncertainty, "robust_fraction": self.robust_fraction,
                "gain_max_nominal": clean(self.gain_max_nominal),
                "slowest_mode": None if self.slowest is None else self.slowest.as_dict(),
                "modes": [mo.as_dict() for mo in self.modes],
                "period_s": self.period, "delay_periods": self.delay,
                "spectral_radius": self.radius, "q": list(self.q),
                "left_out": self.left_out, "task_dim": self.task_dim, "why": self.why()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StabilityReport:
        """The inverse of :meth:`as_dict` (without the linearisation)."""
        def back(x: dict[str, Any]) -> dict[str, float]:
            return {k: (math.inf if v is None else float(v)) for k, v in x.items()}

        def mode(x: dict[str, Any]) -> Mode:
            return Mode(float(x["omega"]), float(x["zeta"]))

        slow = d.get("slowest_mode")
        return cls(d["algorithm"], d["mode"], back(d["gain_max"]), back(d["gain_max_fb"]),
                   back(d["defaults"]), None if slow is None else mode(slow),
                   tuple(mode(x) for x in d.get("modes", ())), float(d["period_s"]),
                   int(d["delay_periods"]), float(d["spectral_radius"]),
                   tuple(float(x) for x in d.get("q", ())),
                   float(d.get("fraction", DEFAULT_FRACTION)),
                   float(d.get("uncertainty", 0.0)),
                   float(d.get("robust_fraction", ROBUST_FRACTION)),
                   back(d.get("gain_max_nominal", {})), int(d.get("left_out", 0)),
                   int(d.get("task_dim", 0)))


def assess(loop: LoopLinearisation, g: IKGains, auto: Iterable[str] = ()
           ) -> tuple[IKGains, StabilityReport]:
    """The automatic gains and the bounds of the live ones.

    Each gain of ``g.algorithm`` named in ``auto`` becomes :data:`DEFAULT_FRACTION` × its
    feedback bound (capped at the loop rate) or the lower value :func:`fastest_decay`
    finds, in the order of :data:`ALGORITHM_GAINS` (ΓZ
    before ΓE, each at the others' values); then the bounds of every gain are computed at
    the resulting gains, in the current mode and in feedback.

    Returns:
        ``(gains, report)``: ``g`` with its automatic gains set, and their report.
    """
    auto = set(auto)
    rate = 1.0 / loop.period
    keys = ALGORITHM_GAINS.get(g.algorithm, ())
    fb = replace(g, mode="fb")
    defaults: dict[str, float] = {}
    for key in keys:
        cap = min(DEFAULT_FRACTION * loop.nominal_bound(key, fb),
                  ROBUST_FRACTION * loop.bound(key, fb), AUTO_MAX, rate)
        defaults[key] = fastest_decay(loop, fb, key, cap)
        if key in auto:
            fb = fb.with_gain(key, defaults[key])
    live = replace(fb, mode=g.mode)
    gain_max_fb = {key: loop.bound(key, fb) for key in keys}
    gain_max = gain_max_fb if g.mode == "fb" else {key: loop.bound(key, live) for key in keys}
    slow = loop.structural_modes()
    projection = loop.projection if g.algorithm in HELD_ALGORITHMS else None
    left_out = 0 if projection is None else loop.k - round(float(np.trace(projection)))
    report = StabilityReport(
        g.algorithm, g.mode, gain_max, gain_max_fb, defaults, slow[0] if slow else None,
        tuple(slow), loop.period, loop.delay, loop.spectral_radius(live),
        tuple(float(x) for x in loop.q_star), DEFAULT_FRACTION, loop.uncertainty,
        ROBUST_FRACTION, {key: loop.nominal_bound(key, fb) for key in keys}, left_out,
        loop.k, loop)
    return live, report


def fastest_decay(loop: LoopLinearisation, g: IKGains, key: str, cap: float) -> float:
    """The value of gain ``key`` in ``(0, cap]`` whose slowest closed-loop pole decays
    fastest over the plants the bound holds for (:meth:`~poise.motion.stability.
    LoopLinearisation.worst_radius`), on the grid ``cap × DECAY_STEP^-j``,
    ``j <`` :data:`DECAY_POINTS`; ``cap`` itself unless a lower gain decays
    :data:`DECAY_GAIN` × faster. Computed once per linearisation and gains (where a plan is
    made, :func:`warm`), so that adopting the plan costs microseconds.

    Below the bound the decay need not improve with the gain: around a lightly damped mode
    the integrator's pole and the mode's meet, and past that the mode's damping is used up
    (the double pendulum at target 0 of ``bench control --plant mixed15``: the slowest pole
    decays in 1.6 s at Γ = 1 /s and in 3.7 s at Γ = 10 /s, the cap; the plant rang there for
    9 s)."""
    if not (math.isfinite(cap) and cap > 0.0):
        return cap
    return loop.cached(("fastest_decay", key, g.with_gain(key, 0.0).relevant(), cap),
                       lambda: _fastest_decay(loop, g, key, cap))


def _fastest_decay(loop: LoopLinearisation, g: IKGains, key: str, cap: float) -> float:
    """:func:`fastest_decay`'s scan (computed once per linearisation and gains)."""
    tau = {}  # the slowest pole's decay time [s] per candidate gain
    for j in range(DECAY_POINTS):
        gain = cap * DECAY_STEP ** -j
        radius = loop.worst_radius(key, g.with_gain(key, gain))
        tau[gain] = -loop.period / math.log(radius) if 0.0 < radius < 1.0 else math.inf
    best = min(tau, key=lambda gain: (tau[gain], -gain))
    return best if tau[best] * DECAY_GAIN < tau[cap] else cap


def warm(loop: LoopLinearisation, g: IKGains, auto: Iterable[str] = ()) -> None:
    """Compute (and cache in ``loop``) the bounds of the live algorithm in both modes at the
    update rule, λ and automatic gains of ``g``: done where a plan is made, so that adopting
    it and a later switch of mode find their bounds at once (another algorithm's are computed
    when it is chosen)."""
    for mode in ("fb", "ff"):
        assess(loop, replace(g, mode=mode), auto)


__all__ = ["AUTO_MAX", "DECAY_GAIN", "DECAY_POINTS", "DECAY_STEP", "DEFAULT_FRACTION",
           "ROBUST_FRACTION", "StabilityReport", "assess", "fastest_decay", "warm"]
