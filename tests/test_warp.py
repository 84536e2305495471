"""Moves slowed where the arm's equilibrium moves fast (poise.motion.warp, shaping.Warp).

The dancer's crossing of ``poise bench control`` (target 14 after 13): its stance leg swings
from 0.81 to −0.79 rad, most of it within a second of the straight line's middle, where the
ankle's stiffness nearly vanishes. Everything in simulated time against the model.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from poise.benchmarks.control import band, config_for, reachable_targets
from poise.benchmarks.control_protocol import SEED
from poise.controller.simulate import SimulatedLoop
from poise.models.actuation import split
from poise.models.base import FloatArray
from poise.motion.params import with_plan
from poise.motion.planner import TargetPlan, approach_move, approach_speed
from poise.motion.reference import move_candidates, predicted_response, settle_time
from poise.motion.shaping import ShapedMove, Shaper, Warp
from poise.motion.stability import Mode
from poise.motion.warp import UNEVEN, equilibrium_path, equilibrium_warp


def test_a_warp_maps_the_shaped_progress_piecewise_linearly_onto_the_line():
    warp = Warp((0.0, 0.5, 1.0), (0.0, 0.2, 1.0))
    assert warp(0.0) == 0.0 and warp(1.0) == 1.0
    assert warp(0.25) == pytest.approx(0.1) and warp(0.75) == pytest.approx(0.6)
    assert warp(-0.1) == 0.0 and warp(1.1) == 1.0
    assert warp.steepest == pytest.approx(1.6)  # 0.8 of the line in 0.5 of the progress
    assert Warp().steepest == 1.0 and Warp()(0.3) == pytest.approx(0.3)


@pytest.mark.parametrize("seed", range(4))
def test_a_warped_move_stays_on_the_line_within_the_speed_and_ends_at_the_goal(seed):
    """Sampled every 0.5 ms: on the straight line, monotone, no actuator faster than its
    speed, at the goal when the move ends; the same move unwarped is shorter by exactly the
    warp's steepest slope (its top speed is the same)."""
    rng = np.random.default_rng(seed)
    start, goal = rng.uniform(-1, 1, 3), rng.uniform(-1, 1, 3)
    speed = rng.uniform(0.2, 1.0, 3)
    f = np.concatenate([[0.0], np.cumsum(rng.uniform(0.1, 1.0, 12))])
    warp = Warp(tuple((f / f[-1]).tolist()), tuple(np.linspace(0, 1, 13).tolist()))
    shaper = Shaper.zvd(Mode(omega=2.0, zeta=0.1))
    start_shaper = Shaper.zv(Mode(omega=1.3, zeta=0.2))
    plain = ShapedMove(start, goal, speed, shaper, start_shaper)
    move = ShapedMove(start, goal, speed, shaper, start_shaper, warp)
    assert move.move_time == pytest.approx(plain.move_time * warp.steepest, rel=1e-12)
    dt = 5e-4
    t = np.arange(0.0, move.duration + 2 * dt, dt)
    qa = np.array([move.at(x).copy() for x in t])
    progress = (qa - start) @ (goal - start) / float((goal - start) @ (goal - start))
    off_line = qa - start - np.outer(progress, goal - start)
    assert np.max(np.abs(off_line)) < 1e-12
    assert np.all(np.diff(progress) >= -1e-15) and progress[0] == 0.0
    assert np.max(np.abs(np.diff(qa, axis=0)) / dt / speed) <= 1.0 + 1e-9
    np.testing.assert_allclose(move.at(move.duration), goal, atol=1e-12)


def _line_speed(loop: SimulatedLoop, q_start: FloatArray, plan: TargetPlan,
                move: ShapedMove) -> tuple[float, float, float]:
    """The held task value's mean speed along the straight line at the allowed speed, its
    peak speed there and its peak speed along ``move`` [m/s], from statics solved densely
    along each (independently of the warp's own samples)."""
    path = equilibrium_path(loop.model, q_start, plan.qa_goal, samples=801)
    assert path is not None
    seg = np.linalg.norm(np.diff(path, axis=0), axis=1)
    line_time = move.move_time / (move.warp.steepest if move.warp is not None else 1.0)
    mean, peak_line = seg.sum() / line_time, seg.max() * 800 / line_time
    # along the move: the progress at fine times, mapped onto the dense path
    t = np.linspace(0.0, move.duration, 4001)
    s = np.array([move.fraction(x) for x in t])
    x = np.array([np.interp(s, np.linspace(0, 1, 801), path[:, k])
                  for k in range(path.shape[1])]).T
    peak_move = float(np.max(np.linalg.norm(np.diff(x, axis=0), axis=1) / np.diff(t)))
    return float(mean), float(peak_line), peak_move


