"""``poise bench stress`` cases on the experiment log (issue 32): a disk that fills during a run,
and logs cut short at any byte.

* :func:`disk_full` — ``poise run`` as a real subprocess, MQTT on, logging to a real file; once
  it logs cycles, the file-size limit of that process (``RLIMIT_FSIZE``, set from outside with
  ``prlimit``) is lowered to a few kB above the log's size, so the next writes fail with
  ``EFBIG`` ("File too large") exactly where a full disk fails with ``ENOSPC``: in the log
  writer's ``write``. The limit is set on the running host process only, after its real-time
  process and virtual device have started (a limit inherited from the start would also refuse
  the controller's shared-memory ring, which is no disk at all), so only the log meets it.
  Measured: whether the run went on (telemetry cycles after the failure), the ``log_failed``
  event on MQTT, the summary's ``log`` entry, the exit code, the messages on stderr, and what
  ``read_log`` recovers from the file.
* :func:`truncated_logs` — a real log of ``poise run`` cut at evenly spaced offsets, each cut
  read by ``poise log info --json``: how many read (the goal: all of them), and whether the
  cycles recovered never decrease as the cut moves later.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import pathlib
import resource
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

#: ``poise run``'s exit code when its log failed (``poise.cli.run_cmd.EXIT_CODES``).
EXIT_LOG_FAILED = 5
#: Bytes the log holds before the limit is set (cycles are being logged by then).
LOGGING_BYTES = 40_000
#: Bytes the log may still grow once limited.
MARGIN_BYTES = 20_000
#: Cycles the run must go on for after the failure before it is stopped.
CYCLES_AFTER = 250
#: A busy machine may starve the loop or the virtual device for a while: the runs here are
#: about the log, so they tolerate longer silences than the defaults before a fault.
PATIENT = ["--set", "limits.sensor_fault=5", "--set", "device.watchdog_ms=2000"]


def _poise(args: list[str], cwd: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "poise", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _wait(predicate: Any, timeout: float, step: float = 0.02) -> bool:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            return False
        time.sleep(step)
    return True


def _size(path: pathlib.Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def limit_file_size(pid: int, size: int) -> None:
    """Lower the file-size limit of process ``pid`` to ``size`` bytes (its hard limit
    unchanged): its next write past ``size`` fails with ``EFBIG`` (CPython ignores
    ``SIGXFSZ``, so the write raises instead of killing the process)."""
    _, hard = resource.prlimit(pid, resource.RLIMIT_FSIZE)
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (size, hard))


def _last_seq(batch: dict[str, Any]) -> int:
    """The last cycle counter of an MQTT telemetry batch."""
    seqs = batch.get("seq")
    return int(seqs[-1]) if seqs else int(batch["seq0"]) + int(batch["n"]) - 1


def disk_full_trial(url: str, workdir: str, timeout: float = 120.0) -> dict[str, Any]:
    """One ``poise run`` whose log meets a full "disk" mid-run; stopped with SIGINT once it
    has gone on for :data:`CYCLES_AFTER` cycles after the failure (or at ``timeout`` [s]).

    Returns:
        ``exit_code``, ``went_on`` (cycles seen on MQTT telemetry after the failure event),
        ``event`` (the ``log_failed`` event's data, or None), ``summary_log`` (the summary's
        ``log`` entry), ``stderr`` (its lines), ``traceback`` (one in stderr),
        ``recovered_cycles`` and ``truncated`` (``read_log`` of the file), ``limited_at``
        (the log's size when the limit was set [bytes]), ``ended`` (the summary's state and
        reason, or None).
    """
    from poise.telemetry.client import Recorder, forget
    from poise.telemetry.mqtt import MqttConfig
    from poise.telemetry.reader import read_log

    cfg = MqttConfig.from_url(url, robot_id="diskfull-" + uuid.uuid4().hex[:8])
    log = pathlib.Path(workdir) / "run.mcap"
    out: dict[str, Any] = {"exit_code": None, "went_on": 0, "event": None, "limited_at": None}
    with Recorder(cfg) as rec:
        proc = _poise(["run", "--mqtt", url, "--robot-id", cfg.robot_id, "--log", str(log),
                       "--json-summary", "--quiet", *PATIENT], workdir)
        try:
            if _wait(lambda: _size(log) >= LOGGING_BYTES or proc.poll() is not None, timeout):
                out["limited_at"] = _size(log)
                limit_file_size(proc.pid, out["limited_at"] + MARGIN_BYTES)
            event = rec.wait_for(lambda m: m.name == "events"
                                 and m.json().get("data", {}).get("code") == "log_failed",
                                 timeout if proc.poll() is None else 0)
            if event is not None:
                out["event"] = event.json()["data"]
                seen = [_last_seq(m.json()) for m in rec.named("telemetry")]
                at = max(seen, default=0)
                later = rec.wait_for(lambda m: m.name == "telemetry"
                                     and _last_seq(m.json()) >= at + CYCLES_AFTER, timeout)
                if later is not None:
                    out["went_on"] = _last_seq(later.json()) - at
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGINT)
            stdout, stderr = proc.communicate(timeout=timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    with contextlib.suppress(Exception):
        forget(cfg)
    out["exit_code"] = proc.returncode
    try:
        summary = json.loads(stdout)
        out["summary_log"] = summary.get("log")
        out["ended"] = (summary.get("state"), summary.get("reason", ""))
    except ValueError:
        out["summary_log"], out["ended"] = None, None
    out["stderr"] = stderr.splitlines()
    out["traceback"] = "Traceback" in stderr
    contents = read_log(log) if log.exists() else None
    out["recovered_cycles"] = len(contents.topic("/sensors")) if contents else 0
    out["truncated"] = bool(contents and contents.truncated)
    return out


def disk_full(runs: int = 3, url: str | None = None) -> dict[str, Any]:
    """``runs`` runs of :func:`disk_full_trial` against ``url`` (default: Mosquitto on
    127.0.0.1:1883, else an embedded broker). Goal: every run went on, published the event,
    said so in its summary and on one stderr line without a traceback, exited with
    :data:`EXIT_LOG_FAILED`, and its file reads back with at least the cycles it says it
    logged."""
    from poise.telemetry.stress import broker_url

    trials = []
    with broker_url(url) as broker:
        for _ in range(runs):
            with tempfile.TemporaryDirectory() as tmp:
                trials.append(disk_full_trial(broker, tmp))
    good = [t for t in trials if _as_expected(t)]
    return {
        "runs": runs, "as_expected": len(good),
        "went_on": sum(t["went_on"] >= CYCLES_AFTER for t in trials),
        "event_published": sum(t["event"] is not None for t in trials),
        "summary_says_so": sum(not (t["summary_log"] or {}).get("ok", True) for t in trials),
        "exit_codes": sorted({t["exit_code"] for t in trials}, key=str),
        "tracebacks": sum(t["traceback"] for t in trials),
        "unlogged_pct": [(t["summary_log"] or {}).get("unlogged_pct") for t in trials],
        "failures": [{k: v for k, v in t.items() if k != "stderr"} | {"stderr": t["stderr"][-5:]}
                     for t in trials if t not in good][:3],
    }


def _as_expected(t: dict[str, Any]) -> bool:
    """A disk-full trial that did all :func:`disk_full` asks for."""
    log = t["summary_log"] or {}
    said = [line for line in t["stderr"] if "experiment log" in line]
    logged = log.get("samples_logged")
    return (t["went_on"] >= CYCLES_AFTER and t["event"] is not None and log.get("ok") is False
            and t["exit_code"] == EXIT_LOG_FAILED and len(said) == 1 and not t["traceback"]
            and t["truncated"] and logged is not None and t["recovered_cycles"] >= logged)


def write_run_log(path: str | os.PathLike[str], seconds: float = 1.5,
                  timeout: float = 180.0) -> pathlib.Path:
    """A real log: ``poise run`` (the demo, no MQTT) for ``seconds`` logging to ``path``.

    Raises:
        RuntimeError: the run did not end as a run does (0 reached, 1 not, 3 fault, 4 e-stop:
            a fault on a busy machine still leaves a log), or left no log.
    """
    path = pathlib.Path(path)
    proc = _poise(["run", "--no-mqtt", "--duration", str(seconds), "--log", str(path),
                   "--quiet", *PATIENT], str(path.parent))
    try:
        _, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    if proc.returncode not in (0, 1, 3, 4) or not path.exists():
        raise RuntimeError(f"poise run ended with {proc.returncode}: {err[-500:]}")
    return path


#: Runs ``poise`` with these arguments, its output on this process's stdout and stderr, and
#: returns its exit code (``poise.cli.main``: in this process; the default: a child process).
PoiseCommand = Callable[[list[str]], int]


def poise_process(argv: list[str]) -> int:
    """``poise ARGV`` in a child process, its output copied to this process's stdout and
    stderr (what :func:`read_cuts` uses unless the command line passes ``poise.cli.main``)."""
    proc = subprocess.run([sys.executable, "-m", "poise", *argv], capture_output=True,
                          text=True, check=False)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    return proc.returncode


def read_cuts(data: bytes, offsets: Iterable[int], workdir: str | os.PathLike[str],
              poise: PoiseCommand = poise_process) -> list[dict[str, Any]]:
    """``data`` (a log) cut at each offset, each cut read by ``poise log info --json`` (run
    by ``poise``): ``{"offset", "exit", "cycles", "truncated", "damage", "error"}`` per cut
    (``damage``: what the reader says stopped it; ``error``: the command's stderr, or the
    exception when it raised, with ``exit`` None)."""
    cut = pathlib.Path(workdir) / "cut.mcap"
    results = []
    for offset in offsets:
        cut.write_bytes(data[:offset])
        buf, err = io.StringIO(), io.StringIO()
        row: dict[str, Any] = {"offset": offset, "exit": None, "cycles": None,
                               "truncated": None, "damage": "", "error": ""}
        try:
            with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err):
                row["exit"] = poise(["log", "info", str(cut), "--json"])
            info = json.loads(buf.getvalue())
            row["cycles"], row["truncated"] = info.get("cycles", 0), info.get("truncated")
            row["damage"] = info.get("error", "")
            row["error"] = err.getvalue().strip()
        except Exception as exc:  # a crash of the command is what is measured
            row["error"] = f"{type(exc).__name__}: {exc}"
        results.append(row)
    return results


def spread(size: int, n: int) -> list[int]:
    """``n`` offsets spread evenly over ``[1, size]`` (the last one the whole file)."""
    return sorted({max(1, round(size * (i + 1) / n)) for i in range(n)})


def truncated_logs(offsets: int = 50, log: str | os.PathLike[str] | None = None,
                   poise: PoiseCommand = poise_process) -> dict[str, Any]:
    """A real log (``log``, else one written by :func:`write_run_log`) cut at ``offsets``
    evenly spaced offsets and read by ``poise log info``. Goal: every cut reads (exit 0),
    says it is truncated (all but the whole file), and the cycles recovered never decrease
    as the cut moves later."""
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(log) if log else write_run_log(pathlib.Path(tmp) / "run.mcap")
        data = path.read_bytes()
        rows = read_cuts(data, spread(len(data), offsets), tmp, poise)
    readable = [r for r in rows if r["exit"] == 0]
    cycles = [r["cycles"] for r in readable]
    says_truncated = sum(bool(r["truncated"]) for r in readable if r["offset"] < len(data))
    return {"log_bytes": len(data), "offsets": len(rows), "readable": len(readable),
            "said_truncated": says_truncated,
            "cut_offsets": sum(r["offset"] < len(data) for r in rows),
            "monotone": all(a <= b for a, b in itertools.pairwise(cycles)),
            "cycles_whole": rows[-1]["cycles"] if rows else None,
            "failures": [r for r in rows if r["exit"] != 0][:5]}
