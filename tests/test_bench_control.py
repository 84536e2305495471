"""``poise bench control`` (issue 14 §4): the protocol's targets are held configurations, a
case measures what it says, and the command writes its table and JSON."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from poise.benchmarks import control
from poise.cli import main
from poise.controller.simulate import SimulatedLoop
from poise.models.actuation import blocks
from poise.motion.planner import plan_target


def test_targets_are_stable_held_configurations_the_planner_reaches():
    loop = SimulatedLoop(control.config_for("tendon_3link", "ff", "alg1"))
    model = loop.model
    targets = control.reachable_targets(model, loop.limits.qa_min, loop.limits.qa_max, 5, 3)
    assert len({tuple(np.round(x, 9)) for x in targets}) == 5
    for x in targets:
        plan = plan_target(model, x, [np.zeros(model.n)], 1e-4)
        assert plan.reachable and plan.error < 1e-4
        b = blocks(model, plan.q_goal)
        assert np.linalg.norm(b.Gu) < 1e-6  # held: nothing pushes along qu
        assert np.linalg.eigvalsh(0.5 * (b.Huu + b.Huu.T))[0] > 0  # stable
        lo, hi = loop.limits.qa_min, loop.limits.qa_max
        inner = 0.5 * (1 - control.INNER) * (hi - lo)
        assert np.all(b.qa >= lo + inner - 1e-6) and np.all(b.qa <= hi - inner + 1e-6)
    # the same seed, the same targets (deterministic protocol)
    again = control.reachable_targets(model, loop.limits.qa_min, loop.limits.qa_max, 5, 3)
    assert all(np.array_equal(a, b) for a, b in zip(targets, again, strict=True))


def test_a_case_reaches_and_holds_each_target_and_reports_what_it_measured():
    out = control.run_case("soft_arm_stiff", "fb", "alg1", count=2, seed=5)
    assert out["success_pct"] == 100.0
    eps = out["band_m"]
    assert eps == control.SUCCESS_ABS  # reach 1 m: 3 mm is the smaller
    for r in out["targets"]:
        assert r["success"] and r["error_m"] <= eps
        # nothing settles before the arm could have got there at the allowed speed
        assert r["settle_s"] >= r["move_s"]
        assert r["settle_s"] <= r["goal_s"]  # the goal: within 3 periods of the slowest mode
        assert r["peak_rate"] <= 1.0 + 1e-9  # the safety layer's rate limit holds
        assert r["residual"] < 1e-6  # the prediction stays on E
        assert math.isfinite(r["overshoot_pct"]) and r["overshoot_m"] >= 0
    assert out["within_3T_pct"] == 100.0
    # the goal counts from the end of the fastest move: never less than from the command
    assert out["within_3T_after_move_pct"] == 100.0
    assert out["gains"]["gamma"] > 0


def test_bench_control_command_writes_table_and_json(tmp_path, capsys):
    path = tmp_path / "control.json"
    code = main(["bench", "control", "--models", "double_pendulum", "--modes", "ff",
                 "--algorithms", "alg2", "--targets", "1", "--json", str(path), "--quiet"])
    assert code == 0
    text = capsys.readouterr().out
    assert "double_pendulum  ff   alg2" in text and "max/3T" in text and "≤3T %" in text
    result = json.loads(path.read_text())
    (case,) = result["cases"]
    assert case["model"] == "double_pendulum" and len(case["targets"]) == 1
    assert case["success_pct"] == 100.0 and result["load_avg"]
    assert main(["bench", "control", "--targets", "0", "--quiet"]) == 2


def _stiffer(tmp_path, name: str, factor: float):
    """A copy of model ``name``'s file with every joint spring ``factor`` times stiffer."""
    import re

    from poise.models.registry import builtin_path

    text = builtin_path(name).read_text()
    text = re.sub(r"^stiffness = ([0-9.]+)",
                  lambda m: f"stiffness = {round(float(m.group(1)) * factor, 9)!r}", text,
                  flags=re.M)
    path = tmp_path / f"{name}_stiffer.toml"
    path.write_text(text)
    return path


def test_a_plant_that_differs_from_the_model_leaves_ff_off_target_and_fb_removes_it(
        tmp_path, capsys):
    """``--plant``: the double pendulum's springs 10 % stiffer than the controller's model.
    Feedforward ends where the model says the target is: a static error above the band on
    every target (the springs deflect less). Feedback ends at least four times closer; the
    table and the JSON say what differs."""
    plant = _stiffer(tmp_path, "double_pendulum", 1.1)
    ff = control.run_case("double_pendulum", "ff", "alg1", count=3, plant=str(plant))
    fb = control.run_case("double_pendulum", "fb", "alg1", count=3, plant=str(plant))
    assert ff["plant_differs"] == ["bodies[0].stiffness: 12.0 → 13.2",
                                   "bodies[1].stiffness: 8.0 → 8.8"]
    eps = ff["band_m"]
    for off, on in zip(ff["targets"], fb["targets"], strict=True):
        assert not off["success"] and off["error_m"] > eps, off
        assert on["error_m"] < 0.25 * off["error_m"], (off, on)
    nominal = control.run_case("double_pendulum", "ff", "alg1", count=3)
    assert nominal["success_pct"] == 100.0 and nominal["plant_differs"] == []
    path = tmp_path / "control.json"
    code = main(["bench", "control", "--models", "double_pendulum", "--modes", "ff",
                 "--algorithms", "alg1", "--targets", "1", "--plant",
                 f"double_pendulum={plant}", "--json", str(path), "--quiet"])
    assert code == 0
    assert "double_pendulum: the simulated robot is" in capsys.readouterr().out
    result = json.loads(path.read_text())
    assert result["plants"] == {"double_pendulum": str(plant)}
    assert result["cases"][0]["plant_differs"] == ff["plant_differs"]
    for bad in ("double_pendulum", f"dancer={plant}", "double_pendulum=/no/such/file"):
        assert main(["bench", "control", "--models", "double_pendulum", "--targets", "1",
                     "--plant", bad, "--quiet"]) == 2


