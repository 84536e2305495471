"""The plant's sway after a shaped move, the detuning of its modes it shows, and moves chosen
to allow for it (issue 35, :mod:`poise.motion.sway`)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from poise.benchmarks.control import config_for, reachable_targets, run_case
from poise.controller.simulate import SimulatedLoop
from poise.motion import sway as sway_module
from poise.motion.shaping import Shaper
from poise.motion.stability import Mode
from poise.motion.sway import (
    MAX_DETUNING,
    MoveSway,
    detuning_for,
    first_order,
    fitted_sway,
    move_shaper,
    residual_vibration,
    sway_settle,
    worst_residual,
)
from poise.sim.named import write_named

PERIOD = 0.004
TOL = 2e-3
OMEGA, ZETA = 7.8, 0.05  # soft_arm_stiff's slowest structural mode


@pytest.mark.parametrize("ratio", [0.9, 1.0, 1.037, 1.1, 1.25])
def test_residual_vibration_is_the_textbook_one_for_an_undamped_mode(ratio):
    """Singer and Seering: ZV leaves |cos(π r / 2)| of a step on a mode at r × its design
    frequency, ZVD its square, ZV three times (ZVDD) its cube; no shaper leaves all of it."""
    mode = Mode(OMEGA, 0.0)
    zv, zvd = Shaper.zv(mode), Shaper.zvd(mode)
    zvdd = zv.then(zv).then(zv)
    expected = abs(math.cos(0.5 * math.pi * ratio))
    assert residual_vibration(zv, OMEGA * ratio, 0.0) == pytest.approx(expected, abs=1e-12)
    assert residual_vibration(zvd, OMEGA * ratio, 0.0) == pytest.approx(expected ** 2,
                                                                        abs=1e-12)
    assert residual_vibration(zvdd, OMEGA * ratio, 0.0) == pytest.approx(expected ** 3,
                                                                         abs=1e-12)
    assert residual_vibration(Shaper(), OMEGA * ratio, 0.0) == pytest.approx(1.0)


def test_a_damped_shaper_cancels_its_own_mode_and_is_robust_in_its_order():
    """On the damped mode it was made for each shaper leaves nothing; off it, the more robust
    shaper leaves less, and the worst over ±ε grows with ε."""
    mode = Mode(OMEGA, ZETA)
    zv, zvd = Shaper.zv(mode), Shaper.zvd(mode)
    for shaper in (zv, zvd):
        assert residual_vibration(shaper, OMEGA, ZETA) < 1e-12
    worst = [worst_residual(zv, mode, e) for e in (0.01, 0.03, 0.1)]
    assert worst == sorted(worst) and worst[0] > 0
    for e in (0.01, 0.03, 0.1):
        assert worst_residual(zvd, mode, e) < worst_residual(zv, mode, e)


@pytest.mark.parametrize("ratio", [1e-3, 0.0145, 0.05, 0.2])
def test_detuning_for_inverts_the_worst_residual(ratio):
    mode = Mode(OMEGA, ZETA)
    zv = Shaper.zv(mode)
    eps = detuning_for(zv, mode, ratio)
    assert 0 < eps < MAX_DETUNING
    assert worst_residual(zv, mode, eps) == pytest.approx(ratio, rel=1e-6)
    assert worst_residual(zv, mode, 0.99 * eps) < ratio  # the least such detuning


def test_detuning_for_at_its_ends():
    mode = Mode(OMEGA, ZETA)
    zv = Shaper.zv(mode)
    assert detuning_for(zv, mode, 0.0) == 0.0
    assert detuning_for(Shaper(), mode, 0.5) == 0.0  # unshaped: the mode explains it
    assert detuning_for(zv, mode, 0.99) == MAX_DETUNING  # no detuning explains it


def test_sway_settle_charges_a_fragile_shaper_the_decay_of_its_sway():
    """A 0.4 m move on a plant 1.5 % off: a ZV shaper leaves ~9 mm, which decays into 2 mm
    at ζω in ln(R / tol) / ζω; a ZVD one leaves ~0.2 mm and keeps the model's settling."""
    mode = Mode(OMEGA, ZETA)
    zv, zvd = Shaper.zv(mode), Shaper.zvd(mode)
    distance, detuning, end = 0.4, 0.015, 0.7
    left = distance * worst_residual(zv, mode, detuning)
    assert 5e-3 < left < 2e-2
    expected = end + math.log(left / TOL) / (ZETA * OMEGA)
    assert sway_settle(0.8, end, distance, zv, mode, detuning, TOL) == pytest.approx(expected)
    assert sway_settle(1.2, end + 0.4, distance, zvd, mode, detuning, TOL) == 1.2
    assert sway_settle(0.8, end, distance, zv, mode, 0.0, TOL) == 0.8  # the model's


