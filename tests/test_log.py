"""Experiment logs: MCAP round trip, crash recovery (a real writer process killed with SIGKILL),
and the ``poise log`` commands."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import numpy as np
import pytest
from mcap.reader import make_reader

from conftest import wait_for
from poise.api.bus import Command, CycleSample, Event, SampleQueue
from poise.api.topics import samples_from_batch
from poise.cli import main as cli_main
from poise.telemetry.client import Recorder, forget
from poise.telemetry.log import SCHEMAS, LogWriter
from poise.telemetry.mqtt import MqttConfig
from poise.telemetry.reader import read_log, summary
from poise.telemetry.replay import replay
from poise.telemetry.synthetic import SyntheticLoop
from test_mqtt import broker_url  # noqa: F401 - the broker fixture


def _sample(seq: int, t: float, state: str = "active") -> CycleSample:
    return CycleSample(t=t, seq=seq, state=state, q=(0.1 * seq, 0.2), q_bar=(0.1, 0.2),
                       qa_ref=(0.3,), tau_ff=(), target=(1.0, 2.0), x=(0.9, 2.1),
                       task_error=0.1 / (1 + seq), statics_residual=1e-9 * seq,
                       period_us=1000.0, lateness_us=5.0 + seq % 7, compute_us=40.0,
                       latency_us=60.0)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A log of a deterministic run: 500 cycles with a gap, params, state changes, events."""
    path = tmp_path_factory.mktemp("log") / "run.mcap"
    samples: SampleQueue[CycleSample] = SampleQueue()
    events: SampleQueue[Event] = SampleQueue()
    writer = LogWriter(path, samples, events, chunk_size=8192,
                       params={"algorithm": "alg2", "gamma": 0.5},
                       metadata={"config": {"loop": {"rate": 1000.0}},
                                 "calibration": {"file": None}, "model": {"name": "syn"}})
    with writer:
        writer.add_metadata("firmware", {"id": "poise-fw 1.2.3"})
        events.put(Event(100.0, "state", {"from": "inactive", "to": "active", "cause": "start"}))
        for seq in range(500):
            if 200 <= seq < 210:
                continue  # ten cycles lost upstream: the log must show the gap
            samples.put(_sample(seq, 100.0 + seq * 1e-3))
        events.put(Event(100.2, "param", {"gains": {"gamma": 0.7}}))
        events.put(Event(100.3, "fault", {"what": "sensor timeout"}))
        events.put(Event(100.4, "state", {"from": "active", "to": "error", "cause": "fault"}))
    return path, writer


def test_log_round_trips_every_cycle_and_shows_the_gap(recorded):
    path, writer = recorded
    log = read_log(path)
    assert log.finished and not log.truncated
    sensors = log.topic("/sensors")
    assert len(sensors) == 490 == writer.samples_written
    assert log.gaps() == [(200, 10)] and writer.gaps == 10
    assert [m["_sequence"] for m in sensors[:3]] == [0, 1, 2]  # MCAP sequence = cycle counter
    rows = list(log.samples())
    assert len(rows) == 490
    expected = _sample(499, 100.0 + 499e-3).as_dict()
    assert rows[-1] == {k: list(v) if isinstance(v, tuple) else v for k, v in expected.items()}
    assert [m["to"] for m in log.topic("/state")] == ["active", "error"]
    assert [m["kind"] for m in log.topic("/params")] == ["initial", "change"]
    assert log.topic("/events")[0]["data"] == {"what": "sensor timeout"}
    cols = log.columns("/sensors")
    assert cols["q"].shape == (490, 2) and cols["seq"].dtype == np.int64


def test_log_metadata_carries_config_provenance_firmware_and_a_clock_anchor(recorded):
    log = read_log(recorded[0])
    meta = log.metadata
    assert meta["config"]["loop"] == {"rate": 1000.0}
    assert meta["firmware"]["id"] == "poise-fw 1.2.3"
    assert meta["poise"]["version"] and "git_revision" in meta["poise"]
    assert abs(log.t0_wall() + time.monotonic() - time.time()) < 60  # anchor maps mono → wall
    assert meta["log_stats"]["samples"] == 490


def test_log_is_standard_mcap_with_json_schemas(recorded):
    with open(recorded[0], "rb") as f:
        reader = make_reader(f)
        summary_ = reader.get_summary()
        topics = {c.topic: c for c in summary_.channels.values()}
        assert set(topics) == set(SCHEMAS)
        for channel in topics.values():
            schema = summary_.schemas[channel.schema_id]
            assert channel.message_encoding == "json" and schema.encoding == "jsonschema"
            assert json.loads(schema.data)["type"] == "object"
        # every message validates against its channel's schema (required keys present)
        for schema, channel, message in reader.iter_messages():
            doc = json.loads(message.data)
            assert set(json.loads(schema.data)["required"]) <= set(doc), channel.topic


