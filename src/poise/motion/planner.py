"""Where a new target leads: the held configuration the arm should go to, found offline.

The per-cycle IK (:mod:`poise.motion.stepper`) is a local method: from an arm parked at an
actuator limit, or folded past the top of ``h`` along E, its descent direction can point away
from a target it could reach (the double pendulum sent to x̄ = 2.5 m folds to qa = 0.12 m and
then drives *further* into the limit for x̄ = 0.45 m). So before a target reaches the loop,
:func:`plan_target` solves Algorithm 1 offline from several starts — the current q̄, the
measured q, the rest pose (actuators at zero) and the last plan's goal — and keeps the best
held configuration:

* a stable solution that meets the tolerance, the one nearest the current actuators (on a
  robot with more actuators than task coordinates, moved along the family of held
  configurations that reach the target to the one nearest them, :func:`_nearest`: one solve
  from q̄ can drift far along it); else
* the stable configuration closest to the target (the target is then ``unreachable`` and the
  arm goes as close as it can, within its limits).

When none of these starts reaches the target, up to :data:`EXTRA_STARTS` more are tried:
held configurations with the actuators drawn in the inner :data:`INNER_RANGE` of their limits,
from a generator seeded by the target (the same target gives the same plan). Descent from a
few starts misses reachable targets of a robot whose held-configuration surface folds: 9 of
100 reachable targets of the dancer from its rest pose, each found within three such starts.

A target received while the loop runs is first planned quickly (:func:`quick_target`: the
solve from q̄ alone, milliseconds), so that the loop can start towards it at once; only when
that one solve does not settle it is the target planned in full here.

The loop then first moves the actuators to the plan's ``qa_goal`` (:func:`approach_move`: a
straight line at the allowed actuator speeds, input-shaped on the structural modes of the loop
linearised at the goal, :mod:`poise.motion.shaping`, so the arm arrives without ringing;
every intermediate q̄ stays on E) and then hands over to the per-cycle IK, so a reachable
target is reached from wherever the arm was parked.

Given the loop period, a plan also carries that linearisation
(:class:`~poise.motion.stability.LoopLinearisation` at ``q_goal``): the feedback gains'
stability bound at the target and the modes the shaper cancels.
"""

from __future__ import annotations

import weakref
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from poise.api.rules import GAIN_UNCERTAINTY
from poise.ik.held import HeldOptions, algorithm1, algorithm2
from poise.ik.held_common import held_jacobian
from poise.ik.result import IKResult
from poise.ik.statics import solve_statics
from poise.models.actuation import blocks, join, split
from poise.models.base import FloatArray, MechanicalModel
from poise.motion.bounds import warm
from poise.motion.retarget import bounded_correction
from poise.motion.shaping import ShapedMove, Shaper, Warp, shaper_for
from poise.motion.springs import SpringScale, held_reach
from poise.motion.stability import IKGains, LoopLinearisation, Mode, structural_modes

#: Iteration cap of each offline solve.
MAX_ITER = 300
#: Iteration cap of a quick plan's one solve (:func:`quick_target`): ~10 µs an iteration
#: compiled; the reference robots' solves that settle from q̄ took at most 106.
QUICK_MAX_ITER = 200
#: Top speed of the move to a plan's goal, as a fraction of each actuator's range per second.
APPROACH_SPEED = 1.0
#: The move keeps this fraction of the safety layer's rate limit (which then never clips it).
RATE_MARGIN = 0.95
#: Starts tried after the given ones when none of those reaches the target.
EXTRA_STARTS = 12
#: The extra starts' actuators lie in this inner fraction of each actuator's range.
INNER_RANGE = 0.8
#: Robots with more actuators than task coordinates: at most this many steps along the
#: family of held configurations that reach the target towards the current actuators
#: (:func:`_nearest`), each changing an actuator by at most :data:`NEAREST_STEP` [actuator
#: units] and halved up to :data:`NEAREST_HALVINGS` times; done when the step's null-space
#: part is below :data:`NEAREST_DONE` [actuator units].
#: A plan aimed for the plant's springs (:func:`for_springs`) whose aim lies more than this
#: many tolerances from the target is timed for the plant (:attr:`TargetPlan.plant_rest`):
#: the model's path to such an aim is not the plant's to the target, and what the model's
#: simulation predicts of its settling says nothing of the plant's. The dancer's pointe 10 %
#: stiffer moves its aims 36–250 mm from the bench's targets (a held map 40 % off); the
#: arms' springs and masses 10–20 % off at most 19 mm, where the model's choice of move
#: (a slower one for a 1.2 m move of ``soft_arm_stiff``) still holds.
AIM_NEAR = 10.0
#: Gauss–Newton steps of an aim for the plant its held efforts show (:func:`for_plant`):
#: from the model's goal near the edge of its stability the plant's held map is far off (the
#: dancer at ``mixed15``'s target 3: its goal held 30 cm off), and 4 steps miss by 14 mm
#: where 8 land.
PLANT_ITERATIONS = 12
#: ... and its error map (:attr:`TargetPlan.error_map`) only where ``J* J⁺`` is conditioned
#: better than this (else the model's loop).
MAP_CONDITION = 1e3
NEAREST_ITER = 200
NEAREST_STEP = 0.1
NEAREST_HALVINGS = 10
NEAREST_DONE = 1e-4


