"""A dither of the setpoints while the arm rests (issue 35, :mod:`poise.motion.dither`): its
frequency and direction, the static fits that take it out, the physics it is for (friction
no longer biases the held efforts), and the corrector that switches it on where the resting
windows show friction and nowhere else."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from poise.api.bus import Command
from poise.benchmarks.calibrated import weigh
from poise.benchmarks.control import SEED, config_for, reachable_targets
from poise.controller.simulate import SimulatedLoop
from poise.ik.held_common import held_jacobian
from poise.ik.statics import solve_statics
from poise.models.actuation import blocks
from poise.models.registry import load_model
from poise.motion import retarget as retarget_module
from poise.motion import ringwatch
from poise.motion import step as step_module
from poise.motion.dither import (
    CLEARANCE,
    MIN_HZ,
    MIN_SCALE,
    RANGE_FRACTION,
    TASK_FRACTION,
    WIDE_TASK_FRACTION,
    dither_direction,
    dither_for,
    dither_frequency,
)
from poise.motion.masses import EFFORT_SIGMA, PASSIVE_FRICTION, MassEstimate
from poise.motion.planner import plan_target
from poise.motion.retarget import (
    BIAS_SIGMA,
    DITHER_PIN,
    FRICTION_TEST,
    FRICTION_WINDOWS,
    TEST_BIAS,
    Retargeting,
    static_part,
    static_trend,
)
from poise.motion.stability import Mode
from poise.sim.named import write_named

TOL = 2e-3
#: A held target of the dancer's model (bench target 2 of its own) whose plan has a dither
#: (nearer upright the held centre of mass is so sensitive that there is none).
RESTING = [-0.3448, 0.8497]


def test_the_dither_holds_whole_periods_in_a_window_and_keeps_clear_of_the_modes():
    """ω = 2πk / T for a whole k ≥ 2, at least :data:`MIN_HZ`, and :data:`CLEARANCE` away
    from every structural mode (a mode at the first candidate pushes it to the next k)."""
    for window in (1.3, 3.0, 6.7, 8.4):
        omega = dither_frequency(window, [])
        k = omega * window / (2 * math.pi)
        assert abs(k - round(k)) < 1e-9 and round(k) >= 2
        assert omega / (2 * math.pi) >= MIN_HZ - 1e-12
        assert (round(k) - 1) / window < MIN_HZ or round(k) == 2  # the lowest such k
    first = dither_frequency(6.0, [])
    blocked = dither_frequency(6.0, [Mode(first, 0.05)])
    assert blocked > first
    assert abs(blocked - first) >= CLEARANCE * first
    assert dither_frequency(6.0, [Mode(w, 0.05) for w in np.arange(1.0, 20.0, 0.2)]) is None
    assert dither_frequency(math.inf, []) is None


def test_the_dither_moves_the_held_centre_of_mass_least_and_within_its_bound():
    """On the dancer (3 actuators, a 2-D task) the signs are the best of all eight, each
    amplitude :data:`RANGE_FRACTION` of its actuator's range, and the held centre of mass
    moves by at most :data:`TASK_FRACTION` × the tolerance (statically); where that would
    leave less than :data:`MIN_SCALE` of the amplitude, it is :data:`MIN_SCALE` of it if the
    task then moves by at most :data:`WIDE_TASK_FRACTION` × the tolerance, else none."""
    model = load_model("dancer")
    span = np.asarray(model.qa_max, float) - np.asarray(model.qa_min, float)
    for qa in ([0.0, 0.0, 0.0], [0.3, -0.5, 1.0], [-0.4, 0.8, -1.2]):
        q = solve_statics(model, np.asarray(qa, float), np.zeros(1)).q
        J = held_jacobian(blocks(model, q))
        a = RANGE_FRACTION * span
        d = dither_direction(J, a)
        assert np.allclose(np.abs(d), a) and d[0] > 0
        every = [np.linalg.norm(J @ (a * np.array(s))) for s in
                 itertools.product((1, -1), repeat=3)]
        assert np.linalg.norm(J @ d) == pytest.approx(min(every), abs=1e-15)
        dither = dither_for(J, model.qa_min, model.qa_max, TOL, 6.0, [])
        assert np.linalg.norm(J @ dither.amplitude) <= TASK_FRACTION * TOL * (1 + 1e-12)
    flat = np.array([[0.5, 0.5, 0.5], [0.0, 0.0, 0.0]])  # no sign cancels it: scaled down
    dither = dither_for(flat, -np.ones(3), np.ones(3), TOL, 6.0, [])
    assert np.linalg.norm(flat @ dither.amplitude) == pytest.approx(TASK_FRACTION * TOL)
    assert np.linalg.norm(dither.amplitude) >= MIN_SCALE * RANGE_FRACTION * 2 * np.sqrt(3)
    # below MIN_SCALE: kept at MIN_SCALE where the task then moves within WIDE_TASK_FRACTION
    # × the tolerance (here 0.3 mm of 1 mm), else none
    wide = dither_for(2 * flat, -np.ones(3), np.ones(3), TOL, 6.0, [])
    np.testing.assert_allclose(np.abs(wide.amplitude), MIN_SCALE * RANGE_FRACTION * 2)
    assert TASK_FRACTION * TOL < np.linalg.norm(2 * flat @ wide.amplitude) <= \
        WIDE_TASK_FRACTION * TOL
    assert dither_for(8 * flat, -np.ones(3), np.ones(3), TOL, 6.0, []) is None  # 1.2 mm
    assert dither_for(flat, np.full(3, -np.inf), np.full(3, np.inf), TOL, 6.0, []) is None


def test_the_static_fits_take_the_dither_out_and_friction_harmonics_average_out():
    """A window of a constant, a slope, a large sine at the dither's frequency and white
    noise, 2.4 of its periods long: with the dither's ω the value is the constant to the
    noise's error (without it, off by far more). A window of whole periods with a square
    wave of friction changing sign with the dither: the error counts the noise √N less and
    the square wave's harmonics not at all (each whole period averages them out); a smooth
    sway of a faster mode counts in full."""
    period, n = 0.004, 1500
    t = np.arange(n) * period
    omega = 2 * math.pi * 2.4 / (n * period)
    rng = np.random.default_rng(4)
    noise = 0.5 * rng.standard_normal(n)
    samples = (10.0 + 0.2 * (t - 0.5 * t[-1]) + 5.0 * np.sin(omega * t + 0.3) + noise)[:, None]
    value, rate, _, error = static_trend(samples, period, 0.0, 0.0, omega)
    assert value[0] == pytest.approx(10.0, abs=0.05)
    assert rate[0] == pytest.approx(0.2, abs=0.03)
    assert abs(static_part(samples, period, 0.0, 0.0, omega)[0] - 10.0) < 0.05
    assert abs(static_trend(samples, period, 0.0, 0.0)[0][0] - 10.0) > 0.3
    omega = 2 * math.pi * 2 / (n * period)  # two whole periods
    friction = 2.0 * np.sign(np.cos(omega * t + 0.3))
    samples = (10.0 + 5.0 * np.sin(omega * t + 0.3) + friction + noise)[:, None]
    value, _, spread, error = static_trend(samples, period, 0.0, 0.0, omega)
    assert value[0] == pytest.approx(10.0, abs=0.05)
    assert 0.5 / math.sqrt(n) * 0.8 < error[0] < 0.5 / math.sqrt(n) * 1.5
    assert spread[0] > 50 * error[0]  # the square wave and the noise, as if correlated
    assert static_trend(samples, period, 0.0, 0.0)[3][0] > 1.0  # no dither: all of it counts
    ringing = (10.0 + 0.3 * np.sin(2 * math.pi * 1.7 * t) + 0.1 * noise)[:, None]
    assert static_trend(ringing, period, 0.0, 0.0)[3][0] == pytest.approx(0.3 / math.sqrt(2),
                                                                          rel=0.1)


def test_a_restarted_estimate_is_the_model_again():
    """:meth:`MassEstimate.restart` forgets every window: moments, scatter and count are
    those of a fresh estimate with the same total mass."""
    model = load_model("dancer")
    fresh, used = MassEstimate(model, 52.0), MassEstimate(model, 52.0)
    q = solve_statics(model, np.array([0.3, -0.5, 1.0]), np.zeros(1)).q
    used.add(q, np.array([120.0, -30.0, 5.0]))
    used.add(q, np.array([100.0, -20.0, 4.0]))
    assert used.scatter() > 1.0 and not np.allclose(used.moments, fresh.moments)
    used.restart()
    assert used.windows == 0 and used.scatter() == 1.0
    assert np.allclose(used.moments, fresh.moments, rtol=1e-12)
    assert used.com_sigma(q) == pytest.approx(fresh.com_sigma(q), rel=1e-12)


def resting_efforts(path, qa, side, dither=None, seed=3):
    """The dancer simulated as the plant ``path`` describes, its setpoint brought to ``qa``
    from ``side`` (+1/−1: 0.03 rad above/below each actuator) over 2 s, held 6 s, then 12 s
    with ``dither`` added (None: none): the static efforts' error against the plant's
    statics, ``Aᵀ τ̂ − G(q̂)`` (n,) [N·m], at the window's static ``q̂``."""
    loop = SimulatedLoop(config_for("dancer", "fb", "alg1", path), seed=seed)
    truth, dt, device = loop.plant.physical, loop.period, loop.device
    A = np.asarray(loop.model.C, float)[:loop.model.m]
    start = qa + side * 0.03
    device.arm()
    ramp, hold, window = round(2 / dt), round(6 / dt), round(12 / dt)
    for i in range(ramp + hold):
        device.read()
        device.write(start + (qa - start) * min(1.0, (i + 1) / ramp), None)
    qs, taus = [], []
    for i in range(window):
        sample = device.read()
        qs.append(sample.q)
        taus.append(sample.efforts)
        device.write(qa + (dither.offset((i + 1) * dt) if dither is not None else 0.0), None)
    omega = dither.omega if dither is not None else 0.0
    q_hat = static_trend(np.array(qs), dt, 0.0, 0.0, omega)[0]
    tau_hat = static_trend(np.array(taus), dt, 0.0, 0.0, omega)[0]
    return A.T @ tau_hat - truth.G(q_hat)


