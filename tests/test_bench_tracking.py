"""``poise bench tracking`` (issue 33): the references are what they say, the lag estimate
finds a known shift, the goal check tells physics from unreachable references, and the
quick bench writes finite figures in its schema with the double pendulum within its goal."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from poise.benchmarks import tracking
from poise.benchmarks.plants import parse_plants, stiffer
from poise.benchmarks.tracking_protocol import LEAD_IN_S, STEP_S, STEPS
from poise.benchmarks.tracking_refs import Reference, quasi_static, steady_lag
from poise.benchmarks.tracking_report import check_goals
from poise.cli import main
from poise.sim.params import load_physical

# ------------------------------------------------------------------ references and lag


def test_a_circle_leads_in_from_the_arm_to_its_first_point_then_keeps_its_radius():
    start, centre = np.array([0.21, -0.9]), np.array([0.2, -0.9])
    ref = Reference("circle", start, centre, 0.05, 0.25)
    assert np.allclose(ref.at(0.0), start) and np.allclose(ref.at(-1.0), start)
    assert np.allclose(ref.at(LEAD_IN_S), centre + np.array([0.05, 0.0]))
    lo, hi = ref.window
    assert (lo, hi) == pytest.approx((LEAD_IN_S + 4.0, LEAD_IN_S + 8.0))
    radius = np.linalg.norm(ref.values(np.linspace(lo, hi, 200)) - centre, axis=1)
    assert np.allclose(radius, 0.05)
    # minimum jerk: at rest at both ends of the lead-in
    h = 1e-4
    for t in (h, LEAD_IN_S - h):
        assert np.linalg.norm(ref.at(t + h) - ref.at(t - h)) / (2 * h) < 1e-3


def test_every_step_of_the_sequence_is_of_the_amplitude_and_the_window_follows_the_last():
    ref = Reference("steps", np.array([0.5]), np.array([0.5]), 0.2)
    times = LEAD_IN_S + STEP_S * np.arange(STEPS + 1) + 0.5 * STEP_S
    levels = ref.values(np.concatenate([[LEAD_IN_S - 1e-6], times]))[:, 0]
    assert np.allclose(np.abs(np.diff(levels[1:STEPS + 1])), 0.2)
    assert ref.window == pytest.approx((LEAD_IN_S + (STEPS - 1) * STEP_S,
                                        LEAD_IN_S + STEPS * STEP_S))


@pytest.mark.parametrize("shift", [0.23, -0.41, 0.0])
def test_the_lag_estimate_finds_a_known_shift(shift):
    """A circle delayed by ``shift`` with 1 % noise: τ within 5 ms (the grid is 10 ms), and
    the RMS left at τ is the noise's."""
    ref = Reference("circle", np.zeros(2), np.zeros(2), 1.0, 0.2)
    t = np.arange(7.0, 12.0, 0.004)
    rng = np.random.default_rng(1)
    x = ref.values(t - shift) + 0.01 * rng.standard_normal((t.size, 2))
    tau, rms, at_bound = steady_lag(t, x, ref.values)
    assert not at_bound
    assert abs(tau - shift) < 5e-3, tau
    assert rms < 0.02


def test_a_lag_beyond_the_range_is_reported_at_its_bound():
    ref = Reference("sine", np.zeros(1), np.zeros(1), 1.0, 0.1)
    t = np.arange(10.0, 20.0, 0.01)
    tau, _, at_bound = steady_lag(t, ref.values(t - 1.6), ref.values, max_shift=1.0)
    assert at_bound and tau == pytest.approx(1.0)


def test_the_quasi_static_estimate_is_the_second_order_response():
    """Well below the mode the arm follows with the damping's lag, |1 − H| ≈ 2ζr; near it
    the error is of the order of the amplitude; feedback faster than the reference removes
    most of it."""
    slow = quasi_static(0.01, 10.0, 0.2)
    near = quasi_static(0.1, 2 * math.pi * 0.14, 0.29)
    r = 2 * math.pi * 0.01 / 10.0
    assert slow["error_pct"] == pytest.approx(100 * 2 * 0.2 * r, rel=0.01)
    assert slow["lag_s"] == pytest.approx(2 * 0.2 / 10.0, rel=0.01)  # 2ζ/ω_n
    assert near["error_pct"] > 50
    fed_back = quasi_static(0.1, 2 * math.pi * 0.14, 0.29, gain=10.0)
    assert fed_back["rms_pct"] < 0.1 * near["rms_pct"]