class UnstableTarget(ValueError):
    """The only held configuration reaching the target is unstable; the message says so."""


@dataclass(frozen=True)
class TargetPlan:
    """What a target leads to.

    Attributes:
        target: x̄ (task_dim,) [task units].
        reachable: a stable held configuration meets the tolerance.
        q_goal: that configuration, or the closest stable one (n,); None if not planned
            (fully actuated robots: the per-cycle IK is the whole story).
        qa_goal: its actuator positions (m,) [actuator units].
        error: ‖x̄ − h(q_goal)‖ [task units] (0 when not planned).
        approach: the loop first moves the actuators towards ``qa_goal`` (always, when a goal
            was planned: whether the per-cycle IK alone would get there is not known from one
            offline solve, whose large steps may cross a fold the IK would not).
        loop: the loop linearised at ``q_goal`` (or at the first start when no goal was
            planned); None when the plan was made without the loop period.
        shaper: the input shaper of the move's end (:func:`~poise.motion.shaping.
            shaper_for` of ``loop``'s structural modes; the identity without ``loop``).
        start_shaper: the shaper of its start (the modes at the first start, the current
            q̄; the arm's modes change along the way).
        speed: the move's speed as a fraction of :func:`approach_speed` (chosen on the
            model with the shapers, :func:`~poise.motion.reference.choose_move`).
        warp: where along the line the move is as it progresses (slower where the held
            configuration moves fast, :mod:`poise.motion.warp`); None: constant speed.
        reference: the model's predicted task response to the move (rows, task_dim), which
            feedback follows after it (:mod:`poise.motion.reference`); None: none.
        settle_s: when the model's predicted response enters the tolerance for good [s from
            the move's start]; None where it was not predicted.
        unshaped_sway: the model's sway at its slowest structural mode after the same
            straight move unshaped [task units]: how much the move excites it, which a
            shaper's residual scales (:mod:`poise.motion.sway`); None where not predicted.
        serves: the live target a plan aimed elsewhere serves (None: its own ``target``).
            A plant whose springs the loop has measured stiffer or softer than the model's
            (:func:`for_springs`) reaches ``serves`` where the model goes to ``target``;
            feedback then follows the reference shifted to end at ``serves``.
        plant_rest: where such a plant rests at :attr:`qa_goal` (n,): the held
            configuration of the model with its springs × ``1 +`` :attr:`springs`, or of the
            plant its held efforts show (:func:`for_plant`); None for a plan not aimed.
        springs: the spring scale the plan is aimed for (0: not aimed).
        plant_modes: the plant's structural modes at :attr:`plant_rest` (slowest first),
            which the move is shaped for and the corrections' window and the sway watch
            use (:meth:`structural_modes`); None: the loop's.
        task_bias: for a plan aimed for the plant its held efforts show
            (:func:`for_plant`): the model's task value where that plant will rest minus the
            target it serves [task units], what feedback adds to its aim
            (:mod:`poise.motion.masses`); None for a plan not so aimed.
        error_map: for such a plan, ``(J* J⁺)⁻¹`` (task_dim, task_dim): the plant's held
            Jacobian ``J*`` where it rests against the model's ``J`` at the goal; feedback
            integrates the measured error mapped by it, so that the plant, not the model,
            answers with the error's own direction (:meth:`ControlStep._projection
            <poise.motion.step.ControlStep._projection>`). None: the model's loop.
    """

    target: FloatArray
    reachable: bool = True
    q_goal: FloatArray | None = None
    qa_goal: FloatArray | None = None
    error: float = 0.0
    approach: bool = False
    loop: LoopLinearisation | None = field(default=None, compare=False, repr=False)
    shaper: Shaper = field(default_factory=Shaper)
    start_shaper: Shaper = field(default_factory=Shaper)
    speed: float = 1.0
    warp: Warp | None = None
    reference: FloatArray | None = field(default=None, compare=False, repr=False)
    settle_s: float | None = field(default=None, compare=False)
    unshaped_sway: float | None = field(default=None, compare=False)
    serves: FloatArray | None = field(default=None, compare=False)
    plant_rest: FloatArray | None = field(default=None, compare=False, repr=False)
    springs: float = 0.0
    plant_modes: tuple[Mode, ...] | None = field(default=None, compare=False, repr=False)
    task_bias: FloatArray | None = field(default=None, compare=False)
    error_map: FloatArray | None = field(default=None, compare=False, repr=False)

    def structural_modes(self) -> list[Mode]:
        """The structural modes the move ends in, slowest first: for a plan aimed for the
        plant's springs (:func:`for_springs`) the plant's, at :attr:`plant_rest` with its
        springs scaled; else the loop's at the goal (none without :attr:`loop`)."""
        if self.plant_modes is not None:
            return list(self.plant_modes)
        return self.loop.structural_modes() if self.loop is not None else []

    def slowest_mode(self) -> Mode | None:
        """The first of :meth:`structural_modes`, None without any."""
        modes = self.structural_modes()
        return modes[0] if modes else None

    @property
    def live_target(self) -> FloatArray:
        """The target the user asked for: :attr:`serves`, else :attr:`target`."""
        return self.serves if self.serves is not None else self.target

    @property
    def status(self) -> str:
        """``reachable`` or ``unreachable``."""
        return "reachable" if self.reachable else "unreachable"

    def note(self) -> str:
        """The sentence for the command's answer and the state's reason ('' if reachable)."""
        if self.reachable:
            return ""
        return (f"unreachable: target {self.target.tolist()} is out of reach within the "
                f"actuator limits; going to the closest held configuration (task error "
                f"{self.error:.3g})")