def test_a_dither_lets_the_held_efforts_show_gravity_through_friction(tmp_path):
    """The dancer on the ``friction`` plant (joint and transmission friction, stiction),
    resting where a setpoint approached from above leaves it: friction holds the hips off
    by 0.4–1 N·m of what gravity needs. With the dither the actuated rows are within
    0.1 N·m of the plant's statics (the pointe, passive, is not dithered: its friction
    stays, which the weighed total mass keeps out of the centre of mass)."""
    path = write_named("dancer", "friction", tmp_path)
    model = load_model("dancer")
    qa = np.array([0.3, -0.5, 1.0])
    q = solve_statics(model, qa, np.zeros(1)).q
    dither = dither_for(held_jacobian(blocks(model, q)), model.qa_min, model.qa_max, TOL,
                        4.0, [])
    still = resting_efforts(path, qa, +1)
    dithered = resting_efforts(path, qa, +1, dither)
    assert np.max(np.abs(still[1:])) > 0.3
    assert np.max(np.abs(dithered[1:])) < 0.1


def test_the_service_dithers_what_it_sends_and_its_wire_path_steps_aside(sim_device, tmp_path):
    """The service against the virtual device of the dancer with friction (a pty, real
    time): once the windows have shown friction (set here, as the resting windows would),
    a new target's plan dithers the setpoints while the arm rests. The cycle announces it;
    the setpoints sent are the IK's held setpoint (its rate gain paused) plus the dither,
    which swings them by its amplitude; the compiled wire path, which would send the IK's
    own, answers no read meanwhile; when the dither stops it answers again."""
    from poise.controller.service import Controller
    from test_replan_service import _config, _info, _wait

    device = sim_device("dancer", params=write_named("dancer", "friction", tmp_path))
    with Controller(_config(device.path)) as ctl:
        assert ctl.start().accepted
        _wait(lambda: ctl.state.value == "running", what="running")
        r = ctl.step.retarget
        r.friction = True
        assert ctl.submit(Command("target", RESTING)).accepted
        _wait(lambda: _info(ctl, "dither"), what="the dither's announcement", ctl=ctl)
        (event,) = _info(ctl, "dither")
        dither = r.dither
        assert event["on"] and event["hz"] == pytest.approx(dither.omega / (2 * math.pi))
        assert event["amplitude"] == pytest.approx(dither.amplitude.tolist())
        _wait(lambda: r.dither_offset() is not None, what="a resting window", ctl=ctl)
        answered = ctl.summary()["wire"]["answered"]
        queue = ctl.subscribe()
        cycles = ctl.summary()["timing"]["cycles"]
        _wait(lambda: ctl.summary()["timing"]["cycles"] > cycles + 1.5 * 2 * math.pi
              / dither.omega * 250, ctl=ctl, what="one and a half periods of the dither")
        ctl.unsubscribe(queue)
        assert ctl.summary()["wire"]["answered"] == answered
        sent = np.array([s.qa_ref for s in queue.drain() if s.qa_ref])
        swing = np.ptp(sent, axis=0)  # the IK's own setpoint held: the dither's swing alone
        assert np.all(swing >= 1.9 * np.abs(dither.amplitude))
        assert np.all(swing <= 2.0 * np.abs(dither.amplitude) * (1 + 1e-9))
        r.dither = None
        _wait(lambda: len(_info(ctl, "dither")) == 2, what="the stop", ctl=ctl)
        assert not _info(ctl, "dither")[1]["on"]
        _wait(lambda: ctl.summary()["wire"]["answered"] > answered + 50, ctl=ctl,
              what="the wire path answering again")


