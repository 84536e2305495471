"""A weighed total mass as a second known quantity (``identify(total_mass=...)``,
``poise calibrate --total-mass KG``): ``Σ masses_of(π) = M`` holds exactly, the statistics are
those of the constrained fit, and a bias that the data put on one mass is pulled back. With the
scale's standard deviation (``total_mass_sd``, ``--total-mass-sd KG``) it is one measurement
``M ± σ_M`` weighed against the data instead."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from tests.test_calibration import perturbed

from poise.calibration import (
    CalibrationError,
    calibration_document,
    excitation,
    identify,
    statics_regressor,
    synthetic_poses,
)
from poise.calibration.grouping import (
    group_matrix,
    parameter_groups,
    parse_fix,
    total_mass_row,
)
from poise.calibration.lsq import _scaled_lstsq, _stacked_system
from poise.models import load_model, model_from_dict

#: The fits of the first test: (model, grid levels, prior).
CASES = [("double_pendulum", 7, None), ("dancer", 3, None),
         ("soft_arm", 4, None),  # masses tied: mass[*]
         ("soft_arm", 4, 0.2)]  # untied, the prior


def _masses(model, result) -> np.ndarray:
    return statics_regressor(model).masses_of(result.pi)


def _noisy(name: str, levels: int):
    """``(nominal, noisy poses of the perturbed truth, the truth's total mass [kg])``."""
    nominal, truth = perturbed(name)
    poses = synthetic_poses(truth, excitation(nominal, levels=levels), q_noise=3e-4,
                            tau_noise=0.01, samples=10, seed=3)
    reg = statics_regressor(truth)
    return nominal, poses, float(np.sum(reg.masses_of(reg.nominal)))


@pytest.mark.parametrize("name,levels,prior", CASES)
def test_the_total_mass_holds_exactly_and_the_statistics_follow(name, levels, prior):
    """Noisy data: without the constraint the masses' sum misses the weighed value; with it
    the sum is exact, the covariance gives the sum no variance, and the fit has one free
    parameter less."""
    nominal, poses, weighed = _noisy(name, levels)
    free = identify(nominal, poses, prior=prior)
    held = identify(nominal, poses, prior=prior, total_mass=weighed)
    assert free.identifiable and held.identifiable, held.message
    assert abs(_masses(nominal, free).sum() - weighed) > 1e-6  # the data alone do not
    assert abs(_masses(nominal, held).sum() - weighed) < 1e-9
    assert held.total_mass == weighed and held.total_mass_constrained
    assert "total mass" in held.message and "held exactly" in held.message
    # the written model: its masses add up to the weighed total too
    key = "bodies" if "bodies" in held.description else "segments"
    assert abs(sum(b["mass"] for b in held.description[key]) - weighed) < 1e-9
    # statistics of the constrained fit: one unknown less, no variance along the constraint
    assert held.n_free == free.n_free - 1 and held.rank == held.n_free
    assert held.singular_values.size == held.n_free
    c = total_mass_row(statics_regressor(nominal))
    assert c @ free.covariance @ c > 1e-12 * np.max(np.abs(free.covariance))
    assert abs(c @ held.covariance @ c) < 1e-12 * np.max(np.abs(held.covariance))
    stats = held.statistics()
    assert stats["total_mass"] == weighed and stats["total_mass_constrained"] is True


def test_the_constrained_solution_is_the_kkt_solution():
    """The elimination solves the same problem as the KKT system
    ``[AᵀA d; dᵀ 0] [x; λ] = [Aᵀb; e]`` on the weighted rows."""
    nominal, truth = perturbed("dancer")
    reg = statics_regressor(nominal)
    poses = synthetic_poses(truth, excitation(nominal, levels=3), q_noise=3e-4,
                            tau_noise=0.01, samples=10, seed=5)
    qs = np.array([p.q for p in poses])
    Y = np.stack([reg.rows(p.q, p.tau) for p in poses])
    groups = parameter_groups(reg, ())
    T = group_matrix(reg, groups)
    k_fix, theta_fix = parse_fix(reg, None)  # untied: the group is the parameter
    g_fix = next(g for g, grp in enumerate(groups) if grp.members == (k_fix,))
    free = [g for g in range(len(groups)) if g != g_fix]
    system = _stacked_system(reg, nominal, Y, qs, np.array([p.qa for p in poses]), groups, T,
                             free, g_fix, theta_fix, True)
    d = np.zeros(system.A_w.shape[1])
    d[: len(free)] = (total_mass_row(reg) @ T)[free]
    e = 51.7
    x, *_ = _scaled_lstsq(system, 1e-8, (d, e))
    A, b = system.A_w * system.scales, system.b_w  # the KKT in the scaled unknowns
    ds = d * system.scales
    k = A.shape[1]
    kkt = np.block([[A.T @ A, ds[:, None]], [ds[None, :], np.zeros((1, 1))]])
    u = np.linalg.solve(kkt, np.concatenate([A.T @ b, [e]]))[:k]
    assert d @ x == pytest.approx(e, abs=1e-9)
    assert np.max(np.abs(x - system.scales * u) / system.scales) < 1e-7


def _with_mass(model, body: int, extra: float):
    d = copy.deepcopy(model.describe())
    d["bodies"][body]["mass"] += extra
    return model_from_dict(d)


def test_the_weighed_total_pulls_a_biased_stance_leg_back_to_the_truth():
    """The stance row of the dancer's data carries a torque ``δ g cos q_stance`` that the
    statics read as a stance leg 3 kg heavier (what the pointe's friction did on ``real``).
    The other rows pin the other masses, so the weighed total pins the stance leg: every mass
    comes back within 3 % of the bias, and σ̂ says the data disagree with the total."""
    dancer = load_model("dancer")
    truth = np.asarray(dancer.masses, dtype=float)
    biased = _with_mass(dancer, 0, 3.0)  # a_stance += 0.45 · 3 kg·m, the stance row only
    poses = synthetic_poses(biased, excitation(dancer, levels=3), q_noise=5e-4,
                            tau_noise=0.05, samples=10, seed=1)
    free = identify(dancer, poses)
    held = identify(dancer, poses, total_mass=float(truth.sum()))
    assert free.identifiable and held.identifiable, held.message
    err_free = _masses(dancer, free) - truth
    err_held = _masses(dancer, held) - truth
    assert err_free[0] == pytest.approx(3.0, abs=0.2)  # the data say: heavier stance leg
    assert np.max(np.abs(err_free[1:])) < 0.02
    # the stance leg within 1 % of the bias; the torso and the gesture leg, which share the
    # stance row, take up to 3 % of it
    assert abs(err_held[0]) < 0.01 * 3.0 and np.max(np.abs(err_held)) < 0.03 * 3.0, err_held
    assert held.sigma > 2 * free.sigma  # the weighed total and the data disagree


def test_a_total_mass_the_scale_already_implies_adds_nothing_or_is_refused():
    """The soft arm with its masses tied and one of them fixed: the scale alone sets the
    total mass. The same value is accepted and said to add nothing; another is refused."""
    arm = load_model("soft_arm")
    poses = synthetic_poses(arm, excitation(arm, levels=4), q_noise=1e-4, samples=10)
    total = float(np.sum(arm.masses))
    plain = identify(arm, poses, fix="mass[seg1]")
    same = identify(arm, poses, fix="mass[seg1]", total_mass=total)
    assert same.total_mass == total and not same.total_mass_constrained
    assert "implied by the scale alone, adds nothing" in same.message
    assert np.array_equal(same.pi, plain.pi) and same.n_free == plain.n_free
    with pytest.raises(CalibrationError, match=r"total_mass = 0\.6 kg: the total mass "
                       r"depends only on the scale \(mass\[seg1\] fixed\), which implies 0\.5 kg"):
        identify(arm, poses, fix="mass[seg1]", total_mass=0.6)


@pytest.mark.parametrize("bad,why", [(0.0, "finite and > 0"), (-2.0, "finite and > 0"),
                                     (float("nan"), "finite and > 0"),
                                     (float("inf"), "finite and > 0"),
                                     ("heavy", "must be a number")])
def test_a_bad_total_mass_is_refused_with_what_and_where(bad, why):
    model = load_model("double_pendulum")
    poses = synthetic_poses(model, excitation(model, levels=5))
    with pytest.raises(CalibrationError, match=rf"^total_mass = .*: the weighed total mass "
                       rf".*{why}"):
        identify(model, poses, total_mass=bad)


def test_a_family_without_masses_is_refused():
    with pytest.raises(CalibrationError, match=r"total_mass = 5: model 'panda' \(family "
                       r"'dh_chain'\) has no masses among its statics parameters"):
        identify(load_model("panda"), [], total_mass=5)


def test_the_calibration_file_records_the_weighed_total():
    nominal, truth = perturbed("double_pendulum")
    poses = synthetic_poses(truth, excitation(nominal, levels=7), q_noise=3e-4, samples=10)
    weighed = float(np.sum(truth.masses))
    doc = calibration_document(identify(nominal, poses, total_mass=weighed), poses,
                               model_name="double_pendulum")
    table = doc["calibration"]
    assert table["total_mass"]["value"] == weighed and table["total_mass"]["constrained"]
    assert table["statistics"]["total_mass"] == weighed
    assert abs(sum(m["value"] for m in table["masses"]) - weighed) < 1e-9
    without = calibration_document(identify(nominal, poses), poses,
                                   model_name="double_pendulum")
    assert without["calibration"]["total_mass"] is None
    json.dumps(doc)


# ------------------------------------------------- a scale of finite precision (total_mass_sd)


def _se(result) -> np.ndarray:
    return np.array([p.std_error for p in result.parameters])


def _sum_se(model, result) -> float:
    """Standard error of the identified ``Σ masses`` from the covariance: ``√(cᵀ cov c)``."""
    c = total_mass_row(statics_regressor(model))
    return float(np.sqrt(c @ result.covariance @ c))


@pytest.mark.parametrize("name,levels,prior", CASES)
def test_a_precise_scale_is_the_exact_total_and_a_useless_one_is_none(name, levels, prior):
    """``σ_M = 1e-6 M``: the measurement row gives the exact constraint's solution and
    standard errors (the sum now ``M ± σ_M``, every unknown free again), and ``1e-12 M`` still
    its solution and rank. ``σ_M = 1e6 M``: the
    fit without a total mass; only ``σ̂`` has one degree of freedom more (the row is a
    measurement that fits), so every standard error shrinks by ``√(dof / (dof + 1))``."""
    nominal, poses, weighed = _noisy(name, levels)
    reg = statics_regressor(nominal)
    free = identify(nominal, poses, prior=prior, predict=False)
    held = identify(nominal, poses, prior=prior, predict=False, total_mass=weighed)
    sd = 1e-6 * weighed
    tight = identify(nominal, poses, prior=prior, predict=False, total_mass=weighed,
                     total_mass_sd=sd)
    loose = identify(nominal, poses, prior=prior, predict=False, total_mass=weighed,
                     total_mass_sd=1e6 * weighed)
    assert tight.identifiable and loose.identifiable, tight.message
    se = _se(free)
    some = se > 0  # not the scale
    # the three fits differ by a fair fraction of a standard error (dancer: 1.3)
    assert np.max(np.abs(free.pi - held.pi)[some] / se[some]) > 0.05
    # σ_M → 0: the exact constraint
    assert np.max(np.abs(tight.pi - held.pi)[some] / se[some]) < 1e-5
    assert abs(_masses(nominal, tight).sum() - weighed) < 1e-8 * weighed
    assert np.allclose(_se(tight), _se(held), rtol=1e-4, atol=sd)
    assert tight.sigma == pytest.approx(held.sigma, rel=1e-6)
    assert tight.n_free == held.n_free + 1 == free.n_free and tight.rank == tight.n_free
    assert 0.9 * sd < _sum_se(nominal, tight) < 1.05 * sd  # the scale's, not zero
    assert tight.mass_sum_std_error == pytest.approx(_sum_se(nominal, tight), rel=1e-9)
    assert tight.total_mass == weighed and tight.total_mass_sd == sd
    assert tight.total_mass_constrained and tight.prior_held == held.prior_held
    assert f"weighed total mass {weighed:g} ± {sd:g} kg" in tight.message
    assert "held exactly" not in tight.message
    # a scale far beyond the data's precision: its row's huge singular value must not make
    # the data's directions look unseen (the rank threshold is the data's)
    tighter = identify(nominal, poses, prior=prior, predict=False, total_mass=weighed,
                       total_mass_sd=1e-12 * weighed)
    assert tighter.identifiable and tighter.rank == tighter.n_free, tighter.message
    assert np.max(np.abs(tighter.pi - held.pi)[some] / se[some]) < 1e-3
    # σ_M → ∞: no total mass
    data_rows = len(free.fit_index) * (reg.n + reg.m)
    prior_rows = free.n_free - reg.m if free.prior_held else 0  # one per free group
    dof = data_rows + prior_rows - free.n_free
    shrink = np.sqrt(dof / (dof + 1))
    assert np.max(np.abs(loose.pi - free.pi)[some] / se[some]) < 1e-6
    assert loose.sigma == pytest.approx(shrink * free.sigma, rel=1e-9)
    assert np.allclose(_se(loose), shrink * se, rtol=1e-6, atol=0)
    assert loose.n_free == free.n_free and loose.rank == free.rank
    assert np.allclose(loose.singular_values, free.singular_values, rtol=1e-9)


@pytest.mark.parametrize("kinematics", [True, False])
def test_a_scale_as_precise_as_the_data_meets_them_half_way(kinematics):
    """The scale reads ``δ = 3`` standard errors (of the data's sum) off the truth and has
    that same standard error: the identified sum lies strictly between the data's and the
    scale's, about half way, with a standard error below both (about ``1/√2`` of them).
    Without kinematics the statics rows carry weight 1 [N·m], and the row weighs one ``σ_M``
    like one ``σ̂`` of them: the sum is exactly the inverse-variance mean."""
    nominal, poses, truth = _noisy("double_pendulum", 7)
    free = identify(nominal, poses, kinematics=kinematics, predict=False)
    s_free, se_free = float(_masses(nominal, free).sum()), _sum_se(nominal, free)
    assert abs(s_free - truth) < 3 * se_free  # the data agree with the truth
    weighed, sd = truth + 3 * se_free, se_free
    soft = identify(nominal, poses, kinematics=kinematics, predict=False,
                    total_mass=weighed, total_mass_sd=sd)
    assert soft.identifiable, soft.message
    s_soft, se_soft = float(_masses(nominal, soft).sum()), _sum_se(nominal, soft)
    way = (s_soft - s_free) / (weighed - s_free)
    assert 0.3 < way < 0.7, way
    assert 0 < se_soft < min(sd, se_free)
    assert se_soft == pytest.approx(se_free / np.sqrt(2), rel=0.1)
    assert soft.n_free == free.n_free and soft.rank == free.rank
    if not kinematics:
        precision = 1 / se_free**2 + 1 / sd**2
        mean = (s_free / se_free**2 + weighed / sd**2) / precision
        assert abs(s_soft - mean) < 1e-6 * abs(weighed - s_free)
        assert se_soft == pytest.approx(soft.sigma / free.sigma / np.sqrt(precision),
                                        rel=1e-6)


def test_a_total_mass_the_scale_implies_agrees_within_three_standard_deviations():
    """The soft arm with its masses tied and one fixed (the scale implies 0.5 kg): a reading
    2 σ_M off adds nothing, one 10 σ_M off is refused."""
    arm = load_model("soft_arm")
    poses = synthetic_poses(arm, excitation(arm, levels=4), q_noise=1e-4, samples=10)
    plain = identify(arm, poses, fix="mass[seg1]", predict=False)
    near = identify(arm, poses, fix="mass[seg1]", predict=False, total_mass=0.52,
                    total_mass_sd=0.01)
    assert near.total_mass == 0.52 and near.total_mass_sd == 0.01
    assert not near.total_mass_constrained and near.n_free == plain.n_free
    assert np.array_equal(near.pi, plain.pi)
    assert ("weighed total mass 0.52 ± 0.01 kg (implied by the scale alone within its "
            "precision, adds nothing)") in near.message
    with pytest.raises(CalibrationError, match=r"total_mass = 0\.6 ± 0\.01 kg: the total mass "
                       r"depends only on the scale \(mass\[seg1\] fixed\), which implies 0\.5 kg "
                       r"\(10 standard deviations apart\)"):
        identify(arm, poses, fix="mass[seg1]", total_mass=0.6, total_mass_sd=0.01)


@pytest.mark.parametrize("total,sd,why", [
    (None, 0.01, r"total_mass_sd = 0\.01: a standard deviation of the weighed total mass "
                 r"needs the weighed total mass \(total_mass\)"),
    (2.0, 0.0, r"total_mass_sd = 0\.0: .* must be finite and > 0 \[kg\]"),
    (2.0, -0.01, r"total_mass_sd = -0\.01: .* must be finite and > 0 \[kg\]"),
    (2.0, float("inf"), r"total_mass_sd = inf: .* must be finite and > 0 \[kg\]"),
    (2.0, "fine", r"total_mass_sd = 'fine': .* must be a number \[kg\]")],
    ids=["without-total-mass", "zero", "negative", "inf", "not-a-number"])
def test_a_bad_total_mass_sd_is_refused(total, sd, why):
    model = load_model("double_pendulum")
    with pytest.raises(CalibrationError, match=rf"^{why}"):
        identify(model, synthetic_poses(model, excitation(model, levels=5)), total_mass=total,
                 total_mass_sd=sd)


def test_the_report_says_the_weighed_total_mass_with_its_sd():
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    from poise.calibration.report import _parameter_table

    nominal, poses, truth = _noisy("double_pendulum", 7)
    soft = identify(nominal, poses, predict=False, total_mass=truth, total_mass_sd=0.002)
    ax = Figure().add_subplot()
    _parameter_table(ax, soft)
    title = ax.get_title()
    assert f"weighed total mass {truth:g} ± 0.002 kg" in title
    assert f"std. error of the sum of the masses {soft.mass_sum_std_error:.2g} kg" in title


# ----------------------------------------------------------------------------- the CLI


def test_cli_total_mass_end_to_end_on_the_simulated_plant(tmp_path, capsys):
    """``poise calibrate --device inprocess --total-mass KG`` on the ``mixed15`` plant (masses
    off by up to 15 %): the file's masses add up to the weighed total, and it says so."""
    from poise.cli import main
    from poise.sim.named import write_named
    from poise.sim.params import load_physical

    plant = write_named("double_pendulum", "mixed15", tmp_path)
    _, physical, _ = load_physical("double_pendulum", plant)
    weighed = round(float(np.sum(physical.masses)), 3)
    assert abs(weighed - 2.0) > 0.005  # not the nominal model's 2 kg
    out = tmp_path / "cal.json"
    args = ["calibrate", "--model", "double_pendulum", "--device", "inprocess",
            "--sim-params", plant, "--out", str(out), "--quiet", "--total-mass", str(weighed)]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert f"total mass {weighed:g} kg (weighed, held exactly)" in text
    assert f"(weighed total mass {weighed:g}, held exactly)" in text
    doc = json.loads(out.read_text())
    assert abs(sum(b["mass"] for b in doc["bodies"]) - weighed) < 1e-9
    assert doc["calibration"]["total_mass"]["value"] == weighed
    # the masses come out near the plant's (the scale reads 1.99 kg for 1.9902)
    assert np.allclose([b["mass"] for b in doc["bodies"]], physical.masses, rtol=0.01)


@pytest.mark.parametrize("value,why", [("-1", "finite and > 0"), ("nan", "finite and > 0"),
                                       ("0", "finite and > 0")])
def test_cli_bad_total_mass_is_a_usage_error_before_any_device_work(tmp_path, capsys, value,
                                                                    why):
    from poise.cli import main

    code = main(["calibrate", "--model", "double_pendulum", "--device", "/dev/poise-no-such",
                 "--out", str(tmp_path / "cal.json"), "--total-mass", value])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"--total-mass {float(value):g}: the weighed total mass must be {why}" in err
    assert "poise-no-such" not in err and list(tmp_path.iterdir()) == []


def test_cli_total_mass_for_a_model_without_masses_is_a_usage_error(tmp_path, capsys):
    from poise.cli import main

    code = main(["calibrate", "--model", "panda", "--device", "/dev/poise-no-such",
                 "--out", str(tmp_path / "cal.json"), "--total-mass", "18"])
    err = capsys.readouterr().err
    assert code == 2 and "--total-mass 18: model 'panda' (family 'dh_chain') has no masses" in err


def test_cli_total_mass_the_scale_contradicts_is_refused_before_the_routine(tmp_path, capsys):
    from poise.cli import main

    code = main(["calibrate", "--model", "soft_arm_stiff", "--device", "/dev/poise-no-such",
                 "--out", str(tmp_path / "cal.json"), "--fix", "mass[seg1]",
                 "--total-mass", "0.6"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "the total mass depends only on the scale (mass[seg1] fixed)" in err
    assert "nothing was run" in err and "poise-no-such" not in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("extra,why", [
    (["--total-mass-sd", "0.01"], "--total-mass-sd 0.01: a standard deviation of the weighed "
     "total mass needs the weighed total mass (--total-mass KG)"),
    (["--total-mass", "2", "--total-mass-sd", "0"], "--total-mass-sd 0: the standard "
     "deviation of the weighed total mass must be finite and > 0 [kg]"),
    (["--total-mass", "2", "--total-mass-sd", "-0.01"], "--total-mass-sd -0.01: the standard "
     "deviation of the weighed total mass must be finite and > 0 [kg]"),
    (["--total-mass", "2", "--total-mass-sd", "nan"], "--total-mass-sd nan: the standard "
     "deviation of the weighed total mass must be finite and > 0 [kg]"),
    (["--total-mass", "2", "--total-mass-sd", "inf"], "--total-mass-sd inf: the standard "
     "deviation of the weighed total mass must be finite and > 0 [kg]")],
    ids=["without-total-mass", "zero", "negative", "nan", "inf"])
def test_cli_bad_total_mass_sd_is_a_usage_error_before_any_device_work(tmp_path, capsys, extra,
                                                                       why):
    from poise.cli import main

    code = main(["calibrate", "--model", "double_pendulum", "--device", "/dev/poise-no-such",
                 "--out", str(tmp_path / "cal.json"), *extra])
    err = capsys.readouterr().err
    assert code == 2, err
    assert why in err
    assert "poise-no-such" not in err and list(tmp_path.iterdir()) == []


def test_cli_total_mass_sd_the_scale_contradicts_is_refused_before_the_routine(tmp_path,
                                                                              capsys):
    from poise.cli import main

    code = main(["calibrate", "--model", "soft_arm_stiff", "--device", "/dev/poise-no-such",
                 "--out", str(tmp_path / "cal.json"), "--fix", "mass[seg1]",
                 "--total-mass", "0.6", "--total-mass-sd", "0.02"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "total_mass = 0.6 ± 0.02 kg: the total mass depends only on the scale" in err
    assert "(5 standard deviations apart)" in err and "nothing was run" in err
    assert "poise-no-such" not in err and list(tmp_path.iterdir()) == []


def test_cli_total_mass_sd_prints_writes_and_reads_back_the_weighed_total(tmp_path, capsys):
    """``poise calibrate --from-poses FILE --total-mass KG --total-mass-sd KG``: the text, the
    JSON and the calibration file say ``M ± σ_M`` (not "held exactly"), record the sd and the
    identified sum with its standard error, and the file loads as the calibrated model."""
    from poise.calibration import read_calibration
    from poise.calibration.posefile import save_poses
    from poise.cli import main

    _, poses, truth = _noisy("double_pendulum", 7)
    posefile = tmp_path / "dp.poses.json"
    save_poses(posefile, poses, {}, {})
    weighed, sd = round(truth + 0.004, 3), 0.002
    base = ["calibrate", "--model", "double_pendulum", "--from-poses", str(posefile), "--quiet",
            "--total-mass", str(weighed), "--total-mass-sd", str(sd)]
    out = tmp_path / "cal.json"
    assert main([*base, "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"weighed total mass {weighed:g} ± {sd:g} kg" in text and "held exactly" not in text
    model, table = read_calibration(out)
    tm = table["total_mass"]
    assert tm["value"] == weighed and tm["sd"] == sd and tm["unit"] == "kg" and tm["constrained"]
    assert f"{weighed:g} ± {sd:g} kg" in tm["why"]
    assert tm["sum"] == pytest.approx(float(np.sum(model.masses)), rel=1e-12)
    assert 1e-4 < weighed - tm["sum"] < 3 * sd  # pulled towards the scale, not onto it
    assert 0 < tm["sum_std_error"] < sd
    assert table["statistics"]["total_mass_sd"] == sd
    assert table["statistics"]["mass_sum_std_error"] == tm["sum_std_error"]
    assert table["statistics"]["n_free"] == 8  # every unknown free: 7 groups and one offset
    as_json = tmp_path / "cal2.json"
    assert main([*base, "--out", str(as_json), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["statistics"]["total_mass_sd"] == sd
    assert summary["statistics"]["mass_sum_std_error"] == pytest.approx(tm["sum_std_error"])
    assert f"weighed total mass {weighed:g} ± {sd:g} kg" in summary["message"]
