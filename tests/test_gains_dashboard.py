"""The dashboard's gain controls show the stability bound the service published and refuse a
gain above it with the service's own rule and sentence (issue 14), in a real offscreen Qt
application."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np
from PySide6 import QtCore

from poise.controller.config import load_config
from poise.examples import resolve_config
from poise.gui.controls import ControlPanel
from poise.models import load_model
from poise.motion.params import LiveParams, with_plan
from poise.motion.planner import plan_target


def published_params() -> dict:
    """The ``params`` message of a soft arm at a target (as the MQTT bridge sends it)."""
    config = load_config(resolve_config("soft_arm_soft"), {"mqtt.enabled": (False, "test")})
    model = load_model("soft_arm_soft")
    p = LiveParams.from_config(config, np.array([0.2, -0.95]))
    plan = plan_target(model, p.target, [np.zeros(model.n)], 2e-3, period=1 / 250, params=p)
    return with_plan(p, plan).as_dict()


def test_gain_controls_show_the_bound_and_refuse_a_gain_above_it(qtbot):
    panel = ControlPanel()
    qtbot.addWidget(panel)
    params = published_params()
    panel.set_params(params)
    bound = params["stability"]["gain_max"]["gamma"]
    text = panel.stability_label.text()
    assert f"gamma < {bound:.3g} (auto)" in text and "slowest mode ω" in text
    assert panel.gains["gamma"].value() == round(params["gamma"], 4)
    sent: list = []
    panel.command.connect(lambda name, value: sent.append((name, value)))
    panel.gains["gamma"].setValue(1.5 * bound)
    qtbot.mouseClick(panel.apply_gains, QtCore.Qt.MouseButton.LeftButton)
    assert sent == []  # not sent: the rule the service applies, with its bound
    answer = panel.answer.text()
    assert "not sent" in answer and f"must be below {bound:.4g} 1/s" in answer
    assert "slowest structural mode" in answer
    panel.gains["gamma"].setValue(0.5 * bound)
    qtbot.mouseClick(panel.apply_gains, QtCore.Qt.MouseButton.LeftButton)
    assert sent and sent[-1][0] == "gains"
    assert abs(sent[-1][1]["gamma"] - 0.5 * bound) < 1e-4
    qtbot.mouseClick(panel.auto_gains, QtCore.Qt.MouseButton.LeftButton)
    assert sent[-1] == ("gains", {"gamma": "auto", "gamma_z": "auto", "gamma_e": "auto"})
    # a service that publishes no bound: nothing is refused locally
    panel.set_params({k: v for k, v in params.items() if k != "stability"})
    assert panel.stability_label.text() == "—"
    panel.gains["gamma"].setValue(1.5 * bound)
    qtbot.mouseClick(panel.apply_gains, QtCore.Qt.MouseButton.LeftButton)
    assert sent[-1][0] == "gains" and sent[-1][1]["gamma"] > bound
