"""The calibration report figure (matplotlib, Agg): measured vs predicted equilibria, residuals
per pose, and the parameter table."""

from __future__ import annotations

import pathlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from poise.api.extras import require
from poise.calibration.identify import Identification
from poise.calibration.poses import Pose
from poise.models.base import FloatArray


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
    hold = sorted(set(result.holdout_index))
    fig = plt.figure(figsize=(13, 8.5))
    gs = fig.add_gridspec(2, 2, width_ratios=[1, 1.25])
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    _equilibria_panel(fig.add_subplot(gs[0, 0]), result, qs, hold, colors)
    _residual_panel(fig.add_subplot(gs[1, 0]), result, hold, colors)
    _parameter_table(fig.add_subplot(gs[:, 1]), result)
    suptitle = title or "statics calibration"
    if result.identifiable and not result.validated:
        suptitle += "\n" + result.validation
    fig.suptitle(suptitle, fontsize=11)
    fig.tight_layout()
    out = pathlib.Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _equilibria_panel(ax: Any, result: Identification, qs: FloatArray, hold: list[int],
                      colors: list[str]) -> None:
    """Measured ``q`` vs the predicted equilibrium, per coordinate (□: held-out poses)."""
    pred = np.asarray(result.predicted_q)
    fit = [k for k in range(len(qs)) if k not in hold]
    for i in range(qs.shape[1]):
        ax.plot(qs[fit, i], pred[fit, i], "o", ms=4, color=colors[i % len(colors)],
                label=f"q{i + 1}")
        if hold:
            ax.plot(qs[hold, i], pred[hold, i], "s", ms=7, mfc="none",
                    color=colors[i % len(colors)])
    lo, hi = float(np.nanmin(qs)), float(np.nanmax(qs))
    ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
    ax.set_xlabel("measured q [rad]")
    ax.set_ylabel("predicted equilibrium q [rad]")
    if result.validated:
        ax.set_title(f"equilibria (□ held out): RMS {result.equilibrium_rms:.2e} rad fit, "
                     f"{_held(result.equilibrium_rms_holdout)} held out", fontsize=9)
    else:
        ax.set_title(f"equilibria: RMS {result.equilibrium_rms:.2e} rad fit; NOT VALIDATED "
                     "(no held-out poses)", fontsize=9)
    ax.legend(fontsize=7, ncol=2)


def _residual_panel(ax: Any, result: Identification, hold: list[int],
                    colors: list[str]) -> None:
    """The statics residual ``Y π`` per pose, one bar per row (grey: held-out poses), and
    per coordinate the static band (:func:`~poise.calibration.band.static_residuals`) as
    dashed lines at ``± band / 2``: where the arm rested around its equilibrium, which the
    statics cannot explain (friction, hysteresis)."""
    res = np.asarray(result.residuals)
    n = res.shape[1]
    k = np.arange(res.shape[0])
    width = 0.8 / max(n, 1)
    for i in range(n):
        ax.bar(k + (i - (n - 1) / 2) * width, res[:, i], width=width,
               color=colors[i % len(colors)], label=f"row {i + 1}")
    band = (result.static_residuals or {}).get("band", [])
    for i, row in enumerate(band[:n]):
        half = 0.5 * float(row["band_Nm"])
        for sign in (1.0, -1.0):
            ax.axhline(sign * half, color=colors[i % len(colors)], lw=0.8, ls="--",
                       label=f"band {row['coordinate']}" if sign > 0 else None)
    for h in hold:
        ax.axvspan(h - 0.45, h + 0.45, color="0.9", zorder=0)
    ax.axhline(0, color="k", lw=0.6)
    ax.set_xlabel("pose (grey: held out)")
    ax.set_ylabel("statics residual Yπ [N·m]")
    held = (f"{result.holdout_rms:.2e} held out" if result.validated
            else "no held-out validation")
    widths = ", ".join(f"{row['coordinate']} {float(row['band_Nm']):.2g}" for row in band[:n])
    ax.set_title(f"residuals: RMS {result.residual_rms:.2e} fit, {held}"
                 + (f"\nstatic band (dashed, full width) [N·m]: {widths}" if widths else ""),
                 fontsize=9)
    ax.legend(fontsize=7, ncol=min(n, 5))


def _parameter_table(ax: Any, result: Identification) -> None:
    """Nominal vs identified parameters with standard errors, under the verdict."""
    ax.axis("off")
    rows = [[p.name, p.unit, f"{p.nominal:.5g}", f"{p.value:.5g}",
             "fixed" if p.fixed else f"{p.std_error:.2g}",
             f"{100 * (p.value - p.nominal) / p.nominal:+.1f} %" if p.nominal else "–"]
            for p in result.parameters]
    table = ax.table(cellText=rows, colLabels=["parameter", "unit", "nominal", "identified",
                                               "std. error", "change"],
                     loc="upper center", cellLoc="right", colLoc="center")
    table.auto_set_font_size(False)
    table.set_fontsize(7.5)
    table.scale(1.0, 1.25)
    verdict = "NOT identifiable" if not result.identifiable else (
        "identified" if result.validated else "fitted, NOT validated")
    ax.set_title(f"{verdict}: rank {result.rank}/{result.n_free}, cond {result.cond:.3g}, "
                 f"σ̂ {result.sigma:.3g}; scale {result.fixed[0]} = {result.fixed[1]:g}"
                 + (_total_mass_title(result) if result.total_mass is not None else ""),
                 fontsize=9)


def _total_mass_title(result: Identification) -> str:
    """The weighed total mass in the table's title (a line of its own): held exactly, or
    ``M ± σ_M`` with the standard error of the identified sum."""
    if result.total_mass_sd is None:
        return f"\ntotal mass {result.total_mass:g} kg (weighed)"
    return (f"\nweighed total mass {result.total_mass:g} ± {result.total_mass_sd:g} kg "
            f"(std. error of the sum of the masses {result.mass_sum_std_error:.2g} kg)")


def _held(x: float) -> str:
    """A held-out figure, or "n/a" when it is undefined (never "nan" as if it were a result)."""
    return f"{x:.2e}" if np.isfinite(x) else "n/a"


__all__ = ["plot_report"]
