"""Calibration on an arm that is not its model's kind of perfect (issue 35 §3): noisy, quantised
encoders still settle; a slow sway gets the time it needs; friction and hysteresis are
estimated as a static band instead of biasing the parameters, and reported; what statics cannot
determine is held near the nominal model by a prior instead of refusing the calibration."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest

from poise.calibration import (
    PlantDevice,
    SettleConfig,
    SettleDetector,
    excitation,
    identify,
    run_excitation,
    safe_range,
    statics_regressor,
    synthetic_poses,
)
from poise.calibration.band import pair_spread
from poise.calibration.poses import Pose
from poise.calibration.settle import DECAY_RATIO, DECAYS, TIMEOUT_MIN, settle_timeout
from poise.models import load_model, model_from_dict
from poise.motion.stability import structural_modes
from poise.sim.named import write_named

sim = pytest.importorskip("poise.sim")


# ----------------------------------------------------------------------------- settle


def _feed(det: SettleDetector, signal, seconds: float = 6.0, dt: float = 0.002) -> float | None:
    """Feed ``signal(t)`` until the detector settles; the time it did (None: never)."""
    for k in range(int(seconds / dt)):
        t = k * dt
        if det.add(t, np.atleast_1d(signal(t)), np.zeros(1), np.zeros(1)):
            return t
    return None


def test_a_resting_arm_read_by_a_noisy_coarse_encoder_settles():
    """4096 counts/rev (1.5 mrad steps) and 0.6 mrad noise: the block means of a resting arm
    span more than the 0.3 mrad change tolerance, yet it is at rest."""
    step = 2 * math.pi / 4096
    rng = np.random.default_rng(3)
    cfg = SettleConfig()
    det = SettleDetector(cfg, np.array([1.0]))
    reading = lambda t: step * np.round((0.3 + 6e-4 * rng.standard_normal()) / step)  # noqa: E731
    assert _feed(det, reading) is not None
    # the same readings would fail the fixed tolerance: the floor is what let it settle
    Q = np.array([[reading(0.0)] for _ in range(200)])
    means = np.array([b.mean() for b in np.array_split(Q[:, 0], cfg.blocks)])
    assert np.ptp(means) > cfg.change_tol
    assert SettleDetector.noise_floor(Q, cfg.blocks)[0] > np.ptp(means)


def test_the_noise_floor_does_not_let_a_drift_through():
    """A creep of 1 mrad/s under the same noise never settles: the slope test and the block
    means see it; the floor comes from sample-to-sample differences, which a drift hardly
    changes."""
    rng = np.random.default_rng(4)
    det = SettleDetector(SettleConfig(velocity_tol=5e-3), np.array([1.0]))
    assert _feed(det, lambda t: 0.3 + 1e-2 * t + 6e-4 * rng.standard_normal()) is None
    assert det.last_change > 2e-3  # the drift over a window, far above the noise floor


def test_the_settle_timeout_is_sized_by_the_slowest_sway():
    for name in ("double_pendulum", "tendon_3link"):
        assert settle_timeout(load_model(name)) == TIMEOUT_MIN
    dancer = load_model("dancer")
    slow = structural_modes(dancer, np.zeros(dancer.n))[0]
    expected = DECAYS * math.log(DECAY_RATIO) / (slow.zeta * slow.omega)
    assert expected > TIMEOUT_MIN
    assert settle_timeout(dancer) == pytest.approx(expected)


# ----------------------------------------------------------------------------- the band


def _pose(q, direction="loading", qa_ref=(0.0,)) -> Pose:
    return Pose(qa_ref=np.array(qa_ref), q=np.array(q, float), qa=np.array(qa_ref),
                tau=np.zeros(1), direction=direction, q_std=np.full(len(q), 1e-4), samples=100)


def test_pair_spread_is_the_distance_between_loading_and_unloading_visits():
    model = load_model("double_pendulum")
    poses = [_pose([0.10, 0.0], "loading", (0.01,)), _pose([0.30, 0.1], "loading", (0.02,)),
             _pose([0.12, 0.0], "unloading", (0.01,))]
    residuals = np.array([[0.2, 0.0], [0.0, 0.0], [-0.1, 0.05]])
    spread = pair_spread(model, poses, residuals)
    assert spread["pairs"] == 1
    assert spread["q_max_rad"] == pytest.approx([0.02, 0.0])
    dh = np.linalg.norm(model.fk(np.array([0.12, 0.0])) - model.fk(np.array([0.10, 0.0])))
    assert spread["task_max"] == pytest.approx(dh)
    assert spread["loop_Nm"] == pytest.approx([-0.3, 0.05])  # unloading − loading


def _routine(plant_name: str | None, folder, levels: int = 9):
    nominal = load_model("double_pendulum")
    params = write_named("double_pendulum", plant_name, folder) if plant_name else None
    plant = sim.make_plant("double_pendulum", params, seed=5)
    lo, hi = safe_range(nominal)
    result = run_excitation(PlantDevice(plant), excitation(nominal, levels=levels),
                            settle=SettleConfig(timeout=settle_timeout(nominal)),
                            qa_range=(lo, hi), speed=hi - lo)
    assert result.status == "complete" and all(p.settled for p in result.poses)
    return nominal, result


@pytest.fixture(scope="module")
def friction_report(tmp_path_factory):
    """The double pendulum with the ``friction`` named plant, 9 levels each way."""
    nominal, result = _routine("friction", tmp_path_factory.mktemp("friction"))
    ident = identify(nominal, result.poses)
    assert ident.identifiable, ident.message
    return nominal, ident


def test_the_friction_band_is_reported_at_the_breakaway_torque(friction_report):
    """Joint friction 3 % of the spring torque at 0.5 rad (0.18 N·m on link 1, stiction 1.5×:
    0.27 N·m) and transmission friction: the arm rests up to the breakaway torque from the
    equilibrium, so the band seen is close to twice it, and far above the exact plant's."""
    nominal, ident = friction_report
    from poise.sim import named

    k1 = nominal.describe()["bodies"][0]["stiffness"]
    breakaway = named.STICTION_RATIO * named.FRICTION * k1 * named.THETA_MID
    link1 = ident.static_residuals["band"][0]
    assert link1["coordinate"] == "link1"
    assert breakaway < link1["band_Nm"] < 3.0 * breakaway
    assert link1["band_rad"] == pytest.approx(link1["band_Nm"] / ident.value("stiffness[link1]"))
    hyst = ident.static_residuals["hysteresis"]
    assert hyst["pairs"] == 8
    # the same command leaves the arm up to ~the band apart, by the way it came
    assert 0.3 * link1["band_rad"] < max(hyst["q_max_rad"]) < 2.0 * link1["band_rad"]