@pytest.mark.parametrize("cap", [0.5, 1.0])
def test_under_the_warp_the_equilibrium_never_moves_faster_than_the_cap(cap, dancer_crossing):
    """Along the straight line the dancer's held centre of mass peaks at more than twice
    its mean speed (crossing upright); along the warped move it never exceeds ``cap`` × that
    mean (to 6 %: the warp is linear between its 81 samples; 801 here)."""
    loop, q_start, plan = dancer_crossing
    lim = loop.limits
    qa = split(loop.model, q_start)[0]
    warp = equilibrium_warp(loop.model, q_start, plan.qa_goal, cap)
    assert warp is not None
    bare = replace(plan, shaper=Shaper(), start_shaper=Shaper())
    straight = approach_move(bare, qa, lim.qa_min, lim.qa_max, lim.qa_rate)
    warped = approach_move(replace(bare, warp=warp), qa, lim.qa_min, lim.qa_max, lim.qa_rate)
    mean, peak_line, _ = _line_speed(loop, q_start, plan, straight)
    assert peak_line > UNEVEN * mean
    _, _, peak_warped = _line_speed(loop, q_start, plan, warped)
    assert peak_warped <= 1.06 * cap * mean, (peak_warped, cap * mean)
    speed = approach_speed(lim.qa_min, lim.qa_max, lim.qa_rate)
    dt = 1e-3
    steps = np.array([warped.at(t).copy() for t in np.arange(0, warped.duration, dt)])
    assert np.max(np.abs(np.diff(steps, axis=0)) / dt / speed) <= 1.0 + 1e-9


def test_slowed_where_the_equilibrium_moves_fast_the_crossing_settles_sooner(dancer_crossing):
    """The model's response: with the plan's own shapers, the warped move (cap 0.5, 0.7 of
    the speed) ends longer after the command, yet its sway after the move is a fourteenth of
    the straight move's (0.15 → 0.011 m) and it settles 5 s sooner (22.4 s → 17.3 s here)."""
    loop, q_start, plan = dancer_crossing
    params = with_plan(loop.params, plan)
    tol = band(loop.model)
    qa = split(loop.model, q_start)[0]
    lim = loop.limits
    out = {}
    for name, candidate in (
            ("straight", plan),
            ("warped", replace(plan, speed=0.7, warp=equilibrium_warp(
                loop.model, q_start, plan.qa_goal, 0.5)))):
        rows = predicted_response(loop.model, candidate, q_start, params, tolerance=tol,
                                  period=loop.period, limits=lim, effort_feedforward=True,
                                  shaper="auto", stepper_factory=loop.step.stepper_factory)
        move = approach_move(candidate, qa, lim.qa_min, lim.qa_max, lim.qa_rate)
        after = rows[int(np.ceil(move.duration / loop.period)):]
        out[name] = (settle_time(rows, plan.target, tol, loop.period), move.duration,
                     float(np.max(np.linalg.norm(after - plan.target, axis=1))))
    (s_straight, d_straight, sway_straight), (s_warped, d_warped, sway_warped) = \
        out["straight"], out["warped"]
    assert d_warped > d_straight
    assert sway_warped < 0.1 * sway_straight, out
    assert s_warped < s_straight - 4.0, out


def test_warped_moves_are_tried_only_where_the_equilibrium_moves_unevenly(dancer_crossing):
    """The crossing's candidates include warped moves (each cap at each warp speed, with
    each shaper); a soft arm's largest move (even equilibrium) has none."""
    from poise.motion.reference import MOVE_SHAPERS, MOVE_SPEEDS, MOVE_WARPS, WARP_SPEEDS

    loop, q_start, plan = dancer_crossing
    tried = move_candidates(loop.model, plan, q_start)
    warped = [c for c in tried if c.warp is not None]
    assert len(warped) == len(MOVE_WARPS) * len(WARP_SPEEDS) * len(MOVE_SHAPERS)
    assert len(tried) - len(warped) <= 1 + len(MOVE_SHAPERS) * len(MOVE_SPEEDS)
    soft = SimulatedLoop(config_for("soft_arm_stiff", "ff", "alg1"), seed=SEED)
    targets = reachable_targets(soft.model, soft.limits.qa_min, soft.limits.qa_max)
    tol = soft.config.algorithm.tolerance
    q14 = soft.step.make_plan(targets[14], soft.measured(), tol).q_goal
    plan15 = soft.step.make_plan(targets[15], q14, tol, soft.params)
    assert all(c.warp is None for c in move_candidates(soft.model, plan15, q14))
    assert equilibrium_warp(soft.model, q14, plan15.qa_goal, 0.5) is None
    with pytest.raises(ValueError, match="cap"):
        equilibrium_warp(loop.model, q_start, plan.qa_goal, 0.0)


def test_the_summary_describes_the_warped_move_and_its_predicted_settling(dancer_crossing,
                                                                          crossing_step):
    """``ControlStep.move_summary`` (the ``move`` of ``poise run``'s JSON summary) and the
    summary's line: the plan's speed, shaper, the warp's slowdown, the move's duration once
    made and the settling time the plan predicted."""
    from poise.cli.run_cmd import move_lines

    loop, q_start, plan = dancer_crossing
    warp = equilibrium_warp(loop.model, q_start, plan.qa_goal, 0.5)
    assert warp is not None
    chosen = replace(plan, speed=0.7, warp=warp, settle_s=12.7)
    step = crossing_step
    step.adopt(chosen)
    before = step.move_summary
    assert before is not None and before["duration_s"] is None  # not made yet
    step.update(q_start, with_plan(loop.params, chosen))
    move = step.move_summary
    assert move is not None and step.move is not None
    assert move["speed"] == 0.7 and move["slowdown"] == pytest.approx(warp.steepest)
    assert move["shaper_s"] == list(plan.shaper.times)
    assert move["duration_s"] == pytest.approx(step.move.duration)
    assert move["predicted_settle_s"] == 12.7
    (line,) = move_lines(move)
    assert f"{warp.steepest:.3g} × longer" in line and "0.7 × the speed" in line
    assert "settles 12.7 s" in line
    assert move_lines(None) == []
    step.adopt(replace(plan, approach=False))
    assert step.move_summary is None
