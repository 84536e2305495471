"""Frame-time benchmark of the dashboard (``poise bench dashboard``, ``bench/dashboard.py``).

One frame = *update* (append one frame's worth of new samples to the ring buffers, then
:meth:`DashboardWindow.frame`: set the data of every curve, the arm and the configuration plane)
+ *render* (``QWidget.grab()`` of the whole window, which paints every widget into a pixmap on
the offscreen platform). The loaded case draws ``curves`` curves of ``points`` samples each (the
double pendulum's telemetry gives 12 curves; ``points`` samples fill the time window); the
baseline renders the same window with no telemetry, in the same run. Reported: mean, p50, p99
and max [ms] of update, render and the whole frame (wall clock), the frame's CPU time of the GUI
thread (``frame_cpu``: robust to other processes on a shared machine), and the loaded /
baseline ratios.
"""

from __future__ import annotations

import os
import platform
import time
from typing import Any

import numpy as np

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def _stats(values: list[float]) -> dict[str, float]:
    a = np.asarray(values)
    return {"mean": round(float(a.mean()), 3), "p50": round(float(np.percentile(a, 50)), 3),
            "p99": round(float(np.percentile(a, 99)), 3), "max": round(float(a.max()), 3)}


def _batch(t: np.ndarray) -> dict[str, Any]:
    """Synthetic telemetry for the double pendulum (n = 2, m = 1, task 1) at times t [s]."""
    k = t.shape[0]
    rng = np.random.default_rng(int(t[0] * 1000) if k else 0)
    q = np.column_stack([0.4 * np.sin(0.7 * t), -0.2 * np.cos(1.3 * t)])
    return {"t": t.tolist(), "q": q.tolist(), "q_bar": (q + 0.01).tolist(),
            "qa_ref": (0.06 * q[:, :1] + 0.04 * q[:, 1:]).tolist(),
            "target": np.full((k, 1), 0.5).tolist(), "x": np.sin(q[:, :1]).tolist(),
            "task_error": np.abs(np.sin(t)).tolist(),
            "statics_residual": (1e-9 + 1e-6 * rng.random(k)).tolist(),
            "latency_us": (600 + 200 * rng.random(k)).tolist(),
            "lateness_us": (50 + 40 * rng.random(k) ** 8).tolist(),
            "compute_us": (300 + 100 * rng.random(k)).tolist()}


def _frames(app, window, frames: int, rate: float, feed: bool) -> dict[str, list[float]]:
    per_frame = max(1, round(rate / 30.0))
    t_next = window.buffer.ring.view(1)[0, 0] + 1.0 / rate if feed else 0.0
    update, render, total, cpu = [], [], [], []
    for _ in range(frames):
        if feed:  # what the MQTT thread would have queued (not part of the GUI's frame)
            t = t_next + np.arange(per_frame) / rate
            t_next = float(t[-1]) + 1.0 / rate
            batches = [_batch(t)]
        c0, t0 = time.thread_time(), time.perf_counter()
        if feed:
            window.ingest(batches)
        window.frame()
        t1 = time.perf_counter()
        window.grab()
        app.processEvents()
        t2, c2 = time.perf_counter(), time.thread_time()
        update.append((t1 - t0) * 1e3)
        render.append((t2 - t1) * 1e3)
        total.append((t2 - t0) * 1e3)
        cpu.append((c2 - c0) * 1e3)
    return {"update": update, "render": render, "frame": total, "frame_cpu": cpu}


def run(points: int = 5000, frames: int = 150, warmup: int = 15, rate: float = 1000.0,
        size: tuple[int, int] = (1500, 900)) -> dict[str, Any]:
    """Measure the frame time with ``points`` samples per curve and without telemetry."""
    import pyqtgraph as pg
    from PySide6 import QtCore

    from poise.gui.app import application
    from poise.gui.plane import compute_plane
    from poise.gui.ring import TelemetryBuffer, layout_of
    from poise.models import load_model

    app = application()
    model = load_model("double_pendulum")
    plane = compute_plane(model)

    def make_window():
        from poise.gui.window import DashboardWindow

        window = DashboardWindow(None, start_timer=False)
        window.resize(*size)
        window.show()
        window.set_model(model.describe())
        if window._plane_job is not None:
            window._plane_job.cancel()
            window._plane_job = None
        window.plane.set_data(plane)
        window.plane.set_target([0.5])
        app.processEvents()
        return window

    # baseline: the same window, no telemetry
    empty = make_window()
    _frames(app, empty, warmup, rate, feed=False)
    base = _frames(app, empty, frames, rate, feed=False)
    empty.close()

    window = make_window()
    window.set_window(points / rate)
    first = _batch(np.arange(points) / rate)
    window.buffer = TelemetryBuffer(layout_of(first), capacity=max(points * 2, 60_000))
    window.buffer.ingest(first)
    _frames(app, window, warmup, rate, feed=True)
    loaded = _frames(app, window, frames, rate, feed=True)
    curves = len(window.curves.curves)
    drawn = [len(c.item.getOriginalDataset()[0]) for c in window.curves.curves]
    window.close()

    result = {
        "benchmark": "dashboard frame time (update + offscreen render of the whole window)",
        "config": {"curves": curves, "points_per_curve": int(np.median(drawn)),
                   "frames": frames, "warmup": warmup, "sample_rate_hz": rate,
                   "window_s": points / rate, "size": list(size),
                   "samples_per_frame": max(1, round(rate / 30.0))},
        "loaded": {k: _stats(v) for k, v in loaded.items()},
        "baseline": {k: _stats(v) for k, v in base.items()},
        "environment": {"python": platform.python_version(), "machine": platform.machine(),
                        "cpus": os.cpu_count(), "qt": QtCore.qVersion(),
                        "pyqtgraph": pg.__version__,
                        "platform": os.environ.get("QT_QPA_PLATFORM", ""),
                        "loadavg": [round(v, 2) for v in os.getloadavg()]},
    }
    lf, bf = result["loaded"]["frame"], result["baseline"]["frame"]
    result["ratio"] = {"mean": round(lf["mean"] / bf["mean"], 2),
                       "p99": round(lf["p99"] / bf["p99"], 2),
                       "cpu_mean": round(result["loaded"]["frame_cpu"]["mean"]
                                         / result["baseline"]["frame_cpu"]["mean"], 2)}
    return result


def table(result: dict[str, Any]) -> str:
    """The result as a text table."""
    c = result["config"]
    lines = [f"dashboard frame time: {c['curves']} curves × {c['points_per_curve']} points, "
             f"{c['frames']} frames, window {c['size'][0]}×{c['size'][1]} "
             f"({result['environment']['platform'] or 'default'} platform)",
             f"{'case':<10} {'part':<9} {'mean':>8} {'p50':>8} {'p99':>8} {'max':>8}  [ms]"]
    for case in ("loaded", "baseline"):
        for part in ("update", "render", "frame", "frame_cpu"):
            s = result[case][part]
            lines.append(f"{case:<10} {part:<9} {s['mean']:>8.2f} {s['p50']:>8.2f} "
                         f"{s['p99']:>8.2f} {s['max']:>8.2f}")
    r = result["ratio"]
    lines.append(f"loaded / baseline frame: mean × {r['mean']:.2f}, p99 × {r['p99']:.2f}; "
                 f"CPU mean × {r['cpu_mean']:.2f} (budget at 30 frames/s: 33.3 ms)")
    lines.append(f"load average during the run: {result['environment']['loadavg']}")
    return "\n".join(lines)
