"""How far the plant's modes are from the model's, as its sway after a shaped move shows (issue 35).

A move is shaped on the model's slowest structural mode (:mod:`poise.motion.shaping`) and,
where the shapers may fall short, chosen on the model (:func:`~poise.motion.reference.
choose_move`): the candidate whose predicted response settles first. On the model a ZV shaper
cancels the mode exactly and wins, being the shortest; on a plant whose mode is a few percent
off it leaves a sway that a ZVD or ZVDD shaper would not (``soft_arm_stiff`` on ``mixed15``,
bench control target 13: a 435 mm move shaped ZV left 7 mm swinging at 7.8 rad/s, ζ 0.05, and
settled after 4.7 s; ZVD settled after 1.45 s, ZVDD after 1.77 s; 3 T is 2.4 s).

The residual vibration of a shaper with impulses ``A_i`` at ``t_i`` on a mode ``(ω, ζ)`` is
(Singer and Seering, 1990), with ``ω_d = ω √(1 − ζ²)``,

    V(ω, ζ) = e^(−ζω t_N) |Σ_i A_i e^(ζω t_i) e^(j ω_d t_i)|,

the amplitude left relative to an unshaped step (0 at the mode a ZV-family shaper was made
for). When a move is chosen on the model, the planner also runs the same straight move
unshaped on the model and fits the sway it leaves at the slowest mode: ``A``, how much the
move excites that mode (:attr:`TargetPlan.unshaped_sway <poise.motion.planner.TargetPlan>`;
for a move not chosen so, the distance moved, an upper bound). :class:`MoveSway` measures,
after each move in feedback, the plant's sway beyond the model's predicted response: ``S``,
the amplitude of the slowest mode fitted over one damped period after the move
(:func:`fitted_sway`). A move whose shaper is of the first order in the frequency (ZV, or a
move that holds still part-way, :func:`first_order`) and that excites the mode by at least
:data:`EXCITED` × the tolerance is evidence: the least detuning that explains it is the ``ε``
with ``max V(ω (1 ± ε)) = S / A`` for its shaper (:func:`detuning_for`), and the run's
detuning is the mean over such moves (the plant's modes are off by different amounts at
different configurations; a move that left no sway beyond the tolerance counts as 0 there).
:func:`~poise.motion.reference.choose_move` then charges each candidate the sway its own
shaper would leave at that detuning, ``A · max V(ω (1 ± ε))``, decaying at ``ζω`` from the end
of its move (a move that holds still part-way, :mod:`poise.motion.dwell`, counts as
ZV-shaped: its pause cancels the mode as a ZV shaper's two impulses do). On the model (and on
a plant whose modes it knows) ``S`` is 0 and nothing changes.

Measured (``poise bench control --modes fb``, 20 targets): ``soft_arm_stiff`` on ``mixed15``
learns ε ≈ 3.4 % (its slowest mode is 3.7 % off at target 13) and moves target 13 ZVD where
the model chose ZV; within 3 T after the move: 90 → 95–100 % of the targets (``stiff10``
85 → 95–100 %, ``real`` 80–85 → 85 %). The price is the longer shaper where ZV would have done
(ZVD: half a damped period more).
"""

from __future__ import annotations

import cmath
import math
from typing import TYPE_CHECKING

import numpy as np

from poise.models.base import FloatArray

if TYPE_CHECKING:
    from poise.motion.planner import TargetPlan
    from poise.motion.shaping import Shaper
    from poise.motion.stability import Mode

#: The largest detuning inferred [fraction of ω]: a sway that even this would not explain
#: is not the shaper's (a limit cycle, a push, a task the model measures wrongly: the
#: dancer's centre of mass through masses 15 % off) and is no evidence. Springs ±20 % (the
#: automatic gains' family) move a mode by about ±10 %.
MAX_DETUNING = 0.25
#: A sway within this multiple of the tolerance shows no detuning (0: nothing that
#: matters; the model's prediction and the loop differ by a little even on the model).
FLOOR = 1.0
#: A move is evidence only where it excites the slowest mode by this multiple of the
#: tolerance unshaped (a small move's ratio is noise over noise).
EXCITED = 10.0
#: The sway is measured over this many damped periods of the slowest mode after a move.
WINDOW_PERIODS = 1.0
#: A shaper is of the first order in the detuning where it leaves more than half this
#: detuning's worth of a step at it (ZV: π/2 × it; ZVD: (π/2 × it)²).
FIRST_ORDER_AT = 0.01
#: Points per side on which the worst residual over ``ω (1 ± ε)`` is sought.
DETUNE_POINTS = 4


def residual_vibration(shaper: Shaper, omega: float, zeta: float) -> float:
    """``V(ω, ζ)`` of ``shaper`` on a mode at ``omega`` [rad/s] damped ``zeta`` (see the
    module docstring): the sway left relative to an unshaped step (1 for no shaper)."""
    zeta = min(max(zeta, 0.0), 0.99)
    wd, decay = omega * math.sqrt(1 - zeta * zeta), zeta * omega
    t_end = shaper.times[-1]
    total = sum(a * math.exp(decay * (t - t_end)) * cmath.exp(1j * wd * t)
                for t, a in zip(shaper.times, shaper.amplitudes, strict=True))
    return abs(total)


