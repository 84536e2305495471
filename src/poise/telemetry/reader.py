"""Read an experiment log back, whole or damaged.

:func:`read_log` walks the file with ``mcap``'s ``StreamReader`` (one pass, no index needed), so
a file cut short by a crash yields every record before the damage and reports ``truncated``;
``mcap.reader.make_reader`` would refuse such a file outright. A file that is not MCAP at all
(another format, or empty) is refused with :class:`NotMcapError`, not reported as damaged.

Message times: logs written since the Foxglove-native format store Unix nanoseconds (their
``clock`` record says ``log_time = "unix_ns"``); older logs stored host monotonic nanoseconds.
:attr:`LogContents.time_base` tells which (from that record, else from the magnitude of the
times), and :meth:`LogContents.unix_ns` converts either. Everything that works on run time reads
the host monotonic ``t`` of the payloads, which every version of the log carries, so both
kinds read, export, plot and replay alike.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from mcap.records import Channel, Message, Metadata, Schema
from mcap.stream_reader import StreamReader

from poise.telemetry.clock import UNIX_NS

#: Per-cycle topics joined by ``seq`` into samples.
CYCLE_TOPICS = ("/sensors", "/setpoints", "/ik", "/timing")
#: The first bytes of every MCAP file.
MCAP_MAGIC = b"\x89MCAP0\r\n"
#: Message times at or above this are Unix ns (2001-09-09); a monotonic clock would need 31
#: years of uptime to reach it.
UNIX_NS_MIN = 10**18


class NotMcapError(ValueError):
    """The file is not an MCAP file (its first bytes are not the MCAP magic, or it is empty)."""


@dataclass
class LogContents:
    """What a log holds.

    Attributes:
        path: the file.
        metadata: ``{record name: {key: decoded JSON value}}``.
        messages: ``{topic: [decoded message dicts]}`` in file order; each dict also carries
            ``_log_time`` [ns] as stored (see :attr:`time_base`) and ``_sequence``.
        schemas: ``{topic: schema name}``.
        truncated: the file ended early (crash); everything before the damage is here.
        error: what stopped the reader, if anything.
        finished: the writer closed the file properly (summary and footer present).
    """

    path: str
    metadata: dict[str, dict[str, Any]] = field(default_factory=dict)
    messages: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    schemas: dict[str, str] = field(default_factory=dict)
    truncated: bool = False
    error: str = ""
    finished: bool = False

    def topic(self, name: str) -> list[dict[str, Any]]:
        """Messages of one topic (empty list if none)."""
        return self.messages.get(name, [])

    def columns(self, topic: str) -> dict[str, np.ndarray]:
        """A topic as columns: scalars become 1-D arrays, fixed-length lists 2-D (rows × k).

        ``null`` is how the writer stores a number that is not finite, so a column of nulls
        only (a latency never measured, a residual the model has not, or the first cycles of
        a log cut short) is a float column of NaN, like any other number column."""
        rows = self.topic(topic)
        if not rows:
            return {}
        out: dict[str, np.ndarray] = {}
        for key in rows[0]:
            if key.startswith("_"):
                continue
            values = [r.get(key) for r in rows]
            first = next((v for v in values if v is not None), None)
            if isinstance(first, list):
                width = max(len(v or ()) for v in values)
                arr = np.full((len(values), width), np.nan)
                for i, v in enumerate(values):
                    if v:
                        arr[i, : len(v)] = [np.nan if x is None else x for x in v]
                out[key] = arr
            elif isinstance(first, int | float) and not isinstance(first, bool):
                out[key] = np.array([np.nan if v is None else v for v in values], dtype=float)
                if key == "seq":
                    out[key] = out[key].astype(np.int64)
            elif first is None:
                out[key] = np.full(len(values), np.nan)
            else:
                out[key] = np.array(values, dtype=object)
        return out

    def samples(self) -> Iterator[dict[str, Any]]:
        """Per-cycle records: the four cycle topics joined on ``seq`` (fields of
        :class:`CycleSample`); cycles missing from any topic are skipped."""
        parts = [{m["seq"]: m for m in self.topic(t)} for t in CYCLE_TOPICS]
        for seq in sorted(set(parts[0]).intersection(*parts[1:])):
            row: dict[str, Any] = {}
            for p in parts:
                row.update({k: v for k, v in p[seq].items() if not k.startswith("_")})
            yield row

    def gaps(self) -> list[tuple[int, int]]:
        """Missing cycle ranges ``(first missing seq, count)`` on ``/sensors``."""
        seqs = [m["seq"] for m in self.topic("/sensors")]
        return [(a + 1, b - a - 1) for a, b in itertools.pairwise(seqs) if b != a + 1]

    def t0_wall(self) -> float | None:
        """Unix time [s] of monotonic time zero per the ``clock`` anchor, if recorded."""
        clock = self.metadata.get("clock")
        if not clock:
            return None
        return (clock["wall_ns"] - clock["monotonic_ns"]) / 1e9

    @property
    def time_base(self) -> str:
        """What the MCAP message times are: ``"unix"`` (Unix ns, current logs) or
        ``"monotonic"`` (host monotonic ns, logs written before), per the ``clock`` record's
        ``log_time``, else the magnitude of the first message time; ``"unknown"`` for a log
        cut short before both."""
        clock = self.metadata.get("clock") or {}
        if clock.get("log_time") == UNIX_NS:
            return "unix"
        first = next((m[0]["_log_time"] for m in self.messages.values() if m), None)
        if first is None and not clock:
            return "unknown"
        return "unix" if first is not None and first >= UNIX_NS_MIN else "monotonic"

    def unix_ns(self, log_time: int) -> int | None:
        """Unix time [ns] of a stored message time, whichever the time base (None for a
        monotonic log without a ``clock`` anchor)."""
        if self.time_base == "unix":
            return int(log_time)
        clock = self.metadata.get("clock")
        if not clock:
            return None
        return int(log_time) + int(clock["wall_ns"]) - int(clock["monotonic_ns"])

    def drawing_topics(self) -> list[str]:
        """Topics with Foxglove drawing schemas (``foxglove.*``: the scene and transforms),
        derived from the cycle channels."""
        return sorted(t for t, name in self.schemas.items() if name.startswith("foxglove."))


def _decode_meta(data: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in data.items():
        try:
            out[k] = json.loads(v)
        except (json.JSONDecodeError, TypeError):
            out[k] = v
    return out


def _damage(exc: Exception, f: Any) -> str:
    """What stopped the reader: the file ending inside a record (cut short: a crash, a full
    disk), or a record that does not decode (corruption)."""
    what = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    try:
        cut = f.tell() >= os.fstat(f.fileno()).st_size
    except (OSError, ValueError):
        cut = False
    return f"cut short: the file ends inside a record ({what})" if cut else what


def read_log(path: str | os.PathLike[str]) -> LogContents:
    """Read every record of ``path`` that survived; never raises on a damaged file.

    Raises:
        NotMcapError: the file does not start like an MCAP file (or is empty).
        OSError: it cannot be opened.
    """
    contents = LogContents(path=os.fspath(path))
    channels: dict[int, str] = {}
    schemas: dict[int, str] = {}
    with open(path, "rb") as f:
        head = f.read(len(MCAP_MAGIC))
        if not head:
            raise NotMcapError(f"{contents.path} is not an MCAP file (it is empty)")
        if not MCAP_MAGIC.startswith(head):  # a shorter head: cut right after it was opened
            raise NotMcapError(f"{contents.path} is not an MCAP file")
        f.seek(0)
        try:
            for record in StreamReader(f, skip_magic=False, emit_chunks=False,
                                       validate_crcs=True).records:
                if isinstance(record, Message):
                    topic = channels.get(record.channel_id)
                    if topic is None:
                        continue
                    try:
                        doc = json.loads(record.data)
                    except json.JSONDecodeError:
                        continue
                    doc["_log_time"] = record.log_time
                    doc["_sequence"] = record.sequence
                    contents.messages.setdefault(topic, []).append(doc)
                elif isinstance(record, Channel):
                    channels[record.id] = record.topic
                    contents.schemas[record.topic] = schemas.get(record.schema_id, "")
                elif isinstance(record, Schema):
                    schemas[record.id] = record.name
                elif isinstance(record, Metadata):
                    contents.metadata[record.name] = _decode_meta(dict(record.metadata))
                elif type(record).__name__ == "Footer":
                    contents.finished = True
        except Exception as exc:  # truncated or corrupt tail: keep what came before
            contents.truncated = True
            contents.error = _damage(exc, f)
    if not contents.finished and not contents.truncated:
        contents.truncated = True
        contents.error = contents.error or "no footer: the writer did not finish the file"
    return contents


def summary(contents: LogContents) -> dict[str, Any]:
    """What ``poise log info`` shows: span, counts, gaps, states, rates, provenance."""
    sensors = contents.topic("/sensors")
    info: dict[str, Any] = {
        "path": contents.path, "finished": contents.finished, "truncated": contents.truncated,
        "error": contents.error, "time_base": contents.time_base,
        "messages": {t: len(m) for t, m in sorted(contents.messages.items())},
    }
    if sensors:
        t = [m["t"] for m in sensors]
        info["cycles"] = len(sensors)
        info["first_seq"], info["last_seq"] = sensors[0]["seq"], sensors[-1]["seq"]
        info["duration_s"] = t[-1] - t[0]
        info["rate_hz"] = (len(t) - 1) / (t[-1] - t[0]) if t[-1] > t[0] else None
        gaps = contents.gaps()
        info["missing_cycles"] = sum(n for _, n in gaps)
        info["gaps"] = gaps[:20]
        t0 = contents.t0_wall()
        if t0 is not None:
            info["start_unix"] = t0 + t[0]
    timing = contents.columns("/timing")
    if timing:
        for key in ("lateness_us", "compute_us", "latency_us"):
            col = timing[key][np.isfinite(timing[key])]
            if col.size:
                info[key] = {"p50": float(np.percentile(col, 50)),
                             "p99": float(np.percentile(col, 99)), "max": float(col.max())}
    ik = contents.columns("/ik")
    if ik:
        err = ik["task_error"][np.isfinite(ik["task_error"])]
        if err.size:
            info["task_error_final"] = float(err[-1])
    info["states"] = [(m["t"], m["from"], m["to"], m["cause"]) for m in contents.topic("/state")]
    info["events"] = len(contents.topic("/events"))
    info["controller"] = run_summary(contents)
    info["param_changes"] = sum(1 for m in contents.topic("/params") if m["kind"] == "change")
    info["metadata"] = contents.metadata
    return info


def run_summary(contents: LogContents) -> dict[str, Any] | None:
    """What the controller itself reported at the end of the run: its last ``summary`` event
    (``Controller.summary()``), reduced to ``cycles``, ``missed``, ``missed_pct``, ``state``
    and ``reason``; None for logs written before controllers published it (or cut short
    before the end)."""
    last = None
    for event in contents.topic("/events"):
        if event.get("kind") == "summary" and isinstance(event.get("data"), dict):
            last = event["data"]
    if last is None:
        return None
    timing = last.get("timing") if isinstance(last.get("timing"), dict) else {}
    return {"cycles": timing.get("cycles"), "missed": timing.get("missed"),
            "missed_pct": timing.get("missed_pct"), "state": last.get("state"),
            "reason": last.get("reason")}
