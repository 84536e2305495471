"""Moves tuned on the model (poise.motion.dwell) and the faster choice among moves
(poise.motion.reference: candidates compared half-settled, given up by their sway).

The dancer's crossing of ``poise bench control`` (target 14 after 13, the ``dancer_crossing``
fixture): every shaped or warped move left the ankle swinging (12 s at best, 3 T = 8.9 s).
Everything in simulated time against the model, or the in-process plant.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from poise.benchmarks.control import _one_target, band, config_for, reachable_targets
from poise.benchmarks.control_protocol import GOAL_PERIODS, SEED
from poise.controller.simulate import SimulatedLoop
from poise.models.actuation import split
from poise.motion.dwell import (
    CUT_AGREEMENT,
    ITERATIONS,
    MAX_CHANGE_PAUSE,
    MAX_CHANGE_SPLIT,
    PROGRESS_AFTER,
    SOLVED,
    _gauss_newton,
    dwell_move,
    dwell_warp,
)
from poise.motion.params import with_plan
from poise.motion.reference import (
    CHOOSING_FRACTION,
    Prediction,
    line_time,
    move_candidates,
    settle_time,
)
from poise.motion.shaping import ShapedMove, Shaper
from poise.motion.stability import Mode


@pytest.mark.parametrize("seed", range(4))
def test_a_dwell_move_goes_at_full_speed_holds_still_then_goes_on(seed):
    """Sampled every 0.5 ms: full speed (one actuator at its limit) to the split, still
    for the pause exactly there, full speed on to the goal; it lasts the line plus the
    pause."""
    rng = np.random.default_rng(seed)
    start, goal, speed = rng.uniform(-1, 1, 3), rng.uniform(-1, 1, 3), rng.uniform(0.2, 1, 3)
    line = ShapedMove(start, goal, speed, Shaper()).move_time
    at, pause = rng.uniform(0.2, 0.8), rng.uniform(0.2, 2.0)
    move = ShapedMove(start, goal, speed, Shaper(), Shaper(), dwell_warp(at, pause, line))
    assert move.duration == pytest.approx(line + pause, rel=1e-12)
    dt = 5e-4
    t = np.arange(0.0, move.duration + dt, dt)
    qa = np.array([move.at(x).copy() for x in t])
    rate = np.max(np.abs(np.diff(qa, axis=0)) / dt / speed, axis=1)  # per step, worst actuator
    mid = 0.5 * (t[1:] + t[:-1])
    going = (mid < at * line - dt) | ((mid > at * line + pause + dt) &
                                      (mid < move.duration - dt))
    holding = (mid > at * line + dt) & (mid < at * line + pause - dt)
    assert np.allclose(rate[going], 1.0, atol=1e-9)
    assert np.max(rate[holding]) == 0.0
    np.testing.assert_allclose(qa[holding.nonzero()[0][0]], start + at * (goal - start),
                               atol=1e-12)
    np.testing.assert_allclose(move.at(move.duration), goal, atol=1e-12)
    assert dwell_warp(at, 0.0, line)(0.3) == pytest.approx(0.3)  # no pause: the line
    assert dwell_warp(at, pause, line).pauses == [(at, pytest.approx(pause / (line + pause)))]


def _solve(residual, start):
    """``_gauss_newton`` from ``start``, counting the residual's evaluations."""
    calls = []

    def counted(x):
        calls.append(np.array(x))
        return residual(x)

    x, r = _gauss_newton(counted, np.asarray(start, float), residual(np.asarray(start, float)))
    return x, r, calls


def test_the_solver_goes_on_while_its_steps_are_cut_to_the_largest_change():
    """A solution far from the first guess (the dancer's 1.2 m lean on ``mixed15``: σ from
    0.5 to 0.88): each step is cut to the largest change and shrinks the residual by about a
    quarter (a linear residual here: a whole step would solve it), so it has not halved
    after :data:`PROGRESS_AFTER` iterations; the solver goes on and solves it to
    :data:`SOLVED` within :data:`ITERATIONS`, never moving σ or the pause by more than the
    largest change per step."""
    solution = np.array([0.93, 0.75])
    mix = np.array([[1.0, 0.3], [-0.2, 0.8]])

    def residual(x):
        d = x - solution
        return mix @ d

    start = np.array([0.5, 0.125])
    x, r, calls = _solve(residual, start)
    assert np.linalg.norm(r) < SOLVED and np.allclose(x, solution, atol=1e-3), (x, r)
    # three evaluations per iteration (two differences and the step), none halved
    assert len(calls) <= 3 * ITERATIONS
    accepted = calls[2::3]
    steps = np.abs(np.diff(np.vstack([start, *accepted]), axis=0))
    assert np.all(steps[:, 0] <= MAX_CHANGE_SPLIT + 1e-12)
    assert np.all(steps[:, 1] <= MAX_CHANGE_PAUSE + 1e-12)
    # it would have been given up: not halved after PROGRESS_AFTER iterations
    after = np.linalg.norm(residual(accepted[PROGRESS_AFTER - 1]))
    assert after > 0.5 * np.linalg.norm(residual(start))


