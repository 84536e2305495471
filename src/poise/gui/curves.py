"""Live curves: five stacked plots sharing the time axis, fed from a :class:`TelemetryBuffer`.

=============  ==========================================================================
task           task value ``x`` (measured in fb mode, predicted in ff) and target ``x̄``
errors         task error ``‖x̄ − x‖`` and statics residual ``‖G_u(q̄)‖`` (log scale)
configuration  measured ``q`` and predicted ``q̄`` (lighter shade of the same colour)
actuators      actuator setpoints ``q̄a``
timing         loop latency, lateness and compute time [µs]
=============  ==========================================================================

Drawing stays cheap with many points: 1 px cosmetic pens without antialiasing, solid lines
only (dashed pens are slow on long paths), peak downsampling to the pixel width, clipping to
the visible range, and only the samples of the chosen time window handed to each curve. No
grid: pyqtgraph draws axis grids as alpha-blended QPicture playback, which cost ~30 ms per
frame for the five plots here (the curves themselves cost ~2 ms).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6 import QtGui

from poise.gui.ring import Layout, TelemetryBuffer

#: Okabe-Ito palette (colour-blind safe), then a few extra.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442",
           "#000000", "#7F7F7F", "#8C564B")
#: Floor for log-scale curves (zero residuals stay visible at the bottom).
LOG_FLOOR = 1e-12


@dataclass
class Curve:
    """One drawn channel: which buffer row it shows and how."""

    item: pg.PlotDataItem
    field: str
    index: int
    log: bool = False


def _finite_bounds(y: np.ndarray) -> tuple[float, float]:
    """(min, max) of the finite values of y; (inf, −inf) when there are none."""
    finite = y[np.isfinite(y)]
    if finite.size == 0:
        return np.inf, -np.inf
    return float(finite.min()), float(finite.max())


def _pen(color: str, lighter: bool = False) -> QtGui.QPen:
    c = QtGui.QColor(color)
    if lighter:
        c = c.lighter(160)
    pen = pg.mkPen(c, width=1)
    pen.setCosmetic(True)
    return pen


class CurvesPanel(pg.GraphicsLayoutWidget):
    """The stacked live plots. Call :meth:`configure` with the telemetry layout, then
    :meth:`refresh` once per frame."""

    PLOTS = (("task", "task [m]"), ("errors", "error"), ("configuration", "q [rad]"),
             ("actuators", "q̄a"), ("timing", "timing [µs]"))

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setBackground("w")
        self.plots: dict[str, pg.PlotItem] = {}
        self.curves: list[Curve] = []
        self.layout_: Layout | None = None
        first = None
        for row, (key, label) in enumerate(self.PLOTS):
            plot = self.addPlot(row=row, col=0)
            plot.getViewBox().plot_key = key
            plot.setLabel("left", label)
            plot.getAxis("left").setWidth(58)  # equal widths keep the linked time axes aligned
            plot.setClipToView(True)
            plot.setDownsampling(auto=True, mode="peak")
            plot.hideButtons()
            plot.getViewBox().setMouseEnabled(x=False, y=True)
            plot.addLegend(offset=(4, 2), labelTextSize="7pt", verSpacing=-6,
                           brush=pg.mkBrush(255, 255, 255, 200))
            if first is None:
                first = plot
            else:
                plot.setXLink(first)
            if key != "timing":
                plot.hideAxis("bottom")  # one time axis, at the bottom (saves 4 axis redraws)
            plot.enableAutoRange(y=False)  # see _fit_y: axes redraw only when the range moves
            self.plots[key] = plot
        self.plots["timing"].setLabel("bottom", "t [s]")
        self.plots["errors"].setLogMode(y=True)

    # ------------------------------------------------------------------ building

    def _add(self, plot: str, field: str, index: int, name: str, color: str,
             lighter: bool = False) -> None:
        item = self.plots[plot].plot(pen=_pen(color, lighter), name=name, antialias=False,
                                     autoDownsample=True, downsampleMethod="peak",
                                     clipToView=True)
        self.curves.append(Curve(item, field, index, log=(plot == "errors")))

    def configure(self, layout: Layout, *, q_names: list[str] | None = None) -> None:
        """(Re)build the curves for a robot with these vector sizes."""
        if layout == self.layout_:
            return
        for curve in self.curves:
            curve.item.getViewBox().removeItem(curve.item)
        for plot in self.plots.values():
            if plot.legend is not None:
                plot.legend.clear()
        self.curves = []
        self.layout_ = layout
        axes = "xy" if layout.task_dim == 2 else [str(i + 1) for i in range(layout.task_dim)]
        for i in range(layout.task_dim):
            color = PALETTE[i % len(PALETTE)]
            self._add("task", "x", i, f"x{axes[i]}", color)
            self._add("task", "target", i, f"x̄{axes[i]}", color, lighter=True)
        self._add("errors", "task_error", 0, "‖x̄−x‖", PALETTE[0])
        self._add("errors", "statics_residual", 0, "‖G_u‖", PALETTE[1])
        names = q_names or [f"q{i + 1}" for i in range(layout.n)]
        for i in range(layout.n):
            color = PALETTE[i % len(PALETTE)]
            self._add("configuration", "q", i, names[i], color)
            self._add("configuration", "q_bar", i, f"q̄{i + 1}", color, lighter=True)
        for i in range(layout.m):
            self._add("actuators", "qa_ref", i, f"q̄a{i + 1}", PALETTE[i % len(PALETTE)])
        for i, (field, name) in enumerate((("latency_us", "latency"),
                                           ("lateness_us", "lateness"),
                                           ("compute_us", "compute"))):
            self._add("timing", field, 0, name, PALETTE[i])

    # ------------------------------------------------------------------ per frame

    def refresh(self, buffer: TelemetryBuffer, window_s: float) -> int:
        """Show the last ``window_s`` seconds of ``buffer``; returns the samples per curve."""
        if self.layout_ != buffer.layout:
            self.configure(buffer.layout)
        k, t_end = buffer.window(window_s)
        if k == 0:
            return 0
        view = buffer.ring.view(k)
        t = view[0]
        cols = buffer.cols
        bounds: dict[str, list[float]] = {}
        for curve in self.curves:
            y = view[cols[curve.field].start + curve.index]
            if curve.log:
                y = np.maximum(y, LOG_FLOOR)
            curve.item.setData(t, y)
            lo, hi = _finite_bounds(np.log10(y) if curve.log else y)
            if lo <= hi:
                b = bounds.setdefault(curve.item.getViewBox().plot_key, [lo, hi])
                b[0], b[1] = min(b[0], lo), max(b[1], hi)
        for key, (lo, hi) in bounds.items():
            self._fit_y(self.plots[key], lo, hi)
        self.plots["timing"].setXRange(t_end - window_s, t_end, padding=0.0)
        return k

    @staticmethod
    def _fit_y(plot: pg.PlotItem, lo: float, hi: float) -> None:
        """Change the y range only when the data leaves it or fills less than a third of it
        (autorange would move it, and redraw the axis, on every frame)."""
        vb = plot.getViewBox()
        span = hi - lo
        pad = 0.1 * span if span > 0 else max(abs(hi) * 0.1, 1e-9)
        cur_lo, cur_hi = vb.viewRange()[1]
        if lo < cur_lo or hi > cur_hi or (hi - lo + 2 * pad) < (cur_hi - cur_lo) / 3:
            vb.setYRange(lo - pad, hi + pad, padding=0.0)

    def clear_data(self) -> None:
        """Empty every curve (robot switched, service restarted)."""
        for curve in self.curves:
            curve.item.setData([], [])