def _solve(model: MechanicalModel, target: FloatArray, q0: FloatArray,
           options: HeldOptions) -> IKResult:
    return algorithm1(model, target, q0, options=options)


def plan_target(model: MechanicalModel, target: FloatArray, starts: Sequence[FloatArray],
                tol: float, *, period: float | None = None, delay: int = 1,
                effort_feedforward: bool = True, params: Any = None,
                shaper: str = "auto", uncertainty: float = GAIN_UNCERTAINTY,
                spring_scale: float = 0.0, qa_min: FloatArray | None = None,
                qa_max: FloatArray | None = None, plant: MechanicalModel | None = None
                ) -> TargetPlan:
    """The held configuration to go to for ``target`` (see the module docstring).

    Args:
        model: the controller's statics model.
        target: x̄ [task units].
        starts: configurations to start the offline solves from (n,) each; the first is the
            current q̄ (the "nearest" solution is measured from its actuators).
        tol: task tolerance [task units].
        period: the loop period Δt [s]; given, the plan carries the loop linearised at its
            goal (stability bound, structural modes) and the move's shaper.
        delay: the sensor-to-setpoint delay [periods] of that linearisation.
        effort_feedforward: the setpoints carry ``τ_ff = G_a(q̄)``.
        params: the live parameters (:class:`~poise.motion.params.LiveParams`): the
            bounds of their algorithm in both modes, at their update rule, λ and automatic
            gains, are computed here (:func:`~poise.motion.bounds.warm`), so that
            adopting the plan and switching mode later cost microseconds.
        shaper: the kind of input shaper of the move (``[loop] shaper``,
            :func:`~poise.motion.shaping.shaper_for`).
        uncertainty: the feedback bound holds for springs within ``1 ±`` this × the
            model's (``[loop] gain_uncertainty``, :class:`~poise.motion.stability.
            LoopLinearisation`).
        spring_scale: the plant's springs are ``1 +`` this × the model's, as the loop
            measured them (:mod:`poise.motion.springs`); not 0: the plan is aimed where the
            model must go for such a plant to reach ``target`` (:func:`for_springs`).
        qa_min, qa_max: the actuator limits of that aim (default: the model's).
        plant: the plant as its held efforts show it (:mod:`poise.motion.masses`); given,
            the plan is aimed for it (:func:`for_plant`) in place of ``spring_scale``.

    A target the model holds only unstably may be held stably by the plant as the loop
    measured it (``spring_scale`` or ``plant``: ``poise bench control``'s target 16 on
    ``stiff10`` puts the dancer's centre of mass upright 1.057 m high, above the
    ``k0 / (m g) ≈ 1.04`` m its model's pointe holds, and the pointe 10 % stiffer holds it):
    the search for the plant then starts from the model's closest stable configuration, as
    for a target the model does not reach.

    Raises:
        UnstableTarget: the only held configuration found that reaches ``target`` is unstable
            (with ``spring_scale`` or ``plant``: on the plant as measured too).
    """
    target = np.asarray(target, dtype=float)
    for_measured = bool(spring_scale) or plant is not None
    found, unstable = _plan_target(model, target, starts, tol, closest_if_unstable=for_measured)
    plan = _aimed(model, found, tol, spring_scale, plant, qa_min, qa_max)
    if unstable and plan.serves is None:  # the plant as measured does not hold it either
        raise UnstableTarget(unstable)
    if period is None:
        return plan
    here = next((np.asarray(q, dtype=float) for q in starts if q is not None),
                np.zeros(model.n))
    return _linearised(model, plan, here, period, delay, effort_feedforward, params, shaper,
                       uncertainty, plant)