def _plan(mode: Mode, shaper: Shaper) -> SimpleNamespace:
    return SimpleNamespace(loop=SimpleNamespace(slowest_mode=lambda: mode),
                           slowest_mode=lambda: mode, shaper=shaper,
                           approach=True)


def _move_rows(distance: float) -> np.ndarray:
    """A predicted response's first and last rows: a straight move of ``distance`` in x."""
    return np.array([[0.0, 0.0], [distance, 0.0]])


def _sway(seconds: float, amplitude: float, omega: float) -> np.ndarray:
    """A decaying 2-D sway ``a e^{−ζωt} (cos ωt, 0.3 sin ωt)`` per cycle [m]."""
    t = np.arange(round(seconds / PERIOD)) * PERIOD
    envelope = amplitude * np.exp(-ZETA * omega * t)
    return np.column_stack([envelope * np.cos(omega * t), 0.3 * envelope * np.sin(omega * t)])


def test_fitted_sway_is_the_amplitude_of_the_mode_whatever_feedback_adds():
    """The fit takes a 5 mm sway of the mode (3 % off it), under a static offset, the
    integrator's approach (an exponential over the window) and sensor noise of ±1 mm, within
    15 %; the approach and the noise alone leave well under the floor."""
    mode = Mode(OMEGA, ZETA)
    n = round(2 * 2 * math.pi / mode.damped_omega / PERIOD)
    t = np.arange(n) * PERIOD
    rng = np.random.default_rng(7)
    approach = np.column_stack([4e-3 * np.exp(-0.66 * t) + 1e-3, -2e-3 * np.exp(-0.66 * t)])
    noise = rng.uniform(-1e-3, 1e-3, size=(n, 2))
    swaying = _sway(n * PERIOD, 5e-3, OMEGA * 1.03)
    assert fitted_sway(swaying + approach + noise, PERIOD, mode) == pytest.approx(
        math.hypot(5e-3, 0.0), rel=0.15)
    assert fitted_sway(approach + noise, PERIOD, mode) < 0.25 * TOL


def _cycle(watch: MoveSway, error: np.ndarray) -> bool:
    """One cycle as the step makes it: the error observed, then (after the setpoint went
    out, :meth:`ControlStep.look_ahead <poise.motion.step.ControlStep.look_ahead>`) a closed
    window fitted; True when the detuning changed."""
    watch.observe(error)
    return watch.conclude()


def test_the_window_is_fitted_after_the_cycle_not_in_it():
    """``observe`` only copies the error; the window that closes is fitted by ``conclude``
    (the step calls it after the setpoint went out), once."""
    mode = Mode(OMEGA, ZETA)
    watch = MoveSway(PERIOD, TOL)
    watch.begin(_plan(mode, Shaper.zv(mode)), _move_rows(0.4))
    rows = _sway(5.0, 6e-3, OMEGA * 1.03)
    closed = [i for i, e in enumerate(rows) if watch.observe(e)]
    assert len(closed) == 1 and watch.measured == 0 and watch.detuning == 0.0
    assert watch.conclude() and watch.measured == 1 and watch.detuning > 0.0
    assert not watch.conclude() and watch.measured == 1