def test_the_solver_gives_up_a_start_that_crawls_with_cut_steps():
    """Cut steps that shrink the residual far less than the linearisation predicted (the
    pause's residual has a slope 6x steeper where it is sampled than over a step, as a
    start crawling near a fold: 0.53 → 0.52 → 0.50 rad): not progress
    (:data:`CUT_AGREEMENT`), so the start is given up after :data:`PROGRESS_AFTER`
    iterations, two differences and a step each."""
    start, solution, wiggle = np.array([0.5, 0.125]), 1.9, 0.2 / (2 * np.pi)

    def residual(x):
        d, d0 = x[1] - solution, start[1] - solution  # a step of 0.2 returns to the phase
        return np.array([x[0] - 0.5, d + 5.0 * wiggle * np.sin((d - d0) / wiggle)])

    _, r, calls = _solve(residual, start)
    assert len(calls) == 3 * PROGRESS_AFTER, len(calls)
    steps = np.diff(np.vstack([start, *calls[2::3]])[:, 1])
    assert np.allclose(steps, MAX_CHANGE_PAUSE)  # each a cut step
    # each shrank it by 1/6 of the prediction: below the agreement asked for
    assert CUT_AGREEMENT > 1.0 / 6.0
    assert np.linalg.norm(r) == pytest.approx(np.linalg.norm(residual(start))
                                              - PROGRESS_AFTER * MAX_CHANGE_PAUSE)


def _predict(loop, q_start, params):
    def predict(candidate):
        return Prediction(loop.model, candidate, q_start, params, period=loop.period,
                          limits=loop.limits, effort_feedforward=True, shaper="auto",
                          stepper_factory=loop.step.stepper_factory)
    return predict


def test_the_dwell_move_leaves_the_crossing_still(dancer_crossing):
    """Solved on the model, the dwell move's response: the ankle held still at its goal
    (to 1 mrad) once the actuators stop, and the centre of mass within the tolerance from
    then on for two periods of the ankle's sway, while the unshaped straight line leaves it
    swinging by more than 0.1 m. It settles within 3 T of the goal's slowest mode."""
    loop, q_start, plan = dancer_crossing
    params = with_plan(loop.params, plan)
    predict = _predict(loop, q_start, params)
    tuned = dwell_move(loop.model, plan, q_start, predict,
                       line_time(plan, q_start, loop.model, loop.limits))
    assert tuned is not None and tuned.warp is not None and len(tuned.warp.pauses) == 1
    slow = plan.loop.slowest_mode()
    tol = loop.config.algorithm.tolerance
    sway = {}
    for name, candidate in (("dwell", tuned),
                            ("straight", replace(plan, shaper=Shaper(), start_shaper=Shaper()))):
        prediction = predict(candidate)
        prediction.run_move(0.1 * slow.period)
        end = len(prediction.rows)
        q, _ = prediction.state
        prediction.run_move(0.1 * slow.period + 2 * slow.period)
        after = prediction.rows[end:]
        sway[name] = (float(np.max(np.linalg.norm(after - plan.target, axis=1))),
                      abs(float(split(loop.model, q)[1][0] - split(loop.model, plan.q_goal)[1][0])))
        if name == "dwell":
            prediction.run(tol)
            settle = settle_time(prediction.rows, plan.target, tol, loop.period)
    assert sway["dwell"][1] < 1e-3 and sway["dwell"][0] < tol, sway
    assert sway["straight"][0] > 0.1, sway
    assert settle < GOAL_PERIODS * slow.period, settle


