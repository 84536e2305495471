"""The dashboard window: controls on the left, live curves in the middle, the arm and (for
two-coordinate robots) the configuration plane on the right.

One ~30 Hz frame timer drives everything that moves: it drains the telemetry batches the MQTT
thread queued, appends them to the ring buffers, and redraws curves, arm and plane. Messages
that change rarely (``$state``, ``params``, ``model``, ``response``, ``events``) arrive as Qt
signals. Nothing here waits on the network; the configuration-plane grid is computed in a
worker thread once per model.
"""

from __future__ import annotations

import collections
import concurrent.futures
import json
import time
from typing import Any

import numpy as np
from PySide6 import QtCore, QtWidgets

from poise.gui.arm import ArmView
from poise.gui.broker import choose_robot
from poise.gui.client import MqttLink
from poise.gui.controls import ControlPanel, summary
from poise.gui.curves import CurvesPanel
from poise.gui.plane import ConfigPlane, PlaneData, compute_plane
from poise.gui.ring import TelemetryBuffer, layout_of
from poise.models import ModelError, model_from_dict

FRAME_MS = 33
WINDOWS_S = (2.0, 5.0, 10.0, 30.0, 60.0)
#: The pending-answer name of a streamed target sample (a drag).
STREAMED = "target (streamed)"
#: A command with no answer after this long is reported as unanswered [s].
ANSWER_TIMEOUT_S = 5.0


