"""Spawn ``poise device sim`` (the virtual device) as a separate process and find its pty.

The device runs in its own process so that its real-time thread never competes with the
controller's for the GIL, exactly as a microcontroller would not. It prints ``PTY <path>`` on
its first line; we also ask it to keep a symlink (``--link``) to the current pty, so that after
a simulated unplug (``--disconnect-after``) the controller reconnects under the same name, as
a re-plugged USB device reappears under ``/dev/serial/by-id``.

The device never outlives us: it gets our pid (``--parent-pid``) and exits when we die, even by
SIGKILL (:mod:`poise.firmware_bridge.lifetime`), and it owns the temporary directory of the
symlink (``--own-link-dir``): whatever ends it, it removes the link and the directory.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

#: Environment variable that replaces ``python -m poise device sim`` (e.g. another simulator;
#: it gets the same flags, including ``--link PATH --own-link-dir --parent-pid PID``).
SIM_COMMAND_ENV = "POISE_DEVICE_SIM_COMMAND"


class SimDeviceError(RuntimeError):
    """The virtual device did not start; the message carries its stderr."""


class SimDevice:
    """A ``poise device sim`` subprocess.

    Args:
        model: model the device simulates.
        rate: sensor rate [Hz].
        params: the simulated robot's true parameter file (``--params``).
        extra: more flags (fault injection: ``--corrupt 0.02 --drop 0.02``,
            ``--disconnect-after S`` …).
        startup_timeout: how long to wait for the ``PTY`` line [s] (the simulator compiles
            its kernels first: seconds from Numba's cache, up to a minute without it).
        fifo_priority: run the device's threads at this ``SCHED_FIFO`` priority, set by the
            device once it has started (``--fifo-priority``): for a device launched while
            its controller still runs at the normal scheduler (:meth:`launch` early), so
            that neither's start-up takes a whole core from the other. ``None``: the device
            runs one below what it inherits.
        cpus: the CPUs the device runs on (``--cpus``; ``None``: any), set before its
            threads start (:mod:`poise.devices.affinity`: the control loop's core is
            kept for the loop).

    Attributes:
        path: the symlink to the current pty (stable across reopen); use it as the port.
        pty: the pty path the device printed first.
    """

    def __init__(self, model: str, *, rate: float = 500, params: str | None = None,
                 extra: Sequence[str] = (), startup_timeout: float = 120.0,
                 fifo_priority: int | None = None,
                 cpus: frozenset[int] | None = None) -> None:
        self.model = model
        self.fifo_priority = fifo_priority
        self.cpus = cpus
        self.rate = rate
        self.params = params
        self.extra = tuple(extra)
        self.startup_timeout = startup_timeout
        self._dir = tempfile.mkdtemp(prefix="poise-sim-")
        self.path = os.path.join(self._dir, "device")
        self.pty = ""
        self.proc: subprocess.Popen[str] | None = None
        self.lines: list[str] = []
        self._first: list[str] = []
        self._first_reader: threading.Thread | None = None

    def command(self) -> list[str]:
        base = os.environ.get(SIM_COMMAND_ENV)
        cmd = shlex.split(base) if base else [sys.executable, "-m", "poise", "device", "sim"]
        cmd += ["--model", self.model, "--rate", str(round(self.rate)), "--link", self.path,
                "--own-link-dir", "--parent-pid", str(os.getpid())]
        if self.params:
            cmd += ["--params", self.params]
        if self.fifo_priority is not None:
            cmd += ["--fifo-priority", str(self.fifo_priority)]
        if self.cpus:
            from poise.devices.affinity import format_cpus

            cmd += ["--cpus", format_cpus(self.cpus)]
        return cmd + list(self.extra)

    def start(self) -> str:
        """Start the process and wait for its pty; returns :attr:`path`."""
        self.launch()
        return self.wait_ready()

    def launch(self) -> SimDevice:
        """Start the process without waiting for it (:meth:`wait_ready` does): it imports,
        builds its plant and opens its pty meanwhile. Idempotent."""
        if self.proc is not None:
            return self
        # its own session: a terminal's Ctrl-C reaches us (we disarm, then stop it), not the
        # device first; it still dies with us (--parent-pid)
        self.proc = proc = subprocess.Popen(self.command(), stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE, text=True, bufsize=1,
                                            start_new_session=True)
        self._first_reader = threading.Thread(
            target=lambda: self._first.append(proc.stdout.readline()), daemon=True)
        self._first_reader.start()
        return self

    def wait_ready(self) -> str:
        """Wait (at most ``startup_timeout`` from now) for the launched process's pty;
        returns :attr:`path`.

        Raises:
            SimDeviceError: it printed no ``PTY`` line in time (it is stopped then).
        """
        if self.proc is None or self._first_reader is None:
            self.launch()
        self._first_reader.join(self.startup_timeout)  # type: ignore[union-attr]
        line = self._first[0].strip() if self._first else ""


        if not line.startswith("PTY "):
            self.stop()
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise SimDeviceError(
                f"'{shlex.join(self.command())}' did not print 'PTY <path>' within "
                f"{self.startup_timeout:g} s (got {line!r}); stderr: {err.strip()[-800:]}")
        self.pty = line[4:]
        deadline = time.monotonic() + 2.0
        while not os.path.exists(self.path) and time.monotonic() < deadline:
            time.sleep(0.005)
        threading.Thread(target=self._drain, daemon=True).start()
        return self.path

    def _drain(self) -> None:
        proc = self.proc
        if proc is None or proc.stdout is None:
            return
        with contextlib.suppress(ValueError, OSError):
            for line in proc.stdout:
                self.lines.append(line.rstrip())

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def pause(self) -> None:
        """Freeze the device process (SIGSTOP): its sensor stream stops (a sensor timeout)."""
        if self.running:
            self.proc.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]

    def resume(self) -> None:
        if self.running:
            self.proc.send_signal(signal.SIGCONT)  # type: ignore[union-attr]

    def stop(self) -> None:
        """Terminate the process (SIGTERM, then SIGKILL) and remove the symlink."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGCONT)
                proc.terminate()
            try:
                proc.wait(3)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(3)
        if proc is not None:
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    with contextlib.suppress(OSError, ValueError):
                        stream.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        with contextlib.suppress(OSError):
            os.rmdir(self._dir)

    def __enter__(self) -> SimDevice:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def launch_early(spec: Mapping[str, Any]) -> SimDevice | None:
    """Start the virtual device of ``spec`` (:class:`SimDevice`'s keyword arguments, from
    :func:`poise.devices.factory.early_device_spec`) without waiting for it; None when the
    OS refuses (opening the device starts one again then, and reports why)."""
    sim = SimDevice(**spec)
    try:
        return sim.launch()
    except OSError:
        sim.stop()
        return None