def test_move_sway_infers_the_detuning_that_explains_the_sway():
    """A ZV-shaped 0.4 m move (no unshaped sway predicted: the distance stands for it)
    leaving 6 mm: the detuning found is the one at which ZV leaves the measured sway of
    0.4 m, found when the window closes (once per move); the run's detuning is the mean over
    the moves."""
    mode = Mode(OMEGA, ZETA)
    zv = Shaper.zv(mode)
    watch = MoveSway(PERIOD, TOL)
    watch.begin(_plan(mode, zv), _move_rows(0.4))
    found = [i for i, e in enumerate(_sway(5.0, 6e-3, OMEGA * 1.03)) if _cycle(watch, e)]
    window = math.ceil(sway_module.WINDOW_PERIODS * 2 * math.pi / mode.damped_omega / PERIOD)
    assert found == [window - 1]  # one window per move
    swing, ratio = watch.last
    assert swing == pytest.approx(6e-3, rel=0.15) and ratio == pytest.approx(swing / 0.4)
    assert worst_residual(zv, mode, watch.detuning) == pytest.approx(ratio, rel=1e-6)
    assert 0.005 < watch.detuning < 0.03
    # a later move that leaves less: the mean of the two
    first = watch.detuning
    watch.begin(_plan(mode, zv), _move_rows(0.4))
    assert any(_cycle(watch, e) for e in _sway(5.0, 3e-3, OMEGA * 1.015))
    second = detuning_for(zv, mode, watch.last[1])
    assert second < first and watch.measured == 2
    assert watch.detuning == pytest.approx(0.5 * (first + second))


def test_a_move_that_leaves_only_noise_shows_a_small_detuning_a_disturbed_window_none():
    """Sensor noise of ±2 tol after a 0.4 m ZV move fits to a sway far below the tolerance:
    evidence of no detuning (0, counted in the mean). A window disturbed half-way (a
    correction), a plan with no predicted response and a move that hardly excites the mode
    are not evidence."""
    mode = Mode(OMEGA, ZETA)
    zv = Shaper.zv(mode)
    rng = np.random.default_rng(3)
    watch = MoveSway(PERIOD, TOL)
    watch.begin(_plan(mode, zv), _move_rows(0.4))
    noise = rng.uniform(-2 * TOL, 2 * TOL, size=(1000, 2))
    for e in noise:
        _cycle(watch, e)
    assert watch.measured == 1 and watch.last[0] < 0.5 * TOL and watch.detuning == 0.0
    watch.begin(_plan(mode, zv), _move_rows(0.4))  # a move that sways: the mean of 0 and it
    assert any(_cycle(watch, e) for e in _sway(5.0, 6e-3, OMEGA * 1.03))
    small = watch.detuning
    assert small == pytest.approx(0.5 * detuning_for(zv, mode, watch.last[1]))
    watch.begin(_plan(mode, zv), _move_rows(0.5 * sway_module.EXCITED * TOL))
    assert not any(_cycle(watch, e) for e in _sway(5.0, 6e-3, OMEGA))
    assert watch.measured == 3 and watch.detuning == small  # measured, not evidence
    watch.begin(_plan(mode, zv), _move_rows(0.4))  # a correction half-way: nothing measured
    rows = _sway(5.0, 6e-3, OMEGA * 1.03)
    for e in rows[:50]:
        _cycle(watch, e)
    watch.interrupt()
    assert not any(_cycle(watch, e) for e in rows[50:]) and watch.measured == 3
    watch.begin(_plan(mode, zv), None)  # no predicted response to measure against
    assert not any(_cycle(watch, e) for e in rows) and watch.measured == 3
    assert watch.detuning == small


def test_on_the_exact_model_nothing_sways_and_no_move_changes():
    """The step's sway watch on the exact model: no evidence over a chain of targets, so
    every move is chosen as before (detuning 0)."""
    out = run_case("soft_arm_stiff", "fb", "alg1", count=6)
    assert out["detuning"] == 0.0 and out["success_pct"] == 100.0


def test_a_plant_off_its_model_is_learnt_from_and_its_next_move_settles_in_time(tmp_path,
                                                                                 monkeypatch):
    """``soft_arm_stiff`` on ``mixed15`` (bench control targets 0–13): a move chosen ZV on the
    model leaves the plant swaying (target 3: 5 mm, 4 % of the 0.12 m the same move leaves
    unshaped on the model); from then on the moves allow for the mean detuning (2–5 %).
    Target 13, a 0.44 m move that the model's choice (ZV)
    left swaying 7 mm and settling after 4.7 s, 2 s past its 3 T goal, is moved with a
    ZVD-shaped move and settles within 3 T of the end of the fastest move. Without the
    evidence (no move excites enough to count) the same chain moves it ZV again and
    misses."""
    path = write_named("soft_arm_stiff", "mixed15", tmp_path)
    loop = SimulatedLoop(config_for("soft_arm_stiff", "fb", "alg1", path))
    truth = loop.plant.physical
    targets = reachable_targets(truth, loop.limits.qa_min, loop.limits.qa_max, 14)
    learnt = run_case("soft_arm_stiff", "fb", "alg1", targets, plant=path)
    assert 0.01 < learnt["detuning"] < 0.08
    last = learnt["targets"][-1]
    assert last["success"] and last["settle_s"] <= last["goal_s"] + last["move_s"]
    monkeypatch.setattr(sway_module, "EXCITED", math.inf)
    blind = run_case("soft_arm_stiff", "fb", "alg1", targets, plant=path)
    assert blind["detuning"] == 0.0
    missed = blind["targets"][-1]
    assert missed["settle_s"] is None or missed["settle_s"] > missed["goal_s"] + missed["move_s"]