def quick_target(model: MechanicalModel, target: FloatArray, q_bar: FloatArray, tol: float,
                 *, period: float, delay: int = 1, effort_feedforward: bool = True,
                 shaper: str = "auto", qa_min: FloatArray | None = None,
                 qa_max: FloatArray | None = None, uncertainty: float = GAIN_UNCERTAINTY,
                 spring_scale: float = 0.0, plant: MechanicalModel | None = None
                 ) -> TargetPlan | None:
    """The plan of ``target`` from one Algorithm-1 solve from ``q̄`` and, where that does not
    settle it, one from the rest pose (at most :data:`QUICK_MAX_ITER` iterations each, the
    compiled solve where the model has it), made in milliseconds so that a target can be
    adopted as soon as it is received; None when neither settles it, and the caller plans it
    in full (:func:`plan_target`). (From q̄ alone, 34 of 200 targets of ``poise bench
    control``'s five robots missed: 32 of them settle from the rest pose.)

    Of :func:`plan_target` it keeps those two solves and the loop linearised at the goal
    with the move's shapers; it leaves out the other starts, the move along the family of
    held configurations to the one nearest the current actuators (:func:`_nearest`: the
    goal may lie farther along it, a longer move), the extra starts and the bounds computed
    ahead (:func:`~poise.motion.bounds.warm`). So unreachable and unstable targets, which
    that one solve never settles, keep the full plan's answers.

    Args:
        model, target, tol, period, delay, effort_feedforward, shaper, uncertainty: as
            :func:`plan_target`'s.
        q_bar: the IK's predicted configuration q̄ now (n,).
        qa_min, qa_max: the actuator limits the goal must lie in (m,) [actuator units]
            (besides the model's; the run's safety limits).
        spring_scale, plant: as :func:`plan_target`'s.

    Returns:
        A reachable plan that approaches a stable held configuration within the limits that
        meets the tolerance; None otherwise.
    """
    target = np.asarray(target, dtype=float)
    here = np.asarray(q_bar, dtype=float)
    if model.m == model.n:
        plan = TargetPlan(target)
    else:
        options = HeldOptions(tol=tol / 10, max_iter=QUICK_MAX_ITER)
        for start in (here, rest_pose(model)):
            r = _solve(model, target, start, options)
            if _holds(model, r, qa_min, qa_max):
                break
        else:
            return None
        plan = _aimed(model, _plan(model, target, r, True), tol, spring_scale, plant, qa_min,
                      qa_max)
    return _linearised(model, plan, here, period, delay, effort_feedforward, None, shaper,
                       uncertainty, plant)


def for_springs(model: MechanicalModel, plan: TargetPlan, spring_scale: float, tol: float,
                qa_min: FloatArray | None = None, qa_max: FloatArray | None = None
                ) -> TargetPlan:
    """``plan`` aimed for a plant whose springs are ``1 + spring_scale`` times the model's
    (:mod:`poise.motion.springs`): from its goal, Gauss–Newton on the held map of the model
    with its springs so scaled finds the actuators ``qa*`` at which such a plant holds the
    target (within the limits); the plan then goes to the model's own held configuration at
    ``qa*``, its ``target`` the model's task value there (the *aim*), and ``serves`` the
    target. On the dancer, whose pointe 10 % stiffer is a held map 40 % off, the first move
    to a target then lands within millimetres instead of 5–16 cm.

    A target the model does not reach (``plan`` unreachable: its closest held configuration)
    may be held by such a plant (the bench's dancer targets are the plant's); from that
    closest configuration the same search finds it, and the plan to the aim is reachable.
    ``plan`` itself where it has no goal, the scaled model does not hold the target stably
    within ``tol`` inside the limits, or the model holds no stable configuration at ``qa*``.

    Where the aim is more than :data:`AIM_NEAR` tolerances from the target, the plan also
    carries where such a plant will rest (:attr:`TargetPlan.plant_rest`): its move is then
    timed for the plant, shaped for the plant's modes there (:func:`_linearised`), not the
    model's at the aim (the dancer at ``poise bench control``'s target 3: 1.16 against
    0.82 rad/s), and chosen by simulating the model with its springs so scaled, not the
    model (:meth:`~poise.motion.motion_planner.MotionPlanner.move`)."""
    if not spring_scale or plan.q_goal is None or model.m == model.n:
        return plan
    lo, hi = _bounds(model, qa_min, qa_max)
    target = np.asarray(plan.target, dtype=float)
    qa, qu = split(model, np.asarray(plan.q_goal, dtype=float))
    scaled = SpringScale.fixed(model, spring_scale)
    reach = scaled.reach(qa, qu, target, lambda J, e, a: bounded_correction(J, e, a, lo, hi))
    if reach is None or float(np.linalg.norm(reach[1] - target)) > tol or \
            not scaled.rests_stably(reach[0], qu):
        return plan
    sol = solve_statics(model, reach[0], qu)
    if not (sol.converged and sol.stable):
        return plan
    q = join(model, reach[0], sol.qu)
    aim = np.asarray(model.fk(q), dtype=float)
    far = float(np.linalg.norm(aim - target)) > AIM_NEAR * tol
    rest = scaled.resting(reach[0], qu) if far else None
    return replace(plan, target=aim, reachable=True, q_goal=q,
                   qa_goal=np.asarray(reach[0], dtype=float), error=0.0, serves=target,
                   plant_rest=rest, springs=float(spring_scale))


