"""Start-up time of ``poise run`` (``poise bench startup``, ``bench/startup.py``).

Protocol: ``runs`` times, a fresh ``poise run … --duration 1`` process (by default the demo:
the virtual double pendulum, the embedded MQTT broker and the MCAP log, as a user starts it),
launched from this process. Every state change the controller makes is in the run's log
(``/state``, field ``t`` = ``time.monotonic()`` of the process that made it; CLOCK_MONOTONIC is
one clock for every process of the machine), so each phase is measured from this process's
``time.monotonic()`` just before the launch:

=================  ==========================================================================
``first_line``     launch → the run's first line on stderr (what starts; issue 32's goal:
                   ≤ 2 s, a first start included), read here as it arrives
``idle``           launch → ``connecting``: the interpreter and poise's imports, spawning the
                   real-time process (its imports, building its controller), telemetry and
                   log attached, the start command sent
``connect``        ``connecting`` → ``ready``: the cycle's kernels loaded (Numba's cache) and
                   the device opened (the virtual device: its process, imports and kernels)
``arm``            ``ready`` → ``running``: the device armed, the loop's first cycle
``total``          launch → ``running`` (the goal of issue 12: ≤ 3 s with a warm cache)
=================  ==========================================================================

The first run warms the cache when it is cold (``--cold`` starts from an empty private
``NUMBA_CACHE_DIR`` and reports that first start on its own: its first line, and its time to
``running`` with the compile). The JSON records the load average before and after: quote it
with the figures.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

#: Issue 12's goal: launch → running with a warm cache [s].
GOAL_S = 3.0
#: Issue 32's goal: launch → the first line, a first start (empty cache) included [s].
FIRST_LINE_GOAL_S = 2.0
#: The phases, each from one state change to the next (see the module docstring).
PHASES = (("idle", None, "connecting"), ("connect", "connecting", "ready"),
          ("arm", "ready", "running"), ("total", None, "running"))
TIMED = tuple(name for name, _start, _end in PHASES)
#: Launch → the first line on stderr.
FIRST_LINE = "first_line"


def state_times(log_path: str) -> dict[str, float]:
    """``time.monotonic()`` at which the run's controller first entered each state, from the
    ``/state`` channel of its MCAP log."""
    from mcap.reader import make_reader

    times: dict[str, float] = {}
    with open(log_path, "rb") as fh:
        for _schema, _channel, message in make_reader(fh).iter_messages(topics=["/state"]):
            record = json.loads(message.data)
            times.setdefault(record["to"], float(record["t"]))
    return times


def one_run(args: Sequence[str], env: dict[str, str], workdir: str,
            timeout: float) -> dict[str, Any]:
    """Launch one ``poise run`` and return its phases [s] (see :data:`PHASES`) and the time
    to its first line on stderr (``first_line``)."""
    log = os.path.join(workdir, f"startup-{time.monotonic_ns()}.mcap")
    cmd = [sys.executable, "-m", "poise", "run", *args, "--duration", "1", "--log", log]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, cwd=workdir, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    first: list[float] = []
    lines: list[str] = []

    def read_stderr() -> None:  # each line as it comes: the first one's time
        for line in proc.stderr:  # type: ignore[union-attr]
            if not first:
                first.append(time.monotonic() - t0)
            lines.append(line)

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    wall = time.monotonic() - t0
    reader.join(5)
    stderr = "".join(lines).strip()[-600:]
    try:
        times = state_times(log)
    except (OSError, ValueError) as exc:
        raise RuntimeError(f"'{' '.join(cmd)}' left no readable log ({exc}); exit code "
                           f"{proc.returncode}; stderr: {stderr}") from None
    if "running" not in times or not first:
        raise RuntimeError(f"'{' '.join(cmd)}' never reached 'running' (states "
                           f"{sorted(times)}) or printed nothing; exit code "
                           f"{proc.returncode}; stderr: {stderr}")
    out: dict[str, Any] = {"exit_code": proc.returncode, "process_s": round(wall, 3),
                           "first_line": round(first[0], 3)}
    for name, start, end in PHASES:
        out[name] = round(times[end] - (t0 if start is None else times[start]), 3)
    os.unlink(log)
    return out


def run(run_args: Sequence[str] = (), *, runs: int = 5, cold: bool = False,
        timeout: float = 600.0,
        progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """``runs`` warm start-ups of ``poise run RUN_ARGS`` (after a cold one with ``cold``)."""
    if runs < 1:
        raise ValueError(f"runs = {runs}: must be >= 1")
    if "--quiet" in run_args:
        raise ValueError("--quiet: the run's first line is measured; leave --quiet out")
    env = dict(os.environ)
    workdir = tempfile.mkdtemp(prefix="poise-bench-startup-")
    if cold:
        env["NUMBA_CACHE_DIR"] = os.path.join(workdir, "numba-cache")
    load_before = os.getloadavg()
    try:
        first = one_run(run_args, env, workdir, timeout) if cold else None
        if progress is not None and cold:
            progress(1)
        warm = []
        for _ in range(runs):
            warm.append(one_run(run_args, env, workdir, timeout))
            if progress is not None:
                progress(1)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    stats = {name: _stats([r[name] for r in warm]) for name in (FIRST_LINE, *TIMED)}
    lines = [r["first_line"] for r in (first, *warm) if r is not None]
    return {
        "benchmark": "startup",
        "command": ["poise", "run", *run_args, "--duration", "1"],
        "runs": warm,
        "cold": first,
        "stats": stats,
        "goal_s": GOAL_S,
        "goal_met": stats["total"]["median"] <= GOAL_S,
        "first_line_goal_s": FIRST_LINE_GOAL_S,
        "first_line_goal_met": max(lines) <= FIRST_LINE_GOAL_S,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform(),
                    "load_before": [round(x, 2) for x in load_before],
                    "load_after": [round(x, 2) for x in os.getloadavg()]},
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def _stats(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    mid = len(ordered) // 2
    median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    return {"min": ordered[0], "median": round(median, 3), "max": ordered[-1]}


def table(result: dict[str, Any]) -> str:
    """The result as a text table."""
    lines = [f"poise bench startup: {' '.join(result['command'])}",
             f"{'phase':<11}{'min':>8}{'median':>8}{'max':>8}   [s], {len(result['runs'])} "
             "warm runs"]
    for name in (FIRST_LINE, *TIMED):
        s = result["stats"][name]
        lines.append(f"{name:<11}{s['min']:>8.3f}{s['median']:>8.3f}{s['max']:>8.3f}")
    if result["cold"] is not None:
        c = result["cold"]
        lines.append(f"cold cache: first line {c['first_line']:.2f} s, running after "
                     f"{c['total']:.1f} s (idle {c['idle']:.1f}, connect {c['connect']:.1f})")
    verdict = "met" if result["goal_met"] else "NOT met"
    first = "met" if result["first_line_goal_met"] else "NOT met"
    m = result["machine"]
    lines.append(f"goals: launch → running ≤ {result['goal_s']:g} s (median, warm): "
                 f"{verdict}; first line ≤ {result['first_line_goal_s']:g} s (every run"
                 f"{', the cold one too' if result['cold'] is not None else ''}): {first}; "
                 f"load {m['load_before'][0]} → {m['load_after'][0]}, {m['cpus']} CPUs")
    return "\n".join(lines)


__all__ = ["FIRST_LINE_GOAL_S", "GOAL_S", "PHASES", "one_run", "run", "state_times", "table"]
