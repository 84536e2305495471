"""``poise bench tracking --figure``: one PNG per robot, the reference against the arm over
the measured window of one case (:func:`poise.benchmarks.tracking.with_traces` picks it).
Needs matplotlib (``pip install 'poise[plot]'``)."""

from __future__ import annotations

import pathlib
from typing import Any


def paths(base: str, robots: list[str]) -> dict[str, pathlib.Path]:
    """Where each robot's figure goes: ``base`` ending in ``.png`` → ``<stem>_<robot>.png``
    beside it; else ``base`` is a folder → ``<base>/tracking_<robot>.png``."""
    p = pathlib.Path(base)
    if p.suffix.lower() == ".png":
        return {r: p.with_name(f"{p.stem}_{r}.png") for r in robots}
    return {r: p / f"tracking_{r}.png" for r in robots}


def take_traces(result: dict[str, Any]) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Remove the traces from ``result``'s cases (they are not JSON): ``{robot: (case,
    trace)}``."""
    out = {}
    for case in result["cases"]:
        trace = case.pop("_trace", None)
        if trace is not None:
            out[case["robot"]] = (case, trace)
    return out


def draw(traces: dict[str, tuple[dict[str, Any], dict[str, Any]]], base: str) -> list[str]:
    """Draw each robot's trace (:func:`take_traces`) to :func:`paths`; the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    written = []
    for robot, path in paths(base, sorted(traces)).items():
        case, tr = traces[robot]
        t, x, ref = tr["t"], tr["x"], tr["ref"]
        fig, (ax, ax_err) = plt.subplots(1, 2, figsize=(10, 3.8), dpi=110)
        if x.shape[1] >= 2:
            ax.plot(ref[:, 0], ref[:, 1], "k--", lw=1, label="reference")
            ax.plot(x[:, 0], x[:, 1], lw=1, label="arm (true state)")
            ax.set_xlabel("x [task units]")
            ax.set_ylabel("y [task units]")
            ax.set_aspect("equal", adjustable="datalim")
        else:
            ax.plot(t, ref[:, 0], "k--", lw=1, label="reference")
            ax.plot(t, x[:, 0], lw=1, label="arm (true state)")
            ax.set_xlabel("time since the reference began [s]")
            ax.set_ylabel("task [task units]")
        ax.legend(fontsize=7)
        ax.grid(True, lw=0.3)
        err = np.linalg.norm(x - ref, axis=1)
        ax_err.plot(t, 1e3 * err, lw=1)
        ax_err.set_xlabel("time since the reference began [s]")
        ax_err.set_ylabel("task error [10⁻³ task units]")
        ax_err.grid(True, lw=0.3)
        f = "" if case["freq_hz"] is None else f" {case['freq_hz']:g} Hz"
        how = "streamed" if case["as"] == "stream" else "as a trajectory"
        fig.suptitle(f"{robot}: {case['kind']}{f}, A = {case['amplitude']:.3g}, "
                     f"{how}, {case['mode']}, {case['algorithm']} — RMS "
                     f"{case['rms_pct']:.1f} % of A, lag {case['lag_s']:+.3f} s"
                     + (f" [{case['flags']}]" if case["flags"] else ""), fontsize=9)
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
        plt.close(fig)
        written.append(str(path))
    return written


__all__ = ["draw", "paths", "take_traces"]