def loop_inverse(loop: FloatArray) -> FloatArray | None:
    """The error map ``(J* J⁺)⁻¹`` of the feedback loop ``J* J⁺`` (k, k): its inverse, where
    it is conditioned better than :data:`MAP_CONDITION`; else None (the model's loop)."""
    return np.linalg.inv(loop) if np.linalg.cond(loop) < MAP_CONDITION else None


def for_plant(model: MechanicalModel, plan: TargetPlan, plant: MechanicalModel, tol: float,
              qa_min: FloatArray | None = None, qa_max: FloatArray | None = None
              ) -> TargetPlan:
    """``plan`` aimed for ``plant``, the robot as its held efforts show it (its masses and
    springs estimated, :meth:`MassEstimate.plant_model <poise.motion.masses.MassEstimate.
    plant_model>`), as :func:`for_springs` aims for a spring scale: from the goal,
    Gauss–Newton on ``plant``'s held map and task (its own centre of mass) finds the
    actuators ``qa*`` at which it holds the target within the limits; the plan goes to the
    model's held configuration at ``qa*`` (its ``target`` the model's task value there),
    serves the target, and carries ``task_bias`` = the model's task value where ``plant``
    rests at ``qa*`` minus the target: what feedback, which measures the model's task, aims
    with (:mod:`poise.motion.step`). ``plan`` itself where it has no goal, ``plant`` does
    not reach the target within ``tol`` inside the limits, or the model holds no stable
    configuration at ``qa*``.

    Where the search misses because at the model's goal the plant rests on another branch
    (``mixed15``'s target 16: it tips over its pointe to the other side, a metre off),
    ``qa*`` is the plant's own held configuration for the target, solved as the model's
    are. The plan carries where ``plant`` rests (``plant_rest``), and with the loop linearised
    its structural modes there (``plant_modes``); its move is chosen by simulating ``plant``
    (:func:`~poise.motion.reference.choose_move`'s ``plant``): chosen on the model, a move
    that settles the model left the plant swaying for 10 s, and only shaping the model's
    move for the plant's modes settled the dancer's ``mixed15`` targets no sooner on the
    whole (7 of 17 sooner, 9 later by 1–7 s).

    On the dancer whose masses are 5–15 % off (``mixed15``) the model's held map and its
    centre of mass are both off (by 2–5 cm at the bench's targets); aimed only by the bias
    of the task, the first move still landed 3 cm off. Near the edge of the model's
    stability the two held maps differ in direction too (``mixed15``'s target 3: ``J* J⁺``
    has eigenvalues 0.02 ± 1.16i, so the integrator on the model's map circled the target
    for a minute); the plan carries ``error_map = (J* J⁺)⁻¹`` for feedback."""
    if plan.q_goal is None or model.m == model.n:
        return plan
    lo, hi = _bounds(model, qa_min, qa_max)
    target = np.asarray(plan.target, dtype=float)
    qa, qu = split(model, np.asarray(plan.q_goal, dtype=float))

    def held(a: FloatArray, u: FloatArray) -> Any:
        sol = solve_statics(plant, a, u)
        return blocks(plant, join(plant, a, sol.qu))

    qa_star, x, _ = held_reach(held, held_jacobian, qa, qu, target,
                               lambda J, e, a: bounded_correction(J, e, a, lo, hi),
                               PLANT_ITERATIONS)
    if float(np.linalg.norm(x - target)) > tol:
        # the plant holds the model's goal on another branch (it tips over its pointe
        # where the model does not): its own held configuration for the target
        try:
            own = _plan_target(plant, target, [np.asarray(plan.q_goal, dtype=float)], tol)[0]
        except UnstableTarget:
            return plan
        if not own.reachable or own.qa_goal is None or \
                np.any(own.qa_goal < lo) or np.any(own.qa_goal > hi):
            return plan
        qa_star, qu = np.asarray(own.qa_goal, dtype=float), split(plant, own.q_goal)[1]
    rests = solve_statics(plant, qa_star, qu)
    sol = solve_statics(model, qa_star, qu)
    if not (sol.converged and sol.stable and rests.converged and rests.stable):
        return plan
    q = join(model, qa_star, sol.qu)
    rest = join(plant, qa_star, rests.qu)
    bias = np.asarray(model.fk(rest), dtype=float) - target
    answer = held_jacobian(blocks(plant, rest)) @ np.linalg.pinv(held_jacobian(blocks(model, q)))
    error_map = loop_inverse(answer)
    return replace(plan, target=np.asarray(model.fk(q), dtype=float), reachable=True,
                   q_goal=q, qa_goal=np.asarray(qa_star, dtype=float), error=0.0,
                   serves=target, task_bias=bias, error_map=error_map, plant_rest=rest)


