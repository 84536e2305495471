"""The dashboard's pieces without a network: ring buffers, the batch format of the real
telemetry encoder, the configuration plane against the statics solver, and the widgets in a real
(offscreen) Qt application."""

from __future__ import annotations

import itertools
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from poise.api.bus import CycleSample
from poise.api.topics import batch_dict, command_topic, split_topic
from poise.gui.broker import BrokerURL
from poise.gui.ring import Layout, RingBuffer, TelemetryBuffer
from poise.ik.statics import solve_statics
from poise.models import load_model
from poise.models.actuation import Gu


@settings(max_examples=60, deadline=None)
@given(capacity=st.integers(1, 40),
       blocks=st.lists(st.integers(0, 60), min_size=1, max_size=30))
def test_ring_buffer_view_is_the_newest_samples_in_order(capacity, blocks):
    ring = RingBuffer(capacity, 2)
    reference: list[float] = []
    counter = 0
    for k in blocks:
        block = np.arange(counter, counter + k, dtype=float)
        counter += k
        ring.extend(np.column_stack([block, -block]))
        reference.extend(block)
        expected = np.array(reference[-capacity:])
        view = ring.view()
        assert view.shape == (2, len(expected))
        np.testing.assert_array_equal(view[0], expected)
        np.testing.assert_array_equal(view[1], -expected)
        assert view[0].flags["C_CONTIGUOUS"]  # handed to the plots without a copy
    assert ring.total == counter


def _samples(n_samples: int, start_seq: int = 0, t0: float = 100.0) -> list[CycleSample]:
    out = []
    for i in range(n_samples):
        s = start_seq + i
        out.append(CycleSample(
            t=t0 + 0.002 * s, seq=s, state="running", q=(0.1 * s, -0.2 * s),
            q_bar=(0.1 * s + 1, -0.2 * s + 1), qa_ref=(0.01 * s,), tau_ff=(), target=(0.5,),
            x=(0.001 * s,), task_error=abs(0.5 - 0.001 * s), statics_residual=1e-9 * s,
            period_us=2000.0, lateness_us=float(s), compute_us=100.0 + s, latency_us=200.0 + s))
    return out


def test_telemetry_buffer_reads_the_services_batch_encoding():
    buf = TelemetryBuffer(Layout(n=2, m=1, task_dim=1), capacity=100)
    for start in (0, 10, 25):  # seq 20..24 never arrive: a gap of 5
        assert buf.ingest(batch_dict(_samples(10, start), dropped=3)) == 10
    assert len(buf) == 30
    assert buf.gaps == 5
    seqs = np.r_[0:20, 25:35]
    np.testing.assert_allclose(buf.channel("t")[0], 0.002 * seqs)
    np.testing.assert_allclose(buf.channel("q")[1], -0.2 * seqs)
    np.testing.assert_allclose(buf.channel("q_bar")[0], 0.1 * seqs + 1)
    np.testing.assert_allclose(buf.channel("qa_ref")[0], 0.01 * seqs)
    np.testing.assert_allclose(buf.channel("latency_us")[0], 200.0 + seqs)
    np.testing.assert_allclose(buf.latest("target"), [0.5])
    assert buf.window(0.0201)[0] == 10  # the last 20 ms: seq 25..34
    assert buf.window(0.0301)[0] == 11  # the last 30 ms: seq 19 and 25..34


def test_telemetry_buffer_starts_over_when_the_service_restarts():
    buf = TelemetryBuffer(Layout(n=2, m=1, task_dim=1), capacity=100)
    buf.ingest(batch_dict(_samples(10, 0, t0=500.0), dropped=0))
    buf.ingest(batch_dict(_samples(4, 0, t0=3.0), dropped=0))  # a new process: clock restarts
    assert len(buf) == 4
    np.testing.assert_allclose(buf.channel("t")[0], 0.002 * np.arange(4))