def worst_residual(shaper: Shaper, mode: Mode, detuning: float) -> float:
    """The largest ``V`` of ``shaper`` over the mode's frequency ``ω (1 ± detuning)``
    (``ω`` itself at 0)."""
    if detuning <= 0.0:
        return residual_vibration(shaper, mode.omega, mode.zeta)
    return max(residual_vibration(shaper, mode.omega * (1 + s * detuning * k / DETUNE_POINTS),
                                  mode.zeta)
               for s in (-1.0, 1.0) for k in range(1, DETUNE_POINTS + 1))


def detuning_for(shaper: Shaper, mode: Mode, ratio: float) -> float:
    """The least detuning ``ε`` ≤ :data:`MAX_DETUNING` at which ``shaper`` leaves ``ratio``
    of a step on ``mode`` (:func:`worst_residual`; bisection); :data:`MAX_DETUNING` when
    even that leaves less, 0 when the mode itself does."""
    if worst_residual(shaper, mode, 0.0) >= ratio:
        return 0.0
    if worst_residual(shaper, mode, MAX_DETUNING) < ratio:
        return MAX_DETUNING
    low, high = 0.0, MAX_DETUNING
    for _ in range(40):
        mid = 0.5 * (low + high)
        low, high = (low, mid) if worst_residual(shaper, mode, mid) >= ratio else (mid, high)
    return high


def fitted_sway(rows: FloatArray, period: float, mode: Mode) -> float:
    """The sway at ``mode`` in ``rows`` (one per ``period`` [s], task_dim columns) [task
    units]: per column, the least-squares fit of ``1, t, t², e^(−ζωt) cos ω_d t,
    e^(−ζωt) sin ω_d t``; the norm over the columns of the oscillating terms' amplitude at
    the first row."""
    t = np.arange(rows.shape[0]) * period
    decay = np.exp(-mode.zeta * mode.omega * t)
    phase = mode.damped_omega * t
    t = t / max(t[-1], period)  # a well-conditioned polynomial
    basis = np.column_stack([np.ones_like(t), t, t * t, decay * np.cos(phase),
                             decay * np.sin(phase)])
    # the normal equations (five columns, t scaled to [0, 1]: well conditioned); once per move,
    # after that cycle's setpoint went out (MoveSway.conclude): 30 µs for soft_arm_stiff's
    # window (200 rows), 0.2 ms for the dancer's at 250 Hz (1,600), 0.5 ms for a 1 rad/s mode
    # at 1 kHz (6,300)
    coef = np.linalg.solve(basis.T @ basis, basis.T @ rows)
    return float(np.linalg.norm(coef[3:]))


def first_order(shaper: Shaper, mode: Mode) -> bool:
    """Whether ``shaper`` leaves on ``mode`` a sway of the first order in the detuning (ZV,
    and a move that holds still part-way): only such a move's sway is taken as evidence of
    the detuning. A ZVD or ZVDD shaper leaves the second or third order (0.02 % or less of a
    step at 1 %), and what is left after it on a plant (``soft_arm_stiff`` on ``mixed15``:
    1.4 % of a 0.24 m move) is what no shaper of one linear mode cancels: the modes changing
    along the move, the next mode; a more robust shaper would not remove it either."""
    return worst_residual(shaper, mode, FIRST_ORDER_AT) > 0.5 * FIRST_ORDER_AT


def move_shaper(plan: TargetPlan, mode: Mode) -> Shaper:
    """The shaper whose residual stands for ``plan``'s move on ``mode``: its own, or for a
    move timed on the model to hold still part-way (:mod:`poise.motion.dwell`, unshaped, its
    pause cancelling the mode as the two impulses of a ZV shaper do) a ZV shaper of
    ``mode``."""
    from poise.motion.shaping import Shaper

    warp = getattr(plan, "warp", None)
    if warp is not None and warp.pauses:
        return Shaper.zv(mode)
    return plan.shaper


def sway_settle(settle: float, move_end: float, excitation: float | None, shaper: Shaper,
                mode: Mode, detuning: float, tolerance: float) -> float:
    """A candidate's settling time [s] on a plant detuned by ``detuning``: its settling on the
    model, or, where the sway ``excitation · max V`` its shaper leaves at that detuning
    exceeds ``tolerance`` [task units], the end of its move [s] plus the time that sway takes
    to decay into the tolerance at ``ζω``. ``excitation``: the move's sway unshaped [task
    units] (:attr:`TargetPlan.unshaped_sway <poise.motion.planner.TargetPlan>`; None: no
    charge)."""
    if detuning <= 0.0 or excitation is None or not math.isfinite(mode.omega) \
            or mode.omega <= 0.0:
        return settle
    sway = excitation * worst_residual(shaper, mode, detuning)
    rate = mode.zeta * mode.omega
    if sway <= tolerance:
        return settle
    if rate <= 0.0:
        return math.inf
    return max(settle, move_end + math.log(sway / tolerance) / rate)


