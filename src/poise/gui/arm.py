"""The arm drawn live: measured ``q`` (solid), predicted ``q̄`` (grey ghost) and the target.

Works for every model with planar ``body_points(q)`` polylines (planar tree, planar PCC). The
target is a handle the operator drags: while it moves it emits :attr:`ArmView.target_moved`
at most :data:`DRAG_HZ` times a second (the dashboard streams them: the arm follows the hand,
``poise.motion.streaming``), and releasing it emits :attr:`ArmView.target_dragged` with the
new ``x̄``. For a horizontal-tip task (``tip_x``, task size 1) the target is a vertical line
``x = x̄`` (the target set of seed 000's running example); for planar position tasks
(``tip_xy``, ``com_xy``) it is a cross-hair at ``x̄``.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore

from poise.models.base import FloatArray

#: After a drag the handle stays where it was dropped until the service reports that target,
#: or this long [s] (so it does not flicker back to the old target in between).
HOLD_S = 2.0
#: Most :attr:`ArmView.target_moved` signals per second while the target is dragged.
DRAG_HZ = 25.0
ARM_COLOR = "#1f3b57"
GHOST_COLOR = "#a8b3bd"
TARGET_COLOR = "#d62728"


def polylines(parts: list[FloatArray]) -> tuple[FloatArray, FloatArray]:
    """Join polylines into one (x, y) pair with NaN breaks (for ``connect="finite"``)."""
    if not parts:
        return np.empty(0), np.empty(0)
    rows: list[FloatArray] = []
    for p in parts:
        rows.append(np.asarray(p, dtype=float).reshape(-1, 2))
        rows.append(np.full((1, 2), np.nan))
    xy = np.concatenate(rows[:-1])
    return xy[:, 0], xy[:, 1]


def task_kind(model: Any) -> str:
    """``tip_x``, ``tip_xy``, ``com_xy`` … (the model's task name, else from its task size)."""
    name = getattr(model, "task_name", None)
    if isinstance(name, str):
        return name
    return "tip_x" if getattr(model, "task_dim", 0) == 1 else "tip_xy"


class ArmView(pg.PlotWidget):
    """Planar drawing of the robot with a draggable target.

    Signals:
        target_dragged(list): the operator released the target at this ``x̄`` [task units].
        target_moved(list): the operator is dragging the target; it is at this ``x̄`` now.
    """

    target_dragged = QtCore.Signal(list)
    target_moved = QtCore.Signal(list)

    def __init__(self, parent=None) -> None:
        super().__init__(parent, background="w")
        self.setAspectLocked(True)
        self.hideButtons()
        self.setMenuEnabled(False)
        self.getPlotItem().setTitle("arm", size="9pt")
        self.model: Any = None
        self.kind = ""
        self.ghost = self.plot(pen=pg.mkPen(GHOST_COLOR, width=3), connect="finite",
                               symbol="o", symbolSize=5, symbolBrush=GHOST_COLOR,
                               symbolPen=None)
        self.arm = self.plot(pen=pg.mkPen(ARM_COLOR, width=4), connect="finite", symbol="o",
                             symbolSize=7, symbolBrush=ARM_COLOR, symbolPen=None)
        self.tip = pg.ScatterPlotItem(size=9, pen=pg.mkPen(ARM_COLOR), brush=None,
                                      symbol="o")
        self.addItem(self.tip)
        self.handle: pg.InfiniteLine | pg.TargetItem | None = None
        self._held: tuple[np.ndarray, float] | None = None  # dropped x̄, until when
        self._moved_at = -1e9  # when target_moved was last emitted [s, monotonic]
        self.note = pg.TextItem("waiting for the model…", color="#555", anchor=(0.5, 0.5))
        self.addItem(self.note)

    # ------------------------------------------------------------------ model

    def set_model(self, model: Any) -> None:
        """Draw this robot from now on (``None``: nothing to draw)."""
        self.model = model
        if self.handle is not None:
            self.removeItem(self.handle)
            self.handle = None
        self.arm.setData([], [])
        self.ghost.setData([], [])
        self.tip.setData([], [])
        if model is None or not hasattr(model, "body_points"):
            name = getattr(model, "name", "this model")
            self.note.setText("waiting for the model…" if model is None
                              else f"no planar drawing for {name}")
            self.note.show()
            return
        self.note.hide()
        self.kind = task_kind(model)
        q0 = np.zeros(model.n)
        xs, ys = polylines(model.body_points(q0))
        base = np.array([xs[0], ys[0]])
        reach = float(np.nanmax(np.hypot(xs - base[0], ys - base[1]))) * 1.15 or 1.0
        self.setRange(xRange=(base[0] - reach, base[0] + reach),
                      yRange=(base[1] - reach, base[1] + reach), padding=0.0)
        pen = pg.mkPen(TARGET_COLOR, width=2)
        if self.kind == "tip_x":
            self.handle = pg.InfiniteLine(pos=0.0, angle=90, movable=True, pen=pen,
                                          hoverPen=pg.mkPen(TARGET_COLOR, width=4),
                                          label="x̄", labelOpts={"color": TARGET_COLOR,
                                                                "position": 0.95})
        else:
            self.handle = pg.TargetItem(pos=(0.0, 0.0), size=16, pen=pen, movable=True,
                                        label="x̄", labelOpts={"color": TARGET_COLOR})
        self.handle.setZValue(10)
        self.handle.sigPositionChangeFinished.connect(self._released)
        self.handle.sigPositionChanged.connect(self._moved)
        self.addItem(self.handle)

    # ------------------------------------------------------------------ target

    def dragging(self) -> bool:
        """True while the operator holds the target."""
        return bool(self.handle is not None and getattr(self.handle, "moving", False))

    def target(self) -> list[float]:
        """``x̄`` where the handle is now (task units)."""
        if self.handle is None:
            return []
        if isinstance(self.handle, pg.InfiniteLine):
            return [float(self.handle.value())]
        p = self.handle.pos()
        return [float(p.x()), float(p.y())]

    def set_target(self, target: list[float] | FloatArray | None) -> None:
        """Move the handle to ``x̄`` (ignored while the operator drags it)."""
        if self.handle is None or target is None or self.dragging():
            return
        t = np.asarray(target, dtype=float).ravel()
        if not np.all(np.isfinite(t)) or t.size == 0:
            return
        if self._held is not None:
            dropped, until = self._held
            if dropped.shape == t.shape and np.allclose(dropped, t, atol=1e-9, rtol=1e-6):
                self._held = None
            elif time.monotonic() < until:
                return
            else:
                self._held = None
        self.handle.blockSignals(True)
        if isinstance(self.handle, pg.InfiniteLine):
            self.handle.setValue(float(t[0]))
        elif t.size >= 2:
            self.handle.setPos(float(t[0]), float(t[1]))
        self.handle.blockSignals(False)

    def handle_scene_pos(self) -> QtCore.QPointF | None:
        """Where the handle is in scene coordinates (tests drag it from there)."""
        if self.handle is None:
            return None
        if isinstance(self.handle, pg.InfiniteLine):
            vb = self.getViewBox()
            y = sum(vb.viewRange()[1]) / 2
            return vb.mapViewToScene(QtCore.QPointF(self.handle.value(), y))
        return self.handle.mapToScene(QtCore.QPointF(0, 0))

    def release_hold(self) -> None:
        """Let the handle follow the service's target again (e.g. the drag was refused)."""
        self._held = None

    def _moved(self, *_: Any) -> None:
        """The handle moved: while the operator drags it, :attr:`target_moved` at most
        :data:`DRAG_HZ` times a second (programmatic moves emit nothing)."""
        now = time.monotonic()
        if self.dragging() and now - self._moved_at >= 1.0 / DRAG_HZ:
            self._moved_at = now
            self.target_moved.emit(self.target())

    def _released(self, *_: Any) -> None:
        value = self.target()
        self._held = (np.array(value), time.monotonic() + HOLD_S)
        self.target_dragged.emit(value)

    # ------------------------------------------------------------------ per frame

    def show_configuration(self, q: FloatArray | None, q_bar: FloatArray | None) -> None:
        """Draw the measured ``q`` and the predicted ``q̄`` (either may be None or NaN)."""
        model = self.model
        if model is None or not hasattr(model, "body_points"):
            return
        for item, value in ((self.arm, q), (self.ghost, q_bar)):
            if value is None or value.shape != (model.n,) or not np.all(np.isfinite(value)):
                item.setData([], [])
                continue
            item.setData(*polylines(model.body_points(value)))
        if q is not None and q.shape == (model.n,) and np.all(np.isfinite(q)):
            x = np.asarray(model.fk(q), dtype=float)
            if self.kind == "tip_x":
                xs, ys = polylines(model.body_points(q)[-1:])
                self.tip.setData([xs[-1]], [ys[-1]])
            elif x.size >= 2:
                self.tip.setData([x[0]], [x[1]])
