"""The operator's side panel: robot selector, status, run/e-stop, algorithm, mode, gains,
target, and the log of command answers.

The panel only emits :attr:`ControlPanel.command` ``(name, value)``; the window sends it and
feeds the service's answer back through :meth:`ControlPanel.show_answer`, so every command
shows whether it was accepted or why it was refused.
"""

from __future__ import annotations

import math
import time
from typing import Any

from PySide6 import QtCore, QtGui, QtWidgets

from poise.api.rules import (
    ALGORITHMS,
    AUTO,
    MODES,
    RATE_GAINS,
    RuleError,
    check_gain_bound,
)

#: The gains the dashboard edits: the rate gains and λ (names owned by poise.api.rules).
GAIN_KEYS = (*RATE_GAINS, "damping")
GAIN_TIPS = {
    "gamma": "Γ: task gain of Algorithm 1 and classic IK [1/s]",
    "gamma_z": "ΓZ: task gain of Algorithm 2 [1/s]",
    "gamma_e": "ΓE: statics gain of Algorithm 2 [1/s]",
    "damping": "λ: damping of the damped least-squares inverse",
}
STATE_COLORS = {"running": "#2ca02c", "active": "#2ca02c", "idle": "#1f77b4",
                "inactive": "#1f77b4", "estop": "#d62728", "fault": "#d62728",
                "error": "#d62728", "lost": "#7f7f7f", "gone": "#7f7f7f"}

ESTOP_STYLE = """
QPushButton { background: #d62728; color: white; font-weight: bold; font-size: 20px;
              border: 3px solid #8b0000; border-radius: 10px; padding: 10px; }
QPushButton:hover { background: #e8413f; }
QPushButton:pressed { background: #8b0000; }
"""


def summary(value: Any, width: int = 48) -> str:
    """Short text for a command value."""
    if isinstance(value, float):
        text = f"{value:.4g}"
    elif isinstance(value, list | tuple):
        text = "[" + ", ".join(f"{v:.4g}" if isinstance(v, float) else str(v)
                               for v in value) + "]"
    elif isinstance(value, dict):
        text = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                         for k, v in value.items())
    else:
        text = "" if value is None else str(value)
    return text if len(text) <= width else text[: width - 1] + "…"