def test_a_dwell_move_is_solved_only_for_one_passive_coordinate():
    """The soft arm (several passive coordinates, a residual the two unknowns cannot cancel)
    gets none, without a single prediction."""
    soft = SimulatedLoop(config_for("soft_arm_stiff", "ff", "alg1"), seed=SEED)
    targets = reachable_targets(soft.model, soft.limits.qa_min, soft.limits.qa_max)
    tol = soft.config.algorithm.tolerance
    q14 = soft.step.make_plan(targets[14], soft.measured(), tol).q_goal
    plan15 = soft.step.make_plan(targets[15], q14, tol, soft.params)

    def never(candidate):
        raise AssertionError("predicted")

    assert soft.model.n - soft.model.m > 1
    assert dwell_move(soft.model, plan15, q14, never, 1.0) is None


def test_the_crossing_through_the_control_step_settles_within_3_periods():
    """The bench's own protocol on the in-process plant (sensor noise, its own simulator):
    held at target 13, target 14 commanded, then 13 again (the way back, from where the arm
    was left); each time the chosen move is a dwell move and the centre of mass settles
    within 3 T (the way there took 16.4 s before, 3 T = 8.7 s)."""
    loop = SimulatedLoop(config_for("dancer", "ff", "alg1"), seed=SEED)
    targets = reachable_targets(loop.model, loop.limits.qa_min, loop.limits.qa_max)
    eps = band(loop.model)
    loop.start()
    first = _one_target(loop, 13, np.asarray(targets[13]), eps)
    assert first.success
    for index in (14, 13):
        result = _one_target(loop, index, np.asarray(targets[index]), eps)
        plan = loop.step.plan
        assert plan.warp is not None and plan.warp.pauses, index  # a dwell move was chosen
        assert result.success and result.settle_s < result.goal_s, result


def test_a_candidate_is_given_up_only_when_it_cannot_settle_by_then(dancer_crossing):
    """``Prediction.run(give_up=g)``: False for a candidate that settles (run in full) later
    than ``g``, True for one that settles before, however far the sway bound prunes: the
    straight move, a warped one and the dwell move."""
    loop, q_start, plan = dancer_crossing
    params = with_plan(loop.params, plan)
    predict = _predict(loop, q_start, params)
    tol = loop.config.algorithm.tolerance
    warped = next(c for c in move_candidates(loop.model, plan, q_start) if c.warp is not None)
    tuned = dwell_move(loop.model, plan, q_start, predict,
                       line_time(plan, q_start, loop.model, loop.limits))
    for candidate in (plan, warped, tuned):
        full = predict(candidate)
        assert full.run(tol, CHOOSING_FRACTION)
        settle = settle_time(full.rows, plan.target, tol, loop.period)
        assert not predict(candidate).run(tol, CHOOSING_FRACTION, give_up=settle - 0.5)
        assert predict(candidate).run(tol, CHOOSING_FRACTION, give_up=settle + 0.05)


@pytest.mark.parametrize("zeta", [0.05, 0.4, 1.0, 2.5])
def test_a_modes_decay_rate_is_its_fastest_pole(zeta):
    """``Mode.decay_rate`` = max(−Re λ) of ``λ² + 2ζωλ + ω² = 0``."""
    omega = 1.7
    poles = np.roots([1.0, 2 * zeta * omega, omega**2])
    assert Mode(omega, zeta).decay_rate == pytest.approx(float(np.max(-poles.real)),
                                                         rel=1e-6)
    assert math.isfinite(Mode(omega, zeta).decay_rate)


def test_the_summary_says_where_and_how_long_a_dwell_move_holds_still(dancer_crossing,
                                                                      crossing_step):
    """``move_summary``'s ``pause`` and the summary's line: where along the line and, once
    the move is made, for how long."""
    from poise.cli.run_cmd import move_lines

    loop, q_start, plan = dancer_crossing
    lim = loop.limits
    line = line_time(plan, q_start, loop.model, lim)
    chosen = replace(plan, shaper=Shaper(), start_shaper=Shaper(), speed=1.0,
                     warp=dwell_warp(0.6, 1.1, line), settle_s=4.3)
    step = crossing_step
    step.adopt(chosen)
    assert step.move_summary["pause"] == {"at": 0.6, "s": None}  # not made yet
    step.update(q_start, with_plan(loop.params, chosen))
    move = step.move_summary
    assert move["pause"]["at"] == 0.6 and move["pause"]["s"] == pytest.approx(1.1)
    assert move["duration_s"] == pytest.approx(line + 1.1)
    (text,) = move_lines(move)
    assert "holds still for 1.1 s at 60 % of the way" in text
    assert "slowed where" not in text and "settles 4.3 s" in text