def _aimed(model: MechanicalModel, plan: TargetPlan, tol: float, spring_scale: float,
           plant: MechanicalModel | None, qa_min: FloatArray | None,
           qa_max: FloatArray | None) -> TargetPlan:
    """``plan`` aimed for the plant as the loop measured it: :func:`for_plant` where its
    held efforts showed it, else :func:`for_springs` where a spring scale did."""
    if plant is not None:
        return for_plant(model, plan, plant, tol, qa_min, qa_max)
    if spring_scale:
        return for_springs(model, plan, spring_scale, tol, qa_min, qa_max)
    return plan


def _bounds(model: MechanicalModel, qa_min: FloatArray | None, qa_max: FloatArray | None
            ) -> tuple[FloatArray, FloatArray]:
    """The actuator limits: the model's, within ``qa_min``/``qa_max`` where given."""
    lo = np.asarray(model.qa_min if qa_min is None else np.maximum(qa_min, model.qa_min),
                    dtype=float)
    hi = np.asarray(model.qa_max if qa_max is None else np.minimum(qa_max, model.qa_max),
                    dtype=float)
    return lo, hi


_REST: weakref.WeakKeyDictionary[MechanicalModel, FloatArray] = weakref.WeakKeyDictionary()


def rest_pose(model: MechanicalModel) -> FloatArray:
    """The held configuration with every actuator at zero (n,), solved once per model."""
    rest = _REST.get(model)
    if rest is None:
        rest = _REST[model] = np.asarray(
            solve_statics(model, np.zeros(model.m), split(model, np.zeros(model.n))[1]).q,
            dtype=float)
    return rest


def _linearised(model: MechanicalModel, plan: TargetPlan, here: FloatArray, period: float,
                delay: int, effort_feedforward: bool, params: Any, shaper: str,
                uncertainty: float = GAIN_UNCERTAINTY, plant: MechanicalModel | None = None
                ) -> TargetPlan:
    """``plan`` with the loop linearised at its goal (at ``here``, the current q̄, without
    one), the bounds of ``params``' algorithm computed ahead when given, and the shapers of
    the move's end and start (the structural modes at the goal, the plant's for a plan
    aimed for it, and at ``here``)."""
    at = plan.q_goal if plan.q_goal is not None else here
    loop = LoopLinearisation(model, at, period, delay=delay,
                             effort_feedforward=effort_feedforward, uncertainty=uncertainty)
    if params is not None:
        warm(loop, IKGains.of(params), getattr(params, "auto", ()))
    _ = loop.projection  # made here, not in the cycle that adopts the plan
    plan = replace(plan, loop=loop, plant_modes=_plant_modes(model, plan, loop, plant))
    return replace(plan, shaper=shaper_for(plan.structural_modes(), shaper),
                   start_shaper=shaper_for(structural_modes(model, here, loop.actuators),
                                           shaper))


