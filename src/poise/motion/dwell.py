"""Moves tuned on the model: the line in two full-speed halves with a pause, timed so that
nothing sways when the actuators stop.

A zero-vibration shaper (:mod:`poise.motion.shaping`) is exact for one linear mode: two
half-moves whose starts are half a damped period apart leave no vibration. Over a long move of
the dancer its ankle's mode changes by half (2.3 rad/s leaning, 1.05 upright), and shapers
designed at the ends leave the ankle swinging by 0.1–0.4 rad; the moves that leave little
sway (:mod:`poise.motion.warp`, slower shapers) last 11–14 s where the ankle sways with a
period of 2.7 s.

The same idea, solved on the nonlinear model: the actuators go along the straight line at the
allowed speed to a split ``σ`` of it, hold still for a pause ``d``, and go on at full speed
to the goal (:func:`dwell_warp`, a :class:`~poise.motion.shaping.Warp` with a flat
piece). Once the actuators have come to rest at the goal, the passive coordinates ``q_u`` of
a robot that sways no more are at their held values with no velocity; that is, the residual::

    r(σ, d) = (q_u − q_u*,  q̇_u / ω)

(``ω`` the slowest structural mode at the goal) is zero, two equations in two unknowns for a
robot with one passive coordinate (least squares for more). :func:`dwell_move` solves them by
Gauss–Newton with finite differences, each residual one simulation of the move alone on the
model (:class:`~poise.motion.reference.Prediction`), from the best of a few pauses at
``σ = ½``. On the dancer's full-lean crossing (bench target 14) it converges in two
iterations; the move lasts 4.7 s and settles 4.3 s after the command, on the model, from
rest (3 T = 8.9 s; the best shaped or warped move took 12 s).

Like a ZV shaper, the solution cancels the sway of the model it was solved on: a model off
by some percent leaves a sway of that order, which feedback (``fb``, following the model's
response) then removes. :func:`~poise.motion.reference.choose_move` keeps it only when it
settles first on the model.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from poise.models.actuation import split
from poise.models.base import FloatArray, MechanicalModel
from poise.motion.shaping import Shaper, Warp

if TYPE_CHECKING:
    from poise.motion.planner import TargetPlan
    from poise.motion.reference import Prediction

#: Pauses tried at ``σ = ½`` for the first guess, as fractions of the slowest mode's period.
FIRST_PAUSES = (0.0, 0.125, 0.25, 0.375, 0.5)
#: Gauss–Newton iterations at most, and the residual norm that ends them [rad, rad].
ITERATIONS = 8
SOLVED = 1e-4
#: Halvings of a Gauss–Newton step that does not shrink the residual.
HALVINGS = 3
#: Gauss–Newton starts from the best of the first guesses; a start is given up when its
#: residual has not halved after this many iterations, unless the last step was cut to the
#: largest change (:data:`MAX_CHANGE_SPLIT`, :data:`MAX_CHANGE_PAUSE`) and still shrank
#: it: a solution far from the first guess, approached as fast as the steps allow (the
#: dancer's 1.2 m lean on ``mixed15``, bench target 16: from σ = 0.5 to 0.88 in steps of
#: 0.1, the residual 0.52 → 0.45 → 0.35 → 0.18 rad; given up at the third iteration, the
#: shaped move left the plant swaying for 37 s, the dwell move settles it in 7 s).
STARTS = 2
PROGRESS_AFTER = 2
#: ... a cut step counts as progress when it shrank the residual by at least this fraction
#: of what the linearisation predicted for it (on that lean 0.57 and more; a start that
#: crawled, 0.53 → 0.52 → 0.50 rad near a fold of the exact dancer, bench target 17 in
#: ``ff``, 0.12: given up as before).
CUT_AGREEMENT = 0.25
#: A dwell move is offered only when its residual sway is at most this fraction of the
#: straight line's (where the two unknowns cannot cancel it, a shaped move settles first).
CANCELLED = 0.1
#: Finite-difference steps: of the split, and of the pause [fraction of the period].
STEP_SPLIT = 1e-3
STEP_PAUSE = 2e-3
#: The largest change per iteration: of the split, and of the pause [fraction of the period].
MAX_CHANGE_SPLIT = 0.1
MAX_CHANGE_PAUSE = 0.2
#: The split and the pause stay within these bounds [-, periods].
SPLIT_RANGE = (0.05, 0.95)
MAX_PAUSE = 2.0
#: How long after the commanded move the residual is taken: the actuators' position loop
#: (critically damped at ``ω_a``) has come to rest after this many ``1/ω_a`` [-].
SERVO_SETTLE = 10.0
#: ... and at least this fraction of the slowest mode's period (the IK's last correction).
AFTER_PERIODS = 0.1


def dwell_warp(split_at: float, pause: float, line_time: float) -> Warp:
    """The progress along the line of a move that goes to ``split_at`` (0–1) of it at full
    speed, holds still for ``pause`` [s] and goes on at full speed; ``line_time`` [s] is the
    line's duration at full speed. The move lasts ``line_time + pause``."""
    stretch = (line_time + pause) / line_time
    f1 = split_at / stretch
    f2 = f1 + pause / (line_time * stretch)
    if f2 <= f1:
        return Warp((0.0, f1, 1.0), (0.0, split_at, 1.0))
    return Warp((0.0, f1, f2, 1.0), (0.0, split_at, split_at, 1.0))


