"""``poise run``'s helper processes when ``poise run`` dies (issue 32), measured on the real
command in its default set-up: the embedded MQTT broker (``python -m poise.telemetry.broker``,
a child), the real-time process (a child) and its virtual device (a grandchild, in a session
of its own).

* :func:`sigkill_embedded_broker` — SIGKILL ``poise run`` at a random moment once it runs:
  which helpers are left, whether the broker's port is still held, and how long each helper
  outlived ``poise run``.
* :func:`sigterm_during_startup` — SIGTERM during ``poise run``'s start-up: how long each
  helper outlives ``poise run`` (a helper that is still starting must give up at once).

Both need Linux's ``/proc`` (process tree, listening sockets). Every process a run leaves is
SIGKILLed afterwards (by pid, checked against its start time), so the next run starts clean.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import random
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from poise.telemetry.broker import port_is_free
from poise.telemetry.stress import _children, _spawn, percentiles

#: The roles of ``poise run``'s helpers, as :func:`role` names them.
ROLES = ("broker", "realtime", "device", "tracker", "other")
#: What marks the end of ``poise run``'s start-up on its stderr (the line naming the run).
RUN_LINE = "Hz, device"
#: Polling period of the watches [s].
POLL = 0.005


@dataclass(frozen=True)
class Helper:
    """A process below ``poise run``: its pid, its start time (clock ticks since boot, to
    tell it from a later process that got the same pid) and its role."""

    pid: int
    start: int
    role: str


def _stat_fields(pid: int) -> list[str] | None:
    """``/proc/<pid>/stat`` after the command name (field 3 on), or None."""
    try:
        text = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()


def role(pid: int) -> str:
    """What ``pid`` is to ``poise run``, from its command line (see :data:`ROLES`)."""
    try:
        args = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "other"
    if b"poise.telemetry.broker" in args:
        return "broker"
    if b"device" in args and b"sim" in args:
        return "device"
    if b"--multiprocessing-fork" in args and any(b"spawn_main" in a for a in args):
        return "realtime"
    if any(b"multiprocessing.resource_tracker" in a for a in args):
        return "tracker"  # multiprocessing's resource tracker (of the real-time process)
    return "other"


def helpers(pid: int) -> list[Helper]:
    """Every live process below ``pid`` (children, grandchildren, …)."""
    out: list[Helper] = []
    todo = list(_children(pid))
    while todo:
        child = todo.pop()
        fields = _stat_fields(child)
        if fields is None or fields[0] in ("Z", "X"):
            continue
        out.append(Helper(child, int(fields[19]), role(child)))
        todo.extend(_children(child))
    return out


def alive(h: Helper) -> bool:
    """``h`` still runs (a zombie has exited: orphans under a PID 1 that does not reap stay
    zombies)."""
    fields = _stat_fields(h.pid)
    return fields is not None and fields[0] not in ("Z", "X") and int(fields[19]) == h.start


def listening_ports(pid: int) -> set[int]:
    """The TCP ports ``pid`` listens on (its socket inodes matched in ``/proc/net/tcp*``)."""
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in pathlib.Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
    ports = set()
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in pathlib.Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                cols = line.split()
                if len(cols) > 9 and cols[3] == "0A" and cols[9] in inodes:  # 0A: LISTEN
                    ports.add(int(cols[1].rsplit(":", 1)[1], 16))
    return ports


@dataclass
class _Run:
    """One ``poise run`` (its stderr read in a thread, each line with its time)."""

    proc: subprocess.Popen[bytes]
    lines: list[tuple[float, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        with contextlib.suppress(ValueError, OSError):
            for raw in self.proc.stderr:
                self.lines.append((time.monotonic(), raw.decode(errors="replace").rstrip()))

    def started_at(self) -> float | None:
        """When ``poise run`` said its start-up was done (monotonic), else None."""
        return next((t for t, line in self.lines if RUN_LINE in line), None)

    def wait_until(self, predicate: Any, timeout: float) -> bool:
        """Poll ``predicate()`` until it holds (True), ``poise run`` exits or ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            if predicate():
                return True
            time.sleep(0.02)
        return False


def _watch_exit(run: _Run, sig: int, procs: list[Helper], wait: float
                ) -> tuple[float, dict[Helper, float | None]]:
    """Send ``sig`` to ``poise run``; then poll until it and ``procs`` have exited, each
    helper given at most ``wait`` s after ``poise run`` exited. Returns how long ``poise
    run`` took to exit [s] and, per helper, how long it outlived ``poise run`` [s] (None:
    still running at the end)."""
    t_sig = time.monotonic()
    run.proc.send_signal(sig)
    t_parent: float | None = None
    gone: dict[Helper, float] = {}
    while True:
        now = time.monotonic()
        if t_parent is None and run.proc.poll() is not None:
            t_parent = now
        for h in procs:
            if h not in gone and not alive(h):
                gone[h] = now
        if t_parent is not None and (len(gone) == len(procs) or now > t_parent + wait):
            break
        if now > t_sig + 60:  # poise run itself hangs: the caller sees it in the exit time
            run.proc.kill()
        time.sleep(POLL)
    return t_parent - t_sig, {h: (max(0.0, gone[h] - t_parent) if h in gone else None)
                              for h in procs}


