"""The DH family and the Franka Emika Panda: published FK, Jacobian vs finite differences,
description round trip, FK → IK → FK."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from poise.ik import orientation_error, quat_from_matrix, solve
from poise.models import ModelError, load_model, model_from_dict
from poise.models.dh import DHChain

PANDA = load_model("panda")


def test_panda_is_a_seven_joint_pose_model_with_published_limits():
    assert isinstance(PANDA, DHChain)
    assert (PANDA.n, PANDA.task_dim, PANDA.task_kind) == (7, 6, "pose")
    assert np.allclose(PANDA.q_min, [-2.8973, -1.7628, -2.8973, -3.0718, -2.8973, -0.0175,
                                     -2.8973])
    assert np.allclose(PANDA.q_max, [2.8973, 1.7628, 2.8973, -0.0698, 2.8973, 3.7525, 2.8973])


def test_panda_flange_at_zero_configuration_matches_published_geometry():
    T = PANDA.pose(np.zeros(7))
    # stretched up: x = a4 - a5 + a7 = 0.088, z = 0.333 + 0.316 + 0.384 - 0.107 = 0.926
    assert np.allclose(T[:3, 3], [0.088, 0.0, 0.926], atol=1e-12)
    assert np.allclose(T[:3, :3], np.diag([1.0, -1.0, -1.0]), atol=1e-12)


def test_fast_pose_agrees_with_product_of_dh_matrices():
    rng = np.random.default_rng(0)
    for _ in range(10):
        q = rng.uniform(PANDA.q_min, PANDA.q_max)
        assert np.allclose(PANDA.frames(q)[-1], PANDA.pose(q), atol=1e-13)


def test_panda_jacobian_matches_finite_differences_of_the_pose():
    rng = np.random.default_rng(1)
    h = 1e-6
    for _ in range(20):
        q = rng.uniform(PANDA.q_min, PANDA.q_max)
        J = PANDA.task_jacobian(q)
        for i in range(7):
            dq = np.zeros(7)
            dq[i] = h
            Tp, Tm = PANDA.pose(q + dq), PANDA.pose(q - dq)
            v = (Tp[:3, 3] - Tm[:3, 3]) / (2 * h)
            # angular velocity from the rotation between the two poses: R+ R-ᵀ = exp(2h [ω])
            eps, angle = orientation_error(Tp[:3, :3], Tm[:3, :3])
            w = eps / np.linalg.norm(eps) * angle / (2 * h)
            assert np.linalg.norm(J[:3, i] - v) < 1e-8
            assert np.linalg.norm(J[3:, i] - w) < 1e-8


def test_description_round_trips_through_model_from_dict():
    again = model_from_dict(PANDA.describe(), "describe")
    q = np.random.default_rng(2).uniform(PANDA.q_min, PANDA.q_max)
    assert again.describe() == PANDA.describe()
    assert np.allclose(again.pose(q), PANDA.pose(q))


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda d: d["joints"][1].update(q_min=2.0), r"joints\[1\]\.q_max"),
        (lambda d: d["joints"][0].update(alpha="x"), r"joints\[0\]\.alpha"),
        (lambda d: d.update(convention="standard"), "convention"),
        (lambda d: d["joints"][2].update(mass=1.0), r"joints\[2\]\.mass"),
    ],
)
def test_bad_description_names_file_key_and_value(change, match):
    data = PANDA.describe()
    change(data)
    with pytest.raises(ModelError, match=match):
        DHChain.from_dict(data, "bad.toml")


def test_pose_target_forms_are_equivalent():
    q = PANDA.q_home + 0.2
    T = PANDA.pose(q)
    seven = np.concatenate([T[:3, 3], quat_from_matrix(T[:3, :3])])
    a = solve(PANDA, T, method="lm")
    b = solve(PANDA, seven, method="lm")
    assert a.success and b.success and np.allclose(a.q, b.q, atol=1e-9)
    assert np.allclose(b.x[:3], seven[:3], atol=1e-6)
    assert abs(abs(b.x[3:] @ seven[3:]) - 1.0) < 1e-9


def test_position_only_target_leaves_orientation_free():
    p = PANDA.fk(PANDA.q_home + 0.3)
    r = solve(PANDA, p, method="dls")
    assert r.success and r.orientation_error == 0.0
    assert np.linalg.norm(PANDA.fk(r.q) - p) < 1e-6


_LO, _HI = PANDA.q_min, PANDA.q_max


@settings(max_examples=30, deadline=None)
@given(u=st.lists(st.floats(0.05, 0.95), min_size=7, max_size=7),
       noise=st.lists(st.floats(-0.3, 0.3), min_size=7, max_size=7),
       method=st.sampled_from(["lm", "dls"]))
def test_fk_ik_fk_round_trip_panda(u, noise, method):
    """Targets from configurations ≥ 5 % of each range inside the limits: at the corners the
    only solution can have several joints on their limits (measure zero; the benchmark's
    statistics cover them). DLS's singularity damping stays on (λ > 0) wherever σ_min < ε
    = 0.05, also at the solution, so it converges only linearly there by design; its targets
    have σ_min ≥ 0.06. LM's damping vanishes at the solution and takes every target."""
    q = _LO + np.array(u) * (_HI - _LO)
    if method == "dls":
        assume(np.linalg.svd(PANDA.task_jacobian(q), compute_uv=False)[-1] >= 0.06)
    T = PANDA.pose(q)
    start = np.clip(q + np.array(noise), _LO, _HI)
    r = solve(PANDA, T, method=method, q0=start, restarts=10, seed=1)
    assert r.success, r.message
    T_ik = PANDA.pose(r.q)
    assert np.linalg.norm(T_ik[:3, 3] - T[:3, 3]) < 1e-6
    assert orientation_error(T[:3, :3], T_ik[:3, :3])[1] < 1e-6
    assert math.hypot(r.position_error, r.orientation_error) < 1e-6