# ------------------------------------------------------------------ cases, plants, goals


def test_sines_run_on_one_dimensional_tasks_circles_on_two_and_a_plant_doubles_the_cases():
    cases = tracking.cases_for(["double_pendulum", "soft_arm_stiff"], ["fb"], ["alg1"],
                               [0.1, 0.25], ["sine", "circle", "steps"], ["stream"])
    kinds = {(c.robot, c.kind) for c in cases}
    assert kinds == {("double_pendulum", "sine"), ("double_pendulum", "steps"),
                     ("soft_arm_stiff", "circle"), ("soft_arm_stiff", "steps")}
    assert len(cases) == 6
    with_plant = tracking.cases_for(["double_pendulum"], ["fb"], ["alg1"], [0.1], ["sine"],
                                    ["stream"], {"double_pendulum": "x.toml"})
    assert [c.plant for c in with_plant] == [None, "x.toml"]
    drawn = tracking.with_traces(cases)
    assert {c.ident for c in drawn if c.trace} == {
        "double_pendulum/fb/alg1/model/sine/0.1Hz/stream",
        "soft_arm_stiff/fb/alg1/model/circle/0.1Hz/stream"}


def test_plant_by_name_alone_is_the_model_with_every_spring_ten_percent_stiffer(tmp_path):
    plants = parse_plants(["double_pendulum"],
                          lambda name: stiffer(name, 1.1, tmp_path))
    _, _, differs = load_physical("double_pendulum", plants["double_pendulum"])
    assert differs == ["bodies[0].stiffness: 12.0 → 13.2", "bodies[1].stiffness: 8.0 → 8.8"]
    assert parse_plants(["dancer=a.toml"]) == {"dancer": "a.toml"}
    with pytest.raises(ValueError, match="NAME=FILE"):
        parse_plants(["dancer"])  # bench control's: a file is needed


def _case(**over):
    case = {"id": "r/fb/alg1/model/circle/0.1Hz/stream", "robot": "r", "as": "stream",
            "mode": "fb", "kind": "circle", "freq_hz": 0.1, "plant_differs": [], "status": "ok",
            "reason": "", "rms_pct": 50.0, "held_back": False, "clamped_pct": 0.0,
            "at_limit_pct": 0.0, "flags": "", "peak_rate": 0.2, "gains": {"lead": 0.15},
            "slowest_mode": {"omega": 0.89, "zeta": 0.29, "hz": 0.14},
            "quasi_static": quasi_static(0.1, 0.89, 0.29, 0.15)}
    case.update(over)
    return case


def test_the_goal_check_tells_physics_from_references_out_of_reach():
    checks = check_goals([_case(), _case(id="b", held_back=True, clamped_pct=80.0),
                          _case(id="c", rms_pct=4.0)])
    first = [c for c in checks if c["goal"].startswith("stream RMS ≤ 10 %")]
    by_id = {c["case"]: c for c in first}
    assert by_id["r/fb/alg1/model/circle/0.1Hz/stream"]["met"] is False
    assert "the goal is beyond it" in by_id["r/fb/alg1/model/circle/0.1Hz/stream"]["why"]
    assert by_id["b"]["met"] is None and "held back 80 %" in by_id["b"]["why"]
    assert "at any amplitude" in by_id["b"]["why"]  # the physics said even when out of reach
    assert by_id["c"]["met"] is True
    not_run = [c for c in checks if c["case"] is None]
    assert {c["goal"].split(" RMS")[0] for c in not_run} == {"stream", "trajectory"}


# ------------------------------------------------------------------ the command


