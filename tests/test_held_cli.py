"""``poise solve`` with the held-configuration algorithms."""

from __future__ import annotations

import json

import pytest

from poise.cli import main

KEYS = {"success", "status", "q", "qa", "qu", "x", "task_error", "statics_residual", "stable",
        "min_eig_Huu", "iterations"}


@pytest.mark.parametrize("algorithm", ["alg1", "alg2"])
def test_solve_held_algorithms_print_held_configuration_json(algorithm, capsys):
    code = main(["solve", "--model", "double_pendulum", "--algorithm", algorithm,
                 "--target", "0.6", "--start", "0.3", "-1.0", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out.keys() >= KEYS
    assert out["success"] and out["status"] == "converged"
    assert out["statics_residual"] < 1e-8 and out["stable"] is True
    assert abs(out["x"][0] - 0.6) < 1e-6


def test_solve_plain_reports_large_statics_residual(capsys):
    code = main(["solve", "--model", "double_pendulum", "--algorithm", "plain",
                 "--target", "0.6", "--start", "0.3", "-1.0", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["success"]
    assert out["statics_residual"] > 1.0  # reaches the target, but not a held shape


def test_solve_gravity_flag_changes_the_held_solution(capsys):
    args = ["solve", "--model", "double_pendulum", "--algorithm", "alg1", "--target", "0.6",
            "--start", "0.3", "-1.0", "--json"]
    main(args)
    with_g = json.loads(capsys.readouterr().out)
    main([*args, "--gravity", "0"])
    without_g = json.loads(capsys.readouterr().out)
    assert with_g["success"] and without_g["success"]
    assert abs(with_g["qa"][0] - without_g["qa"][0]) > 1e-3


def test_solve_unstable_dancer_target_is_flagged(capsys):
    code = main(["solve", "--model", "dancer", "--algorithm", "alg2", "--target", "0", "1.0889",
                 "--start", "0.01", "0.01", "3.15", "0.01", "--reject-unstable",
                 "--max-iter", "2000", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1
    assert out["status"] == "unstable" and out["stable"] is False and out["min_eig_Huu"] < 0


def test_solve_held_algorithm_on_a_model_without_statics_is_refused(capsys):
    code = main(["solve", "--model", "panda", "--algorithm", "alg1",
                 "--target", "0.4", "0.1", "0.5", "--json"])
    captured = capsys.readouterr()
    assert code == 2
    assert json.loads(captured.out)["status"] == "invalid_input"
    assert "no statics" in captured.err
