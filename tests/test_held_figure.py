"""The held-set figure: runs end to end and shows what it claims."""

from __future__ import annotations

import numpy as np

from poise.cli import main
from poise.models import load_model
from poise.models.actuation import Gu
from poise.viz.held_set import run_all


def test_held_set_runs_show_sag_of_plain_ik_and_held_solutions():
    model = load_model("double_pendulum")
    runs = run_all(model, np.array([0.6]), np.array([0.3, -1.0]))
    assert runs.plain.position_error < 1e-6 and runs.plain.statics_residual > 1.0
    assert abs(model.fk(runs.released.q)[0] - 0.6) > 0.05
    for res in (runs.alg1, runs.alg2):
        assert res.success and np.linalg.norm(Gu(model, res.q)) < 1e-8


def test_plot_held_set_command_writes_a_png(tmp_path, capsys):
    out = tmp_path / "held.png"
    assert main(["plot", "held-set", "--model", "double_pendulum", "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "released, the tip moves" in capsys.readouterr().out


def test_plot_held_set_refuses_a_model_without_a_plane(tmp_path, capsys):
    out = tmp_path / "x.png"
    assert main(["plot", "held-set", "--model", "soft_arm", "--target", "0.1", "-0.9",
                 "--start", "0", "0", "0", "0", "0", "--out", str(out)]) == 2
    assert "2 coordinates" in capsys.readouterr().err
