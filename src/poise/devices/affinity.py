"""CPU affinity (``loop.cpu``): a core for the control loop, the others for the virtual device.

Between two sensor frames the loop thread sleeps ~0.9 ms at 1 kHz. Whatever runs on its core
meanwhile evicts the loop's code and data from that core's caches, and the next cycle runs
cold: on the 2-core reference machine a cycle's Python runs 3–6× slower in the service than
in a tight loop. Pinning the loop thread to one CPU and the virtual device to the others keeps
the device's simulator off the loop's core (Linux ``sched_setaffinity``; elsewhere nothing is
pinned and the summary says so).

Only those two are pinned. The real-time process's other threads (commands, e-stop, the
telemetry pump) run at the loop's ``SCHED_FIFO`` priority: confined to the device's CPUs they
starve it (one CPU on a 2-core computer: arming then took 0.85 s instead of 0.04 s, and a
start once faulted with a sensor timeout). The first process (telemetry, the log, the broker)
and other programs are left where the OS puts them: poise does not move a process it did not
start.

By default (:data:`AUTO`) the loop is pinned when at least three CPUs are allowed (a Raspberry
Pi 4 or 5, a Jetson): on two, the device would be left one CPU that it shares with every other
thread, and on the 2-core reference machine pinning did not lower the latency (interleaved
20 s runs: p99 263/234/194 µs unpinned, 332/206/194 µs pinned; docs/controller.md). Give a CPU
number to pin anyway.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

#: ``loop.cpu``: the last CPU this process may use, when it may use :data:`AUTO_MIN_CPUS`.
AUTO = -1
#: How many CPUs :data:`AUTO` needs to pin the loop (two or more left for the rest).
AUTO_MIN_CPUS = 3
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
    when there are at least :data:`AUTO_MIN_CPUS`; a CPU number must be an allowed one;
    :data:`OFF` pins nothing. With one CPU allowed the loop shares it with the device
    (``others`` = it too).
    """
    if not hasattr(os, "sched_setaffinity"):
        return None, "CPU affinity is not supported on this system"
    cpus = allowed if allowed is not None else allowed_cpus()
    if setting == OFF:
        return None, "loop.cpu = -2 (off)"
    if setting == AUTO:
        if len(cpus) < AUTO_MIN_CPUS:
            return None, f"{len(cpus)} CPU(s) ({sorted(cpus)}): loop.cpu = -1 pins the loop " \
                         f"from {AUTO_MIN_CPUS} on (a CPU number pins it anyway)"
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


__all__ = ["AUTO", "AUTO_MIN_CPUS", "OFF", "CpuPlan", "allowed_cpus", "format_cpus", "parse_cpus",
           "pin_process", "pin_thread", "plan_cpus"]
