"""Statics calibration on synthetic data: the regressor, the fit, identifiability, files."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from poise.calibration import (
    CalibrationError,
    NotIdentifiableError,
    Pose,
    SettleConfig,
    SettleDetector,
    calibration_document,
    excitation,
    identify,
    parameter_groups,
    plot_report,
    read_calibration,
    statics_regressor,
    synthetic_poses,
    write_calibration,
)
from poise.models import load_model, model_from_dict

MODELS = ["double_pendulum", "tendon_3link", "soft_arm", "soft_arm_soft", "dancer"]


def perturbed(name: str) -> tuple[object, object]:
    """(nominal, truth): stiffness +25 %, masses −15 %, last moment arm of the last tendon +10 %."""
    nominal = load_model(name)
    d = copy.deepcopy(nominal.describe())
    for body in d.get("bodies", d.get("segments")):
        body["stiffness"] *= 1.25
        body["mass"] *= 0.85
        if "inertia" in body:
            body["inertia"] *= 0.85
    C = np.array(d["actuation"]["C"])
    j = nominal.m - 1
    C[j, np.nonzero(C[j])[0][-1]] *= 1.10
    d["actuation"]["C"] = C.tolist()
    return nominal, model_from_dict(d)


def rel_error(truth_model, result) -> dict[str, float]:
    """Relative error of every identified parameter (rest moments: error in rest angle, rad)."""
    reg = statics_regressor(truth_model)
    out = {}
    for k, p in enumerate(result.parameters):
        true = reg.nominal[k]
        if p.kind == "k_rest":
            out[p.name] = abs(p.value - true) / reg.nominal[k - reg.n]
        else:
            out[p.name] = abs(p.value - true) / abs(true)
    return out


@pytest.mark.parametrize("name", MODELS)
def test_regressor_reproduces_G_minus_actuator_force(name):
    model = load_model(name)
    reg = statics_regressor(model)
    rng = np.random.default_rng(1)
    for _ in range(5):
        q = rng.uniform(-0.8, 0.8, model.n)
        tau = rng.normal(size=model.m)
        expected = model.G(q) - model.C[: model.m].T @ tau
        assert np.max(np.abs(reg.rows(q, tau) @ reg.nominal - expected)) < 1e-12
    # π → description → model is the identity at the nominal parameters
    again = reg.model_with(reg.nominal)
    q = rng.uniform(-0.8, 0.8, model.n)
    assert np.allclose(again.G(q), model.G(q), atol=1e-13)


@pytest.mark.parametrize("name,levels", [("double_pendulum", 7), ("soft_arm", 4)])
def test_exact_data_recover_truth(name, levels):
    nominal, truth = perturbed(name)
    poses = synthetic_poses(truth, excitation(nominal, levels=levels))
    result = identify(nominal, poses)
    assert result.identifiable, result.message
    errors = rel_error(truth, result)
    assert max(errors.values()) < 1e-6, errors
    # the calibrated model predicts the measured equilibria, the nominal one does not
    assert result.equilibrium_rms < 1e-8 < 1e-2 < result.nominal_equilibrium_rms


@pytest.mark.parametrize("name,levels", [("double_pendulum", 9), ("soft_arm", 5)])
def test_noisy_data_recover_truth_within_one_percent(name, levels):
    nominal, truth = perturbed(name)
    poses = synthetic_poses(truth, excitation(nominal, levels=levels), q_noise=1e-3,
                            qa_noise=1e-5, tau_noise=0.5, samples=100, seed=4)
    result = identify(nominal, poses)
    assert result.identifiable, result.message
    errors = rel_error(truth, result)
    assert max(errors.values()) < 0.01, errors
    # the standard errors mean something: every error within 5 σ
    reg = statics_regressor(truth)
    for k, p in enumerate(result.parameters):
        if not p.fixed:
            assert abs(p.value - reg.nominal[k]) < 5 * p.std_error + 1e-9, p
    assert np.isfinite(result.holdout_rms) and len(result.holdout_index) > 0


def test_frozen_actuator_is_not_identifiable_and_names_its_parameters():
    nominal, truth = perturbed("soft_arm")
    poses = synthetic_poses(truth, excitation(nominal, levels=4, frozen=(1,)), q_noise=1e-4,
                            samples=10)
    result = identify(nominal, poses)
    assert not result.identifiable
    assert result.description is None
    assert "A[1,seg5]" in result.undetermined and "stiffness[seg4]" in result.undetermined
    assert any("move actuator 1" in a for a in result.advice)
    with pytest.raises(NotIdentifiableError):
        calibration_document(result, poses, model_name="soft_arm")
    with pytest.raises(NotIdentifiableError, match="not identifiable"):
        identify(nominal, poses, raise_on_failure=True)


def test_single_pose_is_rank_deficient():
    nominal, truth = perturbed("double_pendulum")
    poses = synthetic_poses(truth, excitation(nominal, levels=5, frozen=(0,)))
    result = identify(nominal, poses, min_coverage=0.0)
    assert not result.identifiable
    assert result.rank < result.n_free
    assert "stiffness[link1]" in result.undetermined


def test_untied_segment_masses_are_refused_with_noise_and_tying_is_suggested():
    nominal, truth = perturbed("soft_arm")
    poses = synthetic_poses(truth, excitation(nominal, levels=5), q_noise=1e-3, tau_noise=0.5,
                            samples=100, seed=0)
    result = identify(nominal, poses, tie=())
    assert not result.identifiable
    assert "mass[seg1]" in result.undetermined
    assert any("--tie mass" in a for a in result.advice)


def test_parameter_groups_tie_kinds():
    reg = statics_regressor(load_model("soft_arm"))
    groups = parameter_groups(reg, ("mass",))
    assert [g.name for g in groups].count("mass[*]") == 1
    sections = parameter_groups(reg, ("stiffness:section",))
    names = [g.name for g in sections]
    assert "stiffness[seg1+seg2+seg3]" in names and "stiffness[seg4+seg5]" in names
    with pytest.raises(CalibrationError, match="tie"):
        parameter_groups(reg, ("bogus",))


def test_scale_fixed_by_a_known_mass_moment():
    nominal, truth = perturbed("double_pendulum")
    poses = synthetic_poses(truth, excitation(nominal, levels=7))
    true_a2 = statics_regressor(truth).nominal[5]
    result = identify(nominal, poses, fix=f"mass_moment[link2]={true_a2}", kinematics=False)
    assert result.fixed == ("mass_moment[link2]", pytest.approx(true_a2))
    assert max(rel_error(truth, result).values()) < 1e-6
    with pytest.raises(CalibrationError, match="unknown"):
        identify(nominal, poses, fix="nope")


def test_calibration_file_loads_as_the_calibrated_model(tmp_path):
    nominal, truth = perturbed("double_pendulum")
    poses = synthetic_poses(truth, excitation(nominal, levels=7))
    result = identify(nominal, poses)
    doc = calibration_document(result, poses, model_name="double_pendulum",
                               device={"device": "synthetic", "firmware_id": "none"})
    path = write_calibration(tmp_path / "cal.json", doc)
    model, table = read_calibration(path)
    q = np.array([0.4, -0.3])
    assert np.allclose(model.G(q), truth.G(q), atol=1e-9)
    assert np.allclose(model.C[:1], truth.C[:1], atol=1e-12)
    assert table["provenance"]["package_version"]
    assert table["provenance"]["device"] == "synthetic"
    assert len(table["poses"]) == len(poses)
    assert table["statistics"]["rank"] == result.rank
    assert {p["name"] for p in table["parameters"]} >= {"stiffness[link1]", "A[0,link2]"}
    json.loads(path.read_text())  # plain JSON
    with pytest.raises(CalibrationError, match=r"\.json"):
        write_calibration(tmp_path / "cal.toml", doc)


def test_pose_round_trip():
    p = Pose(qa_ref=np.array([0.01]), q=np.array([0.1, 0.2]), qa=np.array([0.0101]),
             tau=np.array([3.0]), direction="unloading", settled=False, settle_time=1.5)
    back = Pose.from_dict(json.loads(json.dumps(p.to_dict())))
    assert back.direction == "unloading" and not back.settled
    assert np.allclose(back.q, p.q)


def test_excitation_visits_every_pose_loading_then_unloading():
    model = load_model("soft_arm")
    refs = excitation(model, levels=3)
    loading = [tuple(r) for r, d in refs if d == "loading"]
    unloading = [tuple(r) for r, d in refs if d == "unloading"]
    assert len(loading) == 9 and len(set(loading)) == 9
    assert unloading == loading[-2::-1]
    lo, hi = model.qa_min, model.qa_max
    assert all(np.all(r >= lo) and np.all(r <= hi) for r, _ in refs)
    rnd = excitation(model, kind="random", count=6, seed=2)
    assert len(rnd) == 11


def test_settle_detector_waits_for_a_slow_swing_to_die_out():
    cfg = SettleConfig(window=0.4, hold=0.3)
    det = SettleDetector(cfg, np.array([1.0]))
    rng = np.random.default_rng(0)
    t_settled = None
    for k in range(4000):
        t = k * 0.002
        q = 0.05 * np.exp(-3.0 * t) * np.cos(2 * np.pi * t) + 1e-4 * rng.standard_normal()
        if det.add(t, np.array([q]), np.zeros(1), np.zeros(1)):
            t_settled = t
            break
    assert t_settled is not None
    # by then the swing amplitude is below the change tolerance
    assert 0.05 * np.exp(-3.0 * t_settled) < cfg.change_tol


def test_report_figure_is_written(tmp_path):
    nominal, truth = perturbed("soft_arm")
    poses = synthetic_poses(truth, excitation(nominal, levels=3), q_noise=1e-4, samples=5)
    result = identify(nominal, poses)
    out = plot_report(result, poses, tmp_path / "report.png")
    assert out.stat().st_size > 10_000


def test_controller_config_uses_the_calibration_file_as_its_statics_model(tmp_path):
    config = pytest.importorskip("poise.controller.config")
    nominal, truth = perturbed("double_pendulum")
    poses = synthetic_poses(truth, excitation(nominal, levels=7))
    result = identify(nominal, poses)
    path = write_calibration(tmp_path / "cal.json", calibration_document(
        result, poses, model_name="double_pendulum"))
    built = config.build_model(config.ModelConfig(name="double_pendulum",
                                                  calibration=str(path)))
    q = np.array([0.3, 0.1])
    assert np.allclose(built.model.G(q), truth.G(q), atol=1e-9)
    assert built.calibration["format"] == "poise-calibration/1"