def test_telemetry_buffer_turns_missing_and_null_fields_into_nan():
    batch = batch_dict(_samples(3), dropped=0)
    del batch["qa_ref"]
    batch["x"] = [[None], [0.1], [None]]  # NaN goes out as null
    buf = TelemetryBuffer(Layout(n=2, m=1, task_dim=1))
    buf.ingest(batch)
    assert np.isnan(buf.channel("qa_ref")).all()
    np.testing.assert_array_equal(np.isnan(buf.channel("x")[0]), [True, False, True])


def test_broker_urls_and_topics():
    url = BrokerURL.parse("mqtt://op:secret@lab-pc:1884")
    assert (url.host, url.port, url.username, url.password, url.tls) == (
        "lab-pc", 1884, "op", "secret", False)
    assert BrokerURL.parse("mqtts://broker").port == 8883
    assert BrokerURL.parse("10.0.0.5").port == 1883
    with pytest.raises(ValueError, match="scheme"):
        BrokerURL.parse("http://x")
    assert command_topic("arm1", "estop") == "poise/arm1/set/estop"
    with pytest.raises(ValueError, match="unknown command"):
        command_topic("arm1", "explode")
    assert split_topic("poise/arm1/$state") == ("arm1", "$state")
    assert split_topic("other/arm1/x") is None


# --------------------------------------------------------------------- configuration plane


@pytest.fixture(scope="module")
def pendulum_plane():
    from poise.gui.plane import compute_plane

    model = load_model("double_pendulum")
    return model, compute_plane(model)


def _distance_to(polylines, q):
    """Distance from point q to the nearest segment of the polylines."""
    best = np.inf
    for line in polylines:
        a, b = line[:-1], line[1:]
        ab = b - a
        s = np.clip(np.einsum("ij,ij->i", q - a, ab) / np.maximum(
            np.einsum("ij,ij->i", ab, ab), 1e-300), 0.0, 1.0)
        best = min(best, float(np.min(np.linalg.norm(a + s[:, None] * ab - q, axis=1))))
    return best


def test_traced_held_set_passes_through_the_statics_solutions(pendulum_plane):
    model, plane = pendulum_plane
    step = float(plane.q1[1] - plane.q1[0])
    for qa in np.linspace(model.qa_min[0], model.qa_max[0], 9):
        sol = solve_statics(model, np.array([qa]), np.zeros(1))
        assert sol.converged and sol.stable
        # every stable held configuration lies on the stable part of the traced E
        assert _distance_to(plane.E_stable, sol.q) < 0.1 * step
    for line in plane.E_stable:
        residual = np.array([abs(Gu(model, q)[0]) for q in line])
        gu_scale = float(np.nanmax(np.abs(plane.Gu)))
        assert residual.max() < 1e-3 * gu_scale


def test_target_set_is_where_the_tip_reaches_the_target(pendulum_plane, qtbot):
    from poise.gui.plane import ConfigPlane

    model, plane = pendulum_plane
    widget = ConfigPlane()
    qtbot.addWidget(widget)
    widget.set_data(plane)
    widget.set_target([0.8])
    x, y = widget.target_set.getData()
    pts = np.column_stack([x, y])[np.isfinite(x)]
    assert len(pts) > 20
    tip = np.array([model.fk(q)[0] for q in pts])
    assert np.max(np.abs(tip - 0.8)) < 5e-3


# --------------------------------------------------------------------- widgets


def _fill(buffer: TelemetryBuffer, seconds: float, rate: float = 1000.0,
          start: float = 0.0) -> None:
    n = int(seconds * rate)
    t = start + np.arange(n) / rate
    batch = {"t": t.tolist(), "q": np.column_stack([np.sin(t), np.cos(t)]).tolist(),
             "q_bar": np.column_stack([np.sin(t), np.cos(t)]).tolist(),
             "qa_ref": (0.01 * t[:, None]).tolist(), "target": np.full((n, 1), 0.5).tolist(),
             "x": np.sin(t)[:, None].tolist(), "task_error": np.abs(np.sin(t)).tolist(),
             "statics_residual": np.zeros(n).tolist(), "latency_us": (t * 0 + 100).tolist(),
             "lateness_us": (t * 0 + 10).tolist(), "compute_us": (t * 0 + 50).tolist()}
    buffer.ingest(batch)


