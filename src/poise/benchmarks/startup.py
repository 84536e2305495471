"""Start-up time of ``poise run`` (``poise bench startup``, ``bench/startup.py``).

Protocol: ``runs`` times, a fresh ``poise run … --duration 1 --quiet`` process (by default the
demo: the virtual double pendulum, the embedded MQTT broker and the MCAP log, as a user starts
it), launched from this process. Every state change the controller makes is in the run's log
(``/state``, field ``t`` = ``time.monotonic()`` of the process that made it; CLOCK_MONOTONIC is
one clock for every process of the machine), so each phase is measured from this process's
``time.monotonic()`` just before the launch:

=================  ==========================================================================
``idle``           launch → ``connecting``: the interpreter and poise's imports, spawning the
                   real-time process (its imports, building its controller), telemetry and
                   log attached, the start command sent
``connect``        ``connecting`` → ``ready``: the cycle's kernels loaded (Numba's cache) and
                   the device opened (the virtual device: its process, imports and kernels)
``arm``            ``ready`` → ``running``: the device armed, the loop's first cycle
``total``          launch → ``running`` (the goal of issue 12: ≤ 3 s with a warm cache)
=================  ==========================================================================

The first run warms the cache when it is cold (``--cold`` empties a private
``NUMBA_CACHE_DIR`` first and reports that run on its own). The JSON records the load
average before and after: quote it with the figures.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

#: Issue 12's goal: launch → running with a warm cache [s].
GOAL_S = 3.0
#: The phases, each from one state change to the next (see the module docstring).
PHASES = (("idle", None, "connecting"), ("connect", "connecting", "ready"),
          ("arm", "ready", "running"), ("total", None, "running"))


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
    """Launch one ``poise run`` and return its phases [s] (see :data:`PHASES`)."""
    log = os.path.join(workdir, f"startup-{time.monotonic_ns()}.mcap")
    cmd = [sys.executable, "-m", "poise", "run", *args, "--duration", "1", "--quiet",
           "--log", log]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=env, cwd=workdir, capture_output=True, text=True,
                          timeout=timeout, check=False)
    wall = time.monotonic() - t0
    try:
        times = state_times(log)
    except (OSError, ValueError) as exc:
        raise RuntimeError(f"'{' '.join(cmd)}' left no readable log ({exc}); exit code "
                           f"{proc.returncode}; stderr: {proc.stderr.strip()[-600:]}") from None
    if "running" not in times:
        raise RuntimeError(f"'{' '.join(cmd)}' never reached 'running' (states "
                           f"{sorted(times)}); exit code {proc.returncode}; stderr: "
                           f"{proc.stderr.strip()[-600:]}")
    out: dict[str, Any] = {"exit_code": proc.returncode, "process_s": round(wall, 3)}
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
    stats = {name: _stats([r[name] for r in warm]) for name, _s, _e in PHASES}
    return {
        "benchmark": "startup",
        "command": ["poise", "run", *run_args, "--duration", "1", "--quiet"],
        "runs": warm,
        "cold": first,
        "stats": stats,
        "goal_s": GOAL_S,
        "goal_met": stats["total"]["median"] <= GOAL_S,
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
             f"{'phase':<10}{'min':>8}{'median':>8}{'max':>8}   [s], {len(result['runs'])} "
             "warm runs"]
    for name, _s, _e in PHASES:
        s = result["stats"][name]
        lines.append(f"{name:<10}{s['min']:>8.3f}{s['median']:>8.3f}{s['max']:>8.3f}")
    if result["cold"] is not None:
        c = result["cold"]
        lines.append(f"cold cache: total {c['total']:.1f} s (idle {c['idle']:.1f}, connect "
                     f"{c['connect']:.1f})")
    verdict = "met" if result["goal_met"] else "NOT met"
    m = result["machine"]
    lines.append(f"goal: launch → running ≤ {result['goal_s']:g} s (median, warm): {verdict}; "
                 f"load {m['load_before'][0]} → {m['load_after'][0]}, {m['cpus']} CPUs")
    return "\n".join(lines)


__all__ = ["GOAL_S", "PHASES", "one_run", "run", "state_times", "table"]
