"""Experiment logs: every run into one MCAP file with JSON-schema channels (opens in Foxglove).

Channels (message encoding ``json``, schema encoding ``jsonschema``); one message per control
cycle on each of the first four, with the cycle counter as the MCAP ``sequence`` so gaps show:

==============  ============================  ============================================
topic           schema                        fields
==============  ============================  ============================================
``/sensors``    ``poise.Sensors``             seq, t, state, q
``/setpoints``  ``poise.Setpoints``           seq, t, qa_ref, tau_ff
``/ik``         ``poise.IKState``             seq, t, q_bar, target, x, task_error,
                                              statics_residual
``/timing``     ``poise.Timing``              seq, t, period_us, lateness_us, compute_us,
                                              latency_us
``/params``     ``poise.Params``              t, kind ("initial" | "change"), data
``/state``      ``poise.State``               t, from, to, cause
``/events``     ``poise.Event``               t, kind, data (commands, faults, info)
``/trajectory`` ``poise.Trajectory``          t, status (accepted | running | done |
                                              aborted), id, data (waypoints, progress)
``/scene``      ``foxglove.SceneUpdate``      the arm at q, at q̄, and the target (with a model)
``/tf``         ``foxglove.FrameTransforms``  world → poise_base (with a model)
==============  ============================  ============================================

Timestamps (``log_time`` = ``publish_time``) are Unix nanoseconds, so Foxglove shows the run at
the time it happened: the ``clock`` metadata record (a :class:`~poise.telemetry.clock.ClockAnchor`,
with ``log_time = "unix_ns"``) pairs one host monotonic instant with the wall clock, read once at
the start, and every message time is that anchor plus the monotonic offset, so times stay
monotonic whatever the wall clock does during the run. The host monotonic time [s] stays in every
payload (``t``; ``metadata`` ``t`` of the scene entities). Metadata records: ``poise`` (package
version, git revision, Python, host), ``clock``, and whatever the caller adds (``config``,
``calibration``, ``firmware``, ``model``); ``stability`` (the feedback gains' bound and the
slowest structural mode, :mod:`poise.motion.stability`) each time an accepted change
brings a new one; each value is JSON text.

Given a drawable ``model`` (:func:`poise.telemetry.scene.drawable`), the writer also draws the
arm for Foxglove's 3D panel (:mod:`poise.telemetry.scene`): ``/scene`` at most ``scene_rate_hz``
(30) per second of cycle time, ``/tf`` at the first cycle and then once a second.

The writer never blocks the control cycle: its own thread drains :class:`SampleQueue` s, encodes
in slices of at most ``slice_`` samples with a GIL hand-off between slices, and closes an MCAP
chunk (compressed, then flushed to the OS) every ``flush_interval`` (0.1 s). A killed process
therefore loses at most the last ~100 ms plus whatever was still queued;
:func:`poise.telemetry.reader.read_log` recovers everything before the damage. A write that
fails (a full disk) ends the log, never the run, and says so (:class:`LogWriter`,
:meth:`LogWriter.report`).
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import os
import pathlib
import platform
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from mcap.writer import CompressionType, Writer

import poise
from poise.api.bus import CycleSample, Event, SampleQueue
from poise.telemetry import scene as fox
from poise.telemetry.clock import ClockAnchor, Decimator

log = logging.getLogger(__name__)

PROFILE = ""  # plain MCAP (no ROS profile)

_num = {"type": "number"}
_nums = {"type": "array", "items": {"type": ["number", "null"]}}
_seq_t = {"seq": {"type": "integer", "description": "control cycle counter"},
          "t": {"type": "number", "description": "host monotonic time [s]"}}


def _schema(title: str, props: dict[str, Any]) -> dict[str, Any]:
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": title,
            "type": "object", "properties": props, "required": list(props)}


#: topic -> (schema name, JSON schema)
SCHEMAS: dict[str, tuple[str, dict[str, Any]]] = {
    "/sensors": ("poise.Sensors", _schema("measured configuration", {
        **_seq_t, "state": {"type": "string"},
        "q": {**_nums, "description": "measured configuration q [rad / model units]"}})),
    "/setpoints": ("poise.Setpoints", _schema("setpoints sent to the device", {
        **_seq_t, "qa_ref": {**_nums, "description": "actuator setpoint [actuator units]"},
        "tau_ff": {**_nums, "description": "effort feed-forward (empty if none)"}})),
    "/ik": ("poise.IKState", _schema("IK state", {
        **_seq_t, "q_bar": {**_nums, "description": "predicted held configuration q̄"},
        "target": {**_nums, "description": "task target x̄ [task units]"},
        "x": {**_nums, "description": "task value used for the error [task units]"},
        "task_error": {"type": ["number", "null"], "description": "‖x̄ − x‖ [task units]"},
        "statics_residual": {"type": ["number", "null"], "description": "‖G_u(q̄)‖ [N·m]"}})),
    "/timing": ("poise.Timing", _schema("cycle timing", {
        **_seq_t, "period_us": _num, "lateness_us": _num, "compute_us": _num,
        "latency_us": {**_num, "description": "sensor frame received → setpoint written"}})),
    "/params": ("poise.Params", _schema("live parameters", {
        "t": _num, "kind": {"enum": ["initial", "change"]}, "data": {"type": "object"}})),
    "/state": ("poise.State", _schema("state transition", {
        "t": _num, "from": {"type": "string"}, "to": {"type": "string"},
        "cause": {"type": "string"}})),
    "/events": ("poise.Event", _schema("event", {
        "t": _num, "kind": {"type": "string"}, "data": {"type": "object"}})),
    "/trajectory": ("poise.Trajectory", _schema("trajectory", {
        "t": _num, "status": {"type": "string"}, "id": {"type": "string"},
        "data": {"type": "object", "description": "accepted: its waypoints (t [s], x [task "
                 "units]), duration and lead-in; running: progress (0–1) and t [s]; done, "
                 "aborted: the target held after it"}})),
}


def _dumps(obj: Any) -> bytes:
    from poise.api.topics import dumps

    return dumps(obj)


def sample_messages(s: CycleSample) -> tuple[bytes, bytes, bytes, bytes]:
    """The ``/sensors``, ``/setpoints``, ``/ik`` and ``/timing`` payloads of one sample."""
    return (
        _dumps({"seq": s.seq, "t": s.t, "state": s.state, "q": s.q}),
        _dumps({"seq": s.seq, "t": s.t, "qa_ref": s.qa_ref, "tau_ff": s.tau_ff}),
        _dumps({"seq": s.seq, "t": s.t, "q_bar": s.q_bar, "target": s.target, "x": s.x,
                "task_error": s.task_error, "statics_residual": s.statics_residual}),
        _dumps({"seq": s.seq, "t": s.t, "period_us": s.period_us,
                "lateness_us": s.lateness_us, "compute_us": s.compute_us,
                "latency_us": s.latency_us}),
    )


def git_revision(path: str | os.PathLike[str] | None = None) -> str | None:
    """``git describe --always --dirty`` of the checkout holding ``path`` (the package), or
    None when it is not a git checkout or git is missing."""
    where = pathlib.Path(path or poise.__file__).resolve().parent
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=40"],
                             cwd=where, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() or None


def provenance() -> dict[str, Any]:
    """Package version, git revision, Python and host of this process."""
    return {"version": poise.__version__, "git_revision": git_revision(),
            "python": platform.python_version(), "platform": platform.platform(),
            "host": socket.gethostname(), "pid": os.getpid()}


def event_message(ev: Event) -> tuple[str, dict[str, Any]]:
    """The topic and payload of an event: ``/state`` (transitions), ``/params`` (accepted
    changes), ``/trajectory`` (a trajectory's life) or ``/events`` (everything else)."""
    if ev.kind == "state":
        d = ev.data
        return "/state", {"t": ev.t, "from": str(d.get("from", "")), "to": str(d.get("to", "")),
                          "cause": str(d.get("cause", ""))}
    if ev.kind == "param":
        return "/params", {"t": ev.t, "kind": "change", "data": ev.data}
    if ev.kind == "trajectory":
        d = ev.data
        return "/trajectory", {"t": ev.t, "status": str(d.get("status", "")),
                               "id": str(d.get("id", "")), "data": d}
    return "/events", ev.as_dict()


def _describe(exc: BaseException) -> str:
    """An error in one line: ``[Errno 28] No space left on device`` for an OS error (without
    the path, which the log's messages name), else ``Type: text``."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"[Errno {exc.errno}] {exc.strerror}" if exc.errno else exc.strerror
    return f"{type(exc).__name__}: {exc}"


def encode_metadata(data: Mapping[str, Any]) -> dict[str, str]:
    """MCAP metadata is str → str: every value becomes its JSON text."""
    return {str(k): json.dumps(v, default=str) for k, v in data.items()}


class LogWriter:
    """Write one run to an MCAP file from its own thread.

    Args:
        path: the ``.mcap`` file; its folder must exist.
        samples: the controller's sample queue (``controller.subscribe()``), or None.
        events: the controller's event queue (``controller.events()``), or None.
        metadata: records to write at the start, ``{name: {key: JSON-able value}}``
            (``config``, ``calibration``, ``firmware``, ``model`` …).
        params: the initial live parameters, logged on ``/params`` as ``kind="initial"``.
        flush_interval: longest time a message waits in an open chunk [s].
        compression: ``"zstd"``, ``"lz4"`` or ``"none"``.
        chunk_size: a chunk is also closed when it holds this many bytes.
        slice_: samples encoded between two GIL hand-offs.
        model: the robot model; when drawable, ``/scene`` and ``/tf`` draw it for Foxglove.
        scene_rate_hz: most ``/scene`` messages per second of cycle time [Hz].
        on_failure: called once, from the writer thread, with :meth:`report` when writing
            fails mid-run (:func:`controller_log` publishes it as an event).

    A write that fails (disk full, a file-size limit, an I/O error) ends the log, never the
    run: the writer says so once (one line on the ``poise.telemetry.log`` logger), calls
    ``on_failure``, and from then on drains its queues without writing, counting what goes
    unlogged. The file keeps everything up to the failure (:func:`~poise.telemetry.reader.
    read_log` reads it); :meth:`report` tells what was logged and what was not.

    Attributes:
        anchor: the clock anchor of the message times (Unix ns).
        samples_written, events_written: counts so far (handed to the MCAP writer).
        gaps: cycles missing between consecutive samples (lost before the writer saw them).
        error: what ended the log early, or None.
    """

    def __init__(self, path: str | os.PathLike[str],
                 samples: SampleQueue[CycleSample] | None = None,
                 events: SampleQueue[Event] | None = None, *,
                 metadata: Mapping[str, Mapping[str, Any]] | None = None,
                 params: Mapping[str, Any] | None = None,
                 flush_interval: float = 0.1, compression: str = "zstd",
                 chunk_size: int = 1 << 20, slice_: int = 25, model: Any = None,
                 scene_rate_hz: float = 30.0,
                 on_failure: Callable[[dict[str, Any]], Any] | None = None) -> None:
        self.path = pathlib.Path(path)
        self.samples = samples
        self.events = events
        self.flush_interval = flush_interval
        self.chunk_size = chunk_size
        self.slice = slice_
        self._compression = {"zstd": CompressionType.ZSTD, "lz4": CompressionType.LZ4,
                             "none": CompressionType.NONE}[compression]
        self._pending_meta: collections.deque[tuple[str, dict[str, str]]] = collections.deque()
        self._pending_params: collections.deque[tuple[float, str, dict]] = collections.deque()
        self._pending_meta.append(("poise", encode_metadata(provenance())))
        self.anchor = ClockAnchor.now()
        self._pending_meta.append(("clock", encode_metadata(self.anchor.as_dict())))
        self._scene = fox.ArmScene(model) if model is not None and fox.drawable(model) else None
        self._scene_due = Decimator(scene_rate_hz)
        self._tf_due = Decimator(1.0)
        for name, data in (metadata or {}).items():
            self.add_metadata(name, data)
        if params is not None:
            self.log_params(params, initial=True)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self.error: BaseException | None = None
        self.samples_written = 0
        self.events_written = 0
        self.gaps = 0
        self._last_seq: int | None = None
        self.on_failure = on_failure
        self._started = 0.0  # monotonic time the writer thread began [s]
        self._flushed = 0  # samples_written at the last flush that reached the OS
        self._failure: dict[str, Any] | None = None
        self._unlogged = [0, 0]  # samples, events drained without writing after a failure

    # -- any thread -----------------------------------------------------------------------------
    def add_metadata(self, name: str, data: Mapping[str, Any]) -> None:
        """Queue a metadata record (e.g. ``firmware`` after the handshake); thread-safe."""
        self._pending_meta.append((name, encode_metadata(data)))

    def log_params(self, params: Mapping[str, Any], *, initial: bool = False) -> None:
        """Queue a ``/params`` message (thread-safe); changes also arrive as ``param`` events."""
        self._pending_params.append((time.monotonic(), "initial" if initial else "change",
                                     dict(params)))

    def start(self) -> LogWriter:
        """Open the file and start the writer thread.

        Raises:
            OSError: the file cannot be created (its folder is missing, not writable …) or
                its first records cannot be written.
        """
        self._thread = threading.Thread(target=self._run, name="poise-log", daemon=True)
        self._thread.start()
        self._ready.wait(5)
        err = self.error
        if isinstance(err, OSError) and err.filename is None:  # a write: name the file
            raise OSError(err.errno, err.strerror, str(self.path)) from err
        if err is not None:
            raise err
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Write what is queued, finish the file (summary and index) and join the thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def __enter__(self) -> LogWriter:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the writer thread ------------------------------------------------------------------------
    def _run(self) -> None:
        self._started = time.monotonic()
        try:
            stream = self.path.open("wb")
        except OSError as exc:
            self.error = exc
            self._ready.set()
            return
        try:
            writer = Writer(stream, chunk_size=self.chunk_size, compression=self._compression)
            writer.start(profile=PROFILE, library=f"poise {poise.__version__}")
            self._channels = {}
            for topic, name, data in self._schemas():
                sid = writer.register_schema(name, "jsonschema", data)
                self._channels[topic] = writer.register_channel(topic, "json", sid)
            stream.flush()
            self._ready.set()
            self._write_until_stopped(writer)
            self._write_pending(writer)
            writer.add_metadata("log_stats", encode_metadata({
                "samples": self.samples_written, "events": self.events_written,
                "gaps": self.gaps,
                "queue_dropped": self.samples.dropped if self.samples else 0}))
            writer.finish()
            stream.flush()
            self._flushed = self.samples_written
        except Exception as exc:  # disk full, etc.: say so, keep the control loop alive
            self.error = exc
            if self._ready.is_set():  # mid-run: the run goes on, unlogged
                self._failed(exc)
                self._discard_until_stopped()
            self._ready.set()  # at start-up: start() raises it
        finally:
            with contextlib.suppress(OSError):  # a full disk refuses the buffer's rest too
                stream.close()

    def _write_until_stopped(self, writer: Writer) -> None:
        """The writer thread's loop: drain the queues in slices, close a chunk every
        ``flush_interval``, until :meth:`stop`."""
        last_flush = time.monotonic()
        while True:
            stopping = self._stop.is_set()
            self._write_pending(writer)
            if self.samples is not None:
                while batch := self.samples.drain(self.slice):
                    self._write_samples(writer, batch)
                    time.sleep(0)  # hand the GIL over between slices
                    if time.monotonic() - last_flush >= self.flush_interval:
                        self._flush(writer)  # even while catching up
                        last_flush = time.monotonic()
            now = time.monotonic()
            if now - last_flush >= self.flush_interval or stopping:
                self._flush(writer)  # close the chunk, push it to the OS
                last_flush = now
            if stopping:
                return
            wait = max(0.0, self.flush_interval - (time.monotonic() - last_flush))
            if self.samples is not None:
                self.samples.wait(min(wait, self.flush_interval / 4))
            else:
                self._stop.wait(min(wait, self.flush_interval / 4))

    def _flush(self, writer: Writer) -> None:
        """Close the open chunk and hand it to the OS; what was written so far is then in
        the file."""
        writer.flush()
        self._flushed = self.samples_written

    def _failed(self, exc: Exception) -> None:
        """Record a mid-run failure, say it once, tell ``on_failure``."""
        self._failure = {"t": time.monotonic(), "unix": time.time(),
                         "dropped": self.samples.dropped if self.samples else 0}
        report = self.report()
        text = (f"experiment log {self.path} failed after {report['failed_after_s']:.1f} s "
                f"({report['error']}); the run goes on, unlogged from here "
                f"({report['samples_logged']} cycles logged)")
        if isinstance(exc, OSError):
            log.error("%s", text)
        else:  # not the disk: a bug, whose traceback is worth having
            log.exception("%s", text)
        if self.on_failure is not None:
            try:
                self.on_failure({**report, "text": text})
            except Exception:  # telling the others must not end the counting
                log.exception("experiment log %s: reporting its failure failed", self.path)

    def _discard_until_stopped(self) -> None:
        """After a failure: empty the queues until :meth:`stop`, counting what goes
        unlogged, so that the controller's queues never fill."""
        while True:
            stopping = self._stop.is_set()
            self._pending_meta.clear()
            self._pending_params.clear()
            if self.samples is not None:
                self._unlogged[0] += len(self.samples.drain())
            if self.events is not None:
                self._unlogged[1] += len(self.events.drain())
            if stopping:
                return
            if self.samples is not None:
                self.samples.wait(self.flush_interval)
            else:
                self._stop.wait(self.flush_interval)

    def report(self) -> dict[str, Any]:
        """What the log holds: ``path``, ``ok`` (no write failed), and after a failure
        ``error`` (what failed), ``failed_after_s`` (its time since the writer started [s]),
        ``failed_at_unix`` [s], ``samples_logged`` (cycles flushed to the file before the
        failure: :func:`~poise.telemetry.reader.read_log` recovers at least these),
        ``samples_unlogged`` (the cycles after them, including those the queue dropped),
        ``unlogged_pct`` (of all the cycles the writer was offered) and ``events_unlogged``;
        always ``gaps``. Final once :meth:`stop` has returned."""
        out: dict[str, Any] = {"path": str(self.path), "ok": self.error is None,
                               "samples_logged": self._flushed, "gaps": self.gaps}
        fail = self._failure
        if self.error is not None:
            out["error"] = _describe(self.error)
        if self.error is None or fail is None:
            return out
        dropped = (self.samples.dropped if self.samples else 0) - fail["dropped"]
        unlogged = self.samples_written - self._flushed + self._unlogged[0] + dropped
        total = self._flushed + unlogged
        out.update(failed_after_s=round(fail["t"] - self._started, 3),
                   failed_at_unix=round(fail["unix"], 3), samples_unlogged=unlogged,
                   unlogged_pct=round(100.0 * unlogged / total, 2) if total else 0.0,
                   events_unlogged=self._unlogged[1])
        return out

    def _write_pending(self, writer: Writer) -> None:
        while self._pending_meta:
            name, data = self._pending_meta.popleft()
            writer.add_metadata(name, data)
        while self._pending_params:
            t, kind, data = self._pending_params.popleft()
            self._write(writer, "/params", t, {"t": t, "kind": kind, "data": data})
        if self.events is not None:
            for ev in self.events.drain():
                topic, doc = event_message(ev)
                self._write(writer, topic, ev.t, doc)
                params = ev.data.get("params") if ev.kind == "param" else None
                if isinstance(params, dict) and isinstance(params.get("stability"), dict):
                    # the feedback gains' bound and the slowest mode at the new target
                    writer.add_metadata("stability", encode_metadata(params["stability"]))
                device = ev.data.get("device") if ev.kind == "info" else None
                if isinstance(device, dict):  # the controller's handshake report
                    # the wire protocol's link says firmware_id, a Device description name
                    writer.add_metadata("firmware", encode_metadata(
                        {**device, "id": device.get("firmware_id") or device.get("name"),
                         "port": ev.data.get("port")}))
                self.events_written += 1

    def _schemas(self) -> list[tuple[str, str, bytes]]:
        """``(topic, schema name, JSON schema)`` of every channel of this log."""
        out = [(topic, name, json.dumps(schema).encode())
               for topic, (name, schema) in SCHEMAS.items()]
        if self._scene is not None:
            out += [(topic, name, fox.foxglove_schema(name.removeprefix("foxglove.")))
                    for topic, name in ((fox.SCENE_TOPIC, fox.SCENE_SCHEMA),
                                        (fox.TF_TOPIC, fox.TF_SCHEMA))]
        return out

    def _write(self, writer: Writer, topic: str, t: float, doc: dict[str, Any]) -> None:
        ns = self.anchor.unix_ns(t)
        writer.add_message(self._channels[topic], log_time=ns, publish_time=ns, data=_dumps(doc))

    def _draw(self, writer: Writer, s: CycleSample, ns: int) -> None:
        """``/tf`` once a second, ``/scene`` decimated (with a drawable model)."""
        assert self._scene is not None
        if self._tf_due.due(s.t):
            writer.add_message(self._channels[fox.TF_TOPIC], log_time=ns, publish_time=ns,
                               data=_dumps(self._scene.transforms(ns)))
        if self._scene_due.due(s.t):
            writer.add_message(self._channels[fox.SCENE_TOPIC], log_time=ns, publish_time=ns,
                               data=_dumps(self._scene.scene(s, ns)), sequence=s.seq & 0xFFFFFFFF)

    def _write_samples(self, writer: Writer, batch: list[CycleSample]) -> None:
        ch = self._channels
        ids = (ch["/sensors"], ch["/setpoints"], ch["/ik"], ch["/timing"])
        # counted first: when a write fails mid-batch, the whole batch is unlogged
        self.samples_written += len(batch)
        for s in batch:
            if self._last_seq is not None and s.seq != self._last_seq + 1:
                self.gaps += max(0, s.seq - self._last_seq - 1)
            self._last_seq = s.seq
            ns = self.anchor.unix_ns(s.t)
            seq = s.seq & 0xFFFFFFFF
            for cid, data in zip(ids, sample_messages(s), strict=True):
                writer.add_message(cid, log_time=ns, publish_time=ns, data=data, sequence=seq)
            if self._scene is not None:
                self._draw(writer, s, ns)


def controller_log(controller: Any, path: str | os.PathLike[str] | None = None,
                   **kwargs: Any) -> LogWriter:
    """A started :class:`LogWriter` for a running ``poise.controller.Controller``.

    Subscribes to its samples and events (with the event history, so a log started after
    ``connect`` still records the handshake), and records as metadata the resolved
    configuration (``config.as_dict()``), the model (``model.describe()``), the calibration
    (the calibration file's metadata and path) and, once the controller reports the handshake,
    the firmware; the model also draws the arm on ``/scene`` and ``/tf``. ``path`` defaults to
    ``config.log.path``. If writing fails mid-run, the controller publishes it (when it can:
    ``announce``) as the event ``fault`` with ``source = "log"``, ``code = "log_failed"``,
    ``action = "continue"`` and :meth:`LogWriter.report`'s fields (and ``text``), which MQTT
    forwards on ``events``.
    """
    config = getattr(controller, "config", None)
    path = path or getattr(getattr(config, "log", None), "path", None)
    if not path:
        raise ValueError("no log path: set [log] path or pass one")
    meta: dict[str, dict[str, Any]] = {}
    if config is not None and hasattr(config, "as_dict"):
        meta["config"] = config.as_dict()
    model = getattr(controller, "model", None)
    if model is not None and hasattr(model, "describe"):
        try:
            meta["model"] = dict(model.describe())
        except Exception as exc:  # a model without a description still gets logged
            meta["model"] = {"name": getattr(model, "name", "?"), "error": str(exc)}
    info = getattr(controller, "model_info", None)
    calibration = getattr(info, "calibration", None)
    cal_file = getattr(getattr(config, "model", None), "calibration", None)
    meta["calibration"] = {"file": cal_file, **(dict(calibration) if calibration else {})}
    params = getattr(controller, "params", None)
    if hasattr(params, "as_dict"):
        params = params.as_dict()
    kwargs.setdefault("model", model)
    announce = getattr(controller, "announce", None)
    if callable(announce):
        kwargs.setdefault("on_failure", lambda report: announce(
            "fault", source="log", code="log_failed", action="continue", **report))
    writer = LogWriter(path, controller.subscribe(), controller.events(), metadata=meta,
                       params=params if isinstance(params, Mapping) else None, **kwargs)
    return writer.start()
