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

import pickle
import signal
from collections.abc import Mapping
from typing import Any


def boot(device: Mapping[str, Any] | None, config_blob: bytes, *args: Any) -> None:
    """The real-time process's target: launch the virtual device ``device`` (the keyword
    arguments of :class:`~poise.devices.simdevice.SimDevice`; ``None``: none to launch)
    at the normal scheduler, then run :func:`~poise.controller.realtime.child.child_main`
    with the unpickled configuration ``config_blob`` and ``args``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides (Ctrl-C reaches both)
    launched = None
    if device is not None:
        from poise.devices.simdevice import launch_early

        launched = launch_early(device)
    try:
        config = pickle.loads(config_blob)
        from poise.controller.realtime.child import child_main
    except BaseException:
        if launched is not None:
            launched.stop()
        raise
    child_main(config, *args, launched=launched)


__all__ = ["boot"]