class DashboardWindow(QtWidgets.QMainWindow):
    """The operator dashboard for one broker (and one selected robot at a time).

    Args:
        link: the MQTT link (None: no network, e.g. for the frame-time benchmark).
        robot: robot id to follow (None: a live one, see :func:`~poise.gui.broker.choose_robot`:
            never an ``offline`` or ``lost`` robot's retained topics, and a switch to a live
            robot when one appears, until the operator picks one in the selector).
        capacity: telemetry samples kept per channel.
    """

    def __init__(self, link: MqttLink | None = None, robot: str | None = None, *,
                 capacity: int = 60_000, start_timer: bool = True) -> None:
        super().__init__()
        self.setWindowTitle("poise dashboard")
        self.link = link
        self.wanted_robot = robot
        #: follow a live robot by itself (no ``--robot``, and the operator has not chosen one)
        self.auto_select = robot is None
        self.robot_states: dict[str, str] = {}
        self._state_payloads: dict[str, dict[str, Any]] = {}
        self.capacity = capacity
        self.buffer: TelemetryBuffer | None = None
        self.model: Any = None
        self.model_key = ""
        self.params: dict[str, Any] = {}
        self.pending: dict[str, tuple[str, Any, float]] = {}
        self.answers: list[dict[str, Any]] = []
        #: Answers to the streamed samples of a drag (accepted ones are not in ``answers``).
        self.streamed_answers = 0
        self.frame_ms: collections.deque[float] = collections.deque(maxlen=90)
        self.window_s = 10.0
        self.paused = False
        self._executor = concurrent.futures.ThreadPoolExecutor(1, "poise-plane")
        self._plane_job: concurrent.futures.Future[PlaneData] | None = None
        self._plane_key = ""
        self._stats_at = time.monotonic()
        self._stats_samples = 0

        self.controls = ControlPanel()
        self.curves = CurvesPanel()
        self.arm = ArmView()
        self.plane = ConfigPlane()
        self.plane.hide()
        right = QtWidgets.QSplitter(QtCore.Qt.Orientation.Vertical)
        right.addWidget(self.arm)
        right.addWidget(self.plane)
        right.setSizes([500, 500])
        middle = QtWidgets.QSplitter(QtCore.Qt.Orientation.Horizontal)
        middle.addWidget(self.curves)
        middle.addWidget(right)
        middle.setSizes([800, 450])
        body = QtWidgets.QWidget()
        row = QtWidgets.QHBoxLayout(body)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.controls)
        row.addWidget(middle, 1)
        self.setCentralWidget(body)
        self._toolbar()

        self.controls.command.connect(self.send)
        self.controls.robot_selected.connect(self.operator_selected)
        self.arm.target_dragged.connect(self.target_dropped)
        self.arm.target_moved.connect(self.target_moving)
        if link is not None:
            link.connection.connect(self.controls.set_broker)
            link.robot_state.connect(self.on_robot_state)
            link.message.connect(self.on_message)
        self.timer = QtCore.QTimer(self)
        self.timer.setTimerType(QtCore.Qt.TimerType.PreciseTimer)
        self.timer.timeout.connect(self.frame)
        if start_timer:
            self.timer.start(FRAME_MS)
        self.resize(1500, 900)

    def _toolbar(self) -> None:
        bar = self.addToolBar("view")
        bar.setMovable(False)
        bar.addWidget(QtWidgets.QLabel(" time window "))
        self.window_box = QtWidgets.QComboBox()
        for w in WINDOWS_S:
            self.window_box.addItem(f"{w:g} s", w)
        self.window_box.setCurrentIndex(WINDOWS_S.index(self.window_s))
        self.window_box.currentIndexChanged.connect(
            lambda i: self.set_window(float(self.window_box.itemData(i))))
        bar.addWidget(self.window_box)
        self.live_drag = QtWidgets.QCheckBox("live drag")
        self.live_drag.setChecked(True)
        self.live_drag.setToolTip("dragging the target streams it: the arm follows the hand "
                                  "(off: the target is planned when you let go)")
        bar.addWidget(self.live_drag)
        bar.addSeparator()
        self.pause_button = QtWidgets.QPushButton("Pause")
        self.pause_button.setCheckable(True)
        self.pause_button.toggled.connect(self.set_paused)
        bar.addWidget(self.pause_button)
        bar.addSeparator()
        self.frame_label = QtWidgets.QLabel("")
        bar.addWidget(self.frame_label)

    # ------------------------------------------------------------------ view

    def set_window(self, seconds: float) -> None:
        """Show the last ``seconds`` of telemetry."""
        self.window_s = float(seconds)

    def set_paused(self, paused: bool) -> None:
        """Freeze the curves (telemetry keeps being buffered; pan and zoom stay live)."""
        self.paused = bool(paused)
        self.pause_button.setText("Resume" if paused else "Pause")
        for plot in self.curves.plots.values():
            plot.getViewBox().setMouseEnabled(x=paused, y=True)

    # ------------------------------------------------------------------ robots and messages

    def on_robot_state(self, robot: str, payload: dict[str, Any]) -> None:
        state = str(payload.get("state", "?"))
        self.robot_states[robot] = state
        self._state_payloads[robot] = payload
        current = self.link.robot if self.link is not None else None
        if self.link is not None:
            if self.auto_select:
                choice = choose_robot(self.robot_states, current)
            elif current is None and self.wanted_robot == robot and state != "lost":
                choice = robot
            else:
                choice = current
            if choice is not None and choice != current:
                self.select_robot(choice)
                current = choice
        self.controls.set_robot_state(robot, state, current)
        if current is not None and current in self._state_payloads:
            self.controls.set_service(self._state_payloads[current])

    def operator_selected(self, robot: str) -> None:
        """The operator picked ``robot`` in the selector: follow it, whatever its state, and
        stop switching robots by ourselves."""
        self.auto_select = False
        self.select_robot(robot)
        if robot in self._state_payloads:
            self.controls.set_service(self._state_payloads[robot])

    def select_robot(self, robot: str) -> None:
        """Follow another robot: forget the old one's data, subscribe to the new one."""
        if self.link is not None and self.link.robot == robot:
            return
        if self.link is not None:
            self.link.select(robot)
        self.setWindowTitle(f"poise dashboard — {robot}")
        self.buffer = None
        self.params = {}
        self.curves.clear_data()
        self.set_model(None)

    def on_message(self, robot: str, leaf: str, payload: Any) -> None:
        if self.link is not None and robot != self.link.robot:
            return
        if leaf == "model" and isinstance(payload, dict):
            self.set_model(payload)
        elif leaf == "params" and isinstance(payload, dict):
            self.params = payload
            self.controls.set_params(payload)
            if self.buffer is None or not len(self.buffer):
                self.arm.set_target(payload.get("target"))
                self.plane.set_target(payload.get("target"))
        elif leaf == "response" and isinstance(payload, dict):
            self.on_response(payload)
        elif leaf == "events" and isinstance(payload, dict):
            kind = payload.get("kind", "event")
            if kind in ("state", "fault"):
                self.controls.note(f"· {kind}: {summary(payload.get('data'), 60)}")

    def set_model(self, description: dict[str, Any] | None) -> None:
        """Draw the robot described by ``model.describe()`` (None: forget it)."""
        key = "" if description is None else json.dumps(description, sort_keys=True)
        if key == self.model_key:
            return
        self.model_key = key
        model = None
        if description is not None:
            try:
                model = model_from_dict(description, source="mqtt model topic")
            except (ModelError, KeyError, TypeError, ValueError) as exc:
                self.controls.note(f"cannot draw the model: {exc}")
        self.model = model
        self.arm.set_model(model)
        self.plane.set_data(None)
        two = model is not None and getattr(model, "n", 0) == 2
        self.plane.setVisible(two)
        if two:
            self._plane_key = key
            self._plane_job = self._executor.submit(compute_plane, model)

    # ------------------------------------------------------------------ commands

    def target_moving(self, value: list[float]) -> None:
        """The operator drags the target: with live drag on, each position is a streamed
        sample (the arm follows the hand)."""
        if self.live_drag.isChecked():
            self.send("target", value, stream=True)

    def target_dropped(self, value: list[float]) -> None:
        """The operator let go of the target: with live drag, the last streamed sample (the
        arm stays where the hand left it); else a target planned and moved to."""
        if self.live_drag.isChecked():
            self.send("target", value, stream=True)
        else:
            self.send("target", value)

    def send(self, name: str, value: Any = None, **extra: Any) -> str | None:
        """Send a command to the selected robot; the answer shows in the panel."""
        if self.link is None:
            self.controls.show_answer(name, False, "no broker link", value=value, local=True)
            return None
        cid, reason = self.link.send(name, value, **extra)
        if cid is None:
            self.controls.show_answer(name, False, reason, value=value, local=True)
            if name == "target":
                self.arm.release_hold()
            return None
        streamed = bool(extra.get("stream"))
        self.pending[cid] = (STREAMED if streamed else name, value, time.monotonic())
        return cid

    def on_response(self, payload: dict[str, Any]) -> None:
        cid = str(payload.get("id", ""))
        if cid not in self.pending:
            return  # another client's command
        name, value, _ = self.pending.pop(cid)
        accepted = bool(payload.get("accepted"))
        if name == STREAMED:  # a dragged sample: counted; shown only when refused
            self.streamed_answers += 1
            if accepted:
                return
            name = "target"
        self.answers.append(payload)
        self.controls.show_answer(str(payload.get("command", name)), accepted,
                                  str(payload.get("reason") or ""), value=value)
        if name == "target" and not accepted:
            self.arm.release_hold()

    def _expire(self, now: float) -> None:
        for cid, (name, value, t) in list(self.pending.items()):
            if now - t > ANSWER_TIMEOUT_S:
                del self.pending[cid]
                self.controls.show_answer(name, False, f"no answer within "
                                          f"{ANSWER_TIMEOUT_S:g} s (service down?)",
                                          value=value, local=True)

    # ------------------------------------------------------------------ frame

    def ingest(self, batches: list[dict[str, Any]]) -> int:
        """Append telemetry batches to the ring buffers; returns the samples added."""
        added = 0
        for batch in batches:
            layout = layout_of(batch)
            if layout is None:
                continue
            if self.buffer is None or self.buffer.layout != layout:
                self.buffer = TelemetryBuffer(layout, self.capacity)
            added += self.buffer.ingest(batch)
        return added

    def frame(self) -> None:
        """One frame: drain telemetry, redraw curves, arm and plane."""
        t0 = time.perf_counter()
        now = time.monotonic()
        if self.link is not None:
            self._stats_samples += self.ingest(self.link.drain_telemetry())
        buf = self.buffer
        if buf is not None and len(buf):
            if not self.paused:
                self.curves.refresh(buf, self.window_s)
            q, q_bar, target = buf.latest("q"), buf.latest("q_bar"), buf.latest("target")
            self.arm.show_configuration(q, q_bar)
            if target is not None and np.all(np.isfinite(target)):
                self.arm.set_target(target)
                self.plane.set_target(target)
            if self.plane.isVisible():
                self.plane.show_configuration(q, q_bar)
        job = self._plane_job
        if job is not None and job.done():
            self._plane_job = None
            if job.exception() is None and self._plane_key == self.model_key:
                self.plane.set_data(job.result())
                self.plane.set_target(self.params.get("target") if buf is None or not len(buf)
                                      else buf.latest("target"))
        self._expire(now)
        if now - self._stats_at > 0.5:
            self._show_stats(now)
        self.frame_ms.append((time.perf_counter() - t0) * 1e3)

    def _show_stats(self, now: float) -> None:
        rate = self._stats_samples / (now - self._stats_at)
        self._stats_at, self._stats_samples = now, 0
        buf = self.buffer
        if buf is not None:
            dropped = buf.dropped + (self.link.telemetry_dropped if self.link else 0)
            self.controls.stream_label.setText(
                f"{rate:.0f} samples/s · {buf.batches} batches · dropped {dropped} · "
                f"gaps {buf.gaps}")
        if self.frame_ms:
            self.frame_label.setText(f"  frame {np.mean(self.frame_ms):.1f} ms "
                                     f"(max {max(self.frame_ms):.1f})  ")

    def closeEvent(self, event) -> None:
        self.timer.stop()
        if self.link is not None:
            self.link.stop()
        self._executor.shutdown(wait=False, cancel_futures=True)
        super().closeEvent(event)