def test_windows_that_disagree_as_friction_makes_them_switch_the_dither_on():
    """Resting windows whose efforts sit anywhere in a friction band (±6 N·m at the hips)
    and carry white noise of 4 N·m (``real``'s effort sensors), 0.1 N·m once averaged over
    a window: weighted by their spread (the noise as if correlated), they agree with the
    masses' estimate; with the noise averaged they disagree far beyond their errors, and
    after :data:`FRICTION_WINDOWS` of them the corrector takes it as friction and forgets
    them (they would bias the masses; from then on only dithered windows teach it).
    Windows that differ by their noise alone leave it off; so does the same friction
    without the white noise's evidence that the errors are smaller."""
    model = load_model("dancer")
    rng = np.random.default_rng(7)
    poses = [solve_statics(model, np.asarray(qa, float), np.zeros(1)).q for qa in
             ([0.3, -0.5, 1.0], [-0.4, 0.8, -1.2], [0.2, 0.4, 0.5], [-0.2, -0.6, 1.4],
              [0.5, 0.1, -0.3], [0.1, -0.2, -0.8])]
    A = np.asarray(model.C, float)[:model.m]
    spread, q_spread = np.full(3, 4.0), np.full(4, 1e-4)
    for band, averaged, friction in ((6.0, 0.1, True), (0.0, 0.1, False), (6.0, 4.0, False)):
        r = Retargeting(model, 0.004, TOL)
        added = 0
        for q in poses:
            added += 1
            tau = np.linalg.lstsq(A.T, model.G(q), rcond=None)[0]
            tau = tau + band * rng.uniform(-1, 1, 3) + 0.1 * rng.standard_normal(3)
            r.teach(q, tau, np.zeros(3), (spread, np.full(3, averaged)),
                    (q_spread, np.full(4, 1e-5)), dithered=False)
            if r.friction:
                break
        assert r.friction is friction
        if friction:
            assert FRICTION_WINDOWS <= added < len(poses) and r.masses.windows == 0
            r.teach(poses[0], tau, np.zeros(3), (spread, spread), (q_spread, q_spread),
                    dithered=False)
            assert r.masses.windows == 0  # undithered windows no longer count
        else:
            assert r.masses.windows == len(poses) and r.masses.scatter() < 3.0