def test_curves_show_only_the_chosen_time_window(qtbot):
    from poise.gui.curves import CurvesPanel

    panel = CurvesPanel()
    qtbot.addWidget(panel)
    panel.resize(800, 700)
    panel.show()
    qtbot.waitExposed(panel)
    buf = TelemetryBuffer(Layout(n=2, m=1, task_dim=1), capacity=20_000)
    _fill(buf, 12.0)
    assert panel.refresh(buf, 5.0) in (5000, 5001)  # 5 s at 1 kHz (edge sample: rounding)
    assert len(panel.curves) == 12  # x, x̄, ‖e‖, ‖G_u‖, q1, q̄1, q2, q̄2, q̄a, 3 timings
    for curve in panel.curves:
        x, _ = curve.item.getOriginalDataset()
        assert x[0] >= 11.999 - 5.0 - 1e-9 and x[-1] == pytest.approx(11.999)
    for plot in panel.plots.values():  # all five share the time axis
        lo, hi = plot.getViewBox().viewRange()[0]
        assert (lo, hi) == pytest.approx((6.999, 11.999), abs=1e-6)


def test_pause_freezes_the_curves_while_data_keeps_arriving(qtbot):
    from poise.gui.app import application
    from poise.gui.window import DashboardWindow

    application()
    window = DashboardWindow(None, start_timer=False)
    qtbot.addWidget(window)
    buf = TelemetryBuffer(Layout(n=2, m=1, task_dim=1))
    _fill(buf, 1.0)
    window.buffer = buf
    window.frame()
    before = window.curves.curves[0].item.getOriginalDataset()[0].copy()
    window.pause_button.click()
    _fill(buf, 1.0, start=1.0)
    window.frame()
    np.testing.assert_array_equal(window.curves.curves[0].item.getOriginalDataset()[0], before)
    window.pause_button.click()
    window.frame()
    assert not window.paused
    window.window_box.setCurrentIndex(0)
    assert window.window_s == 2.0


def test_dragging_the_target_with_the_mouse_emits_the_new_target(qtbot):
    from poise.gui.app import application
    from poise.gui.arm import ArmView

    application()
    view = ArmView()
    qtbot.addWidget(view)
    view.resize(500, 500)
    view.show()
    qtbot.waitExposed(view)
    view.set_model(load_model("double_pendulum"))
    view.set_target([0.2])
    qtbot.wait(50)
    moved: list[list[float]] = []
    view.target_moved.connect(moved.append)
    with qtbot.waitSignal(view.target_dragged, timeout=2000) as blocker:
        drag(qtbot, view, view.handle_scene_pos(), dx_view=0.6)
    assert blocker.args[0] == [pytest.approx(0.8, abs=0.05)]
    # while dragged, its positions (at most DRAG_HZ a second), moving monotonically out
    assert moved and all(b[0] >= a[0] for a, b in itertools.pairwise(moved))
    assert 0.2 < moved[-1][0] <= blocker.args[0][0] + 1e-9
    # programmatic updates (from params/telemetry) do not emit
    with qtbot.assertNotEmitted(view.target_dragged):
        view.set_target([0.3])