CHILD = textwrap.dedent("""
    import sys, time
    from poise.telemetry.log import LogWriter
    from poise.telemetry.synthetic import SyntheticLoop
    loop = SyntheticLoop(1000.0)
    writer = LogWriter(sys.argv[1], loop.subscribe(), loop.events()).start()
    loop.start()
    while True:
        print(loop.cycles, flush=True)
        time.sleep(0.01)
""")


def test_sigkill_mid_run_loses_at_most_the_last_100ms_and_the_rest_is_readable(tmp_path):
    path = tmp_path / "crash.mcap"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE,
                             text=True)
    try:
        cycles = 0
        deadline = time.monotonic() + 20
        while cycles < 1500 and time.monotonic() < deadline:
            cycles = int(child.stdout.readline())
        os.kill(child.pid, signal.SIGKILL)  # no atexit, no finally, no flush
    finally:
        child.kill()
        child.wait(5)
        child.stdout.close()
    assert cycles >= 1500
    with open(path, "rb") as f, pytest.raises(Exception):  # noqa: B017
        make_reader(f).get_summary()  # the indexed reader refuses the torn file
    log = read_log(path)
    assert log.truncated and not log.finished
    seqs = [m["seq"] for m in log.topic("/sensors")]
    assert seqs == list(range(len(seqs)))  # everything before the damage, no holes
    lost = cycles - len(seqs)  # `cycles` was printed at most ~10 ms before the kill
    # the open chunk holds ≤ 100 ms; allow as much again for a loaded 2-core machine
    assert lost <= 200, f"lost {lost} cycles"
    assert len(log.topic("/timing")) >= len(seqs) - 1


def test_log_writer_beside_a_1khz_loop_records_every_cycle(tmp_path):
    path = tmp_path / "live.mcap"
    with SyntheticLoop(1000) as loop:
        with LogWriter(path, loop.subscribe(), loop.events(), params=loop.params()) as writer:
            # by count, not by sleeps: a loaded machine runs fewer cycles in a given time
            wait_for("200 cycles logged before the start", lambda: writer.samples_written >= 200,
                     30.0)
            loop.submit(Command("run", "start"))
            started = writer.samples_written
            wait_for("200 cycles logged after it",
                     lambda: writer.samples_written >= started + 201, 30.0)
        cycles_logged = writer.samples_written
    log = read_log(path)
    assert writer.gaps == 0 and cycles_logged == len(log.topic("/sensors")) > 400
    assert [m["to"] for m in log.topic("/state")] == ["active"]
    assert log.topic("/events")[0]["kind"] == "command"