def test_a_move_that_holds_still_part_way_counts_as_zv_shaped():
    """A dwell move (:mod:`poise.motion.dwell`) is unshaped; its pause, timed on the model,
    cancels the mode as a ZV shaper does, and so it is charged (and measured) as one."""
    mode = Mode(OMEGA, ZETA)
    dwell = SimpleNamespace(shaper=Shaper(), warp=SimpleNamespace(pauses=[(0.59, 0.3)]))
    straight = SimpleNamespace(shaper=Shaper.zvd(mode), warp=None)
    assert move_shaper(dwell, mode) == Shaper.zv(mode)
    assert move_shaper(straight, mode) == straight.shaper


def test_only_a_first_order_shaper_s_sway_is_taken_for_detuning():
    """A ZVD-shaped move that leaves a sway is no evidence of detuning (it leaves 0.02 % at
    1 %): its sway is what no shaper of one mode cancels, and a more robust one would not
    help. A ZV-shaped one, and a dwell move, are."""
    mode = Mode(OMEGA, ZETA)
    assert first_order(Shaper.zv(mode), mode) and not first_order(Shaper.zvd(mode), mode)
    watch = MoveSway(PERIOD, TOL)
    watch.begin(_plan(mode, Shaper.zvd(mode)), _move_rows(0.4))
    assert not any(_cycle(watch, e) for e in _sway(5.0, 6e-3, OMEGA * 1.03))
    assert watch.measured == 1 and watch.last[0] > 4e-3 and watch.detuning == 0.0


def test_the_real_time_parent_takes_the_detuning_from_its_child_s_event():
    """The child's ``move_sway`` event (``info``) reaches the parent's mirror, whose plans
    (``poise.controller.realtime.planning``) allow for its detuning."""
    from poise.api.bus import Event
    from poise.controller.realtime.messages import EventBatch
    from poise.controller.realtime.mirror import ChildMirror

    mirror = ChildMirror()
    assert mirror.detuning == 0.0
    mirror._on_events(EventBatch([Event(1.0, "info", {"code": "static_correction"}),
                                  Event(2.0, "info", {"code": "move_sway", "detuning": 0.012,
                                                      "sway": 5e-3, "ratio": 0.015})]))
    assert mirror.detuning == 0.012


def test_a_sway_no_detuning_explains_is_no_evidence():
    """A sway larger than a ZV shaper leaves even at MAX_DETUNING (here 80 % of the move) is
    not the frequency's: the detuning stays where it was."""
    mode = Mode(OMEGA, ZETA)
    watch = MoveSway(PERIOD, TOL)
    watch.begin(_plan(mode, Shaper.zv(mode)), _move_rows(0.1))
    assert not any(_cycle(watch, e) for e in _sway(5.0, 0.08, OMEGA))
    assert watch.last[1] > worst_residual(Shaper.zv(mode), mode, MAX_DETUNING)
    assert watch.detuning == 0.0


def test_a_mode_s_damped_period_is_the_time_between_its_swings():
    """``Mode.damped_period`` = 2π/ω_d, the undamped period for a mode that does not swing:
    the windows of the ring watch, the sway watch and re-targeting."""
    assert Mode(OMEGA, ZETA).damped_period == pytest.approx(
        2 * math.pi / (OMEGA * math.sqrt(1 - ZETA ** 2)))
    assert Mode(OMEGA, 1.5).damped_period == pytest.approx(2 * math.pi / OMEGA)
