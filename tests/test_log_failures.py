"""The experiment log when things go wrong (issue 32): a disk that fills during a run (``poise run``
goes on, says so on MQTT, in its summary and its exit code, and the file keeps what came before),
a log cut short at any byte (``poise log info`` reads every cut), and a log path in a missing
folder (refused before anything runs, as ``poise calibrate`` refuses its ``--out``)."""

from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from poise.api.bus import CycleSample, SampleQueue
from poise.cli import main as cli_main
from poise.cli.run_cmd import EXIT_CODES, log_lines
from poise.telemetry.log import LogWriter
from poise.telemetry.reader import read_log
from poise.telemetry.stress_logs import (
    CYCLES_AFTER,
    disk_full_trial,
    read_cuts,
    spread,
    write_run_log,
)
from test_mqtt import broker_url  # noqa: F401 - the broker fixture


@pytest.fixture(scope="module")
def run_log(tmp_path_factory):
    """A real log: ``poise run`` (the demo on the virtual device) for 1.5 s."""
    return write_run_log(tmp_path_factory.mktemp("runlog") / "run.mcap", seconds=1.5)


def test_log_info_reads_a_real_run_log_cut_at_any_offset(run_log, tmp_path):
    """Every byte of the first kB (header, schemas, channels: a record boundary every few
    bytes) and 120 cuts spread over the file: each reads, says it is cut short, and the
    cycles recovered never decrease as the cut moves later."""
    data = run_log.read_bytes()
    offsets = sorted({*range(1, 1025), *spread(len(data), 120)})
    rows = read_cuts(data, offsets, tmp_path, cli_main)  # poise log info, in this process
    failed = [r for r in rows if r["exit"] != 0]
    assert not failed, failed[:3]
    cuts, whole = rows[:-1], rows[-1]
    assert whole["offset"] == len(data) and not whole["truncated"]
    assert all(r["truncated"] and r["damage"].startswith("cut short") for r in cuts)
    cycles = [r["cycles"] for r in rows]
    assert all(a <= b for a, b in itertools.pairwise(cycles))
    assert cycles[0] == 0 and 0 < cuts[-1]["cycles"] <= whole["cycles"]


def _cycle(seq: int, latency_us: float) -> CycleSample:
    return CycleSample(t=10.0 + seq * 1e-3, seq=seq, state="running", q=(0.1, 0.2),
                       q_bar=(0.1, 0.2), qa_ref=(0.3,), tau_ff=(), target=(0.5,), x=(0.4,),
                       task_error=0.1, statics_residual=math.nan, period_us=1000.0,
                       lateness_us=5.0, compute_us=40.0, latency_us=latency_us)