def test_cli_info_export_plot(recorded, tmp_path, capsys):
    path = str(recorded[0])
    assert cli_main(["log", "info", path, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["cycles"] == 490 and info["missing_cycles"] == 10 and info["finished"]
    assert cli_main(["log", "info", path]) == 0
    text = capsys.readouterr().out
    assert "490 cycles" in text and "missing" in text

    out = tmp_path / "csv"
    assert cli_main(["log", "export", path, "--format", "csv", "--out", str(out)]) == 0
    header, *rows = (out / "run_sensors.csv").read_text().splitlines()
    assert header.split(",") == ["seq", "t", "state", "q_0", "q_1"] and len(rows) == 490
    assert (out / "run_state.csv").exists() and (out / "run_params.csv").exists()

    png = tmp_path / "run.png"
    assert cli_main(["log", "plot", path, "--out", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_cli_export_parquet(recorded, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / "pq"
    assert cli_main(["log", "export", str(recorded[0]), "--format", "parquet",
                     "--out", str(out)]) == 0
    table = pq.read_table(out / "run_timing.parquet")
    assert table.num_rows == 490 and "lateness_us" in table.column_names


def test_cli_reports_a_missing_file_without_a_traceback(tmp_path, capsys):
    assert cli_main(["log", "info", str(tmp_path / "nope.mcap")]) == 2
    assert "nope.mcap" in capsys.readouterr().err


def test_summary_of_a_torn_file_says_so(recorded, tmp_path):
    data = recorded[0].read_bytes()
    torn = tmp_path / "torn.mcap"
    torn.write_bytes(data[: len(data) // 2])
    info = summary(read_log(torn))
    assert info["truncated"] and not info["finished"] and 0 < info.get("cycles", 0) < 490


def test_replay_republishes_the_run_on_the_live_topics(recorded, broker_url, request):  # noqa: F811
    rid = "replay-" + uuid.uuid4().hex[:8]
    cfg = MqttConfig.from_url(broker_url, robot_id=rid)
    request.addfinalizer(lambda: forget(cfg))
    with Recorder(cfg) as rec:
        counts = replay(read_log(recorded[0]), cfg, speed=2.0)
        state = rec.wait_for(lambda m: m.name == "$state" and m.json()["state"] == "error", 3)
    batches = [m.json() for m in rec.named("telemetry")]
    seqs = [row["seq"] for b in batches for row in samples_from_batch(b)]
    assert counts["samples"] == 490 and seqs == [s for s in range(500) if not 200 <= s < 210]
    assert state is not None and state.json()["device"] == "replay:run.mcap"
    assert rec.named("model")[0].json() == {"name": "syn"}
    params = [m.json() for m in rec.named("params")]
    assert params[0]["algorithm"] == "alg2" and params[-1]["gains"] == {"gamma": 0.7}
    kinds = [m.json()["kind"] for m in rec.named("events")]
    assert kinds == ["state", "param", "fault", "state"]


# ------------------------------------------------------------------ log info: files and summary


def _png(path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(1, 1))
    fig.savefig(path)
    plt.close(fig)
    return path


def test_info_on_a_file_that_is_not_mcap_is_an_error(tmp_path, capsys):
    png = _png(tmp_path / "held.png")
    assert cli_main(["log", "info", str(png)]) == 2
    captured = capsys.readouterr()
    assert f"{png} is not an MCAP file" in captured.err
    assert "TRUNCATED" not in captured.out + captured.err
    empty = tmp_path / "empty.mcap"
    empty.write_bytes(b"")
    assert cli_main(["log", "info", str(empty)]) == 2
    assert "is not an MCAP file (it is empty)" in capsys.readouterr().err
    for cmd in (["export", str(png), "--out", str(tmp_path)], ["plot", str(png)]):
        assert cli_main(["log", *cmd]) == 2
        assert "is not an MCAP file" in capsys.readouterr().err


def test_info_reports_each_of_several_files_and_fails_if_any_failed(recorded, tmp_path,
                                                                    capsys):
    path = str(recorded[0])
    png = str(_png(tmp_path / "held.png"))
    assert cli_main(["log", "info", path, path]) == 0
    assert capsys.readouterr().out.count("490 cycles") == 2
    assert cli_main(["log", "info", path, png, path, "--json"]) == 2
    captured = capsys.readouterr()
    reports = json.loads(captured.out)
    assert [r["path"] for r in reports] == [path, png, path]
    assert reports[0]["cycles"] == 490 and reports[2]["cycles"] == 490
    assert reports[1]["error"] == f"{png} is not an MCAP file"
    assert "1 of 3 file(s) could not be read" in captured.err


def test_info_shows_the_controllers_missed_cycles_and_final_state(tmp_path, capsys):
    """The run summary the controller publishes as its last event (kind ``summary``) is what
    ``log info`` reports as missed cycles, apart from gaps in the log's own sequence."""
    path = tmp_path / "run.mcap"
    samples: SampleQueue[CycleSample] = SampleQueue()
    events: SampleQueue[Event] = SampleQueue()
    with LogWriter(path, samples, events, chunk_size=8192):
        for seq in range(300):
            samples.put(_sample(seq, 50.0 + seq * 1e-3))
        events.put(Event(50.1, "summary", {  # an earlier one: only the last counts
            "state": "running", "timing": {"cycles": 100, "missed": 1, "missed_pct": 1.0}}))
        events.put(Event(50.4, "summary", {
            "state": "fault", "reason": "sensor timeout", "reached": False,
            "timing": {"cycles": 5000, "missed": 25, "missed_pct": 0.4975,
                       "latency_us": {"p50": 10.0}}}))
    assert cli_main(["log", "info", str(path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["missing_cycles"] == 0
    assert info["controller"] == {"cycles": 5000, "missed": 25, "missed_pct": 0.4975,
                                  "state": "fault", "reason": "sensor timeout"}
    assert cli_main(["log", "info", str(path)]) == 0
    text = capsys.readouterr().out
    assert "missed cycles (controller): 25 of 5025 periods (0.4975 %)" in text
    assert "final state fault (sensor timeout)" in text
    assert "sequence gaps in the log: 0 cycle(s) missing" in text


def test_info_on_an_older_log_says_missed_cycles_were_not_recorded(recorded, capsys):
    assert cli_main(["log", "info", str(recorded[0])]) == 0
    text = capsys.readouterr().out
    assert "missed cycles (controller): not recorded" in text
    assert "sequence gaps in the log: 10 cycle(s) missing in 1 gap(s)" in text