def test_efforts_left_elsewhere_when_a_dither_stops_are_friction():
    """The friction test: the arm rests in one place, so its undithered windows agree however
    much friction holds it there. The test is due from the start: its dithered window (the
    first, or the first of a new plan where the last one rested elsewhere) is compared with
    the undithered one after it. Where an actuator's static effort moved by more than
    :data:`FRICTION_TEST` × their errors (friction left it elsewhere in its band when the
    dither stopped), the windows showed friction: the estimate starts again from the
    dithered windows. Where the efforts stay within their errors (no friction), nothing
    changes and no later window is dithered for the test."""
    model = load_model("dancer")
    q = solve_statics(model, np.array([0.3, -0.5, 1.0]), np.zeros(1)).q
    A = np.asarray(model.C, float)[:model.m]
    held = np.linalg.lstsq(A.T, model.G(q), rcond=None)[0]  # what gravity needs there
    error, q_error = np.full(3, 0.2), np.full(4, 1e-5)
    rest = np.zeros(3)
    for offset, friction in (([4.0, 0.0, 0.0], True), ([0.0, 0.0, 0.0], False),
                             ([0.0, 1.0, 0.0], False)):
        r = Retargeting(model, 0.004, TOL)
        assert r.friction_test == "due"
        before = held + np.array([-3.0, 0.0, 0.0])  # where friction held it before
        r.teach(q, before, rest, (error, error), (q_error, q_error), False)
        assert r.friction_test == "due" and not r.friction
        r.teach(q, held, rest, (error, error), (q_error, q_error), True)
        assert r.friction_test == "dithered" and r.masses.windows == 2
        r.begin(None, False)  # a new plan: its windows rest elsewhere, so the test is due
        assert r.friction_test == "due"
        r.teach(q, held, rest, (error, error), (q_error, q_error), True)
        assert r.friction_test == "dithered" and r.masses.windows == 3
        r.teach(q, held + np.array(offset), rest, (error, error), (q_error, q_error), False)
        assert r.friction_test == "done"
        floor = r.masses.effort_floor
        moved = max(offset) / math.hypot(0.2, 0.2, floor)
        assert r.friction is friction is (moved > FRICTION_TEST), moved
        # with friction both dithered windows stay; without, all four count
        assert r.masses.windows == (2 if friction else 4)
        # ... and with friction the passive joint's equation allows for its own
        assert r.masses.passive_floor == pytest.approx(
            PASSIVE_FRICTION * r.masses.effort_floor / EFFORT_SIGMA if friction else floor)


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """The dancer's ``real`` plant (masses as ``mixed15``, friction, hysteresis, slack,
    noise, delay): its file and its true model."""
    path = write_named("dancer", "real", tmp_path_factory.mktemp("real"))
    return path, load_model(path)