def test_generated_chain_code_matches_the_loop_reference_for_general_parameters():
    """Non-special α, offsets and a rotated flange exercise every branch of the generator."""
    chain = DHChain(name="odd", a=[0.0, 0.1, -0.2, 0.05], d=[0.3, 0.0, 0.12, -0.07],
                    alpha=[0.0, 0.7, -math.pi / 2, math.pi], theta_offset=[0.1, 0.0, -0.3, 0.2],
                    q_min=[-3.0] * 4, q_max=[3.0] * 4, flange=(0.02, 0.1, 0.4, -0.5))
    rng = np.random.default_rng(4)
    for model in (chain, PANDA):
        for _ in range(20):
            q = rng.uniform(-3.0, 3.0, model.n).tolist()
            fast, ref = model.pose_jacobian_rows(q), model.pose_jacobian_rows_reference(q)
            assert np.allclose(fast[0], ref[0], atol=1e-14)
            assert np.allclose(fast[1], ref[1], atol=1e-14)
        q = rng.uniform(-3.0, 3.0, model.n)
        assert np.allclose(model.frames(q)[-1], model.pose(q), atol=1e-13)


def test_bench_ik_command_runs_and_writes_json(tmp_path, capsys):
    """The benchmark on a few targets: the compiled lm and its numpy reference solve every
    one, the report carries the ratios, and the Robotics Toolbox row is there when the
    Toolbox is installed, otherwise a note says why it is not."""
    import json

    from poise.benchmarks import rtb
    from poise.cli import main

    out = tmp_path / "ik.json"
    code = main(["bench", "ik", "--n", "5", "--baseline-n", "2", "--method", "lm", "lm_numpy",
                 "--json", str(out)])
    text = capsys.readouterr().out
    assert code == 0 and "lm_numpy" in text
    report = json.loads(out.read_text())
    lm, lm_numpy = report["results"]
    assert report["n"] == 5 and lm["solve_rate"] == 1.0 and lm_numpy["solve_rate"] == 1.0
    assert lm["options"] == {"method": "lm"} and lm_numpy["options"]["compiled"] is False
    assert lm["ratio_to_baseline"] > 0 and report["baseline"]["n"] == 2
    assert set(report["compile_s"]) == {"lm pose", "lm position"}
    if rtb.unavailable_reason(PANDA) is None:
        assert report["rtb"]["solve_rate"] >= 0.8 and report["rtb"]["n"] == 5
        assert report["rtb"]["fk_agreement"] < 1e-12 and lm["ratio_to_rtb"] > 0
    else:
        assert report["rtb"] is None and "not installed" in report["rtb_note"]
        assert "not installed" in text and "ratio_to_rtb" not in lm


def test_bench_ik_rtb_on_refuses_to_run_without_the_toolbox(capsys):
    from poise.benchmarks import rtb
    from poise.cli import main

    reason = rtb.unavailable_reason(PANDA)
    code = main(["bench", "ik", "--n", "2", "--baseline", "none", "--rtb", "on", "--json"])
    captured = capsys.readouterr()
    if reason is None:
        import json

        assert code == 0 and json.loads(captured.out)["rtb"]["n"] == 2
    else:
        assert code == 2 and "--rtb on" in captured.err and "not installed" in captured.err
    assert "not run" in rtb.unavailable_reason(load_model("planar_2link"))


def test_bench_ik_method_names_are_the_benchmark_s():
    from poise.benchmarks.ik_panda import METHODS
    from poise.cli.bench_ik_cmd import METHODS as CLI_METHODS

    assert CLI_METHODS == METHODS
