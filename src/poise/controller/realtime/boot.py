"""The real-time process's first step: launch the virtual device, then import the rest.

The ``spawn`` start method unpickles the process's target and arguments before running it, so
whatever the target's module imports comes first. This module imports only the standard
library and :mod:`poise.devices.simdevice` (itself standard library only): the virtual
device (``port = "sim"``) is launched within a tenth of a second of the process's start,
rather than after numpy and the controller's modules (~0.5 s on the 2-core machine), and its
start-up (imports, plant, kernels) overlaps all of ours. The configuration arrives pickled and
is unpickled after the launch.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
from collections.abc import Mapping
from typing import Any


class _EarlyStop:
    """SIGTERM before the controller's own handler is in place (the parent abandoning a
    start-up): noted, and the launched virtual device told to stop at once. The default
    action would end this process while the device still imports, and the device, an orphan
    then, would remove its folder only once it noticed, after its parent's exit."""

    def __init__(self) -> None:
        self.signalled: list[int] = []
        self.device_pid: int | None = None

    def on_signal(self, signum: int, _frame: object) -> None:
        self.signalled.append(signum)
        if self.device_pid is not None:  # still its pid: only our wait reaps it
            with contextlib.suppress(OSError):
                os.kill(self.device_pid, signal.SIGTERM)


class _Abandoned(Exception):
    """The parent stopped the start-up (SIGTERM) before ``child_main``."""


def boot(device: Mapping[str, Any] | None, config_blob: bytes, *args: Any) -> None:
    """The real-time process's target: launch the virtual device ``device`` (the keyword
    arguments of :class:`~poise.devices.simdevice.SimDevice`; ``None``: none to launch)
    at the normal scheduler, then run :func:`~poise.controller.realtime.child.child_main`
    with the unpickled configuration ``config_blob`` and ``args``. A SIGTERM before
    ``child_main`` serves stops the device and ends the process once the device is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides (Ctrl-C reaches both)
    early = _EarlyStop()
    signal.signal(signal.SIGTERM, early.on_signal)
    launched = None
    if device is not None:
        from poise.devices.simdevice import launch_early

        launched = launch_early(device)
        if launched is not None and launched.proc is not None:
            early.device_pid = launched.proc.pid
    try:
        if early.signalled:
            raise _Abandoned
        config = pickle.loads(config_blob)
        from poise.controller.realtime.child import child_main
        if early.signalled:
            raise _Abandoned
    except BaseException:
        if launched is not None:
            launched.stop()  # waits for it: its folder is gone when we are
        if early.signalled:
            return
        raise
    child_main(config, *args, launched=launched, signalled=early.signalled)


__all__ = ["boot"]