def _plant_modes(model: MechanicalModel, plan: TargetPlan, loop: LoopLinearisation,
                 plant: MechanicalModel | None = None) -> tuple[Mode, ...] | None:
    """The structural modes of the plant where a plan aimed for it leaves it
    (:attr:`TargetPlan.plant_rest`): ``plant``'s, the plant its held efforts show, for a
    plan aimed for it (:func:`for_plant`: the dancer's slowest mode on ``mixed15`` up to 20 %
    off the model's at the aim, 6.8 s against 8.4 s at bench target 16); else the model's
    with its springs × ``1 +`` :attr:`TargetPlan.springs`. None for a plan not aimed."""
    if plan.plant_rest is None:
        return None
    if plan.task_bias is not None and plant is not None:
        return tuple(structural_modes(plant, plan.plant_rest, loop.actuators))
    return tuple(structural_modes(model, plan.plant_rest, loop.actuators, 1.0 + plan.springs))


def _plan_target(model: MechanicalModel, target: FloatArray, starts: Sequence[FloatArray],
                 tol: float, *, closest_if_unstable: bool = False) -> tuple[TargetPlan, str]:
    """The model's plan of ``target`` (the module docstring) and ``""``; where the only held
    configuration that reaches it is unstable, with ``closest_if_unstable`` the plan of the
    closest stable one (unreachable) and why the target itself is refused.

    Raises:
        UnstableTarget: that case, without ``closest_if_unstable``.
    """
    if model.m == model.n:
        return TargetPlan(target), ""
    options = HeldOptions(tol=tol / 10, max_iter=MAX_ITER)
    rest = rest_pose(model)
    candidates = [np.asarray(q, dtype=float) for q in starts if q is not None] + [rest]
    qa_now = split(model, candidates[0])[0]
    results: list[IKResult] = []
    for q0 in candidates:
        r = _solve(model, target, q0, options)
        results.append(r)
        if r.success and r.stable:
            break  # the first start is the current q̄: its solution is the nearest
    good = [r for r in results if r.success and r.stable]
    if not good:
        more = _extra_start(model, target, rest, options)
        good = [more] if more is not None else []
    if good:
        best = min(good, key=lambda r: float(np.linalg.norm(split(model, r.q)[0] - qa_now)))
        if model.m > target.size:  # a family of held configurations reaches the target
            best = _nearest(model, target, best, qa_now, options)
        return _plan(model, target, best, True), ""
    stable = [r for r in results if r.stable is not False] or results
    best = min(stable, key=lambda r: r.position_error)
    r2 = algorithm2(model, target, candidates[0], options=options)
    if r2.success and r2.stable is False:
        closest = min(results, key=lambda r: r.position_error)
        why = (f"target {target.tolist()}: the held configuration that reaches it is unstable "
               f"(min eig H_uu = {r2.min_eig_Huu:.3g} < 0); a collocated controller cannot "
               f"hold it (closest stable: task error {closest.position_error:.3g})")
        if not closest_if_unstable:
            raise UnstableTarget(why)
        return _plan(model, target, best, False), why
    return _plan(model, target, best, best.position_error <= tol), ""


def _nearest(model: MechanicalModel, target: FloatArray, found: IKResult,
             qa_now: FloatArray, options: HeldOptions) -> IKResult:
    """``found``'s held configuration moved along the family of held configurations that
    reach ``target`` to the one (locally) nearest the actuators ``qa_now``, for a robot with
    more actuators than task coordinates; ``found`` itself where that fails or is no nearer.

    Gradient projection on E: each step ``Δqa = J⁺ e − (I − J⁺J)(qa − qa_now)`` (``J`` the
    held Jacobian ``Ja − Ju Huu⁻¹ Hua``, ``e`` the task error: the target first, the distance
    in its null space), scaled to at most :data:`NEAREST_STEP` per actuator and halved until
    the statics converge to a stable configuration; it stops when the null-space part is
    below :data:`NEAREST_DONE`. Algorithm 1 from there restores the tolerance.

    From the dancer's q̄ at ``poise bench control``'s target 9, the solve for target 10
    swings one joint by 3.7 rad (a 3.9 s move at the allowed speed); the nearest
    configuration swings none by more than 1.8 rad (1.9 s)."""
    q = np.asarray(found.q, dtype=float)
    for _ in range(NEAREST_ITER):
        b = blocks(model, q)
        jac = held_jacobian(b)
        pinv = np.linalg.pinv(jac)
        away = b.qa - qa_now
        away_null = away - pinv @ (jac @ away)
        if float(np.max(np.abs(away_null))) < NEAREST_DONE:
            break
        step = pinv @ (target - b.x) - away_null
        step *= min(1.0, NEAREST_STEP / float(np.max(np.abs(step))))
        for _halving in range(NEAREST_HALVINGS):
            qa = np.clip(b.qa + step, model.qa_min, model.qa_max)
            trial = solve_statics(model, qa, b.qu, tol=options.statics_tol)
            if trial.converged and trial.stable:
                break
            step = 0.5 * step
        else:
            break
        q = trial.q
    polished = _solve(model, target, q, options)
    nearer = float(np.linalg.norm(split(model, np.asarray(polished.q))[0] - qa_now)) < float(
        np.linalg.norm(split(model, np.asarray(found.q))[0] - qa_now))
    return polished if polished.success and polished.stable and nearer else found


