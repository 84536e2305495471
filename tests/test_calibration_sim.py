"""Statics calibration against the virtual device with a known truth.

The device runs a robot whose parameters differ from the nominal model (stiffness +25 %,
masses −15 %, the last tendon's last moment arm +10 %). Its joint damping is raised (×4 for the
double pendulum, ×5 for the soft arm; damping does not enter the statics) so that every pose
settles in ~2–3 s of simulated time and the suite stays fast; with the nominal damping the
routine is the same, only slower.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import threading

import numpy as np
import pytest

from poise.calibration import (
    PlantDevice,
    SettleConfig,
    excitation,
    identify,
    run_excitation,
    safe_range,
    statics_regressor,
)
from poise.ik.held import algorithm1
from poise.ik.statics import solve_statics
from poise.models import load_model, model_from_dict
from poise.models.actuation import Ga

sim = pytest.importorskip("poise.sim")

DAMPING = {"double_pendulum": 4.0, "soft_arm": 5.0}
LEVELS = {"double_pendulum": 4, "soft_arm": 2}
FAST = SettleConfig(window=0.3, hold=0.2, average=0.2)


def truth_description(name: str) -> dict:
    nominal = load_model(name)
    d = copy.deepcopy(nominal.describe())
    for body in d.get("bodies", d.get("segments")):
        body["stiffness"] *= 1.25
        body["mass"] *= 0.85
        body["damping"] *= DAMPING[name]
        if "inertia" in body:
            body["inertia"] *= 0.85
    C = np.array(d["actuation"]["C"])
    j = nominal.m - 1
    C[j, np.nonzero(C[j])[0][-1]] *= 1.10
    d["actuation"]["C"] = C.tolist()
    return d


def max_rel_error(truth_model, result) -> tuple[float, dict[str, float]]:
    """Largest relative error over stiffness, gravity and moment-arm parameters, and the rest
    angles' absolute error [rad]."""
    reg = statics_regressor(truth_model)
    errors = {}
    for k, p in enumerate(result.parameters):
        true = reg.nominal[k]
        if p.kind == "k_rest":
            errors[p.name] = abs(p.value - true) / reg.nominal[k - reg.n]
        else:
            errors[p.name] = abs(p.value - true) / abs(true)
    return max(errors.values()), errors


@pytest.fixture(scope="module", params=["double_pendulum", "soft_arm"])
def run(request, tmp_path_factory):
    """One in-process routine per model; the noisy sensors and the true state are both
    recorded (the same run read by realistic sensors and by perfect ones)."""
    name = request.param
    d = truth_description(name)
    path = tmp_path_factory.mktemp(name) / "truth.json"
    path.write_text(json.dumps(d))
    nominal = load_model(name)
    plant = sim.make_plant(name, str(path), noise=True, seed=7)
    lo, hi = safe_range(nominal)
    result = run_excitation(PlantDevice(plant, record_truth=True),
                            excitation(nominal, levels=LEVELS[name]), settle=FAST,
                            qa_range=(lo, hi), speed=hi - lo)
    return name, nominal, model_from_dict(d), result, path


def test_routine_completes_and_every_pose_settles(run):
    _, _, _, result, _ = run
    assert result.status == "complete", result.reason
    assert len(result.poses) == result.planned
    assert all(p.settled for p in result.poses)
    assert {p.direction for p in result.poses} == {"loading", "unloading"}


def test_recovers_truth_within_3_percent_with_sensor_noise(run):
    name, nominal, truth, result, _ = run
    ident = identify(nominal, result.poses)
    assert ident.identifiable, ident.message
    worst, errors = max_rel_error(truth, ident)
    print(name, "noisy", {k: round(v, 5) for k, v in errors.items()})
    assert worst < 0.03, errors
    assert ident.equilibrium_rms < 0.05 * ident.nominal_equilibrium_rms


def test_recovers_truth_within_half_a_percent_without_noise(run):
    name, nominal, truth, result, _ = run
    ident = identify(nominal, result.true_poses)
    assert ident.identifiable, ident.message
    worst, errors = max_rel_error(truth, ident)
    print(name, "noise-free", {k: round(v, 6) for k, v in errors.items()})
    assert worst < 0.005, errors


def _settle_true_robot(plant, qa: np.ndarray, tau_ff: np.ndarray,
                       seconds: float = 4.0) -> np.ndarray:
    """Command ``qa`` with the model's holding effort as feed-forward (seed 000's low-level law
    ``τ = G_a(q̄) + K_P (q̄a − qa) − K_D q̇a``) along a cosine ramp, let the simulated robot
    settle, return its true q."""
    start = plant.sim.qa
    plant.set_mode("position")
    for k in range(1, 251):
        s = 0.5 * (1 - np.cos(np.pi * k / 250))
        plant.set_actuator_command(list(start + s * (qa - start)), list(s * tau_ff))
        plant.step(0.002)
    plant.step(seconds)
    return plant.sim.q