def estimate_after_targets(path, friction, indices=(1, 2), seconds=40.0, tested=False):
    """The dancer's nominal controller in feedback on the plant ``path``, given the weighed
    mass, through bench targets ``indices`` in simulated time; ``friction``: the windows
    have shown friction before (so every resting window is dithered until the estimate
    pins the centre of mass down); ``tested``: as if the friction test had found none (no
    window is dithered for it). The estimate of the masses at the end and where the plant
    rests."""
    loop = SimulatedLoop(config_for("dancer", "fb", "alg1", path,
                                    total_mass=weigh("dancer", path)[0]), seed=SEED)
    truth = loop.plant.physical
    targets = reachable_targets(truth, loop.limits.qa_min, loop.limits.qa_max,
                                max(indices) + 1, SEED)
    loop.step.retarget.friction = friction
    if tested:
        loop.step.retarget.friction_test = "done"
    loop.start()
    for index in indices:
        loop.set_target(targets[index])
        loop.run(seconds)
    return loop.step.retarget, np.asarray(loop.plant.q, dtype=float)


def test_on_the_real_plant_dithered_windows_find_the_centre_of_mass_friction_hid(real,
                                                                                 monkeypatch):
    """The dancer on ``real`` (its hips' efforts at rest anywhere in a ±6 N·m friction band,
    its masses 5–15 % off the model's), bench targets 1 and 2 (40 s each, simulated time).
    Undithered (the friction watch off), the resting windows put the estimated centre of
    mass centimetres off the plant's; with the setpoints dithered (the rate gain paused)
    as many windows or fewer (the dither stops where they pin it down) put it within 3 mm,
    and at least four times closer. (Both at the automatic gains and aiming with the bias
    where the window rested: the ring watch's raise and the bias followed to where the arm
    is, which move the hips through the undithered windows and so show part of what the
    dither does, are off.)"""
    path, plant = real
    monkeypatch.setattr(ringwatch, "RAISE_FLOOR", math.inf)
    monkeypatch.setattr(step_module, "BIAS_FOLLOW_S", 1e9)  # never in the run
    dithered, q = estimate_after_targets(path, True)
    # dithering still, or stopped where the windows pinned the centre of mass down
    assert dithered.dither is not None or \
        dithered.masses.com_sigma(q) <= DITHER_PIN * BIAS_SIGMA * TOL
    monkeypatch.setattr(retarget_module, "FRICTION_SCATTER", math.inf)
    still, q_still = estimate_after_targets(path, False, tested=True)
    assert not still.friction and still.masses.windows >= 4
    near = float(np.linalg.norm(dithered.masses.com(q) - plant.fk(q)))
    far = float(np.linalg.norm(still.masses.com(q_still) - plant.fk(q_still)))
    assert near < 3e-3
    assert far > 4 * near