class MoveSway:
    """The detuning the plant's sway after each move shows (see the module docstring), in
    feedback, over :data:`WINDOW_PERIODS` damped periods of the slowest mode from the end of
    the move.

    The error from the predicted response over the window is fitted, per task component, by
    least squares with ``1, t, t², e^(−ζωt) cos ω_d t, e^(−ζωt) sin ω_d t`` at the model's
    slowest mode: the sway is the norm of the oscillating terms' amplitudes at the window's
    start. The polynomial takes what feedback does meanwhile (the integrator's approach to a
    static error, a drift), the fit averages out sensor noise.

    Args:
        period: the loop period Δt [s].
        tolerance: the IK tolerance [task units] (:data:`EXCITED` × it is the least
            excitation of a move that is evidence).
    """

    def __init__(self, period: float, tolerance: float) -> None:
        self.period = float(period)
        self.tolerance = float(tolerance)
        #: The mean detuning the moves showed over the run [fraction of ω] (0: none).
        self.detuning = 0.0
        #: The last move's measured sway [task units] and its ratio to the move's excitation
        #: (its unshaped sway on the model, else the distance moved); None before a move
        #: was measured.
        self.last: tuple[float, float] | None = None
        #: Moves measured (their sway counted as evidence or not).
        self.measured = 0
        self._shaper: Shaper | None = None
        self._mode: Mode | None = None
        self._excitation = 0.0
        self._found: list[float] = []  # the detuning each first-order move showed
        self._window = 0
        self._count = 0
        self._full = False  # a window closed, not yet fitted (conclude)
        self._rows: FloatArray = np.zeros((0, 0))

    def begin(self, plan: TargetPlan | None, rows: FloatArray | None) -> None:
        """A new plan whose move feedback follows as ``rows`` (its predicted response; None:
        nothing to measure): watch the first damped periods after its move."""
        self._window, self._count, self._full = 0, 0, False
        slow = plan.slowest_mode() if plan is not None and plan.loop is not None else None
        if rows is None or len(rows) < 2 or slow is None or not math.isfinite(slow.period) \
                or slow.damped_omega <= 0 or not plan.approach:
            return
        self._window = max(8, math.ceil(WINDOW_PERIODS * slow.damped_period / self.period))
        self._shaper, self._mode = move_shaper(plan, slow), slow
        excitation = getattr(plan, "unshaped_sway", None)
        self._excitation = float(excitation) if excitation is not None and excitation > 0 \
            else float(np.linalg.norm(rows[-1] - rows[0]))
        if self._rows.shape != (self._window, rows.shape[1]):
            self._rows = np.empty((self._window, rows.shape[1]))

    @property
    def evidence(self) -> int:
        """How many moves :attr:`detuning` is the mean of (0: it is not known)."""
        return len(self._found)

    @property
    def watching(self) -> bool:
        """Whether a move's window is open (waiting for the move's end or under way)."""
        return self._window > 0

    def observe(self, error: FloatArray) -> bool:
        """One cycle's error from the predicted response (task_dim,) [task units] after the
        move (a copy into the window's buffer); True when the window closed: :meth:`conclude`
        then fits it, after the cycle's setpoint went out."""
        if not self._window:
            return False
        self._rows[self._count] = error
        self._count += 1
        if self._count < self._window:
            return False
        self._window, self._count, self._full = 0, 0, True  # one window per move
        return True

    def conclude(self) -> bool:
        """Fit a window that closed (:meth:`observe`) and take what it shows; True when that
        changed :attr:`detuning`. Nothing to do (False) without one."""
        if not self._full:
            return False
        self._full = False
        assert self._mode is not None and self._shaper is not None
        sway = fitted_sway(self._rows, self.period, self._mode)
        ratio = sway / self._excitation if self._excitation > 0 else 0.0
        self.last, self.measured = (sway, ratio), self.measured + 1
        if self._excitation <= EXCITED * self.tolerance or \
                not first_order(self._shaper, self._mode):
            return False
        found = 0.0 if sway <= FLOOR * self.tolerance else \
            detuning_for(self._shaper, self._mode, ratio)
        if found >= MAX_DETUNING:
            return False
        self._found.append(found)
        before, self.detuning = self.detuning, float(np.mean(self._found))
        return self.detuning != before

    def interrupt(self) -> None:
        """Not settled on the plan this cycle: a window under way is disturbed (a correction,
        a followed reference, a new aim) and measures nothing; one not yet begun (the move
        still runs) waits."""
        if self._count:
            self._window = self._count = 0

    def summary(self) -> dict[str, object]:
        """JSON-ready: the detuning, the last measured sway and ratio, moves measured."""
        return {"detuning": self.detuning, "measured": self.measured,
                "last_sway": None if self.last is None else self.last[0],
                "last_ratio": None if self.last is None else self.last[1]}


__all__ = ["DETUNE_POINTS", "EXCITED", "FIRST_ORDER_AT", "FLOOR", "MAX_DETUNING", "WINDOW_PERIODS",
           "MoveSway", "detuning_for", "first_order", "fitted_sway", "move_shaper",
           "residual_vibration", "sway_settle", "worst_residual"]