def test_algorithm1_feedforward_is_5x_more_accurate_with_the_calibrated_model(run):
    name, nominal, truth, result, path = run
    ident = identify(nominal, result.poses)
    calibrated = model_from_dict(ident.description)
    # targets the true robot can reach: the task at true equilibria inside the actuator range
    lo, hi = safe_range(nominal, 0.2)
    qa_targets = [lo + 0.3 * (hi - lo), lo + 0.8 * (hi - lo)]
    errors = {"nominal": [], "calibrated": []}
    for qa_star in qa_targets:
        q_star = solve_statics(truth, qa_star, np.zeros(truth.n - truth.m)).q
        target = truth.fk(q_star)
        for label, model in (("nominal", nominal), ("calibrated", calibrated)):
            sol = algorithm1(model, target)
            plant = sim.make_plant(name, str(path), noise=False)
            q = _settle_true_robot(plant, np.asarray(sol.qa), Ga(model, sol.q))
            errors[label].append(float(np.linalg.norm(truth.fk(q) - target)))
    print(name, "task errors [m]", errors)
    assert 5 * max(errors["calibrated"]) < min(errors["nominal"]), errors


def test_estop_stops_the_routine_and_keeps_the_poses():
    nominal = load_model("double_pendulum")
    plant = sim.make_plant("double_pendulum", noise=False)
    estop = threading.Event()
    done = []

    def progress(k, total, pose, phase):
        if pose is not None:
            done.append(pose)
            estop.set()  # e-stop right after the first pose

    result = run_excitation(PlantDevice(plant), excitation(nominal, levels=3),
                            settle=SettleConfig(timeout=1.0), progress=progress, estop=estop)
    assert result.status == "estop"
    assert len(result.poses) == 1 == len(done)
    assert plant.mode == "disabled"  # like the controller: actuators off, latched


def test_abort_disarms_cleanly_and_keeps_the_poses():
    nominal = load_model("double_pendulum")
    plant = sim.make_plant("double_pendulum", noise=False)
    abort = threading.Event()

    def progress(k, total, pose, phase):
        if pose is not None:
            abort.set()

    result = run_excitation(PlantDevice(plant), excitation(nominal, levels=3),
                            settle=SettleConfig(timeout=1.0), progress=progress, abort=abort)
    assert result.status == "aborted"
    assert len(result.poses) == 1
    assert plant.mode == "hold"


def test_cli_calibrates_through_the_pty_of_poise_device_sim(tmp_path):
    """The real serial path: ``poise calibrate --device sim`` spawns ``poise device sim`` and
    talks to it over its pty; the written file loads as a model and matches the truth."""
    d = truth_description("double_pendulum")
    params = tmp_path / "truth.json"
    params.write_text(json.dumps(d))
    out = tmp_path / "cal.json"
    report = tmp_path / "cal.png"
    cmd = [sys.executable, "-m", "poise", "calibrate", "--model", "double_pendulum",
           "--device", "sim", "--sim-params", str(params), "--levels", "4", "--out", str(out),
           "--report", str(report), "--json", "--settle-window", "0.3", "--hold", "0.2",
           "--average", "0.2", "--velocity-tol", "4e-3", "--change-tol", "6e-4"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["ok"] and summary["poses"] == 7
    assert report.stat().st_size > 10_000
    # the measured poses were saved (before the fit) where --from-poses reads them
    assert summary["poses_file"] == str(tmp_path / "cal.poses.json")
    saved = json.loads((tmp_path / "cal.poses.json").read_text())
    assert len(saved["poses"]) == 7 and saved["routine"]["status"] == "complete"
    assert saved["device"]["firmware_id"].startswith("poise-sim")
    model = load_model(out)
    table = json.loads(out.read_text())["calibration"]
    assert table["provenance"]["firmware_id"].startswith("poise-sim")
    assert table["provenance"]["device"].startswith("sim:/dev/")
    truth = model_from_dict(d)
    q = np.array([0.5, 0.2])
    assert np.allclose(model.G(q), truth.G(q), rtol=0.03, atol=0.03)
    reg_t, reg_c = statics_regressor(truth), statics_regressor(model)
    for k, p in enumerate(reg_t.params):
        if p.kind != "k_rest":
            assert abs(reg_c.nominal[k] / reg_t.nominal[k] - 1) < 0.03, p.name


def test_cli_refuses_a_poor_excitation_with_the_reason(tmp_path):
    params = tmp_path / "truth.json"
    params.write_text(json.dumps(truth_description("soft_arm")))
    cmd = [sys.executable, "-m", "poise", "calibrate", "--model", "soft_arm",
           "--device", "inprocess", "--sim-params", str(params), "--levels", "2", "--freeze",
           "1", "--out", str(tmp_path / "cal.json"), "--timeout", "8", "--settle-window", "0.3",
           "--hold", "0.2", "--average", "0.2"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "not identifiable" in proc.stderr
    assert "move actuator 1" in proc.stderr
    assert not (tmp_path / "cal.json").exists()
    assert (tmp_path / "cal.poses.json").exists()