def _extra_start(model: MechanicalModel, target: FloatArray, rest: FloatArray,
                 options: HeldOptions) -> IKResult | None:
    """The first of up to :data:`EXTRA_STARTS` solves from held configurations with random
    actuators (inner :data:`INNER_RANGE` of the model's limits; ±1 actuator unit about 0 where
    a limit is infinite) that reaches ``target`` with a stable configuration within the
    limits; None if none does. Seeded by ``target``: the same target, the same starts."""
    lo = np.asarray(model.qa_min, dtype=float)
    hi = np.asarray(model.qa_max, dtype=float)
    bounded = np.isfinite(lo) & np.isfinite(hi)
    with np.errstate(invalid="ignore"):  # inf − inf where a limit is open: not used
        mid = np.where(bounded, 0.5 * (lo + hi), 0.0)
        half = np.where(bounded, 0.5 * INNER_RANGE * (hi - lo), 1.0)
    rng = np.random.default_rng(zlib.crc32(np.ascontiguousarray(target).tobytes()))
    qu_rest = split(model, rest)[1]
    for _ in range(EXTRA_STARTS):
        qa = mid + half * rng.uniform(-1.0, 1.0, model.m)
        start = solve_statics(model, qa, qu_rest)
        if not start.converged:
            continue
        r = _solve(model, target, start.q, options)
        if _holds(model, r):
            return r
    return None


def _holds(model: MechanicalModel, r: IKResult, qa_min: FloatArray | None = None,
           qa_max: FloatArray | None = None) -> bool:
    """Whether ``r`` meets its tolerance with a stable held configuration whose actuators
    lie within the model's limits (and ``qa_min``/``qa_max`` where given)."""
    if not (r.success and r.stable):
        return False
    qa = split(model, np.asarray(r.q, dtype=float))[0]
    lo = np.asarray(model.qa_min, dtype=float)
    hi = np.asarray(model.qa_max, dtype=float)
    if qa_min is not None:
        lo = np.maximum(lo, np.asarray(qa_min, dtype=float))
    if qa_max is not None:
        hi = np.minimum(hi, np.asarray(qa_max, dtype=float))
    return bool(np.all(qa >= lo) and np.all(qa <= hi))


def _plan(model: MechanicalModel, target: FloatArray, r: IKResult,
          reachable: bool) -> TargetPlan:
    q = np.asarray(r.q, dtype=float)
    return TargetPlan(target, reachable, q, split(model, q)[0], float(r.position_error), True)


def approach_speed(qa_min: FloatArray, qa_max: FloatArray, qa_rate: FloatArray
                   ) -> FloatArray:
    """The speed of the move to a goal (m,) [actuator units/s]: :data:`APPROACH_SPEED` ×
    each actuator's range per second, at most :data:`RATE_MARGIN` × its rate limit (1 unit/s
    where neither is finite)."""
    span = np.asarray(qa_max, dtype=float) - np.asarray(qa_min, dtype=float)
    speed = np.minimum(APPROACH_SPEED * span, RATE_MARGIN * np.asarray(qa_rate, dtype=float))
    return np.where(np.isfinite(speed) & (speed > 0), speed, 1.0)


def approach_move(plan: TargetPlan, qa: FloatArray, qa_min: FloatArray, qa_max: FloatArray,
                  qa_rate: FloatArray) -> ShapedMove:
    """The move of the actuators from ``qa`` to the plan's goal (clipped to the limits): a
    straight line at the plan's ``speed`` × :func:`approach_speed`, shaped by the plan's
    shapers."""
    assert plan.qa_goal is not None
    goal = np.clip(plan.qa_goal, qa_min, qa_max)
    return ShapedMove(qa, goal, plan.speed * approach_speed(qa_min, qa_max, qa_rate),
                      plan.shaper, plan.start_shaper, plan.warp)


__all__ = [
    "AIM_NEAR",
    "APPROACH_SPEED",
    "EXTRA_STARTS",
    "INNER_RANGE",
    "MAP_CONDITION",
    "PLANT_ITERATIONS",
    "QUICK_MAX_ITER",
    "RATE_MARGIN",
    "TargetPlan",
    "UnstableTarget",
    "approach_move",
    "approach_speed",
    "for_plant",
    "for_springs",
    "loop_inverse",
    "plan_target",
    "quick_target",
]
