"""Export a log to CSV or Parquet (one table per topic) and plot it.

Parquet needs ``pyarrow`` (``pip install 'poise[parquet]'``); CSV and plots do not.
Array fields are flattened into one column per component (``q_0``, ``q_1`` …); nested objects
(``/params`` and ``/events`` data) are written as JSON text. The Foxglove drawing channels
(``/scene``, ``/tf``) are not exported: they are drawn from the cycle channels, which are.
"""

from __future__ import annotations

import csv
import json
import pathlib
from collections.abc import Callable
from typing import Any

import numpy as np

from poise.api.extras import require
from poise.telemetry.reader import LogContents

FORMATS = ("csv", "parquet")
#: Rows written between two progress reports.
CHUNK = 10_000


def table(contents: LogContents, topic: str) -> tuple[list[str], list[list[Any]]]:
    """One topic as a flat table: column names and rows."""
    rows = contents.topic(topic)
    if not rows:
        return [], []
    widths: dict[str, int] = {}
    for row in rows:
        for key, value in row.items():
            if key.startswith("_"):
                continue
            width = len(value) if isinstance(value, list) else 0
            widths[key] = max(widths.get(key, 0), width)
    columns: list[str] = []
    for key, width in widths.items():
        columns.extend([f"{key}_{i}" for i in range(width)] if width else [key])
    out: list[list[Any]] = []
    for row in rows:
        flat: list[Any] = []
        for key, width in widths.items():
            value = row.get(key)
            if width:
                value = list(value or [])
                flat.extend(value + [None] * (width - len(value)))
            elif isinstance(value, dict | list):
                flat.append(json.dumps(value))
            else:
                flat.append(value)
        out.append(flat)
    return columns, out


def rows_to_export(contents: LogContents) -> int:
    """How many rows :func:`export` writes (one per message, over every topic)."""
    return sum(len(v) for v in contents.messages.values())


def export(contents: LogContents, fmt: str, out_dir: str | pathlib.Path,
           stem: str | None = None,
           progress: Callable[[int], Any] | None = None) -> list[pathlib.Path]:
    """Write ``<stem>_<topic>.<fmt>`` for every topic with messages; return the paths.

    ``progress(k)`` is told of every ``k`` rows written (:func:`rows_to_export` in all).
    """
    if fmt not in FORMATS:
        raise ValueError(f"format {fmt!r}: use one of {', '.join(FORMATS)}")
    if fmt == "parquet":
        require("parquet", "Parquet export")
        import pyarrow as pa
        import pyarrow.parquet as pq
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = stem or pathlib.Path(contents.path).stem
    written: list[pathlib.Path] = []
    drawings = set(contents.drawing_topics())
    for topic in sorted(set(contents.messages) - drawings):
        columns, rows = table(contents, topic)
        if not columns:
            continue
        path = out / f"{stem}_{topic.strip('/').replace('/', '_')}.{fmt}"
        if fmt == "csv":
            with path.open("w", newline="") as f:
                w = csv.writer(f)
                w.writerow(columns)
                for i in range(0, len(rows), CHUNK):
                    w.writerows(rows[i:i + CHUNK])
                    if progress is not None:
                        progress(len(rows[i:i + CHUNK]))
        else:
            data = {c: [r[i] for r in rows] for i, c in enumerate(columns)}
            pq.write_table(pa.table(data), path)
            if progress is not None:
                progress(len(rows))
        written.append(path)
    return written


def plot(contents: LogContents, out: str | pathlib.Path, title: str | None = None) -> pathlib.Path:
    """Four panels over time: task error, statics residual, q vs q̄, cycle timing (PNG).

    Raises:
        poise.api.extras.MissingExtra: matplotlib is not installed (``poise[plot]``).
    """
    require("plot", "the log plot")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sensors, ik, timing = (contents.columns(t) for t in ("/sensors", "/ik", "/timing"))
    if not sensors:
        raise ValueError(f"{contents.path}: no cycles to plot")
    t0 = sensors["t"][0]
    fig, axes = plt.subplots(4, 1, figsize=(10, 11), sharex=True, constrained_layout=True)
    ax = axes[0]
    if ik:
        ax.semilogy(ik["t"] - t0, np.maximum(ik["task_error"], 1e-12), lw=1)
    ax.set_ylabel("task error ‖x̄ − x‖")
    ax = axes[1]
    if ik:
        ax.semilogy(ik["t"] - t0, np.maximum(ik["statics_residual"], 1e-16), lw=1, color="C1")
    ax.set_ylabel("statics residual ‖G_u(q̄)‖ [N·m]")
    ax = axes[2]
    for j in range(sensors["q"].shape[1]):
        (line,) = ax.plot(sensors["t"] - t0, sensors["q"][:, j], lw=1, label=f"q{j}")
        if ik and j < ik["q_bar"].shape[1]:
            ax.plot(ik["t"] - t0, ik["q_bar"][:, j], lw=1, ls="--", color=line.get_color(),
                    label=f"q̄{j}")
    ax.set_ylabel("q (solid), q̄ (dashed)")
    ax.legend(ncol=min(8, 2 * sensors["q"].shape[1]), fontsize="small", loc="upper right")
    ax = axes[3]
    if timing:
        for key, label in (("lateness_us", "lateness"), ("compute_us", "compute"),
                           ("latency_us", "latency")):
            ax.plot(timing["t"] - t0, timing[key], lw=0.8, label=label)
        ax.set_yscale("symlog", linthresh=10)
        ax.legend(fontsize="small", loc="upper right")
    ax.set_ylabel("timing [µs]")
    ax.set_xlabel("time since first cycle [s]")
    for m in contents.topic("/state"):
        for a in axes:
            a.axvline(m["t"] - t0, color="0.6", lw=0.8, ls=":")
        axes[0].annotate(m["to"], (m["t"] - t0, 1), xycoords=("data", "axes fraction"),
                         fontsize="small", va="top", rotation=90, color="0.4")
    fig.suptitle(title or pathlib.Path(contents.path).name)
    out = pathlib.Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