def test_targets_are_the_plants_own_held_configurations(tmp_path):
    """With ``--plant`` the targets are held by the simulated robot (its true springs and
    masses) inside its actuator range: the nominal model's targets could lie past what the
    true robot can reach, and no controller could meet them."""
    from poise.models import load_model
    from poise.sim.named import write_named

    plant = write_named("tendon_3link", "mixed15", tmp_path)
    out = control.run_case("tendon_3link", "ff", "alg1", count=2, plant=plant)
    loop = SimulatedLoop(control.config_for("tendon_3link", "ff", "alg1"))
    lo, hi = loop.limits.qa_min, loop.limits.qa_max
    truth = control.reachable_targets(load_model(plant), lo, hi, 2, control.SEED)
    nominal = control.reachable_targets(loop.model, lo, hi, 2, control.SEED)
    got = [np.array(t["target"]) for t in out["targets"]]
    assert all(np.array_equal(a, b) for a, b in zip(got, truth, strict=True))
    assert not any(np.allclose(a, b) for a, b in zip(got, nominal, strict=True))


def test_calibrated_mode_calibrates_on_the_plant_and_feedforward_lands_in_the_band(tmp_path):
    """``--plant mixed15 --calibrated``: ``poise calibrate``'s routine runs on the plant first,
    and feedforward with the identified model lands every target within the band, where the
    nominal model misses them; the JSON keeps the calibration and what it saw."""
    path = tmp_path / "control.json"
    args = ["bench", "control", "--models", "double_pendulum", "--modes", "ff",
            "--algorithms", "alg1", "--targets", "3", "--plant", "mixed15", "--quiet"]
    assert main([*args, "--calibrated", "--json", str(path)]) == 0
    result = json.loads(path.read_text())
    record = result["calibrations"]["double_pendulum"]
    assert record["file"] and record["poses"] == 9
    rms = record["equilibrium_rms_rad"]
    assert rms["calibrated"] < 0.01 * rms["nominal"]
    assert [r["coordinate"] for r in record["static_residuals"]["band"]] == ["link1", "link2"]
    # the plant was weighed: its true total mass as a scale reads it, held by the fit
    weighed = record["total_mass"]
    assert weighed["true_kg"] == pytest.approx(sum(record["masses_kg"]["plant"]), abs=1e-12)
    assert weighed["weighed_kg"] == float(f"{weighed['true_kg']:.3g}") != 2.0  # not nominal
    assert sum(record["masses_kg"]["identified"]) == pytest.approx(weighed["weighed_kg"],
                                                                   abs=1e-9)
    (case,) = result["cases"]
    assert case["calibration"] == record["file"]
    assert case["success_pct"] == 100.0
    assert case["final_error"]["max"] <= case["band_m"]
    nominal = tmp_path / "nominal.json"
    assert main([*args, "--json", str(nominal)]) == 0
    (off,) = json.loads(nominal.read_text())["cases"]
    assert [t["target"] for t in off["targets"]] == [t["target"] for t in case["targets"]]
    assert off["final_error"]["max"] > 3 * case["band_m"]
    # calibrating needs a plant to calibrate on
    assert main(["bench", "control", "--models", "double_pendulum", "--calibrated",
                 "--quiet"]) == 2


def test_a_target_the_models_refuses_is_a_failure_with_its_reason_not_the_end_of_the_run(
        tmp_path):
    """The dancer with springs 10 % stiffer holds a centre of mass that its nominal model
    finds unstable there: that target fails, says why, and the next one runs."""
    from poise.sim.named import write_named

    plant = write_named("dancer", "stiff10", tmp_path)
    refused = np.array([0.0007430089784517535, 1.0572458913075242])
    held = np.array([0.1, 0.95])
    out = control.run_case("dancer", "ff", "alg1", [refused, held], plant=plant)
    first, second = out["targets"]
    assert not first["success"] and "unstable" in first["refused"]
    assert first["error_m"] > 0.0
    assert second["refused"] == "" and second["error_m"] < first["error_m"]
    assert out["refused"] == [0] and out["success_pct"] <= 50.0
    json.dumps(out, allow_nan=False)  # the record stays valid JSON