def test_log_info_export_and_plot_read_a_cut_whose_columns_are_null_only(tmp_path, capsys):
    """What crashed ``log info`` (``ufunc 'isfinite' not supported``): a run's first cycles
    store ``latency_us`` and ``statics_residual`` as null (not finite), so a log cut there has
    number columns of nulls only; they read as NaN."""
    path = tmp_path / "run.mcap"
    samples: SampleQueue[CycleSample] = SampleQueue()
    with LogWriter(path, samples, None, chunk_size=4096):
        for seq in range(400):  # a latency from cycle 300 on
            samples.put(_cycle(seq, math.nan if seq < 300 else 80.0))
    data = path.read_bytes()
    cut = tmp_path / "cut.mcap"
    cut.write_bytes(data[: len(data) // 3])
    contents = read_log(cut)
    n = len(contents.topic("/sensors"))
    assert contents.truncated and 0 < n < 300
    timing, ik = contents.columns("/timing"), contents.columns("/ik")
    assert timing["latency_us"].dtype == float and np.isnan(timing["latency_us"]).all()
    # a cut may fall between one cycle's messages (a busy run had 148 /ik rows to 149 /sensors)
    assert ik["statics_residual"].dtype == float
    assert len(ik["statics_residual"]) == len(contents.topic("/ik")) in (n - 1, n, n + 1)
    assert cli_main(["log", "info", str(cut)]) == 0
    out = capsys.readouterr().out
    assert "TRUNCATED (cut short" in out and f"{n} cycles" in out and "latency" not in out
    assert cli_main(["log", "export", str(cut), "--out", str(tmp_path / "csv"),
                     "--quiet"]) == 0
    assert "damaged or unfinished file (cut short" in capsys.readouterr().err
    assert cli_main(["log", "plot", str(cut), "--out", str(tmp_path / "cut.png")]) == 0


def test_a_disk_full_mid_run_keeps_control_and_says_so_on_mqtt_summary_and_exit_code(
        broker_url, tmp_path):  # noqa: F811
    """``poise run`` whose file-size limit is lowered mid-run (its log's next writes fail with
    EFBIG, as on a full disk with ENOSPC): see :mod:`poise.telemetry.stress_logs`."""
    t = disk_full_trial(broker_url, str(tmp_path))
    assert t["limited_at"] is not None, t["stderr"]
    event = t["event"]
    assert event is not None, t["stderr"]
    assert (event["source"], event["action"]) == ("log", "continue")
    assert "File too large" in event["error"] and event["path"].endswith("run.mcap")
    assert t["went_on"] >= CYCLES_AFTER  # cycles on MQTT telemetry after the failure
    log = t["summary_log"]
    assert log["ok"] is False and log["error"] == event["error"]
    assert log["failed_after_s"] > 0 and log["samples_unlogged"] >= CYCLES_AFTER
    assert 0 < log["unlogged_pct"] < 100
    assert t["exit_code"] == EXIT_CODES["log_failed"] == 5, t["ended"]
    said = [line for line in t["stderr"] if "experiment log" in line]
    assert len(said) == 1 and "File too large" in said[0] and not t["traceback"], t["stderr"]
    assert t["truncated"] and t["recovered_cycles"] >= log["samples_logged"] > 0
    (line,) = log_lines(log)
    assert "FAILED after" in line and f"{log['samples_unlogged']} not" in line


CHILD = textwrap.dedent("""
    import json, resource, sys, time
    from poise.telemetry.log import LogWriter
    from poise.telemetry.synthetic import SyntheticLoop
    resource.setrlimit(resource.RLIMIT_FSIZE, (60_000, resource.RLIM_INFINITY))
    failures = []
    loop = SyntheticLoop(1000.0)
    writer = LogWriter(sys.argv[1], loop.subscribe(), loop.events(),
                       on_failure=failures.append, chunk_size=8192).start()
    loop.start()  # after subscribing: the queue sees every cycle
    end = time.monotonic() + 120
    while not failures and time.monotonic() < end:
        time.sleep(0.01)
    at = loop.cycles
    while loop.cycles < at + 300 and time.monotonic() < end:
        time.sleep(0.01)
    loop.stop()
    writer.stop()
    print(json.dumps({"report": writer.report(), "failures": failures, "sent": loop.cycles}))
""")


def test_log_writer_failure_accounts_for_every_cycle_and_keeps_what_came_before(tmp_path):
    """A writer process with a 60 kB file-size limit: its report's logged + unlogged cycles
    are every cycle the loop produced, and the file holds at least the logged ones."""
    path = tmp_path / "limited.mcap"
    out = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True,
                         text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    report, (told,) = result["report"], result["failures"]
    assert report["ok"] is False and "File too large" in report["error"]
    assert told["samples_logged"] == report["samples_logged"]  # what on_failure was told
    assert report["samples_logged"] + report["samples_unlogged"] == result["sent"]
    assert out.stderr.count("experiment log") == 1 and "Traceback" not in out.stderr
    log = read_log(path)
    seqs = [m["seq"] for m in log.topic("/sensors")]
    assert log.truncated and len(seqs) >= report["samples_logged"] > 0
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # no holes before the damage


def test_a_log_that_cannot_be_started_names_the_file():
    with pytest.raises(OSError, match=r"No space left on device: '/dev/full'"):
        LogWriter("/dev/full").start()


def test_run_and_calibrate_refuse_an_output_in_a_missing_folder_alike(tmp_path, capsys):
    """``poise run --log`` and ``poise calibrate --out`` in a folder that does not exist:
    exit 2 before anything runs, a message naming the option, the path and the folder, and
    no folder created."""
    missing = tmp_path / "nonexistent" / "dir"
    log = missing / "x.mcap"
    assert cli_main(["run", "--log", str(log), "--no-mqtt", "--duration", "1"]) == 2
    err = capsys.readouterr().err
    assert f"--log {log}: folder {missing} does not exist; create it first (nothing was run)" \
        in err
    out = missing / "cal.json"
    assert cli_main(["calibrate", "--model", "double_pendulum", "--device", "inprocess",
                     "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"--out {out}: folder {missing} does not exist; create it first (nothing was run)" \
        in err
    assert not (tmp_path / "nonexistent").exists()


def test_run_creates_only_the_default_runs_folder(tmp_path, monkeypatch):
    from poise.cli.run_cmd import _check_log
    from poise.controller.config import load_config

    monkeypatch.chdir(tmp_path)
    flags = {"log.path": ("runs/x.mcap", "--log")}
    config = load_config(None, flags)
    _check_log(config, flags, argparse_namespace(no_log=False))
    assert (tmp_path / "runs").is_dir()
    flags = {"log.path": ("logs/x.mcap", "--log")}
    with pytest.raises(ValueError, match=r"--log logs/x\.mcap: folder logs does not exist"):
        _check_log(load_config(None, flags), flags, argparse_namespace(no_log=False))
    assert not (tmp_path / "logs").exists()


def argparse_namespace(**kw):
    import argparse

    return argparse.Namespace(**kw)