def test_a_streamed_target_moves_on_with_the_rate_gain_while_a_dither_was_planned():
    """The dither pauses the rate gain only while the arm rests on its plan: once a streamed
    reference is followed the gain is the live one again and no dither is sent (live
    operation must not stall on a measurement). Simulated time, the dancer's model."""
    loop = SimulatedLoop(config_for("dancer", "fb", "alg1"), seed=SEED)
    step = loop.step
    step.retarget.friction = True  # as if the windows had shown it
    loop.start()
    loop.set_target(np.asarray(RESTING, dtype=float))
    assert step.retarget.dither is not None
    loop.run(2.0)  # the move
    while step.goal is not None:
        loop.cycle()
    assert step.dithering and step.backed_off(loop.params).gamma == 0.0
    start = np.asarray(loop.model.fk(loop.measured()), dtype=float)
    aim = start + np.array([0.01, 0.0])
    for _ in range(round(3.0 / loop.period)):
        loop.stream(aim)
        out = loop.cycle()
        assert not step.dithering and np.array_equal(out.qa, step.stepper.qa)
    assert step.backed_off(loop.params).gamma == loop.params.gamma > 0.0
    moved = np.asarray(loop.model.fk(loop.measured()), dtype=float) - start
    assert moved[0] > 0.003  # on its way to the streamed aim 1 cm off


def test_the_friction_test_moves_the_dithered_efforts_as_the_estimate_predicts():
    """The integrator moves the arm a little between the friction test's dithered window and
    the undithered one after it: the efforts that hold it change with the pose, friction or
    not, here by more than :data:`FRICTION_TEST` × their errors. The test compares the
    undithered efforts with the dithered ones moved by the change the estimate of the
    masses predicts (:meth:`MassEstimate.effort_change`): the model's own efforts there
    show no friction; 4 N·m more on a hip (friction's doing) does, and the estimate starts
    again from the dithered window alone."""
    model = load_model("dancer")
    A = np.asarray(model.C, float)[:model.m]
    q = solve_statics(model, np.array([0.3, -0.5, 1.0]), np.zeros(1)).q
    moved = solve_statics(model, np.array([0.32, -0.48, 1.0]), np.zeros(1)).q

    def held(at: np.ndarray) -> np.ndarray:
        return np.linalg.lstsq(A.T, model.G(at), rcond=None)[0]

    error, q_error, rest = np.full(3, 0.2), np.full(4, 1e-5), np.zeros(3)
    combined = math.hypot(0.2, 0.2)
    assert np.max(np.abs(held(moved) - held(q))) > 2 * FRICTION_TEST * combined
    for offset, friction in (([0.0, 0.0, 0.0], False), ([4.0, 0.0, 0.0], True)):
        r = Retargeting(model, 0.004, TOL)
        r.teach(q, held(q), rest, (error, error), (q_error, q_error), True)
        assert r.friction_test == "dithered"
        r.teach(moved, held(moved) + np.array(offset), rest, (error, error),
                (q_error, q_error), False)
        assert r.friction_test == "done" and r.friction is friction
        assert r.masses.windows == (1 if friction else 2)


def test_the_effort_change_the_estimate_predicts_is_the_statics_and_knows_its_error():
    """:meth:`MassEstimate.effort_change` on the exact model: the change of the static
    efforts between two poses is ``G_a(q₂) − G_a(q₁)`` (the model's own moments), and its
    error shrinks as windows at other poses pin the masses down (the prior alone: 30 % of
    the moments; a small move: little of either)."""
    model = load_model("dancer")
    A = np.asarray(model.C, float)[:model.m]
    poses = [solve_statics(model, np.asarray(qa, float), np.zeros(1)).q for qa in
             ([0.3, -0.5, 1.0], [0.32, -0.48, 1.0], [-0.4, 0.8, -1.2], [0.2, 0.4, 0.5])]
    estimate = MassEstimate(model)
    exact = np.linalg.lstsq(A.T, model.G(poses[1]) - model.G(poses[0]), rcond=None)[0]
    change, prior_error = estimate.effort_change(poses[0], poses[1])
    np.testing.assert_allclose(change, exact, atol=1e-9 * np.max(np.abs(exact)))
    assert np.all(prior_error > 0.05 * np.abs(exact))  # the prior knows the moments to 30 %
    for q in poses[2:]:
        estimate.add(q, np.linalg.lstsq(A.T, model.G(q), rcond=None)[0], np.zeros(3),
                     np.full(3, 0.05), np.full(4, 1e-6))
    change, error = estimate.effort_change(poses[0], poses[1])
    np.testing.assert_allclose(change, exact, atol=1e-3 * np.max(np.abs(exact)))
    assert np.all(error < 0.2 * prior_error)
    far = estimate.effort_change(poses[0], poses[2])[1]
    assert np.all(error < far)  # a small move's change is known better than a large one's