def _finish(run: _Run, procs: list[Helper], tmp: str) -> int:
    """Reap ``poise run``, SIGKILL what it left (ours, by pid and start time); returns the
    number of its temporary files (``poise-*`` under its TMPDIR) left behind."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        run.proc.wait(30)
    for h in procs:
        if alive(h):
            with contextlib.suppress(ProcessLookupError):
                os.kill(h.pid, signal.SIGKILL)
    return len(list(pathlib.Path(tmp).glob("poise-*")))


def _tally(outcomes: list[dict[Helper, float | None]]) -> dict[str, Any]:
    """Per role: processes seen, left running, and how long they outlived ``poise run``."""
    out: dict[str, Any] = {}
    for r in ROLES:
        times = [t for o in outcomes for h, t in o.items() if h.role == r]
        if times:
            out[r] = {"seen": len(times), "left": sum(t is None for t in times),
                      "outlived_s": percentiles([t for t in times if t is not None])}
    return out


def sigkill_embedded_broker(runs: int = 20, seed: int = 5, window: float = 3.0,
                            wait: float = 5.0) -> dict[str, Any]:
    """SIGKILL ``poise run`` (the embedded broker, the virtual device) ``runs`` times, each
    at a uniform moment in ``[0, window)`` s after its start-up is done and its broker
    listens; a helper still running ``wait`` s after ``poise run`` died counts as left, and
    so does a broker port that cannot be bound then."""
    rng = random.Random(seed)
    outcomes: list[dict[Helper, float | None]] = []
    never_up = ports_held = files = 0
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            run = _Run(_spawn(["--duration", "120", "--no-log"], tmp))
            ports: set[int] = set()

            def up(run: _Run = run, ports: set[int] = ports) -> bool:
                found = helpers(run.proc.pid)
                for h in found:
                    if h.role == "broker":
                        ports |= listening_ports(h.pid)
                return bool(ports) and run.started_at() is not None and \
                    any(h.role == "device" for h in found)

            if not run.wait_until(up, timeout=120):
                never_up += 1
            time.sleep(rng.uniform(0, window))
            procs = helpers(run.proc.pid)
            _, outcome = _watch_exit(run, signal.SIGKILL, procs, wait)
            outcomes.append(outcome)
            ports_held += sum(not port_is_free(p) for p in ports)
            files += _finish(run, procs, tmp)
    return {"runs": runs, "never_up": never_up, "ports_held": ports_held,
            "temp_files_left": files, "left": sum(t is None for o in outcomes
                                                  for t in o.values()),
            "roles": _tally(outcomes)}


def sigterm_during_startup(runs: int = 20, seed: int = 6, window: float = 1.5,
                           wait: float = 10.0) -> dict[str, Any]:
    """SIGTERM ``poise run`` ``runs`` times during its start-up, at a uniform moment in
    ``[0, window)`` s after its virtual device appeared (a signal that came after the
    start-up was done is not counted; the run is repeated): how long each helper outlived
    ``poise run``, and how long ``poise run`` took to exit."""
    rng = random.Random(seed)
    outcomes: list[dict[Helper, float | None]] = []
    exits: list[float] = []
    late = never_up = files = 0
    while len(outcomes) < runs:
        with tempfile.TemporaryDirectory() as tmp:
            run = _Run(_spawn(["--duration", "120", "--no-log"], tmp))
            if not run.wait_until(lambda run=run: any(  # type: ignore[misc]
                    h.role == "device" for h in helpers(run.proc.pid)), timeout=120):
                never_up += 1
            time.sleep(rng.uniform(0, window))
            procs = helpers(run.proc.pid)
            t_sig = time.monotonic()
            took, outcome = _watch_exit(run, signal.SIGTERM, procs, wait)
            started = run.started_at()
            if started is not None and started < t_sig:
                late += 1
            else:
                outcomes.append(outcome)
                exits.append(took)
            files += _finish(run, procs, tmp)
        if late + never_up > 3 * runs:
            break
    return {"runs": len(outcomes), "after_startup_not_counted": late, "never_up": never_up,
            "exit_s": percentiles(exits), "temp_files_left": files,
            "left": sum(t is None for o in outcomes for t in o.values()),
            "roles": _tally(outcomes)}


def table(r: dict[str, Any]) -> str:
    """One line per role of a result of :func:`sigkill_embedded_broker` or
    :func:`sigterm_during_startup`."""
    head = {k: v for k, v in r.items() if k != "roles" and not isinstance(v, dict)}
    lines = [", ".join(f"{k} {v}" for k, v in head.items())]
    if "exit_s" in r:
        lines.append(f"  poise run exited in p50 {r['exit_s']['p50']} / max "
                     f"{r['exit_s']['max']} s")
    for name, t in r["roles"].items():
        o = t["outlived_s"]
        lines.append(f"  {name:<9} seen {t['seen']:>3}, left running {t['left']}, outlived "
                     f"poise run by p50 {o['p50']} / max {o['max']} s")
    return "\n".join(lines)


__all__ = ["ROLES", "Helper", "alive", "helpers", "listening_ports", "role",
           "sigkill_embedded_broker", "sigterm_during_startup", "table"]


if __name__ == "__main__":  # python -m poise.telemetry.stress_procs [RUNS]
    import json
    import sys

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    for name, f in (("sigkill", sigkill_embedded_broker), ("sigterm", sigterm_during_startup)):
        result = f(n)
        print(name, json.dumps(result), file=sys.stderr)
        print(f"{name}: {table(result)}")
