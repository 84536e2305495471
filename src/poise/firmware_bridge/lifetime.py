"""Tie a helper process's life to its parent's: the virtual device must not outlive ``poise run``.

A ``poise device sim`` started by :class:`~poise.devices.simdevice.SimDevice` (or by
``poise calibrate --device sim``) is told its parent's pid (``--parent-pid``). When the parent
dies — even by SIGKILL, which runs none of its clean-up — the device must stop too, or it keeps
streaming into a pty nobody reads, at full CPU, under PID 1, forever.

Two mechanisms, both ending in the device's normal shutdown (so its clean-up runs):

* Linux: ``prctl(PR_SET_PDEATHSIG, SIGHUP)`` makes the kernel signal us the moment the parent
  goes. The kernel sends it when the parent *thread* that spawned us exits, not only the
  process, so the handler acts only if :func:`os.getppid` no longer is the parent (a thread
  exit leaves us with the same parent process). The parent may have died before the ``prctl``
  call; :func:`watch_parent` therefore checks ``getppid()`` right after it (closing that race).
* Everywhere: :func:`parent_alive` (``getppid()`` is still the parent), polled by the caller's
  main loop every ~0.1 s; it also covers systems without ``prctl``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Callable

#: ``PR_SET_PDEATHSIG`` from ``<linux/prctl.h>``.
PR_SET_PDEATHSIG = 1
#: The signal the kernel sends on the parent's death (a "hang-up": the other end went away).
PARENT_DEATH_SIGNAL = signal.SIGHUP


def parent_alive(parent_pid: int) -> bool:
    """Whether ``parent_pid`` is still our parent (an orphan is re-parented to init or a
    subreaper, so ``getppid()`` changes when the parent dies)."""
    return os.getppid() == parent_pid


def set_parent_death_signal(signum: int) -> bool:
    """Ask the Linux kernel to send ``signum`` when our parent exits; False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def watch_parent(parent_pid: int, on_death: Callable[[], None]) -> bool:
    """Call ``on_death()`` (from the main thread's signal handler) when ``parent_pid`` dies.

    Must be called from the main thread. Installs the handler, then arms the kernel's
    parent-death signal, then checks the parent is still there.

    Args:
        parent_pid: the pid of the process that started us.
        on_death: what to do; it should only request a shutdown (set an event), since it runs
            inside a signal handler.

    Returns:
        False when the parent is already gone (``on_death`` is not called then; the caller
        shuts down at once).
    """

    def handler(signum: int, frame: object) -> None:
        if not parent_alive(parent_pid):
            on_death()

    with contextlib.suppress(ValueError, OSError):  # not the main thread: polling still works
        signal.signal(PARENT_DEATH_SIGNAL, handler)
        set_parent_death_signal(PARENT_DEATH_SIGNAL)
    return parent_alive(parent_pid)




def fifo(priority: int) -> dict[str, object]:
    """``SCHED_FIFO`` at ``priority`` for the calling thread (``priority`` ≤ 0: nothing);
    threads and processes it starts afterwards inherit it. Returns what happened, JSON-ready:
    ``{"scheduler": "fifo", "priority": P}`` or ``{"scheduler": "other", "refused": why}``."""
    if priority <= 0:
        return {"scheduler": "other"}
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except (PermissionError, OSError, AttributeError) as exc:
        return {"scheduler": "other", "refused": f"SCHED_FIFO {priority}: {exc}"}
    return {"scheduler": "fifo", "priority": priority}


def yield_to_parent() -> str:
    """Run one real-time priority below what this process inherited: a virtual device started
    by a controller's real-time process inherits its ``SCHED_FIFO`` priority p and would
    otherwise compete with the control loop as an equal (a FIFO thread is never preempted by
    one of the same priority, and the device spins the last 0.3 ms of each period to pace its
    frames). At p − 1 the loop preempts it the moment a frame wakes it; at p = 1 it returns
    to the normal scheduler. Lowering one's own priority needs no privilege. Returns what
    was done (for the log)."""
    if not hasattr(os, "sched_getscheduler"):
        return "no real-time scheduling here"
    try:
        if os.sched_getscheduler(0) != os.SCHED_FIFO:
            return "normal scheduler"
        p = os.sched_getparam(0).sched_priority
        if p > 1:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(p - 1))
            return f"SCHED_FIFO {p} -> {p - 1}"
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        return "SCHED_FIFO 1 -> normal scheduler"
    except OSError as exc:
        return f"left as inherited ({exc})"


__all__ = ["PARENT_DEATH_SIGNAL", "fifo", "parent_alive",
           "set_parent_death_signal", "watch_parent", "yield_to_parent"]