def drag(qtbot, view, scene_from, dx_view: float = 0.0, dy_view: float = 0.0) -> None:
    """A real left-button drag on a pyqtgraph view, from a scene point by (dx, dy) in data
    units, through the viewport's mouse events."""
    from PySide6 import QtCore, QtGui, QtWidgets

    vb = view.getViewBox()
    start_view = vb.mapSceneToView(scene_from)
    end_scene = vb.mapViewToScene(QtCore.QPointF(start_view.x() + dx_view,
                                                 start_view.y() + dy_view))
    viewport = view.viewport()
    left = QtCore.Qt.MouseButton.LeftButton
    none = QtCore.Qt.MouseButton.NoButton
    mods = QtCore.Qt.KeyboardModifier.NoModifier

    def send(kind, scene_pt, button, buttons):
        local = QtCore.QPointF(view.mapFromScene(scene_pt))
        glob = QtCore.QPointF(viewport.mapToGlobal(local.toPoint()))
        event = QtGui.QMouseEvent(kind, local, glob, button, buttons, mods)
        QtWidgets.QApplication.sendEvent(viewport, event)

    send(QtCore.QEvent.Type.MouseButtonPress, scene_from, left, left)
    steps = 10
    for i in range(1, steps + 1):
        f = i / steps
        p = QtCore.QPointF(scene_from.x() + f * (end_scene.x() - scene_from.x()),
                           scene_from.y() + f * (end_scene.y() - scene_from.y()))
        send(QtCore.QEvent.Type.MouseMove, p, none, left)
        qtbot.wait(5)
    send(QtCore.QEvent.Type.MouseButtonRelease, end_scene, left, none)


def test_frame_time_benchmark_reports_loaded_and_baseline_frames(qtbot):
    from poise.gui import bench

    result = bench.run(points=400, frames=3, warmup=1, size=(800, 500))
    assert result["config"]["curves"] == 12
    assert result["config"]["points_per_curve"] >= 400
    for case in ("loaded", "baseline"):
        assert set(result[case]) == {"update", "render", "frame", "frame_cpu"}
        assert result[case]["frame"]["mean"] > 0
    assert result["ratio"]["mean"] > 0
    assert "loaded / baseline" in bench.table(result)


def test_choose_robot_follows_live_robots_only():
    from poise.gui.broker import choose_robot, is_live

    assert not any(map(is_live, ("offline", "lost", "gone"))) and is_live("running")
    assert choose_robot({}, None) is None
    assert choose_robot({"old": "offline", "dead": "lost"}, None) is None
    assert choose_robot({"old": "offline", "arm": "ready", "arm2": "running"}, None) == "arm"
    assert choose_robot({"arm": "running", "arm2": "running"}, "arm2") == "arm2"  # stays
    # the followed robot stopped: it stays on screen until a live one exists
    assert choose_robot({"arm": "lost", "old": "offline"}, "arm") == "arm"
    assert choose_robot({"arm": "lost", "new": "idle"}, "arm") == "new"
    assert choose_robot({"arm": "gone", "new": "fault"}, "arm") == "new"  # a fault is live


def test_telemetry_buffer_leaves_out_a_late_batch_so_the_window_stays_whole():
    """A batch older than the newest sample (it arrived late, less than the second that means
    a restart) is left out and counted: the times stay increasing, so the newest window
    still holds every sample of its seconds."""
    buf = TelemetryBuffer(Layout(n=2, m=1, task_dim=1), capacity=1000)
    buf.ingest(batch_dict(_samples(200, 0, t0=10.0), dropped=0))  # 10.000 … 10.398 s
    assert buf.ingest(batch_dict(_samples(5, 0, t0=10.1), dropped=0)) == 0
    assert buf.late == 5 and len(buf) == 200
    t = buf.channel("t")[0]
    assert np.all(np.diff(t) > 0)
    count, t_end = buf.window(0.1)
    assert t_end == pytest.approx(0.398) and count == 51  # 10.298 … 10.398 s
    # a batch that overlaps the newest: only its newer part is kept
    buf.ingest(batch_dict(_samples(10, 0, t0=10.39), dropped=0))  # 10.390 … 10.408 s
    assert buf.late == 5 + 5 and len(buf) == 205 and np.all(np.diff(buf.channel("t")[0]) > 0)