def test_the_friction_tests_dithered_window_is_followed_by_its_undithered_one_in_place(
        tmp_path):
    """Where the masses look off after the friction test's dithered window (the efforts of
    ``mixed15``'s dancer, its bodies 5–15 % off: a task bias of :data:`TEST_BIAS` sigmas or
    more), the next correction waits: the undithered window it is compared with rests where
    the dithered one did (a correction between them changes the efforts with the pose; on
    ``real`` the dancer's first target was corrected after every dithered window, so the
    test was never made and friction never shown, and the target ended 35 mm off). The
    window after it is corrected as ever. Where they do not (the model's own efforts, as on
    ``stiff10``), and wherever friction is already shown, a dithered window is corrected at
    once."""
    model = load_model("dancer")
    plant = load_model(write_named("dancer", "mixed15", tmp_path))
    plan = plan_target(model, np.asarray(RESTING, float), [np.zeros(model.n)], TOL,
                       period=0.004)
    A = np.asarray(model.C, float)[:model.m]
    x = np.asarray(model.fk(plan.q_goal), dtype=float)
    off = np.array([0.01, 0.0])  # 10 mm: well over the threshold
    lo, hi = np.asarray(model.qa_min, float), np.asarray(model.qa_max, float)

    def window(r: Retargeting, efforts: np.ndarray) -> np.ndarray | None:
        while not r.observe(x + off, x, plan.qa_goal, 0, plan.q_goal, efforts):
            pass
        return r.correction(plan.q_goal, plan.qa_goal, 1.0, lo, hi)

    def begun(friction: bool = False) -> Retargeting:
        r = Retargeting(model, 0.004, TOL)
        r.friction = friction
        r.begin(plan, True)
        assert r.dithering and r.friction_test == "due"
        return r

    off_masses = np.linalg.lstsq(A.T, plant.G(plan.q_goal), rcond=None)[0]
    r = begun()
    assert window(r, off_masses) is None and r.total == 0 and r.friction_test == "dithered"
    q = plan.q_goal
    assert np.linalg.norm(r.masses.bias(q)) >= TEST_BIAS * r.masses.com_sigma(q)
    assert not r.dithering and not r.ended  # the next window: undithered, in place
    assert window(r, off_masses) is not None and r.total == 1 and r.friction_test == "done"
    assert not r.friction  # the same efforts: none
    own = np.linalg.lstsq(A.T, model.G(plan.q_goal), rcond=None)[0]
    for r, test in ((begun(), "dithered"), (begun(friction=True), "due")):
        assert window(r, own) is not None and r.total == 1 and r.friction_test == test


def test_the_first_target_on_the_real_plant_shows_friction_within_seconds(real, tmp_path):
    """The dancer's first bench target in simulated time: on ``real`` the friction test
    (one dithered window, then one without) shows friction within 25 s, before the
    windows' disagreement could (:data:`FRICTION_WINDOWS`; alone it took 13 windows, 50 s,
    while the arm rested 37 mm off); on ``mixed15`` (masses and springs off, no friction)
    the same test leaves it off."""
    path, _ = real
    shown, _ = estimate_after_targets(path, False, indices=(0,), seconds=25.0)
    assert shown.friction and shown.friction_test == "done"
    assert shown._friction_probe.windows < FRICTION_WINDOWS
    clean, _ = estimate_after_targets(write_named("dancer", "mixed15", tmp_path), False,
                                      indices=(0,), seconds=25.0)
    assert clean.friction_test == "done" and not clean.friction
