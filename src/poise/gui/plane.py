"""The configuration plane ``(q1, q2)`` of a two-coordinate robot (seed 000's interactive figure).

Drawn once per model (and gravity), off the GUI thread by :func:`compute_plane`:

* the held set ``E = {q : G_u(q) = 0}`` as the zero contour of ``G_u`` on a grid, solid where
  the equilibrium is stable (``H_uu ≻ 0``) and light where it is not;
* thin lines of constant actuation ``qa`` (the tendon length in the double pendulum);
* the task map ``h(q)`` on the same grid, so the target set ``h(q) = x̄`` is one more contour
  (per task component) each time the target moves — a few milliseconds.

Live: the measured ``q`` (dot), the predicted ``q̄`` (ring) and a short trail of ``q``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyqtgraph as pg

from poise.gui.arm import polylines
from poise.models.actuation import Gu, blocks
from poise.models.base import FloatArray

E_STABLE = "#009E73"
E_UNSTABLE = "#b8e0d2"
TARGET_SET = "#d62728"
ISO_QA = "#c9c9c9"
TRAIL = 300  # samples of q kept in the trail


@dataclass
class PlaneData:
    """Grid quantities of one model (see :func:`compute_plane`)."""

    q1: FloatArray  # grid coordinates along q1 (N1,)
    q2: FloatArray  # grid coordinates along q2 (N2,)
    Gu: FloatArray | None  # G_u on the grid (N1, N2), None when fully actuated
    h: FloatArray  # task map on the grid (task_dim, N1, N2)
    E_stable: list[FloatArray] = field(default_factory=list)  # polylines (k, 2)
    E_unstable: list[FloatArray] = field(default_factory=list)
    iso_qa: list[FloatArray] = field(default_factory=list)


def plane_ranges(model: Any, span: float = math.pi) -> tuple[tuple[float, float], ...]:
    """The drawn box: the configuration limits clipped to ``[−span, span]``."""
    out = []
    for lo, hi in zip(model.q_min, model.q_max, strict=True):
        out.append((max(float(lo), -span), min(float(hi), span)))
    return tuple(out)


def contour(grid: FloatArray, level: float, q1: FloatArray, q2: FloatArray) -> list[FloatArray]:
    """Level set ``grid = level`` as polylines in (q1, q2) coordinates."""
    finite = np.where(np.isfinite(grid), grid, level + 1e9)
    lines = pg.functions.isocurve(finite, level, connected=True)
    d1, d2 = q1[1] - q1[0], q2[1] - q2[0]
    out = []
    for line in lines:
        c = np.asarray(line, dtype=float)
        if c.shape[0] < 2:
            continue
        # isocurve works in pixel coordinates: index i is the centre of [i, i + 1]
        out.append(np.column_stack([q1[0] + (c[:, 0] - 0.5) * d1, q2[0] + (c[:, 1] - 0.5) * d2]))
    return out


def _split_by_stability(model: Any, line: FloatArray) -> tuple[list, list]:
    """Cut one E polyline into stable (H_uu ≻ 0) and unstable runs."""
    stable = np.array([np.all(np.linalg.eigvalsh(blocks(model, q).Huu) > 0) for q in line])
    runs: tuple[list, list] = ([], [])
    start = 0
    for i in range(1, len(line) + 1):
        if i == len(line) or stable[i] != stable[start]:
            seg = line[max(start - 1, 0) : i]  # overlap one vertex so runs join
            (runs[0] if stable[start] else runs[1]).append(seg)
            start = i
    return runs


def compute_plane(model: Any, points: int = 121) -> PlaneData:
    """Evaluate ``G_u`` and ``h`` on a ``points × points`` grid and trace E (≈ 0.3 s for the
    double pendulum; call it off the GUI thread)."""
    (a1, b1), (a2, b2) = plane_ranges(model)
    q1, q2 = np.linspace(a1, b1, points), np.linspace(a2, b2, points)
    underactuated = hasattr(model, "C") and model.m < model.n
    gu = np.empty((points, points)) if underactuated else None
    h = np.empty((model.task_dim, points, points))
    for i, v1 in enumerate(q1):
        for j, v2 in enumerate(q2):
            q = np.array([v1, v2])
            h[:, i, j] = model.fk(q)
            if gu is not None:
                gu[i, j] = Gu(model, q)[0]
    data = PlaneData(q1=q1, q2=q2, Gu=gu, h=h)
    if gu is not None:
        for line in contour(gu, 0.0, q1, q2):
            stable, unstable = _split_by_stability(model, line)
            data.E_stable += stable
            data.E_unstable += unstable
        a = np.asarray(model.C[0], dtype=float)  # qa = a · q
        corners = np.array([[a1, a2], [a1, b2], [b1, a2], [b1, b2]]) @ a
        qa_grid = a[0] * q1[:, None] + a[1] * q2[None, :]
        for level in np.linspace(corners.min(), corners.max(), 13)[1:-1]:
            data.iso_qa += contour(qa_grid, float(level), q1, q2)
    return data


class ConfigPlane(pg.PlotWidget):
    """The live configuration-plane plot (for models with n = 2)."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent, background="w")
        self.hideButtons()
        self.setMenuEnabled(False)
        self.setLabel("bottom", "q1 [rad]")
        self.setLabel("left", "q2 [rad]")
        self.getPlotItem().setTitle("configuration plane", size="9pt")
        self.data: PlaneData | None = None
        self.addLegend(offset=(4, 2), labelTextSize="7pt", verSpacing=-6,
                                brush=pg.mkBrush(255, 255, 255, 210))
        self.iso = self.plot(pen=pg.mkPen(ISO_QA, width=1), connect="finite",
                             name="const. q̄a")  # solid: dashed pens are slow to draw
        self.e_unstable = self.plot(pen=pg.mkPen(E_UNSTABLE, width=3), connect="finite",
                                    name="E unstable")
        self.e_stable = self.plot(pen=pg.mkPen(E_STABLE, width=3), connect="finite",
                                  name="E (held)")
        self.target_set = self.plot(pen=pg.mkPen(TARGET_SET, width=2), connect="finite",
                                    name="h(q) = x̄")
        self.trail = self.plot(pen=pg.mkPen("#7f9fbf", width=1))
        self.q_bar = pg.ScatterPlotItem(size=11, pen=pg.mkPen("#555", width=1.5), brush=None,
                                        name="q̄")
        self.q = pg.ScatterPlotItem(size=9, pen=None, brush=pg.mkBrush("#1f3b57"), name="q")
        for item in (self.q_bar, self.q):
            self.addItem(item)  # named items join the legend by themselves
        self._target: tuple[float, ...] | None = None
        self._trail = np.full((TRAIL, 2), np.nan)

    def set_data(self, data: PlaneData | None) -> None:
        """Show a freshly computed plane (None clears it)."""
        self.data = data
        self._target = None
        self._trail[:] = np.nan
        for item in (self.iso, self.e_stable, self.e_unstable, self.target_set, self.trail):
            item.setData([], [])
        if data is None:
            return
        self.iso.setData(*polylines(data.iso_qa))
        self.e_stable.setData(*polylines(data.E_stable))
        self.e_unstable.setData(*polylines(data.E_unstable))
        self.setRange(xRange=(data.q1[0], data.q1[-1]), yRange=(data.q2[0], data.q2[-1]),
                      padding=0.0)

    def set_target(self, target: list[float] | FloatArray | None) -> None:
        """Trace ``h(q) = x̄`` (only when x̄ changed)."""
        if self.data is None or target is None:
            return
        t = tuple(float(v) for v in np.asarray(target, dtype=float).ravel())
        if t == self._target or len(t) != self.data.h.shape[0] or not all(map(math.isfinite, t)):
            return
        self._target = t
        lines: list[FloatArray] = []
        for k, level in enumerate(t):
            lines += contour(self.data.h[k], level, self.data.q1, self.data.q2)
        self.target_set.setData(*polylines(lines))

    def show_configuration(self, q: FloatArray | None, q_bar: FloatArray | None) -> None:
        """Move the current point ``q`` (with its trail) and the prediction ``q̄``."""
        if q is not None and q.shape == (2,) and np.all(np.isfinite(q)):
            self.q.setData([q[0]], [q[1]])
            self._trail = np.roll(self._trail, -1, axis=0)
            self._trail[-1] = q
            self.trail.setData(self._trail[:, 0], self._trail[:, 1], connect="finite")
        if q_bar is not None and q_bar.shape == (2,) and np.all(np.isfinite(q_bar)):
            self.q_bar.setData([q_bar[0]], [q_bar[1]])