def dwell_move(model: MechanicalModel, plan: TargetPlan, q_bar: FloatArray,
               predict: Callable[[TargetPlan], Prediction], line_time: float
               ) -> TargetPlan | None:
    """``plan`` with the dwell move (see the module docstring) whose residual sway is
    smallest; None where it leaves more than :data:`CANCELLED` of the straight line's, or
    where there is nothing to solve: no goal, no structural mode, or more than one passive
    coordinate (the residual has more components than the two unknowns can cancel: on the
    soft arms the dwell move never settled first and doubled the planning).

    Args:
        model: the controller's model.
        plan: the target's plan (its goal ``q_goal``, ``qa_goal``, and the loop linearised
            there).
        q_bar: where the move starts (n,).
        predict: a :class:`~poise.motion.reference.Prediction` of a candidate plan's move
            from ``q_bar``.
        line_time: the straight line's duration at the allowed speed [s].
    """
    if plan.loop is None or plan.q_goal is None or line_time <= 0.0 or model.n - model.m != 1:
        return None
    slow = plan.loop.slowest_mode()
    if slow is None or not math.isfinite(slow.period):
        return None
    omega_a = plan.loop.actuators.omega
    after = max(SERVO_SETTLE / omega_a if math.isfinite(omega_a) and omega_a > 0 else 0.0,
                AFTER_PERIODS * slow.period)

    def candidate(x: FloatArray) -> TargetPlan:
        return replace(plan, shaper=Shaper(), start_shaper=Shaper(), speed=1.0,
                       warp=dwell_warp(float(x[0]), float(x[1]) * slow.period, line_time))

    def residual(x: FloatArray) -> FloatArray:
        prediction = predict(candidate(x))
        prediction.run_move(after)
        q, qd = prediction.state  # against where the simulated body rests at the goal
        return np.concatenate([split(model, q)[1] - split(model, prediction.q_rest)[1],
                               split(model, qd)[1] / slow.omega])

    tried = [(x, residual(x)) for x in (np.array([0.5, p]) for p in FIRST_PAUSES)]
    straight = float(np.linalg.norm(tried[0][1]))  # no pause: the unshaped line
    x, r = tried[0]
    for start in sorted(tried, key=lambda pair: float(np.linalg.norm(pair[1])))[:STARTS]:
        found = _gauss_newton(residual, *start)
        if float(np.linalg.norm(found[1])) < float(np.linalg.norm(r)):
            x, r = found
        if float(np.linalg.norm(r)) < SOLVED:
            break
    if float(np.linalg.norm(r)) > CANCELLED * straight:
        return None
    return candidate(x)


def _gauss_newton(residual: Callable[[FloatArray], FloatArray], x: FloatArray,
                  r: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Gauss–Newton on ``(σ, d / T)`` from ``x`` (residual ``r``) with forward differences,
    bounded steps and step halving; given up after :data:`PROGRESS_AFTER` iterations that
    have not halved the residual (another start may do better), unless the last step was a
    whole step cut to the largest change that shrank it by :data:`CUT_AGREEMENT` of what the
    linearisation predicted. The last point and its residual."""
    steps = np.array([STEP_SPLIT, STEP_PAUSE])
    limit = np.array([MAX_CHANGE_SPLIT, MAX_CHANGE_PAUSE])
    low, high = np.array([SPLIT_RANGE[0], 0.0]), np.array([SPLIT_RANGE[1], MAX_PAUSE])
    first = float(np.linalg.norm(r))
    cut = False  # the last step was cut to the largest change, and it shrank the residual
    for iteration in range(ITERATIONS):
        size = float(np.linalg.norm(r))
        if size < SOLVED or (iteration >= PROGRESS_AFTER and size > 0.5 * first
                             and not cut):
            break
        jac = np.column_stack([(residual(x + h * e) - r) / h
                               for h, e in zip(steps, np.eye(2), strict=True)])
        dx = -np.linalg.lstsq(jac, r, rcond=None)[0]
        scale = min(1.0, float(np.min(limit / np.maximum(np.abs(dx), 1e-300))))
        dx *= scale
        for halving in range(HALVINGS + 1):  # backtrack until the residual shrinks
            trial = np.clip(x + dx, low, high)
            r_trial = residual(trial)
            shrunk = size - float(np.linalg.norm(r_trial))
            if shrunk > 0.0:
                # a cut step that did what the linearisation said it would (not a crawl)
                cut = scale < 1.0 and halving == 0 and shrunk >= CUT_AGREEMENT * (
                    size - float(np.linalg.norm(r + jac @ (trial - x))))
                x, r = trial, r_trial
                break
            dx = 0.5 * dx
        else:
            break  # no step shrinks it
    return x, r


__all__ = ["AFTER_PERIODS", "CANCELLED", "CUT_AGREEMENT", "FIRST_PAUSES", "HALVINGS",
           "ITERATIONS", "MAX_CHANGE_PAUSE", "MAX_CHANGE_SPLIT", "MAX_PAUSE", "PROGRESS_AFTER",
           "SERVO_SETTLE", "SOLVED", "SPLIT_RANGE", "STARTS", "STEP_PAUSE", "STEP_SPLIT",
           "dwell_move", "dwell_warp"]