class ControlPanel(QtWidgets.QWidget):
    """Controls and status. Signals: ``command(name, value)``, ``robot_selected(robot_id)``."""

    command = QtCore.Signal(str, object)
    robot_selected = QtCore.Signal(str)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setMinimumWidth(270)
        self.setMaximumWidth(340)
        #: The feedback loop's stability bounds per gain and why (published by the service).
        self._bounds: dict[str, float] = {}
        self._why = ""
        self._robot_states: dict[str, str] = {}
        outer = QtWidgets.QVBoxLayout(self)
        outer.setContentsMargins(6, 6, 6, 6)
        outer.addWidget(self._build_estop())
        outer.addLayout(self._build_status())
        outer.addLayout(self._build_run_buttons())
        form = QtWidgets.QFormLayout()
        self._build_algorithm_rows(form)
        self._build_gain_rows(form)
        self._build_target_row(form)
        outer.addLayout(form)
        self._build_answers(outer)
        for key in ("Space", "Esc"):
            shortcut = QtGui.QShortcut(QtGui.QKeySequence(key), self)
            shortcut.setContext(QtCore.Qt.ShortcutContext.WindowShortcut)
            shortcut.activated.connect(self.estop.click)

    # ------------------------------------------------------------------ layout

    def _build_estop(self) -> QtWidgets.QPushButton:
        self.estop = QtWidgets.QPushButton("E-STOP")
        self.estop.setObjectName("estop")
        self.estop.setStyleSheet(ESTOP_STYLE)
        self.estop.setMinimumHeight(72)
        self.estop.setToolTip("Latch the emergency stop (Space / Esc)")
        self.estop.clicked.connect(lambda: self.command.emit("estop", True))
        return self.estop

    def _build_status(self) -> QtWidgets.QFormLayout:
        """Robot selector, broker, service state, device and stream labels."""
        status = QtWidgets.QFormLayout()
        status.setLabelAlignment(QtCore.Qt.AlignmentFlag.AlignRight)
        self.robots = QtWidgets.QComboBox()
        self.robots.activated.connect(self._robot_chosen)
        self.broker_label = QtWidgets.QLabel("—")
        self.state_label = QtWidgets.QLabel("—")
        self.device_label = QtWidgets.QLabel("—")
        self.stream_label = QtWidgets.QLabel("—")
        for lab in (self.broker_label, self.state_label, self.device_label, self.stream_label):
            lab.setWordWrap(True)
            lab.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        status.addRow("robot", self.robots)
        status.addRow("broker", self.broker_label)
        status.addRow("service", self.state_label)
        status.addRow("device", self.device_label)
        status.addRow("stream", self.stream_label)
        return status

    def _build_run_buttons(self) -> QtWidgets.QHBoxLayout:
        run = QtWidgets.QHBoxLayout()
        self.start = QtWidgets.QPushButton("Start")
        self.stop = QtWidgets.QPushButton("Stop")
        self.clear = QtWidgets.QPushButton("Clear")
        self.clear.setToolTip("Clear a latched e-stop or fault")
        self.start.clicked.connect(lambda: self.command.emit("run", "start"))
        self.stop.clicked.connect(lambda: self.command.emit("run", "stop"))
        self.clear.clicked.connect(lambda: self.command.emit("clear", True))
        for b in (self.start, self.stop, self.clear):
            run.addWidget(b)
        return run

    def _build_algorithm_rows(self, form: QtWidgets.QFormLayout) -> None:
        self.algorithm = QtWidgets.QComboBox()
        self.algorithm.addItems(ALGORITHMS)
        self.algorithm.activated.connect(
            lambda _i: self.command.emit("algorithm", self.algorithm.currentText()))
        self.mode = QtWidgets.QComboBox()
        self.mode.addItems(MODES)
        self.mode.setToolTip("ff: error from the predicted q̄; fb: from the measured q")
        self.mode.activated.connect(lambda _i: self.command.emit("mode", self.mode.currentText()))
        form.addRow("algorithm", self.algorithm)
        form.addRow("mode", self.mode)

    def _build_gain_rows(self, form: QtWidgets.QFormLayout) -> None:
        """One spin box per gain, Apply / Auto, and the stability bound beside them."""
        self.gains: dict[str, QtWidgets.QDoubleSpinBox] = {}
        for key in GAIN_KEYS:
            box = QtWidgets.QDoubleSpinBox()
            box.setDecimals(4)
            box.setRange(0.0, 1e4)
            box.setSingleStep(0.1 if key != "damping" else 0.001)
            box.setToolTip(GAIN_TIPS[key])
            box.setKeyboardTracking(False)
            self.gains[key] = box
            form.addRow(key, box)
        self.apply_gains = QtWidgets.QPushButton("Apply gains")
        self.apply_gains.clicked.connect(self._send_gains)
        self.auto_gains = QtWidgets.QPushButton("Auto")
        self.auto_gains.setToolTip("Rate gains that follow the stability bound (a fraction of "
                                   "it, recomputed with each target)")
        self.auto_gains.clicked.connect(
            lambda: self.command.emit("gains", {k: AUTO for k in RATE_GAINS}))
        buttons = QtWidgets.QHBoxLayout()
        buttons.addWidget(self.apply_gains)
        buttons.addWidget(self.auto_gains)
        form.addRow("", buttons)
        #: The feedback loop's stability bound at the target, beside the gains.
        self.stability_label = QtWidgets.QLabel("—")
        self.stability_label.setWordWrap(True)
        self.stability_label.setToolTip(
            "Gains at or above the bound make the loop ring or diverge (the service refuses "
            "them); computed from the model at the current target (docs/controller.md)")
        form.addRow("stable", self.stability_label)

    def _build_target_row(self, form: QtWidgets.QFormLayout) -> None:
        self.target_edit = QtWidgets.QLineEdit()
        self.target_edit.setPlaceholderText("x̄, e.g. 0.8 or 0.5, 1.2")
        self.target_edit.returnPressed.connect(self._send_target)
        form.addRow("target", self.target_edit)

    def _build_answers(self, outer: QtWidgets.QVBoxLayout) -> None:
        """The last command's answer and the log of answers."""
        self.answer = QtWidgets.QLabel("")
        self.answer.setWordWrap(True)
        self.answer.setObjectName("answer")
        outer.addWidget(self.answer)
        self.log = QtWidgets.QListWidget()
        self.log.setMinimumHeight(80)
        self.log.setWordWrap(True)
        self.log.setHorizontalScrollBarPolicy(QtCore.Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        font = self.log.font()
        font.setPointSizeF(font.pointSizeF() * 0.9)
        self.log.setFont(font)
        outer.addWidget(self.log, 1)

    # ------------------------------------------------------------------ outgoing

    def _robot_chosen(self, index: int) -> None:
        robot = self.robots.itemData(index)
        if robot:
            self.robot_selected.emit(robot)

    def _send_gains(self) -> None:
        gains = {k: float(b.value()) for k, b in self.gains.items() if b.isEnabled()}
        try:  # the rule the service applies, with the bound it published
            for key, value in gains.items():
                check_gain_bound(key, value, self._bounds.get(key, math.inf), self._why)
        except RuleError as exc:
            self.show_answer("gains", False, str(exc), value=gains, local=True)
            return
        self.command.emit("gains", gains)

    def _send_target(self) -> None:
        text = self.target_edit.text().replace(";", ",")
        try:
            value = [float(v) for v in text.split(",") if v.strip()]
        except ValueError:
            self.show_answer("target", False, f"not a list of numbers: {text!r}", local=True)
            return
        self.command.emit("target", value)

    # ------------------------------------------------------------------ incoming

    def set_robot_state(self, robot: str, state: str, selected: str | None) -> None:
        """Add or update a robot in the selector (``selected`` stays the current one)."""
        self._robot_states[robot] = state
        index = self.robots.findData(robot)
        text = f"{robot}  ({state})"
        if index < 0:
            self.robots.addItem(text, robot)
        else:
            self.robots.setItemText(index, text)
        if selected is not None:
            self.robots.setCurrentIndex(max(0, self.robots.findData(selected)))

    def set_broker(self, connected: bool, text: str) -> None:
        color = "#2ca02c" if connected else "#d62728"
        self.broker_label.setText(f"<span style='color:{color}'>●</span> {text}")

    def set_service(self, payload: dict[str, Any]) -> None:
        """Show the ``$state`` message of the selected robot."""
        state = str(payload.get("state", "?"))
        reason = payload.get("reason") or ""
        color = STATE_COLORS.get(state, "#333")
        text = f"<b style='color:{color}'>{state}</b>"
        if reason:
            text += f" — {reason}"
        self.state_label.setText(text)
        device = payload.get("device")
        self.device_label.setText(summary(device, 80) if device else "—")

    def set_params(self, params: dict[str, Any]) -> None:
        """Reflect the live parameters (fields the operator is editing are left alone)."""
        algorithms = params.get("algorithms")
        if isinstance(algorithms, list) and algorithms:
            current = [self.algorithm.itemText(i) for i in range(self.algorithm.count())]
            if current != [str(a) for a in algorithms]:
                self.algorithm.clear()
                self.algorithm.addItems([str(a) for a in algorithms])
        for combo, key in ((self.algorithm, "algorithm"), (self.mode, "mode")):
            value = params.get(key)
            if isinstance(value, str) and not combo.hasFocus():
                if combo.findText(value) < 0:
                    combo.addItem(value)
                combo.setCurrentText(value)
        gains = params.get("gains")
        if not isinstance(gains, dict):  # the service publishes its gains at the top level
            gains = {k: params[k] for k in GAIN_KEYS if k in params}
        gains = dict(gains)
        if "damping" not in gains and isinstance(params.get("damping"), int | float):
            gains["damping"] = params["damping"]
        for key, box in self.gains.items():
            value = gains.get(key)
            box.setEnabled(isinstance(value, int | float) or not gains)
            if isinstance(value, int | float) and not box.hasFocus():
                box.blockSignals(True)
                box.setValue(float(value))
                box.blockSignals(False)
        self._show_stability(params)
        target = params.get("target")
        if isinstance(target, list) and not self.target_edit.hasFocus():
            self.target_edit.setText(", ".join(
                f"{float(v):.4g}" if abs(float(v)) > 1e-12 else "0" for v in target))

    def _show_stability(self, params: dict[str, Any]) -> None:
        """The bounds of the live gains in the live mode and the slowest structural mode
        (``params["stability"]``, :class:`poise.motion.bounds.StabilityReport`)."""
        st = params.get("stability")
        if not isinstance(st, dict):
            self._bounds, self._why = {}, ""
            self.stability_label.setText("—")
            return
        bounds = st.get("gain_max") or {}
        self._bounds = {k: math.inf if v is None else float(v) for k, v in bounds.items()}
        auto = set(params.get("auto") or ())
        parts = [f"{k} < {'∞' if v is None else f'{v:.3g}'}" + (" (auto)" if k in auto else "")
                 for k, v in bounds.items()]
        slow = st.get("slowest_mode")
        text = f"{', '.join(parts) or '—'} 1/s in {st.get('mode', '?')}"
        if isinstance(slow, dict):
            text += f"; slowest mode ω {slow['omega']:.3g} rad/s, ζ {slow['zeta']:.2g}"
        self._why = str(st.get("why") or "")  # the service's own sentence
        self.stability_label.setText(text)

    def note(self, text: str) -> None:
        """Add an informational line to the log (a repeat of the last line is counted)."""
        top = self.log.item(0)
        if top is not None and top.data(QtCore.Qt.ItemDataRole.UserRole) == text:
            count = int(top.data(QtCore.Qt.ItemDataRole.UserRole + 1) or 1) + 1
            top.setData(QtCore.Qt.ItemDataRole.UserRole + 1, count)
            top.setText(f"{time.strftime('%H:%M:%S')} {text} (×{count})")
            return
        item = QtWidgets.QListWidgetItem(f"{time.strftime('%H:%M:%S')} {text}")
        item.setData(QtCore.Qt.ItemDataRole.UserRole, text)
        item.setForeground(QtGui.QColor("#555555"))
        self.log.insertItem(0, item)
        self._trim()

    def _trim(self) -> None:
        while self.log.count() > 200:
            self.log.takeItem(self.log.count() - 1)

    def show_answer(self, command: str, accepted: bool, reason: str, *, value: Any = None,
                    local: bool = False) -> None:
        """Show the answer to a command (latest on the label, all in the log)."""
        stamp = time.strftime("%H:%M:%S")
        what = f"{command} {summary(value)}".strip()
        if accepted:
            text, color = f"✓ {what}: accepted", "#2ca02c"
        else:
            verdict = "not sent" if local else "refused"
            text, color = f"✗ {what}: {verdict}" + (f" — {reason}" if reason else ""), "#d62728"
        self.answer.setText(f"<span style='color:{color}'>{text}</span>")
        item = QtWidgets.QListWidgetItem(f"{stamp} {text}")
        item.setForeground(QtGui.QColor(color))
        self.log.insertItem(0, item)
        self._trim()
