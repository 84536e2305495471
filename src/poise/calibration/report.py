"""The calibration report figure (matplotlib, Agg): measured vs predicted equilibria, residuals
per pose, and the parameter table."""

from __future__ import annotations

import pathlib
from collections.abc import Sequence

import numpy as np

from poise.api.extras import require
from poise.calibration.identify import Identification
from poise.calibration.poses import Pose


def plot_report(result: Identification, poses: Sequence[Pose], path: str | pathlib.Path,
                *, title: str = "") -> pathlib.Path:
    """Write a PNG with three panels: measured vs predicted equilibrium (every coordinate;
    held-out poses marked), statics residual per pose, and the parameter table.

    Raises:
        poise.api.extras.MissingExtra: matplotlib is not installed (``poise[plot]``).
    """
    require("plot", "the calibration report figure")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    used = [p for p in poses if p.settled] or list(poses)
    qs = np.array([p.q for p in used])
    pred = np.asarray(result.predicted_q)
    hold = set(result.holdout_index)
    n = qs.shape[1]
    fig = plt.figure(figsize=(13, 8.5))
    gs = fig.add_gridspec(2, 2, width_ratios=[1, 1.25])
    ax1 = fig.add_subplot(gs[0, 0])
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i in range(n):
        fit = [k for k in range(len(used)) if k not in hold]
        ax1.plot(qs[fit, i], pred[fit, i], "o", ms=4, color=colors[i % len(colors)],
                 label=f"q{i + 1}")
        if hold:
            h = sorted(hold)
            ax1.plot(qs[h, i], pred[h, i], "s", ms=7, mfc="none",
                     color=colors[i % len(colors)])
    lo, hi = float(np.nanmin(qs)), float(np.nanmax(qs))
    ax1.plot([lo, hi], [lo, hi], "k-", lw=0.8)
    ax1.set_xlabel("measured q [rad]")
    ax1.set_ylabel("predicted equilibrium q [rad]")
    if result.validated:
        ax1.set_title(f"equilibria (□ held out): RMS {result.equilibrium_rms:.2e} rad fit, "
                      f"{_held(result.equilibrium_rms_holdout)} held out", fontsize=9)
    else:
        ax1.set_title(f"equilibria: RMS {result.equilibrium_rms:.2e} rad fit; NOT VALIDATED "
                      "(no held-out poses)", fontsize=9)
    ax1.legend(fontsize=7, ncol=2)

    ax2 = fig.add_subplot(gs[1, 0])
    res = np.asarray(result.residuals)
    k = np.arange(len(used))
    width = 0.8 / max(n, 1)
    for i in range(n):
        ax2.bar(k + (i - (n - 1) / 2) * width, res[:, i], width=width,
                color=colors[i % len(colors)], label=f"row {i + 1}")
    for h in hold:
        ax2.axvspan(h - 0.45, h + 0.45, color="0.9", zorder=0)
    ax2.axhline(0, color="k", lw=0.6)
    ax2.set_xlabel("pose (grey: held out)")
    ax2.set_ylabel("statics residual Yπ [N·m]")
    held = (f"{result.holdout_rms:.2e} held out" if result.validated
            else "no held-out validation")
    ax2.set_title(f"residuals: RMS {result.residual_rms:.2e} fit, {held}", fontsize=9)
    ax2.legend(fontsize=7, ncol=min(n, 5))

    ax3 = fig.add_subplot(gs[:, 1])
    ax3.axis("off")
    rows = [[p.name, p.unit, f"{p.nominal:.5g}", f"{p.value:.5g}",
             "fixed" if p.fixed else f"{p.std_error:.2g}",
             f"{100 * (p.value - p.nominal) / p.nominal:+.1f} %" if p.nominal else "–"]
            for p in result.parameters]
    table = ax3.table(cellText=rows, colLabels=["parameter", "unit", "nominal", "identified",
                                                "std. error", "change"],
                      loc="upper center", cellLoc="right", colLoc="center")
    table.auto_set_font_size(False)
    table.set_fontsize(7.5)
    table.scale(1.0, 1.25)
    verdict = "NOT identifiable" if not result.identifiable else (
        "identified" if result.validated else "fitted, NOT validated")
    ax3.set_title(f"{verdict}: rank {result.rank}/{result.n_free}, cond {result.cond:.3g}, "
                  f"σ̂ {result.sigma:.3g}; scale {result.fixed[0]} = {result.fixed[1]:g}",
                  fontsize=9)
    suptitle = title or "statics calibration"
    if result.identifiable and not result.validated:
        suptitle += "\n" + result.validation
    fig.suptitle(suptitle, fontsize=11)
    fig.tight_layout()
    out = pathlib.Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _held(x: float) -> str:
    """A held-out figure, or "n/a" when it is undefined (never "nan" as if it were a result)."""
    return f"{x:.2e}" if np.isfinite(x) else "n/a"


__all__ = ["plot_report"]
