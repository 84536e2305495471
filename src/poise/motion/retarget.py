"""Removing a static error in feedback faster than the rate gain: sampled re-targeting.

In feedback the IK integrates the measured task error, ``q̄a += Δt Γ U e`` (:mod:`poise.
motion.step`), and Γ must stay below the loop's stability bound around the slowest lightly
damped mode (:mod:`poise.motion.stability`): for the dancer Γ ≈ 0.15 /s, so a static error
left by a plant that differs from the model (springs 10 % stiffer) decays with a time constant
of seconds to tens of seconds. The bound is about a *continuous* integrator acting while the
structure sways; nothing limits a correction made once the structure has stopped swaying.

So, after the shaped move to a target has arrived (the shaper cancels the modes, so the arm
arrives nearly still), :class:`Retargeting` measures the *model mismatch*

    m = x_pred − h(q)

(``x_pred`` is the model's predicted response to the same move, the reference feedback
follows, :mod:`poise.motion.reference`; past its end its last row) averaged over one damped
period ``T_d`` of the slowest structural mode, which cancels what is left of the sway and
averages the sensor noise, and, when it exceeds :data:`THRESHOLD` × the tolerance, aims
the next shaped move at where the model says the arm must go to make up for it:

    Δqa = argmin ‖J Δqa − m̂‖² + μ‖Δqa‖²   s.t.   qa_min ≤ qa + Δqa ≤ qa_max

with ``J = Ja − Ju Huu⁻¹ Hua`` the held Jacobian of the model at q̄ (the IK's own), a
bounded least-squares problem, so that on a redundant arm an actuator at its limit leaves the
correction to the others (motion in the null space of the task away from the limit). The
correction move is a straight line at the plan's speed, ZVD-shaped on the structural modes
(robust to a ±15 % error of the modelled frequency, so it leaves the arm still on a plant that
differs from the model), and the continuous integrator is paused while it runs, as during any
move. Where the moves so far showed how far the plant's modes are off
(:attr:`MoveSway.detuning <poise.motion.sway.MoveSway>`) and a ZV shaper, half a damped
period shorter, would leave a step of the correction's size swaying by at most
:data:`SHORT_SWAY` × the tolerance at that detuning, the move is ZV-shaped
(:meth:`Retargeting.move`; ``soft_arm_stiff`` on ``real``: its modes 1.5–4 % off, a 14 mm
correction sways at most 0.6 mm after ZV, and bench targets 14 and 15 settle 0.27 s sooner,
within their goal).

``m̂`` also removes what the continuous integrator did during the window (it keeps running
there: the exact model must not change), to first order on the model:
``m̂ = mean(m_i) − J (qa_end − mean(qa_i))``, the mismatch at the setpoint the correction
starts from. Where the windows showed friction (:mod:`poise.motion.dither`), the plant
need not have followed the integrator, and ``m̂`` is the measured mismatch where the window
ends (the value at its end of a straight line fitted with the sway): on ``real`` the
dancer's pointe stood 12 mm off while the windows, crediting the integrator with motion
friction ate, asked for corrections of 9 and then 4 mm and then none (``poise bench
control`` targets 3 and 10: 11.3 and 8.4 mm → 4.4 and 1.5 mm). That value extrapolates the
window's trend, so a window over which the trend moved by more than :data:`DRIFT` × it (an
arm still on its way) makes no correction.

**Stability.** Between two samples the arm settles (a shaped move, then one period), so the
samples see the static map only: with the true held Jacobian ``J*`` the mismatch after a
correction is ``(I − J* J⁺) m̂`` (plus what the integrator removes, which only helps). For a
plant whose stiffness differs from the model by a factor ``1 + δ`` the held map scales by
about ``1/(1 + δ)``, so a sample reduces the error by ``|δ/(1 + δ)|``: 0.17 at +20 %, 0.25
at −20 %, convergent for any stiffness error above −50 %. Near a fold of the held map that factor
fails: the model's weak direction can be several times off the plant's, and a correction
made on the model lands farther off than it started (the soft arm on ``mixed15``: 4.7 mm
became 49 mm). So a correction is made in a *trust region* (:func:`trust_radius`): no longer
than a step whose outcome a Jacobian off by the stated uncertainty (±20 %) can miss by at
most the mismatch itself (:data:`TRUST_MISS`: never worse than no correction); a longer one
is damped (Levenberg–Marquardt, :func:`bounded_correction`), which gives up the weak
direction first. A trust-limited
correction the plant answered as the model said (:func:`reduction_ratio` ≥
:data:`TRUST_GOOD`) lets the next go :data:`TRUST_GROWTH` × farther. And every correction
the plant answers updates a *measured* held Jacobian
(Broyden's secant update, :func:`secant_update`, starting from the model's) and the next
correction uses it. The loop checks contraction: a sample whose mismatch did not shrink by
1 − :data:`CONTRACTION` of what the last correction predicted (all of it, unless the trust
region or a limit held it back) is given :data:`RETRIES` more corrections
with the measured Jacobian, from where the arm was before the last one when the mismatch
grew; after that the corrections of this target end (the continuous integrator carries on
alone), and a last one that made it worse is undone (the setpoint goes back to where it was
before it). The windows go on (:attr:`Retargeting.learning`): one whose mismatch still
exceeds the threshold starts a round more, afresh on the model (:data:`ROUNDS` per plan; the
integrator's error map leaves out the directions the model's uncertainty could reverse, so
what the corrections leave there stays), and one whose new task bias moves the aim starts
them again as well.

**The plant's springs.** A window that calls for a correction also shows where the plant
rests; there the model's passive force ``G_u(q̂)`` is what the model's springs get wrong, and
over such windows the least-squares stiffness scale ``ŝ`` of the plant
(:class:`~poise.motion.springs.SpringScale`, kept over targets) follows. Once it is
significant and explains the residuals, a plan's first correction is made on the model with
its springs scaled, from where the plant rests: Gauss–Newton on that model's held map
within the limits (the dancer's pointe 10 % stiffer is a held map 40 % off, and a 10 cm
correction is far from linear: one such correction leaves under a millimetre where the
model's Jacobian left 15 mm). The measured Jacobian starts from the scaled one.

**The plant's masses.** Where the task is the centre of mass, every window also adds the
static part of the measured efforts to the estimate of the plant's masses
(:class:`~poise.motion.masses.MassEstimate`, kept over targets), whose task bias, once
pinned down (:meth:`Retargeting.bias_at`), moves the aim: the window's mismatch grows by the
bias's change, while the plant's answer to the last correction (the secant update, the
contraction) is measured against the aim that correction had. The bias depends on the
configuration, and between windows the one in use is followed to where the arm is
(:meth:`Retargeting.follow_bias`, :data:`BIAS_FOLLOW_S`).

**Anti-windup.** A window is discarded (and restarted) when the cycle's anti-windup held an
actuator, when the device reported a saturated actuator, or when a move is under way; the
correction is bounded by the actuator limits (never integrated past them); and there are at
most :data:`MAX_CORRECTIONS` per target.

**A target the model does not reach** (``plan.reachable`` False: the model's closest held
configuration) is corrected too: feedback aims at the model's reference shifted to end at
the target (:meth:`ControlStep.follow <poise.motion.step.ControlStep.follow>`), so the
mismatch includes what the model leaves. A plant that differs from its model may reach it
(on ``mixed15`` the soft arm holds targets past where its model's workspace ends); where the
plant does not either, the correction is bounded by a limit (a stall) or does not contract,
and the corrections end.

**Stall.** When the bounded correction cannot remove the mismatch (its residual above the
tolerance: an actuator at a limit on a branch that cannot reach the target), the corrector
reports a *stall* (:attr:`Retargeting.stalled`) with the model's offset from the plant at the
setpoint now, ``x̄ − h(q)``, plus the task bias in use ``b`` (what the corrections and the
integrator made is kept); the owner of the planner re-plans the model from the measured state
to ``target + x̄ − h(q) + b`` (another member of the held family that reaches it within the
limits and that the move there brings the model to, :meth:`poise.controller.simulate.
SimulatedLoop.replan_stall`).

**On the exact model** the mismatch is the difference between the simulated arm and the
model's prediction of it: sensor noise averaged over a period, far below the threshold
:data:`THRESHOLD` × the tolerance, so no correction is ever made and every cycle is what it
was before.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from poise.api.rules import GAIN_UNCERTAINTY
from poise.ik.branch import follow_branch
from poise.ik.held_common import held_jacobian
from poise.models.actuation import blocks
from poise.models.base import FloatArray, MechanicalModel
from poise.motion.dither import Dither, dither_for
from poise.motion.masses import MassEstimate
from poise.motion.shaping import ShapedMove, Shaper, shaper_for
from poise.motion.springs import SpringScale
from poise.motion.sway import worst_residual

if TYPE_CHECKING:
    from poise.motion.planner import TargetPlan
    from poise.motion.stability import Mode

#: A correction is made only when the averaged mismatch exceeds this multiple of the
#: tolerance (below it the continuous integrator removes it within seconds; on the ``real``
#: plant, friction and hysteresis turned some millimetre-sized corrections into larger errors).
THRESHOLD = 2.0
#: With friction shown, a window over which the mismatch's trend moved by more than this
#: multiple of its value at the window's end (or of the threshold) is an arm still on its
#: way: no correction and nothing learnt from it; the next window (the dancer on ``real``
#: after a 1.2 m lean lagged its reference by 0.8 m as the first window began: 151 mm at
#: 90 mm/s, and the correction made of it threw the arm 25 mm off).
DRIFT = 1.0
#: At most this many corrections per target.
MAX_CORRECTIONS = 6
#: A mismatch must shrink at least to this fraction of the last one for corrections to go on.
CONTRACTION = 0.5
#: ... or the corrections go on with the measured Jacobian (:func:`secant_update`) this many
#: times in a row before they end.
RETRIES = 1
#: The averaging window in damped periods of the slowest structural mode.
WINDOW_PERIODS = 1.0
#: The sway in a window is fitted (:func:`static_part`): 0 plain mean, 1 the mode, 2 the
#: mode and its derivative with respect to ω.
SWAY_FIT = 2
#: Corrections are made only while the rate gain is slow against the slowest mode: Γ T_d
#: below this. A step (a window and a ZVD-shaped move, about 2 T_d) leaves about 0.2 of the
#: error (springs ±20 %) times ``e^{−Γ T_d}`` (the integrator runs in the window, not in the
#: move); the integrator alone over the same time leaves ``e^{−2 Γ T_d}``: the step is the
#: faster one while ``Γ T_d < ln 5 ≈ 1.6``. (tendon_3link's Γ up to 10 /s against its
#: period: the integrator alone; the dancer's 0.13 /s against 3–8 s and the double
#: pendulum's 0.6–0.9 /s against 1.3 s: corrections.)
SLOW_GAIN = 1.5
#: The task bias of the masses' estimate (:mod:`poise.motion.masses`) is used from this
#: multiple of the tolerance (on the exact model it is the effort noise, far below).
BIAS_THRESHOLD = 0.5
#: ... once the windows pin the centre of mass down to this multiple of the tolerance (one
#: sigma, :meth:`MassEstimate.com_sigma <poise.motion.masses.MassEstimate.com_sigma>`).
BIAS_SIGMA = 1.0
#: ... and it is at least this many of those sigmas (significant: with friction the dithered
#: windows of the dancer whose masses are the model's showed a bias of 2.1 mm at a sigma of
#: 1.7 mm, and aiming with it ended two targets 3.2–3.5 mm off).
BIAS_SIGNIFICANCE = 3.0
#: The task bias in use is followed to the measured configuration this often [s]: it is a
#: function of the configuration, ``b(q)``, and held at a window's resting ``q`` it went
#: stale as the arm moved on (the dancer on ``real``, bench target 2: 2.9 mm off the
#: plant's where the estimate at the arm's ``q`` was 0.75 mm off, and feedback saw 2 mm of
#: a 4.3 mm error).
BIAS_FOLLOW_S = 0.1
#: With friction shown, a task bias this many of its sigmas large is used before the windows
#: pin the centre of mass down to :data:`BIAS_SIGMA` × the tolerance: it leaves about a sigma,
#: at most a fifth of it, where not using it leaves all of it (the dancer on ``real``, seed
#: 16: a bias of 36 mm pinned to 4.5 mm by the first dithered window, waiting for 2 mm; its
#: first two targets ended 22–36 mm off). A bias in use is kept while it is
#: :data:`BIAS_SIGNIFICANCE` sigmas or more (seed 15, target 4: the arm 3 mm off where its
#: estimate was 7.9 mm uncertain up and down, and dropping the 37 mm bias sent it 224 mm off).
BIAS_LEAD = 5.0
#: The windows showed friction (:mod:`poise.motion.dither`) when, after at least
#: :data:`FRICTION_WINDOWS` of them, they disagree with the masses' estimate this many times
#: beyond their errors (:meth:`MassEstimate.scatter <poise.motion.masses.MassEstimate.
#: scatter>`, a reduced χ²).
FRICTION_SCATTER = 8.0
FRICTION_WINDOWS = 4
#: The friction test (:meth:`Retargeting.teach`): friction held the arm where an actuator's
#: static effort after the test's dithered window differs from the one in it by more than
#: this many of their combined errors (the dancer's first target: 3.7 on ``real``, 5.8 on
#: ``friction``; 1.7 on ``slack+noise``, ≤ 1 on ``mixed15`` and the exact model).
FRICTION_TEST = 3.0
#: The correction a window calls for waits for the friction test's undithered window after
#: its dithered one (:meth:`Retargeting.correction`) only where the estimate of the masses
#: then shows a task bias of this many of its sigmas: the masses look off, and whether
#: friction hides them decides how they are learnt (the dancer's first target on ``real``:
#: 2–8 sigmas; on ``stiff10``, its masses the model's and its springs off, 0.05, and
#: waiting a window there took the first target past 3 T).
TEST_BIAS = 1.5
#: With friction shown, the setpoints are dithered while the estimate pins the centre of
#: mass where the arm rests down to no better than this fraction of :data:`BIAS_SIGMA` ×
#: the tolerance (0.5, or at most 2 dithered windows per plan, left the rate gain paused
#: longer or the estimate less pinned: 55 % and 50 % of the dancer's targets on ``real``
#: against 70 %).
DITHER_PIN = 1.0
#: A task bias in use is kept while the windows pin the centre of mass down to this multiple
#: of :data:`BIAS_SIGMA` × the tolerance (a sigma near the threshold, as windows with
#: friction leave it, took it up and dropped it window by window).
BIAS_KEEP = 1.5
#: The trust region (:func:`trust_radius`) admits a step that a held Jacobian off by the
#: stated uncertainty misses by at most this fraction of the mismatch (1: never worse than no
#: correction).
TRUST_MISS = 1.0
#: A trust-limited correction (:func:`trust_radius`) whose outcome matched the model's
#: prediction this well (:func:`reduction_ratio`) lets the next one go :data:`TRUST_GROWTH`
#: times farther; one that did not contract shrinks it as much.
TRUST_GOOD = 0.75
TRUST_GROWTH = 4.0
#: A correction is ZV-shaped (half a damped period shorter than ZVD) where the sway ZV
#: leaves on the plant's detuned mode is within this fraction of the tolerance
#: (:meth:`Retargeting.move`).
SHORT_SWAY = 0.5
#: Regularisation μ of the bounded least squares, relative to ‖J‖² (a minimum-norm
#: correction on a redundant arm).
REGULARISATION = 1e-6
#: The correction keeps this fraction of each actuator's range clear of its limits.
LIMIT_MARGIN = 0.005
#: A bounded correction whose predicted residual ‖J Δqa − m̂‖ exceeds this fraction of the
#: tolerance is a stall.
STALL_FRACTION = 1.0
#: Rounds of corrections started again per plan (:meth:`Retargeting.correction`): by a
#: window after they ended without contracting (or after :data:`MAX_CORRECTIONS`) whose
#: mismatch still exceeds the threshold; each afresh, on the model's held Jacobian at the
#: trust region's full scale (the dancer on ``real``, seed 16, target 1: its pointe stuck
#: and slipped, the corrections ended 8.5 mm off, and the integrator's error map leaves
#: that direction out; a round more a window later brought it to 2.4 mm).
ROUNDS = 2


class End(enum.Enum):
    """Why the corrections of a plan ended (:attr:`Retargeting.end`; the words, with the
    figures, are :attr:`Retargeting.ended`)."""

    #: Never begun: the plan lacks what they need, or they are switched off.
    OFF = "off"
    #: :data:`RETRIES` corrections in a row did not contract (or :data:`MAX_CORRECTIONS`
    #: were made and the last did not): a round more may follow (:data:`ROUNDS`).
    NOT_CONTRACTING = "not contracting"
    #: :data:`MAX_CORRECTIONS` were made: a round more may follow.
    MADE = "corrections made"
    #: The limits keep the corrections from the target: the owner re-plans.
    STALLED = "stalled at a limit"
    #: The corrected setpoint is past a fold of the model's held configurations.
    PAST_FOLD = "past a fold"


#: The ends after which a resting window whose mismatch still exceeds the threshold starts a
#: round more of corrections (:data:`ROUNDS`).
ROUND_AFTER = frozenset({End.NOT_CONTRACTING, End.MADE})


@dataclass(frozen=True)
class Correction:
    """One sampled correction (JSON-ready with :meth:`as_dict`).

    Attributes:
        time_s: when it was decided [s from the plan's move start].
        mismatch: the averaged mismatch m̂ (task_dim,) [task units].
        delta: the actuator correction Δqa (m,) [actuator units].
        residual: ‖J Δqa − m̂‖ predicted on the model [task units] (> 0 when limited).
        limited: an actuator limit bounded it.
        radius: the trust region ‖Δqa‖ ≤ radius it was made in [actuator units].
    """

    time_s: float
    mismatch: FloatArray
    delta: FloatArray
    residual: float
    limited: bool
    radius: float = math.inf

    def as_dict(self) -> dict[str, Any]:
        return {"t": self.time_s, "mismatch": [float(x) for x in self.mismatch],
                "mismatch_norm": float(np.linalg.norm(self.mismatch)),
                "delta": [float(x) for x in self.delta], "residual": self.residual,
                "limited": self.limited,
                "radius": self.radius if math.isfinite(self.radius) else None}


class Retargeting:
    """Sampled re-targeting of one control step (see the module docstring).

    Args:
        model: the controller's statics model.
        period: the loop period Δt [s].
        tolerance: the IK tolerance [task units] (the threshold and stall scale).
        total_mass: the robot's weighed total mass [kg] (None: the model's), which the
            estimate of its masses holds to where its task is its centre of mass
            (:mod:`poise.motion.masses`).
    """

    def __init__(self, model: MechanicalModel, period: float, tolerance: float,
                 total_mass: float | None = None) -> None:
        self.model = model
        self.period = period
        self.tolerance = float(tolerance)
        self.enabled = True
        self.plan: TargetPlan | None = None
        self._window = 0
        self._damped_period = math.inf
        self._stall_count = 0
        self._stall_sum = np.zeros(model.task_dim)
        self._stall_first = 0.0
        self.shaper = Shaper()
        self._short: tuple[Shaper, Mode] | None = None  # ZV and the slowest mode (move)
        #: The corrections made for the current plan, oldest first.
        self.corrections: list[Correction] = []
        self.answered = math.nan  # how the plant answered the last correction (begin)
        #: Corrections made over the whole run (all plans).
        self.total = 0
        #: Why the corrections of the current plan ended (None while they go on), and
        #: :attr:`ended` in words with its figures ('' while they go on).
        self.end: End | None = None
        self.ended = ""
        #: The live rate gain [1/s] (the owner keeps it current): corrections only while
        #: ``gain × T_d`` < :data:`SLOW_GAIN`.
        self.rate_gain = 0.0
        #: A stall: the model's offset from the plant at the setpoint now, ``x̄ − h(q)``
        #: plus the task bias in use (:meth:`watch_stall`) [task units], which the limits
        #: keep the corrections from removing; None when none. The owner re-plans the
        #: model to ``target + stalled`` and clears it.
        self.stalled: FloatArray | None = None
        #: The plant's stiffness scale as the windows that called for a correction showed it
        #: (:mod:`poise.motion.springs`); kept over plans.
        self.springs = SpringScale(model)
        #: The plant's mass moments as the held efforts of every window showed them, for a
        #: task through the masses (:mod:`poise.motion.masses`); kept over plans.
        self.masses = MassEstimate(model, total_mass)
        # the same windows weighted by their errors with the noise averaged (the estimate
        # weights them by their spread): whether they disagree as friction makes them
        self._friction_probe = MassEstimate(model, total_mass)
        #: The task bias ``b = h(q) − ĥ(q)`` [task units] feedback aims with (the model's
        #: task at ``target + b``): :meth:`bias_at` the last window, or a plan's aimed for
        #: the plant (:func:`~poise.motion.planner.for_plant`) from its adoption on.
        self.task_bias = np.zeros(model.task_dim)
        # the directions the bias in use is pinned down in (k, j); None: all
        self._bias_basis: FloatArray | None = None
        #: The windows showed friction (:data:`FRICTION_SCATTER`, :data:`FRICTION_TEST`):
        #: from then on only dithered windows teach the masses (:mod:`poise.motion.dither`);
        #: kept over plans.
        self.friction = False
        #: The friction test of :meth:`teach`: ``"due"`` its dithered window next (from the
        #: first window on), ``"dithered"`` the undithered one after it next, ``"done"``.
        self.friction_test = "due"
        self._test_window: tuple[Any, ...] = ()  # the test's dithered window, as taught
        # the dithered windows taught before friction was shown: they stay when it is
        self._dithered: list[tuple[Any, ...]] = []
        #: The dither of the setpoints in the resting windows now (the owner adds
        #: :meth:`dither_offset` to the setpoint it sends); None: none.
        self.dither: Dither | None = None
        self._clear()

    def _clear(self) -> None:
        k, m = self.model.task_dim, self.model.m
        self._count = 0
        size = max(self._window, 1)
        if getattr(self, "_m", np.zeros((0, 0))).shape != (size, k):
            self._m = np.zeros((size, k))
            self._qa = np.zeros((size, m))
            self._q = np.zeros((size, self.model.n))
            self._tau = np.zeros((size, m))
            self._predicted = np.zeros(k)
        self._holds = -1
        self._efforts = self.masses.enabled  # every sample of the window had efforts
        # the dither ω [rad/s] of this window's samples (0: none)
        self._window_dither = self.dither.omega if self.dither is not None else 0.0

    def begin(self, plan: TargetPlan | None, active: bool) -> None:
        """A new plan: corrections start afresh; ``active``: it has what they need (a
        reference after its move, a slowest structural mode, a reachable target)."""
        self.plan = plan
        self.corrections = []
        self._before: FloatArray | None = None  # the setpoint before the last correction
        self._secant: FloatArray | None = None  # the plant's held Jacobian as measured
        self._failed = 0  # corrections in a row that did not contract
        self._first = 0  # the first correction since the corrections last (re)started
        self._rounds = 0  # the rounds of corrections started again after they ended
        self._trust = 1.0  # the trust region's scale (trust_radius × this)
        #: How the plant answered the plan's last correction the windows measured:
        #: :func:`reduction_ratio` ρ (NaN: none measured yet); :attr:`eaten`.
        self.answered = math.nan
        self.stalled = None
        self._stall_count = 0
        self.dither = None
        if self.friction_test == "dithered":  # its dithered window rested elsewhere
            self.friction_test = "due"
        self._clear()
        slow = plan.slowest_mode() if plan is not None and plan.loop is not None else None
        if not (active and self.enabled and plan is not None
                and slow is not None and math.isfinite(slow.period)):
            self._finish(End.OFF, "off")
            return
        self._finish(None, "")
        damped = slow.damped_period
        self._window = max(1, math.ceil(WINDOW_PERIODS * damped / self.period))
        self._damped_period = damped
        self._sway = (slow.zeta * slow.omega, slow.damped_omega)
        self._clear()
        assert plan.loop is not None
        modes = plan.structural_modes()
        self.shaper = shaper_for(modes, "zvd")
        self._short = (shaper_for(modes, "zv"), slow)
        if plan.q_goal is not None:
            self._choose_dither(plan.q_goal)
            self._clear()

    @property
    def dithering(self) -> bool:
        """The setpoints are dithered (:attr:`dither`) while the current plan's corrections
        go on (not in the windows after they ended: the dither pauses the rate gain, which
        carries on alone then)."""
        return self.dither is not None and self.active

    def dither_offset(self) -> FloatArray | None:
        """What the dither adds to the setpoint sent after this cycle [actuator units]
        (:class:`~poise.motion.dither.Dither` at the window's time, so it starts from 0 with
        each window and a window holds whole periods of it); None: no dither now."""
        dither = self.dither
        if dither is None or self._count == 0 or not self._window_dither or self.end is not None:
            return None
        return dither.offset(self._count * self.period)

    def _choose_dither(self, q: FloatArray) -> None:
        """The dither of the next windows with the arm resting at ``q`` (n,): one where the
        windows showed friction and the estimate of the masses does not yet pin the centre
        of mass there down to :data:`DITHER_PIN` × :data:`BIAS_SIGMA` × the tolerance;
        else none."""
        plan = self.plan
        wanted = self.friction or self.friction_test == "due"
        if not wanted or plan is None or \
                self.masses.com_sigma(q) <= DITHER_PIN * BIAS_SIGMA * self.tolerance:
            self.dither = None
            return
        if self.dither is None:
            model: Any = self.model
            self.dither = dither_for(held_jacobian(blocks(self.model, q)), model.qa_min,
                                     model.qa_max, self.tolerance, self._window * self.period,
                                     plan.structural_modes())

    def teach(self, q: FloatArray, efforts: FloatArray, rate: FloatArray,
              effort_errors: tuple[FloatArray, FloatArray],
              q_errors: tuple[FloatArray, FloatArray], dithered: bool) -> None:
        """One resting window teaches the estimate of the masses (:class:`MassEstimate
        <poise.motion.masses.MassEstimate>`: its static ``q`` (n,), efforts (m,) and
        setpoint rate (m,)), and the friction watch. ``effort_errors`` and ``q_errors``:
        ``(spread, error)`` of each, as :func:`static_trend` gives them. A dithered window
        counts with its errors (what repeats with the dither averages out); an undithered
        one with its spreads (a mode still ringing is correlated over the window) and, until
        the windows have shown friction (:meth:`_watch_friction`), not at all after.

        The friction test: the first window is dithered (so that it teaches whatever the
        test finds), and the undithered one after it is compared with it (where the masses
        look off, the correction the dithered window calls for waits for it, so that it
        rests where the dithered one did: :meth:`correction`); a new plan between them makes
        the test due again. Windows where
        the arm rests in one place
        agree with each other however much friction holds it there (``real``: the dancer's
        first target gave 12 windows of reduced χ² 1–3 over 50 s and an estimate 14 mm off
        where the plant's centre of mass was 37 mm off), but an actuator whose dither stops
        comes to rest anywhere in its friction band: its static effort moves by more than
        :data:`FRICTION_TEST` × the errors beyond the change the estimate predicts for the
        integrator's small move between them (:meth:`_left_by_friction`; on the exact model
        it stays). Every dithered
        window is kept: where friction is shown they are what the estimate starts again
        from (:meth:`_friction_shown`)."""
        if dithered:
            window = (q, efforts, rate, effort_errors[1], q_errors[1])
            if self.friction_test == "due" and not self.friction:
                self.friction_test = "dithered"
                self._test_window = window
            self.masses.add(*window)
            if not self.friction:  # kept for the restart (:meth:`_friction_shown`)
                self._dithered.append(window)
            return
        if self.friction:
            return
        if self.friction_test == "dithered":
            self.friction_test = "done"
            if self._left_by_friction(q, efforts, effort_errors[1]):
                self._friction_shown()
                return
        self.masses.add(q, efforts, rate, effort_errors[0], q_errors[0])
        self._friction_probe.add(q, efforts, rate, effort_errors[1], q_errors[1])
        self._watch_friction()

    def _left_by_friction(self, q: FloatArray, efforts: FloatArray, error: FloatArray
                          ) -> bool:
        """Whether the static ``efforts`` (m,) of the window after the friction test's
        dithered one, resting at ``q`` (n,), with their ``error`` (m,), differ from that
        window's moved by the change the estimate of the masses predicts between their
        poses (:meth:`MassEstimate.effort_change <poise.motion.masses.MassEstimate.
        effort_change>`: a correction between them) by more than :data:`FRICTION_TEST` ×
        their combined errors (with the prediction's and the estimate's
        :attr:`~poise.motion.masses.MassEstimate.effort_floor` added) on some actuator."""
        tested_q, tested, _, tested_error, _ = self._test_window
        shift, shift_error = self.masses.effort_change(tested_q, q)
        floor = self.masses.effort_floor
        combined = np.sqrt(np.nan_to_num(np.asarray(error, float) ** 2, nan=np.inf)
                           + np.nan_to_num(np.asarray(tested_error, float) ** 2, nan=np.inf)
                           + shift_error ** 2 + floor ** 2)
        change = np.abs(np.asarray(efforts, float) - np.asarray(tested, float) - shift)
        return bool(np.any(change > FRICTION_TEST * combined))

    def _watch_friction(self) -> None:
        """After an undithered window taught the masses: the windows disagree beyond their
        errors with the sensors' noise averaged over each (:data:`FRICTION_SCATTER`; the
        estimate of the same windows in :attr:`_friction_probe`), as friction holding each
        resting actuator anywhere in its band makes them; then the estimate starts again,
        from dithered windows only."""
        probe = self._friction_probe
        if self.friction or probe.windows < FRICTION_WINDOWS or \
                probe.scatter() <= FRICTION_SCATTER:
            return
        self._friction_shown()

    def _friction_shown(self) -> None:
        """The windows showed friction: the estimate of the masses starts again from the
        dithered windows seen so far, with the passive joints' friction allowed for
        (:meth:`MassEstimate.restart <poise.motion.masses.MassEstimate.restart>`), and only
        dithered windows teach from then on. (Starting from the friction test's window
        alone, or from none where the windows' disagreement showed it first, threw away
        what earlier dithered windows had pinned down: the dancer on ``real``, seed 16,
        went from 11 mm to 147 mm of uncertainty in its centre of mass.)"""
        self.friction = True
        self.friction_test = "done"  # nothing left to test
        self.masses.restart(friction=True)
        for window in self._dithered:
            self.masses.add(*window)
        self._dithered = []  # the estimate has them now; friction is shown once

    def bias_at(self, q: FloatArray) -> FloatArray:
        """The task bias at ``q`` (:meth:`MassEstimate.bias <poise.motion.masses.
        MassEstimate.bias>`) where it is at least :data:`BIAS_THRESHOLD` × the tolerance and
        the windows pin the centre of mass down to :data:`BIAS_SIGMA` × the tolerance
        (:data:`BIAS_KEEP` × that while a bias is in use), at :data:`BIAS_SIGNIFICANCE`
        sigmas or more; else 0 (the model's task).

        Where the windows pin it down in some directions only (:func:`pinned_basis`: a limb
        hanging straight down shows no gravity torque, so its moment leaves the centre of
        mass uncertain up and down but not across), the bias is used in those: the
        ``mixed15`` dancer's first target, resting in one pose, had its centre of mass pinned
        to 0.5 mm across and 6 mm up; the bias across was 28.6 mm, the plant's 28.2 mm, and
        without it the target ended 29 mm off. Only once the friction test has found none
        (:meth:`teach`): a direction is pinned as its covariance says only where the windows
        agree as their errors say, and friction holding the arm anywhere in its band makes
        them disagree in ways a few windows do not show (on ``real`` the first target's
        pinned direction, used before the test had ended, swung window by window and the
        target ended 33 mm off; it passed without it).

        With friction shown, where no direction alone is trusted and only dithered windows
        teach (a few seconds each), a bias of :data:`BIAS_LEAD` sigmas or more is used in
        full before the estimate is pinned down to the tolerance: it leaves about a sigma of
        error where waiting leaves the whole bias. One in use is kept while it is
        :data:`BIAS_SIGNIFICANCE` sigmas or more."""
        return self._pinned_bias(q)[0]

    def _pinned_bias(self, q: FloatArray) -> tuple[FloatArray, FloatArray | None]:
        """:meth:`bias_at` ``q`` and the directions it is used in (k, j) (None: all)."""
        bias = self.masses.bias(q)
        limit = (BIAS_KEEP if self.task_bias.any() else 1.0) * BIAS_SIGMA * self.tolerance
        covariance = self.masses.com_covariance(q)
        sigma = float(np.sqrt(np.trace(covariance)))
        basis = None
        lead = BIAS_SIGNIFICANCE if self.task_bias.any() else BIAS_LEAD
        if self.friction and sigma > limit and np.linalg.norm(bias) >= lead * sigma:
            return bias, None  # with friction: a bias many sigmas large leads the tolerance
        if sigma > limit and self.friction_test == "done" and not self.friction:
            basis, sigma = pinned_basis(covariance, limit)
            bias = basis @ (basis.T @ bias)
        size = float(np.linalg.norm(bias))
        if size < max(BIAS_THRESHOLD * self.tolerance, BIAS_SIGNIFICANCE * sigma) or \
                sigma > limit:
            return np.zeros_like(bias), None
        return bias, basis

    def take_bias(self, q: FloatArray) -> FloatArray:
        """The task bias :meth:`bias_at` the resting configuration ``q`` (n,) becomes the one
        in use (:attr:`task_bias`; zeros: none); its change [task units] (the window's
        mismatch moves by it, :meth:`correction`)."""
        bias, self._bias_basis = self._pinned_bias(q)
        shift = bias - self.task_bias
        self.task_bias = bias
        return shift

    def adopt_bias(self, bias: FloatArray) -> None:
        """A plan aimed for the plant (:func:`~poise.motion.planner.for_plant`) brings its
        own task bias (k,) [task units], in all directions."""
        self.task_bias = np.array(bias, dtype=np.float64)
        self._bias_basis = None

    def follow_bias(self, q: FloatArray) -> FloatArray:
        """The task bias in use followed to the configuration ``q`` (n,) the arm is in now:
        the estimate's ``b(q)`` (:meth:`MassEstimate.bias <poise.motion.masses.
        MassEstimate.bias>`) in the directions the last window pinned down
        (:meth:`bias_at`); see :data:`BIAS_FOLLOW_S`. None in use: none (a bias is taken
        up or dropped only where a window ends, :meth:`take_bias`)."""
        if self.task_bias.any():
            bias = self.masses.bias(q)
            basis = self._bias_basis
            self.task_bias = bias if basis is None else basis @ (basis.T @ bias)
        return self.task_bias

    @property
    def plant(self) -> MechanicalModel | None:
        """The plant as its held efforts show it (:meth:`MassEstimate.plant_model
        <poise.motion.masses.MassEstimate.plant_model>`) where the last window's task bias
        was used (:meth:`bias_at`: the model off by more than the threshold, the estimate
        pinned down), which plans are then aimed for; else None."""
        return self.masses.plant_model() if self.plant_bodies is not None else None

    @property
    def plant_bodies(self) -> tuple[FloatArray, FloatArray] | None:
        """The bodies of :attr:`plant` (:meth:`MassEstimate.bodies
        <poise.motion.masses.MassEstimate.bodies>`: masses [kg], joint stiffnesses
        [N·m/rad]) without making the model (the cycle announces them); None where
        :attr:`plant` is None."""
        if not self.task_bias.any():
            return None
        masses, stiffness = self.masses.bodies()
        return (masses, stiffness) if np.all(masses > 0.0) else None  # else: not a plant

    @property
    def spring_scale(self) -> float:
        """The plant's stiffness scale :attr:`springs` measured, where significant; else 0."""
        return self.springs.scale if self.springs.significant else 0.0

    def _finish(self, end: End | None, words: str) -> None:
        """The corrections end for ``end``, said as ``words`` (None, '': they go on)."""
        self.end, self.ended = end, words

    @property
    def eaten(self) -> bool:
        """The plant answered the plan's last correction by less than :data:`TRUST_GOOD` of
        the reduction the model said (:attr:`answered`): where the windows showed friction,
        it ate the step (the dancer's pointe on ``real``: corrections of 100–180 mrad each
        removing 40–60 % of what they should, 42 → 26 → 22 → 21 mm over 30 s)."""
        return self.answered < TRUST_GOOD

    @property
    def active(self) -> bool:
        """Corrections go on for the current plan."""
        return self.plan is not None and self.end is None

    @property
    def learning(self) -> bool:
        """Resting windows go on for the current plan: while its corrections go on, and after
        they ended, unless stalled (the owner re-plans) or off, undithered (:attr:`dithering`).
        Such a window teaches the masses and the friction watch as any undithered one; a new
        task bias it shows (a new aim), or its mismatch above the threshold after corrections
        that did not contract (:data:`ROUNDS`), starts them again (:meth:`correction`)."""
        return self.watching and self.end is not End.STALLED

    @property
    def watching(self) -> bool:
        """The current plan is watched (for corrections, or still for a stall)."""
        return self.plan is not None and self.end is not End.OFF

    def watch_stall(self, predicted: FloatArray, x_meas: FloatArray, qa: FloatArray,
                    qa_min: FloatArray, qa_max: FloatArray, held: bool,
                    x_bar: FloatArray) -> None:
        """One settled cycle, whatever the window does: feedback has stalled when for one
        window (a damped period of the slowest mode) the mismatch ``predicted − x_meas``
        stayed above the tolerance while an actuator sat at a position limit or the
        anti-windup held one (``held``: its effort at the limit) and the mismatch did not
        shrink by half. Then :attr:`stalled` is the mean over that window of ``x̄ − x_meas``
        (``x_bar``: the model's task value at the setpoint now), the model's offset from the
        plant where it stands, plus the task bias in use (:attr:`task_bias`, the model's task
        minus the plant's where their masses differ, :mod:`poise.motion.masses`), so that a
        re-plan on the model to ``target + stalled`` brings the plant to the target and keeps
        what the corrections and the integrator made (from the plan's own end instead, the
        dancer's re-plan undid a correction of 16 cm; without the bias, the dancer on
        ``real`` was re-planned 39 mm off, from 8 mm to 44 mm), and the corrections end."""
        if self.stalled is not None or self.end in (End.OFF, End.STALLED):
            return
        span = qa_max - qa_min
        margin = 2 * LIMIT_MARGIN * np.where(np.isfinite(span), span, 0.0)
        at_limit = held or bool(np.any((qa <= qa_min + margin) | (qa >= qa_max - margin)))
        mismatch = predicted - x_meas
        norm = float(np.linalg.norm(mismatch))
        if not at_limit or norm <= self.tolerance:
            self._stall_count = 0
            return
        if self._stall_count == 0:
            self._stall_sum = np.zeros_like(mismatch)
            self._stall_first = norm
        self._stall_count += 1
        self._stall_sum += x_bar - x_meas
        if self._stall_count >= self._window and norm > 0.5 * self._stall_first:
            self.stalled = self._stall_sum / self._stall_count + self.task_bias
            self._finish(End.STALLED, f"stalled at a limit ({norm * 1e3:.2g} mm)")
            self._stall_count = 0

    def reset_window(self) -> None:
        """Start the window again (a move, a held actuator, a saturated one)."""
        self._clear()

    def observe(self, predicted: FloatArray, x_meas: FloatArray, qa: FloatArray,
                holds: int, q: FloatArray, efforts: Any = None) -> bool:
        """One settled cycle: the model's predicted task value ``predicted``, the measured
        ``x_meas``, the setpoint ``qa`` after it, the step's anti-windup hold count
        ``holds``, the measured configuration ``q`` and the measured actuator efforts
        (m,) (None or empty: not measured). Returns True when the window is full (then
        :meth:`correction`)."""
        if self._holds >= 0 and holds != self._holds:
            self._clear()
        self._holds = holds
        i = self._count
        if i == 0 and self.end is not None:  # a window after the end: never dithered
            self._window_dither = 0.0
        np.subtract(predicted, x_meas, out=self._m[i])
        self._qa[i] = qa
        self._q[i] = q
        if self._efforts:
            if efforts is not None and len(efforts) == self.model.m:
                self._tau[i] = efforts
            else:
                self._efforts = False
        self._predicted[:] = predicted
        self._count += 1
        return self._count >= self._window

    def correction(self, q_bar: FloatArray, qa: FloatArray, time_s: float,
                   qa_min: FloatArray, qa_max: FloatArray) -> FloatArray | None:
        """The window's correction: the actuator goal of the next move within ``[qa_min,
        qa_max]`` (less :data:`LIMIT_MARGIN`), or None (below the threshold, not
        contracting, or done). Starts the next window.

        The first correction of a plan uses the model's held Jacobian at q̄; each later one
        the *measured* one, updated by every correction the plant answered (Broyden's
        secant update, :func:`secant_update`: the samples' change of mismatch against the
        setpoint's change). Near a fold of the held map the model's weak direction can be
        several times off the plant's (the soft arm on ``mixed15``: singular values 0.078
        and 0.022), so a correction on the model lands far off; the one after it, from
        where the arm was before (:data:`RETRIES` in a row), uses what the plant showed.

        A window that calls for a correction also tells how stiff the plant's springs are
        (:class:`~poise.motion.springs.SpringScale`, from where the arm rests in it); once
        that scale is significant, the first correction of a plan uses the held Jacobian of
        the model with its springs so scaled, at where the arm rests, instead of the model's
        at q̄ (the dancer's pointe 10 % stiffer: a held map 40 % off).

        The friction test's dithered window (:meth:`teach`) makes none where the estimate
        of the masses then shows a task bias of :data:`TEST_BIAS` sigmas: the undithered
        window it is compared with rests where it did (on ``real`` the dancer's first target
        was corrected after each dithered window, the test made again and again and never
        ended, and it stood 20–43 mm off)."""
        n = max(self._count, 1)
        J = self._secant if self._secant is not None else \
            held_jacobian(blocks(self.model, q_bar))
        dither = self._window_dither  # its sine and cosine: no part of the static values
        if self.friction:  # friction eats the integrator's share: the trend at the end
            value, slope = static_trend(self._m[:n], self.period, *self._sway, dither)[:2]
            mismatch = value + slope * 0.5 * (n - 1) * self.period
            if float(np.linalg.norm(slope)) * (n - 1) * self.period > DRIFT * max(
                    float(np.linalg.norm(mismatch)), THRESHOLD * self.tolerance):
                self._clear()  # the arm was still on its way: no static value; the next
                return None
        else:  # each sample moved to the setpoint qa (the integrator's share, on the model)
            samples = self._m[:n] - (qa - self._qa[:n]) @ J.T
            mismatch = static_part(samples, self.period, *self._sway, dither)
        resting = static_part(self._q[:n], self.period, *self._sway, dither)
        if self._efforts:  # the task as the plant's masses make it (poise.motion.masses)
            # the setpoint's rate: the integrator moves it smoothly (no sway in it; the
            # dither is added to what is sent, not to qa)
            rate = static_trend(self._qa[:n], self.period, 0.0, 0.0)[1]
            # a dithered window: no sway columns (the window is one period of the slowest
            # mode, which its mean takes out; friction's square wave with the dither, tens
            # of N·m, leaked into them: on `real` the dancer's hip read 1.5–13 N·m off
            # with them, within 0.3 N·m without)
            sway = (0.0, 0.0) if dither else self._sway
            tau, _, tau_spread, tau_error = static_trend(self._tau[:n], self.period, *sway,
                                                         dither)
            q_mid, _, q_spread, q_error = static_trend(self._q[:n], self.period, *sway, dither)
            self.teach(q_mid, tau, rate, (tau_spread, tau_error), (q_spread, q_error),
                       bool(dither))
            self._choose_dither(q_mid)
            shift = self.take_bias(q_mid)
            # the friction test's dithered window: its undithered one next, from here,
            # where the masses look off
            testing = bool(dither) and self.friction_test == "dithered" and \
                float(np.linalg.norm(self.masses.bias(q_mid))) >= \
                TEST_BIAS * self.masses.com_sigma(q_mid)
        else:
            shift, testing = np.zeros_like(mismatch), False
        self._clear()
        if testing:
            return None
        # the plant's answer is measured against the aim the last correction had; a new
        # task bias moves the aim (poise.motion.masses) and the next correction with it
        answer = mismatch
        mismatch = mismatch + shift
        moved = float(np.linalg.norm(shift)) > THRESHOLD * self.tolerance
        norm = float(np.linalg.norm(mismatch))
        if self.end is not None:  # a window after the end: a new aim, or a round more
            again = self.end in ROUND_AFTER and norm > THRESHOLD * self.tolerance \
                and self._rounds < ROUNDS
            if not (moved or again):
                return None
            if not moved:  # a round more: afresh, on the model's held Jacobian at q̄
                self._rounds += 1
                self._first = len(self.corrections)
                self._trust, self._secant, self._before = 1.0, None, None
                J = held_jacobian(blocks(self.model, q_bar))
            self._finish(None, "")
            self._failed = 0
        if norm > THRESHOLD * self.tolerance:
            self.springs.add(resting)
        plant = self.plant if self._secant is None else None
        springs = plant is None and self._secant is None and self.springs.significant
        if springs:
            J = self.springs.held_jacobian(resting)
        elif plant is not None:  # the plant its held efforts show, where it rests
            J = held_jacobian(blocks(plant, resting))
        last = self.corrections[-1] if len(self.corrections) > self._first else None
        before = float(np.linalg.norm(last.mismatch)) if last is not None else math.inf
        ratio = reduction_ratio(before, float(np.linalg.norm(answer)), last.residual) \
            if last is not None else 1.0
        if last is not None and self._before is not None:
            # the plant's answer to the last correction: x_meas moved by m_before − m_now
            J = self._secant = secant_update(J, np.asarray(qa, float) - self._before,
                                             last.mismatch - answer)
            self.answered = ratio
        if norm <= THRESHOLD * self.tolerance or \
                self.rate_gain * self._damped_period >= SLOW_GAIN:
            return None
        start, retry = np.asarray(qa, dtype=float), False
        if last is not None and math.isfinite(last.radius) and ratio >= TRUST_GOOD:
            self._trust *= TRUST_GROWTH  # the model answered as it said, so far out
        if moved:  # a new aim: its corrections start afresh (the trust kept)
            self._failed = 0
        elif ratio < 1.0 - CONTRACTION:
            self._trust /= TRUST_GROWTH
            self._failed += 1
            if self._failed > RETRIES or len(self.corrections) - self._first >= MAX_CORRECTIONS:
                undone = norm > before and self._before is not None  # worse: undone
                self._finish(End.NOT_CONTRACTING, f"not contracting ({norm * 1e3:.2g} mm "
                             f"after {before * 1e3:.2g} mm){', undone' if undone else ''}")
                return self._before if undone else None
            if norm > before and self._before is not None:
                # worse: again from where it was, with the measured Jacobian
                assert last is not None
                start, mismatch, retry = self._before, last.mismatch + shift, True
        else:
            self._failed = 0
        if len(self.corrections) - self._first >= MAX_CORRECTIONS:
            self._finish(End.MADE, f"{MAX_CORRECTIONS} corrections made")
            return None
        span = np.asarray(qa_max, float) - np.asarray(qa_min, float)
        margin = LIMIT_MARGIN * np.where(np.isfinite(span), span, 0.0)
        radius = self._trust * trust_radius(J, mismatch)
        lo, hi = qa_min + margin, qa_max - margin

        def step(radius: float) -> tuple[FloatArray, float, bool]:
            if springs:  # on the model with its springs scaled (poise.motion.springs)
                return self.springs.correction(
                    resting, start, mismatch,
                    lambda J_, e, a: bounded_correction(J_, e, a, lo, hi), radius)
            return bounded_correction(J, mismatch, start, lo, hi, radius)

        delta, residual, limited = step(radius)
        self._before = np.array(start, dtype=float)
        if self._secant is None:
            self._secant = np.array(J, dtype=float)
        trusted = radius if float(np.linalg.norm(delta)) >= 0.999 * radius else math.inf
        self.corrections.append(Correction(time_s, mismatch, delta, residual, limited,
                                           trusted))
        self.total += 1
        if limited and math.isfinite(radius):  # what the limits alone leave
            residual = step(math.inf)[1]
        if limited and residual > STALL_FRACTION * self.tolerance:
            # the limits keep the correction from the target: no move into them (the
            # owner re-plans from the measured state, :attr:`stalled`: the model's offset
            # from the plant at the setpoint now, as :meth:`watch_stall` gives it)
            self.stalled = answer + np.asarray(self.model.fk(q_bar), dtype=float) \
                - self._predicted + self.task_bias
            self._finish(End.STALLED, f"stalled at a limit ({residual * 1e3:.2g} mm left)")
            return None
        if not np.any(delta):
            return start if retry else None
        if not self._holds_stably(q_bar, start + delta):
            self._finish(End.PAST_FOLD, "the corrected setpoint is past a fold of the "
                         "model's held configurations")
            return None
        return start + delta

    def _holds_stably(self, q_bar: FloatArray, qa: FloatArray) -> bool:
        """Whether the model, moved from ``q_bar`` to the setpoint ``qa`` in a straight line,
        stays on ``q_bar``'s branch of stable held configurations (no fold on the way,
        :func:`~poise.ik.branch.follow_branch`: a large correction could carry the dancer
        past the top of its pointe, and past a fold the model's Jacobian is not the
        plant's)."""
        return follow_branch(self.model, q_bar, qa).whole

    def move(self, qa: FloatArray, goal: FloatArray, speed: FloatArray,
             detuning: float | None = None) -> ShapedMove:
        """The correction move from ``qa`` to ``goal`` at ``speed``: ZVD-shaped, or ZV-shaped
        (half a damped period shorter) where the plant's modes are known to be within
        ``detuning`` of the model's (:attr:`MoveSway.detuning <poise.motion.sway.MoveSway>`;
        None: not known) and the sway ZV leaves there on a step of the correction's size,
        ``‖m̂‖ · max V_ZV(ω (1 ± detuning))`` (:func:`~poise.motion.sway.worst_residual`),
        is within :data:`SHORT_SWAY` × the tolerance."""
        shaper = self.shaper
        if detuning is not None and self.corrections and self._short is not None:
            short, slow = self._short
            size = float(np.linalg.norm(self.corrections[-1].mismatch))
            if size * worst_residual(short, slow, detuning) <= SHORT_SWAY * self.tolerance:
                shaper = short
        return ShapedMove(qa, goal, speed, shaper)

    def summary(self) -> dict[str, Any]:
        """JSON-ready: the corrections of the current plan and why they ended."""
        return {"corrections": [c.as_dict() for c in self.corrections],
                "total": self.total, "ended": self.ended,
                "spring_scale": self.springs.scale,
                "spring_scale_used": self.spring_scale,
                "task_bias": self.task_bias.tolist(),
                "mass_windows": self.masses.windows,
                "friction": self.friction,
                "friction_test": self.friction_test,
                "dither_hz": self.dither.omega / (2 * math.pi) if self.dither is not None
                else None,
                "threshold_m": THRESHOLD * self.tolerance,
                "window_s": self._window * self.period if self.active else None}


def pinned_basis(covariance: FloatArray, limit: float) -> tuple[FloatArray, float]:
    """The directions a ``covariance`` (k, k) [m²] pins down, as orthonormal columns (k, j),
    and their sigma [m]: the principal directions from the most certain on, as long as
    their variances sum to at most ``limit``² (``limit`` [m]); none (k, 0) and 0 where not
    even the most certain is pinned that well."""
    variances, directions = np.linalg.eigh(np.asarray(covariance, dtype=float))
    kept = np.cumsum(np.maximum(variances, 0.0)) <= limit * limit
    return directions[:, kept], float(np.sqrt(np.sum(np.maximum(variances[kept], 0.0))))


def static_part(samples: FloatArray, period: float, sigma: float, omega_d: float,
                dither: float = 0.0) -> FloatArray:
    """The constant part of ``samples`` (rows one period apart) beside a decaying sway at
    the slowest mode: least squares on ``1, e^{−σt} cos ω_d t, e^{−σt} sin ω_d t`` and their
    derivatives with respect to ω (``t e^{−σt} sin``, ``t e^{−σt} cos``: robust to a
    frequency off the model's, as a ZVD shaper is), and ``cos ω t, sin ω t`` of a
    ``dither`` ω [rad/s] of the setpoints (:mod:`poise.motion.dither`; 0: none); the plain
    mean when the window is too short for the fit or the sway is not oscillatory and there
    is no dither."""
    columns = _sway_columns(samples.shape[0], period, sigma, omega_d, dither)
    if columns.shape[1] == 1:
        return samples.mean(axis=0)
    coef, *_ = np.linalg.lstsq(columns, samples, rcond=None)
    return coef[0]


def static_trend(samples: FloatArray, period: float, sigma: float, omega_d: float,
                 dither: float = 0.0) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """``(value, rate, spread, error)``: :func:`static_part` with a straight line in place
    of the constant: its value at the middle of the window, its slope [units/s] (a setpoint
    the integrator moves through the window), per column, and two measures of how well the
    value is known.

    ``spread`` is the RMS of what the fit leaves, ``r`` (faster modes still ringing, noise),
    as if all of it were correlated over the whole window, as a ringing mode is (the
    dancer's windows weighted with ``σ / √N`` disagreed with each other far beyond it; the
    masses' estimate weights undithered windows by it).

    ``error`` counts the white part of ``r`` (sensor noise, variance ``σ_w² = mean(Δr²) /
    2`` from the differences of consecutive samples, which a smooth signal hardly changes)
    ``√N`` less, averaged over the window's ``N`` samples, and the rest in full:
    ``error² = σ_w² / N + max(mean(r²) − σ_w², 0)``. With a ``dither``, what repeats with
    its period (the harmonics of friction changing sign with it) averages out over the
    window's whole periods of it, and ``mean(r²)`` is replaced by the variance of ``r``'s
    changes over one period. (On ``real``, whose effort noise is 1 % of the effort limit,
    4 N·m, the spread hid the friction that biases each resting window by up to 7 N·m.)"""
    n = samples.shape[0]
    if n < 2:
        zero = np.zeros(samples.shape[1:])
        return samples.mean(axis=0), zero, zero, zero
    t = np.arange(n) * period
    sway = _sway_columns(n, period, sigma, omega_d, dither)
    X = np.column_stack([sway[:, :1], t - 0.5 * t[-1], sway[:, 1:]])
    coef, *_ = np.linalg.lstsq(X, samples, rcond=None)
    residual = samples - X @ coef
    spread2 = np.mean(residual ** 2, axis=0)
    white2 = np.minimum(_difference_variance(residual, 1), spread2)
    lag = round(2.0 * math.pi / (dither * period)) if dither > 0.0 else n
    aperiodic2 = spread2 if lag >= n else \
        np.clip(_difference_variance(residual, lag), white2, spread2)
    return coef[0], coef[1], np.sqrt(spread2), np.sqrt(white2 / n + aperiodic2 - white2)


def _difference_variance(residual: FloatArray, lag: int) -> FloatArray:
    """``mean((r[t + lag] − r[t])²) / 2`` per column: the variance of what changes over
    ``lag`` samples (white noise all of it; what repeats every ``lag`` samples none)."""
    return 0.5 * np.mean((residual[lag:] - residual[:-lag]) ** 2, axis=0)


def _sway_columns(n: int, period: float, sigma: float, omega_d: float, dither: float = 0.0
                  ) -> FloatArray:
    """The columns of :func:`static_part`'s fit (n, k): the constant first, then the
    slowest mode's sway (none when the window is short or the mode not oscillatory), then
    the dither's sine and cosine (none when ``dither`` is 0)."""
    t = np.arange(n) * period
    columns = [np.ones(n)]
    if SWAY_FIT > 0 and n >= 8 and omega_d > 0:
        env = np.exp(-sigma * t)
        c, s = env * np.cos(omega_d * t), env * np.sin(omega_d * t)
        columns += [c, s] + ([t * s, t * c] if SWAY_FIT > 1 else [])
    if dither > 0.0 and n >= 8:
        columns += [np.cos(dither * t), np.sin(dither * t)]
    return np.column_stack(columns)


def trust_radius(J: FloatArray, mismatch: FloatArray) -> float:
    """The trust region of a correction [actuator units]: the longest step ``Δ`` whose
    outcome a held Jacobian off by the stated uncertainty δ (:data:`~poise.api.rules.
    GAIN_UNCERTAINTY`, ``‖J* − J‖ ≤ δ ‖J‖``) can miss by at most :data:`TRUST_MISS` × the
    mismatch: ``δ ‖J‖ ‖Δ‖ ≤ TRUST_MISS ‖m̂‖`` (a step never worse than none). A
    well-conditioned ``J`` never meets it; near
    a fold of the held map, where the step along the weak direction is long, the model's
    error along it is what the plant answers (the soft arm on ``mixed15``: 4.7 mm became
    49 mm), so the step gives up that direction first (:func:`bounded_correction`)."""
    size = float(np.linalg.norm(J, 2))
    if not size > 0.0:
        return math.inf
    return TRUST_MISS * float(np.linalg.norm(mismatch)) / (GAIN_UNCERTAINTY * size) or math.inf


def reduction_ratio(before: float, after: float, predicted: float) -> float:
    """ρ = achieved / predicted reduction of the mismatch norm by a correction (1: as the
    model said; a trust region's test); ``-inf`` when none was predicted."""
    expected = before - predicted
    return (before - after) / expected if expected > 0.0 else -math.inf


def secant_update(J: FloatArray, step: FloatArray, change: FloatArray) -> FloatArray:
    """Broyden's update of a Jacobian estimate ``J`` (task_dim, m) by one measured secant:
    the smallest change (Frobenius norm) that makes ``J step = change``, ``J + (change − J
    step) stepᵀ / ‖step‖²``; ``J`` itself when the step is too small to measure anything
    (below 10⁻⁹ of the actuators' units)."""
    size = float(step @ step)
    if not size > 1e-18:
        return J
    return J + np.outer(change - J @ step, step) / size


def bounded_correction(J: FloatArray, mismatch: FloatArray, qa: FloatArray, lo: FloatArray,
                       hi: FloatArray, radius: float = math.inf
                       ) -> tuple[FloatArray, float, bool]:
    """``(Δqa, residual, limited)``: ``argmin ‖J Δ − m‖² + μ‖Δ‖²`` with ``lo ≤ qa + Δ ≤ hi``
    (μ = :data:`REGULARISATION` ‖J‖²), the residual ``‖J Δ − m‖`` and whether a bound is
    active. Unbounded, this is the damped pseudo-inverse ``J⁺ m`` the IK's update uses.

    ``radius`` [actuator units]: a trust region ``‖Δ‖ ≤ radius``; where the damped solution
    is longer, μ grows until it fits (:func:`trust_damping`: Levenberg–Marquardt), which
    gives up the weak directions of ``J`` first."""
    k, m = J.shape
    mu = max(REGULARISATION * max(float(np.sum(J * J)), 1e-30), trust_damping(J, mismatch,
                                                                              radius))
    free = J.T @ np.linalg.solve(J @ J.T + mu * np.eye(k), mismatch) if k <= m else \
        np.linalg.solve(J.T @ J + mu * np.eye(m), J.T @ mismatch)
    lower, upper = lo - qa, hi - qa
    if np.all(free >= lower) and np.all(free <= upper):
        return free, float(np.linalg.norm(J @ free - mismatch)), False
    from scipy.optimize import lsq_linear  # here: only a limited correction needs it

    A = np.vstack([J, math.sqrt(mu) * np.eye(m)])
    b = np.concatenate([mismatch, np.zeros(m)])
    lower = np.minimum(lower, 0.0)  # an actuator past its bound may stay, never go further
    upper = np.maximum(upper, 0.0)
    res = lsq_linear(A, b, bounds=(lower, upper + 1e-15), method="bvls")
    delta = np.clip(res.x, lower, upper)
    size = float(np.linalg.norm(delta))
    if size > radius:  # toward 0, which the bounds admit
        delta = delta * (radius / size)
    return delta, float(np.linalg.norm(J @ delta - mismatch)), True


def trust_damping(J: FloatArray, mismatch: FloatArray, radius: float) -> float:
    """The smallest damping μ ≥ 0 with ``‖Δ(μ)‖ ≤ radius`` (> 0), ``Δ(μ) = Σ σᵢ/(σᵢ² + μ)
    vᵢ uᵢᵀ m`` (the damped least-squares step along ``J``'s singular vectors, whose length
    falls as μ grows); 0 when the undamped step fits. Bisection on log μ (the problem is a
    few actuators wide)."""
    if not math.isfinite(radius):
        return 0.0
    if not radius > 0.0:
        raise ValueError(f"trust radius {radius}: must be > 0")
    U, sigma, _ = np.linalg.svd(J, full_matrices=False)
    proj = U.T @ np.asarray(mismatch, dtype=float)
    live = sigma > 1e-12 * max(float(sigma[0]) if sigma.size else 0.0, 1e-300)

    def length(mu: float) -> float:
        s = sigma[live]
        return float(np.linalg.norm(s / (s * s + mu) * proj[live]))

    if not np.any(live) or length(0.0) <= radius:
        return 0.0
    lo = math.log(max(float(np.min(sigma[live])) ** 2 * 1e-6, 1e-300))
    hi = math.log(float(sigma[0]) * float(np.linalg.norm(proj)) / radius + 1e-300)
    for _ in range(60):  # ‖Δ(e^hi)‖ ≤ σ₁‖m‖/e^hi = radius
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if length(math.exp(mid)) > radius else (lo, mid)
    return math.exp(hi)


__all__ = ["CONTRACTION", "MAX_CORRECTIONS", "RETRIES", "ROUND_AFTER", "SLOW_GAIN", "THRESHOLD",
           "TRUST_GOOD", "TRUST_GROWTH", "TRUST_MISS", "Correction", "End", "Retargeting",
           "bounded_correction", "pinned_basis", "reduction_ratio", "secant_update",
           "static_part", "trust_damping", "trust_radius"]