def test_quick_bench_writes_finite_figures_and_the_double_pendulum_meets_its_goal(
        tmp_path, capsys):
    """``--quick`` on the double pendulum: fb, alg1, a 0.1 Hz sine and the steps, streamed;
    every figure finite, in the JSON schema, and the streamed sine's RMS within 10 % of its
    amplitude (issue 33's goal)."""
    path = tmp_path / "tracking.json"
    code = main(["bench", "tracking", "--quick", "--robots", "double_pendulum", "--as",
                 "stream", "--json", str(path), "--quiet"])
    assert code == 0
    text = capsys.readouterr().out
    assert "double_pendulum  fb   alg1 model sine" in text and "goal stream RMS" in text
    result = json.loads(path.read_text())
    assert result["benchmark"] == "tracking" and result["schema"] == 1
    assert {"protocol", "robots", "cases", "goals", "load_avg", "trajectory"} <= set(result)
    assert [c["kind"] for c in result["cases"]] == ["sine", "steps"]
    for c in result["cases"]:
        assert c["status"] == "ok" and c["plant"] == "model" and c["amplitude"] == 0.2
        for key in ("rms", "max", "rms_pct", "max_pct", "lag_s", "rms_shifted_pct",
                    "peak_rate", "clamped_pct", "at_limit_pct"):
            assert math.isfinite(c[key]), (key, c[key])
        assert c["rms"] <= c["max"] and abs(c["lag_s"]) <= 1.0
        assert c["peak_rate"] <= 1.0 + 1e-9  # the safety layer's rate limit holds
    sine = result["cases"][0]
    assert sine["id"] == "double_pendulum/fb/alg1/model/sine/0.1Hz/stream"
    assert sine["rms_pct"] <= 10.0 and not sine["held_back"]
    assert sine["slowest_mode"]["omega"] > 0
    (goal,) = [g for g in result["goals"] if g["case"] == sine["id"]]
    assert goal["met"] is True and goal["limit_pct"] == 10.0
    assert result["robots"]["double_pendulum"]["quasi_static"]["0.1"]["r"] > 0


def test_bench_tracking_refuses_bad_options():
    assert main(["bench", "tracking", "--workers", "0", "--quiet"]) == 2
    assert main(["bench", "tracking", "--quick", "--robots", "double_pendulum",
                 "--plant", "dancer", "--quiet"]) == 2  # a plant for a robot not run
    with pytest.raises(SystemExit):
        main(["bench", "tracking", "--kinds", "square"])


def test_the_references_go_about_a_centre_given_instead_of_the_examples_target():
    (case,) = tracking.cases_for(["double_pendulum"], ["fb"], ["alg1"], [0.1], ["sine"],
                                 ["stream"], centre=[0.4])
    assert case.centre == (0.4,)
    with pytest.raises(ValueError, match="2 coordinates"):
        tracking.cases_for(["soft_arm_stiff"], ["fb"], ["alg1"], [0.1], ["circle"],
                           ["stream"], centre=[0.4])
    (out,) = tracking.run([case])["cases"]
    assert out["centre"] == pytest.approx([0.4]) and out["status"] == "ok"
    assert out["rms_pct"] <= 10.0  # followed there within the goal, as about 0.5


def test_trajectory_cases_run_through_run_trajectory_and_a_refusal_is_reported():
    """The trajectory path through ``SimulatedLoop.run_trajectory``: a 0.1 Hz sine followed
    within the goal in ff on the model (timed from the trajectory's own time 0, after the
    preview's lead), a step sequence refused as too fast; the bench reports the refusal as
    the case's status, and the goal check counts a refused case as missed."""
    cases = tracking.cases_for(["double_pendulum"], ["ff"], ["alg1"], [0.1],
                               ["sine", "steps"], ["trajectory"])
    result = tracking.run(cases)
    assert result["trajectory"] == "available"
    sine, steps = result["cases"]
    assert sine["status"] == "ok" and sine["rms_pct"] <= 3.0, sine.get("rms_pct")
    assert abs(sine["lag_s"]) < 0.05  # on time: the preview leaves no lag
    assert steps["status"] == "refused" and "too fast" in steps["reason"]
    check = check_goals([{**steps, "freq_hz": 0.1, "kind": "sine"}])
    (refused,) = [c for c in check if c["case"] == steps["id"]]
    assert refused["met"] is False and refused["why"].startswith("refused")


def test_a_named_plant_runs_every_robot_of_the_run_on_that_plant(tmp_path):
    """``--plant friction``: the named plant (poise.sim.named) for every robot of the run;
    the case says which plant and its differences, and the streamed sine is still followed
    within the goal through the plant's stiction (feedback on the measured q)."""
    path = tmp_path / "t.json"
    assert main(["bench", "tracking", "--robots", "double_pendulum", "--modes", "fb",
                 "--algorithms", "alg1", "--freqs", "0.1", "--kinds", "sine", "--as", "stream",
                 "--plant", "friction", "--json", str(path), "--quiet"]) == 0
    result = json.loads(path.read_text())
    assert result["plants"] == {"double_pendulum": "double_pendulum=friction (named plant, "
                                                   "built in)"}
    model, off = result["cases"]
    assert model["plant"] == "model" and off["plant"] == result["plants"]["double_pendulum"]
    assert any(d.startswith("plant.friction.stiction") for d in off["plant_differs"])
    assert off["status"] == "ok" and off["rms_pct"] <= 10.0
