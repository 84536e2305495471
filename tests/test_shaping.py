"""Input shaping of the moves to a planned goal (issue 14 §3): the shapers cancel the modelled
mode, a shaped move stays within the speeds and ends at its goal, and the simulated arm rings
far less after a shaped move than after the same move unshaped."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from poise.controller.config import ConfigError, load_config
from poise.controller.simulate import SimulatedLoop
from poise.examples import resolve_config
from poise.motion.shaping import ShapedMove, Shaper, shaper_for
from poise.motion.stability import Mode

modes = st.builds(Mode, st.floats(0.3, 60.0), st.floats(0.0, 0.6))


def residual(shaper: Shaper, mode: Mode) -> float:
    """Residual vibration of ``mode`` after the impulses, relative to one unit impulse:
    ``|Σ A_i exp((ζω + iω_d) t_i)| / exp(ζω t_last)`` (Singer and Seering)."""
    s = complex(mode.zeta * mode.omega, mode.damped_omega)
    total = sum(a * np.exp(s * t) for a, t in zip(shaper.amplitudes, shaper.times,
                                                   strict=True))
    return abs(total) / math.exp(mode.zeta * mode.omega * shaper.times[-1])


@settings(max_examples=200, deadline=None)
@given(modes)
def test_zv_and_zvd_cancel_the_modelled_mode_and_zvd_tolerates_a_wrong_frequency(mode):
    for shaper in (Shaper.zv(mode), Shaper.zvd(mode), Shaper.zvdd(mode)):
        assert abs(sum(shaper.amplitudes) - 1) < 1e-12 and min(shaper.amplitudes) > 0
        assert residual(shaper, mode) < 1e-9
    # ZVD, ZVDD: zero slope (and curvature) in ω, so a 10 % or 20 % error leaves far less
    if mode.zeta < 0.3:
        wrong = Mode(1.1 * mode.omega, mode.zeta)
        assert residual(Shaper.zvd(mode), wrong) < 0.5 * residual(Shaper.zv(mode), wrong)
        assert residual(Shaper.zvd(mode), wrong) < 0.03
        wrong = Mode(1.2 * mode.omega, mode.zeta)
        assert residual(Shaper.zvdd(mode), wrong) < 0.5 * residual(Shaper.zvd(mode), wrong)
        assert residual(Shaper.zvdd(mode), wrong) < 0.03


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-1.0, 1.0), min_size=4, max_size=4), st.floats(0.05, 2.0),
       modes, modes)
def test_shaped_move_ends_at_its_goal_within_the_speeds_and_never_reverses(ends, speed, m1,
                                                                           m2):
    start, goal = np.array(ends[:2]), np.array(ends[2:])
    speeds = np.array([speed, 2 * speed])
    move = ShapedMove(start, goal, speeds, Shaper.zvdd(m2), Shaper.zv(m1).then(Shaper.zvd(m2)))
    dt = min(1e-3, move.duration / 2000) if move.duration > 0 else 1e-3
    t = np.arange(0.0, move.duration + 10 * dt, dt)
    path = np.array([move.at(x).copy() for x in t])
    assert np.allclose(path[0], start, atol=1e-12)
    assert np.allclose(path[-1], goal, atol=1e-12)
    fraction = np.array([move.fraction(x) for x in t])
    assert np.all(np.diff(fraction) >= -1e-12)  # never back
    velocity = np.abs(np.diff(path, axis=0)) / dt
    assert np.all(velocity <= speeds * (1 + 1e-9) + 1e-12)
    # the line itself: at the unshaped speed the slowest actuator needs move_time
    assert move.duration >= move.move_time - 1e-12


def test_the_identity_shaper_is_a_plain_ramp_and_shaper_for_skips_damped_modes():
    move = ShapedMove(np.zeros(1), np.ones(1), np.array([0.5]), Shaper())
    assert move.duration == 2.0 and move.at(1.0)[0] == 0.5
    assert shaper_for([Mode(3.0, 0.9), Mode(9.0, 1.0)]) == Shaper()
    shaped = shaper_for([Mode(3.0, 0.05), Mode(5.0, 0.8), Mode(30.0, 0.1), Mode(90.0, 0.01)])
    assert len(shaped.times) == 4 * 2  # ZVDD on 3 rad/s, ZV on 30 rad/s; 90 rad/s left
    assert shaped.duration == pytest.approx(3 * math.pi / Mode(3.0, 0.05).damped_omega
                                            + math.pi / Mode(30.0, 0.1).damped_omega)
    # a slow, moderately damped mode: a ZV shaper, half a damped period
    slow = Mode(0.54, 0.4)
    assert shaper_for([slow, Mode(9.0, 0.9)]) == Shaper.zv(slow)


def test_a_shaped_move_leaves_the_soft_arm_still_an_unshaped_one_rings():
    """soft_arm_stiff between two targets, feed-forward: the sway left after the move, with
    the planned shapers and with none."""
    left = {}
    for shaped in (True, False):
        config = load_config(resolve_config("soft_arm_stiff"), {
            "algorithm.target": ([0.2, -0.9], "test"), "loop.mode": ("ff", "test")})
        loop = SimulatedLoop(config, seed=2, noise=False)
        loop.start()
        loop.run(6.0)
        loop.set_target(np.array([0.05, -0.97]))
        if not shaped:
            loop.step.plan = replace(loop.step.plan, shaper=Shaper(), start_shaper=Shaper())
        loop.cycle()
        move = loop.step.move
        assert move is not None
        loop.run(move.duration)
        after = loop.run(4.0)  # the sway left after the move
        left[shaped] = float(after.max())
        assert loop.step.goal is None
    assert left[True] < 1.5e-3, left  # within the band, at once
    assert left[True] < 0.2 * left[False], left


def test_the_configured_shaper_kind_shapes_the_slowest_mode_and_others_get_zv():
    lightly, moderately, fast = Mode(3.0, 0.05), Mode(2.0, 0.3), Mode(30.0, 0.1)
    assert shaper_for([lightly, fast], "off") == Shaper()
    assert shaper_for([lightly, fast], "zv") == Shaper.zv(lightly).then(Shaper.zv(fast))
    assert shaper_for([moderately], "zvd") == Shaper.zvd(moderately)
    assert shaper_for([moderately, fast], "zvdd") == \
        Shaper.zvdd(moderately).then(Shaper.zv(fast))
    # auto: by the damping (ZVDD below ZETA_SHAPED, else ZV)
    assert shaper_for([moderately], "auto") == Shaper.zv(moderately)
    assert shaper_for([lightly], "auto") == Shaper.zvdd(lightly)
    with pytest.raises(ValueError, match="shaper 'zvddd': must be one of auto, zv, zvd, "
                                         "zvdd, off"):
        shaper_for([lightly], "zvddd")


def test_a_bad_shaper_in_a_configuration_is_refused_naming_key_and_choices():
    with pytest.raises(ConfigError, match=r"--set loop.shaper=robust \(loop.shaper\) = "
                                          r"'robust': must be one of 'auto', 'zv', 'zvd', "
                                          r"'zvdd', 'off'"):
        load_config(None, {"loop.shaper": ("robust", "--set loop.shaper=robust")})
    assert load_config(resolve_config("dancer")).loop.shaper == "zvdd"
    assert load_config(None).loop.shaper == "auto"


def test_zvdd_leaves_the_dancer_still_after_a_move_whose_sway_frequency_changes():
    """The dancer from a deep lean to a shallower one (its ankle's sway 1.37 times faster at
    one end than along the way), feed-forward: the sway left in the 6 s after the move with
    ZV shapers at the ends (``auto`` gives ZV: ζ ≈ 0.15-0.2) and with ZVDD."""
    left = {}
    for kind in ("zv", "zvdd"):
        config = load_config(resolve_config("dancer"), {
            "algorithm.target": ([-0.874, 0.421], "test"), "loop.mode": ("ff", "test"),
            "loop.shaper": (kind, "test"), "loop.choose_move": (False, "test")})
        loop = SimulatedLoop(config, seed=2, noise=False)
        loop.start()
        loop.run(20.0)
        loop.set_target(np.array([-0.566, 0.718]))
        loop.cycle()
        move = loop.step.move
        assert move is not None and len(move.shaper.times) == (2 if kind == "zv" else 4)
        loop.run(move.duration)
        left[kind] = float(loop.run(6.0).max())
    assert left["zvdd"] < 0.25 * left["zv"], left
    assert left["zvdd"] < 0.01, left