def test_an_exact_plant_shows_a_band_a_hundred_times_narrower(friction_report, tmp_path):
    nominal, result = _routine(None, tmp_path, levels=5)
    exact = identify(nominal, result.poses).static_residuals
    rough = friction_report[1].static_residuals
    for a, b in zip(exact["band"], rough["band"], strict=True):
        assert a["band_Nm"] < 0.01 * b["band_Nm"], (a, b)
    assert max(exact["hysteresis"]["q_max_rad"]) < 1e-3


def test_calibrate_reports_the_band_and_the_hysteresis(tmp_path, capsys):
    """``poise calibrate`` on the ``real`` plant (friction, hysteresis, slack, noise, delay):
    the noisy, coarse encoders settle at every pose, the file is written, and the report
    states the band and the loading/unloading spread (in the table and the JSON)."""
    from poise.cli import main

    plant = write_named("double_pendulum", "real", tmp_path)
    out = tmp_path / "cal.json"
    args = ["calibrate", "--model", "double_pendulum", "--device", "inprocess",
            "--sim-params", plant, "--out", str(out), "--quiet"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "static band (what the statics cannot explain" in text
    assert "loading vs unloading at the same command" in text
    assert main([*args, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["poses"] == 9 and summary["statistics"]["n_fit"] + summary[
        "statistics"]["n_holdout"] == 9  # every pose settled
    report = summary["statistics"]["static_residuals"]
    assert [r["coordinate"] for r in report["band"]] == ["link1", "link2"]
    assert report["band"][0]["band_Nm"] > 0.1  # friction, not noise
    assert report["hysteresis"]["pairs"] == 4
    assert json.loads(out.read_text())["calibration"]["statistics"]["static_residuals"] == report


# ----------------------------------------------------------------------------- the prior


def test_a_prior_holds_the_base_segment_that_statics_cannot_determine(tmp_path):
    """soft_arm_soft with springs and masses off by up to 15 % segment by segment: the base
    segment's stiffness against its own weight is not determined by statics, so the fit is
    refused; with a prior (±20 %) it is accepted, names what the prior holds, and the
    well-determined segments come out at their true values."""
    truth = load_model(write_named("soft_arm_soft", "mixed15", tmp_path))
    nominal = load_model("soft_arm_soft")
    poses = synthetic_poses(truth, excitation(nominal, levels=5), q_noise=3e-4,
                            tau_noise=1e-4, samples=50, seed=2)
    refused = identify(nominal, poses, tie=[])
    assert not refused.identifiable
    assert "--prior" in refused.message
    held = identify(nominal, poses, prior=0.2)
    assert held.identifiable, held.message
    assert held.prior == 0.2 and "stiffness[seg1]" in held.prior_held
    assert "held near their nominal values by the prior" in held.message
    true = statics_regressor(truth).nominal
    for k, p in enumerate(held.parameters):
        if p.kind in ("stiffness", "mass") and p.name.endswith(("seg3]", "seg4]", "seg5]")):
            assert abs(p.value - true[k]) < 0.02 * abs(true[k]), p
        if p.name in held.prior_held:  # near nominal, within the prior
            assert abs(p.value - p.nominal) < 3 * 0.2 * abs(p.nominal)
    # what matters: the model now predicts where the arm rests
    assert held.equilibrium_rms < 0.05 * held.nominal_equilibrium_rms


def test_a_prior_changes_nothing_where_the_data_determine_everything():
    nominal = load_model("double_pendulum")
    truth = load_model("double_pendulum")
    poses = synthetic_poses(truth, excitation(nominal, levels=7), q_noise=1e-4, samples=20)
    plain, with_prior = identify(nominal, poses), identify(nominal, poses, prior=0.2)
    assert plain.identifiable and with_prior.identifiable
    assert with_prior.prior_held == () and with_prior.prior is None
    assert np.array_equal(plain.pi, with_prior.pi)


def test_a_joint_without_a_spring_stays_without_one():
    """The dancer's arm has no spring: noise puts its fitted stiffness at 0 ± σ, and a
    negative value within 3 σ is no spring (not an unphysical model that refuses the file)."""
    dancer = load_model("dancer")
    arm = statics_regressor(dancer).index("stiffness[arm]")
    values = []
    for seed in range(4):
        poses = synthetic_poses(dancer, excitation(dancer, levels=3), q_noise=5e-4,
                                tau_noise=0.05, samples=10, seed=seed)
        ident = identify(dancer, poses)
        assert ident.identifiable, ident.message
        values.append(ident.parameters[arm].value)
    assert min(values) >= 0.0
    assert 0.0 in values  # at least one fit came out below zero and was read as no spring


def test_the_report_figure_draws_the_band(friction_report):
    """The report's residual panel draws each coordinate's static band as dashed lines at
    ± half its width (every residual inside them: the band is the widest residual) and
    states the widths in its title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from poise.calibration.report import _residual_panel

    _, ident = friction_report
    fig, ax = plt.subplots()
    try:
        _residual_panel(ax, ident, [], ["C0", "C1", "C2"])
        dashed = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
        levels = sorted(float(line.get_ydata()[0]) for line in dashed)
        band = ident.static_residuals["band"]
        expected = sorted(s * 0.5 * row["band_Nm"] for row in band for s in (1.0, -1.0))
        assert levels == pytest.approx(expected)
        residuals = np.abs(np.asarray(ident.residuals))
        for i, row in enumerate(band):  # the widest residual touches its band
            assert residuals[:, i].max() == pytest.approx(0.5 * row["band_Nm"], rel=1e-9)
        title = ax.get_title()
        assert "static band" in title and f"link1 {band[0]['band_Nm']:.2g}" in title
    finally:
        plt.close(fig)


def _in_other_units(model, c: float):
    """``model`` with every mass, inertia and spring × ``c``: ``G(q)`` × c at the same
    configurations (the statics measured in other units of torque)."""
    d = copy.deepcopy(model.describe())
    for body in d.get("bodies", d.get("segments")):
        for key in ("mass", "inertia", "stiffness"):
            if key in body:
                body[key] *= c
    return model_from_dict(d)


def test_a_prior_without_kinematics_pulls_alike_in_any_units_of_torque(tmp_path):
    """Without the kinematics rows the statics rows carry their own units (N·m); the prior's
    rows are in units of their standard deviation, so they are weighed by the statics rows'
    own σ̂ (as the weighed total mass's row is). Then measuring the torques in other units
    (every mass and spring, and the torque noise, × 50) changes no fitted parameter relative
    to its nominal value; weighed as one unit of torque, the prior pulled 2,500 times harder
    in the second fit than in the first."""
    c = 50.0
    truth = load_model(write_named("soft_arm_soft", "mixed15", tmp_path))
    nominal = load_model("soft_arm_soft")
    fits = []
    for scale in (1.0, c):
        poses = synthetic_poses(_in_other_units(truth, scale), excitation(nominal, levels=5),
                                q_noise=3e-4, tau_noise=1e-4 * scale, samples=50, seed=2)
        fit = identify(_in_other_units(nominal, scale), poses, prior=0.2, kinematics=False,
                       predict=False)
        assert fit.identifiable and "stiffness[seg1]" in fit.prior_held, fit.message
        fits.append(fit)
    for one, other in zip(*(f.parameters for f in fits), strict=True):
        assert one.name == other.name
        if one.nominal != 0.0:
            assert other.value / other.nominal == pytest.approx(one.value / one.nominal,
                                                                rel=1e-6, abs=1e-9), one.name
