"""CPU affinity (``loop.cpu``): a core for the control loop, the others for everything else.

Between two sensor frames the loop thread sleeps ~0.9 ms at 1 kHz. Whatever runs on its core
meanwhile (the virtual device's simulator, the real-time process's other threads, the
embedded broker) evicts the loop's code and data from that core's caches, and the next cycle
runs cold: on the 2-core reference machine a cycle's Python runs 3–6× slower in the service
than in a tight loop. Pinning the loop thread to one CPU and what poise starts besides it to
the others keeps that core for the loop (Linux ``sched_setaffinity``; elsewhere nothing is
pinned and the summary says so).

What is pinned (``process = "own"``, the default): the loop thread to :attr:`CpuPlan.loop`;
the real-time process's other threads (commands, e-stop, telemetry pump, serial reader) and
the virtual device to :attr:`CpuPlan.others`. The first process (telemetry, the log, the
broker it may host) and other programs are left where the OS puts them: poise does not move
a process it did not start. With ``process = "shared"`` only the loop thread and the virtual
device are pinned.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

#: ``loop.cpu``: the last CPU this process may use, when it may use two or more.
AUTO = -1
#: ``loop.cpu``: pin nothing.
OFF = -2


@dataclass(frozen=True)
class CpuPlan:
    """Where the loop thread runs (``loop``) and where everything poise starts besides it
    (``others``, never empty)."""

    loop: int
    others: frozenset[int]

    def as_dict(self) -> dict[str, object]:
        return {"cpu": self.loop, "other_cpus": sorted(self.others)}


def allowed_cpus() -> frozenset[int]:
    """The CPUs the calling thread may run on (all of them where the OS cannot tell)."""
    if hasattr(os, "sched_getaffinity"):
        return frozenset(os.sched_getaffinity(0))
    return frozenset(range(os.cpu_count() or 1))


def plan_cpus(setting: int, allowed: frozenset[int] | None = None
              ) -> tuple[CpuPlan | None, str]:
    """The plan for ``loop.cpu`` = ``setting`` among the ``allowed`` CPUs (default: the
    calling thread's): ``(plan, "")``, or ``(None, why nothing is pinned)``.

    :data:`AUTO` takes the highest allowed CPU (the OS tends to start work on the lowest)
    when there are at least two; a CPU number must be an allowed one; :data:`OFF` pins
    nothing. With one CPU allowed the loop shares it with the rest (``others`` = it too).
    """
    if not hasattr(os, "sched_setaffinity"):
        return None, "CPU affinity is not supported on this system"
    cpus = allowed if allowed is not None else allowed_cpus()
    if setting == OFF:
        return None, "loop.cpu = -2 (off)"
    if setting == AUTO:
        if len(cpus) < 2:
            return None, f"one CPU only ({sorted(cpus)}): nothing to keep apart"
        cpu = max(cpus)
    elif setting in cpus:
        cpu = setting
    else:
        return None, f"loop.cpu = {setting} is not a CPU this process may use " \
                     f"({sorted(cpus)})"
    return CpuPlan(cpu, frozenset(cpus - {cpu}) or frozenset({cpu})), ""


def pin_thread(cpus: frozenset[int]) -> str:
    """Run the calling thread (and the threads it starts later) on ``cpus``; returns ``""``
    or why the OS refused."""
    try:
        os.sched_setaffinity(0, cpus)
    except (OSError, AttributeError) as exc:
        return f"sched_setaffinity {sorted(cpus)}: {exc}"
    return ""


def pin_process(cpus: frozenset[int]) -> str:
    """Run every thread of this process on ``cpus``: the calling one, those it starts later,
    and those already running (a BLAS library's worker threads, started when numpy was
    imported); returns ``""`` or why the OS refused."""
    refused = pin_thread(cpus)
    if refused:
        return refused
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{os.getpid()}/task")]
    except OSError:  # no /proc: the threads started from now on inherit it all the same
        return ""
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cpus)
        except OSError:  # a thread that ended meanwhile
            continue
    return ""


def parse_cpus(text: str) -> frozenset[int]:
    """``"0,2,3"`` → ``{0, 2, 3}`` (the ``--cpus`` flag of ``poise device sim``).

    Raises:
        ValueError: not a comma-separated list of CPU numbers ≥ 0.
    """
    try:
        cpus = frozenset(int(part) for part in text.split(","))
    except ValueError:
        raise ValueError(f"--cpus {text!r}: expected CPU numbers separated by commas") \
            from None
    if not cpus or min(cpus) < 0:
        raise ValueError(f"--cpus {text!r}: expected CPU numbers >= 0")
    return cpus


def format_cpus(cpus: frozenset[int]) -> str:
    """The ``--cpus`` text of ``cpus`` (:func:`parse_cpus`'s inverse)."""
    return ",".join(str(c) for c in sorted(cpus))


__all__ = ["AUTO", "OFF", "CpuPlan", "allowed_cpus", "format_cpus", "parse_cpus", "pin_process",
           "pin_thread", "plan_cpus"]
