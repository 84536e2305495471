"""The embedded MQTT broker (``python -m poise.telemetry.broker``, a child of ``poise run``)
never outlives the process that launched it: SIGKILL that process (no clean-up runs in it at
all) and the broker must exit by itself and free its port. Real processes, real signals, a
real port.
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import textwrap

import pytest

from conftest import wait_for
from poise.telemetry.broker import port_is_free
from poise.telemetry.stress_procs import Helper, alive, helpers, listening_ports

pytestmark = pytest.mark.skipif(not pathlib.Path("/proc/self/stat").exists(),
                                reason="needs /proc to find child processes")

#: Generous bounds for a loaded 2-core machine [s].
START_TIMEOUT = 120.0
EXIT_TIMEOUT = 30.0


def _check_no_helper_left(parent: subprocess.Popen, ready) -> None:
    """Once ``ready(helpers)`` holds for ``parent``'s helpers, SIGKILL ``parent``: each
    helper must exit by itself and no port they listened on may stay held."""
    found: list[Helper] = []

    def up() -> bool:
        assert parent.poll() is None, "the parent exited early"
        found[:] = helpers(parent.pid)
        return ready(found)

    wait_for("the parent's helpers", up, START_TIMEOUT)
    ports = {p for h in found if h.role == "broker" for p in listening_ports(h.pid)}
    assert ports
    try:
        parent.send_signal(signal.SIGKILL)  # no atexit, no finally, no EmbeddedBroker.stop()
        parent.wait(30)
        for h in found:
            wait_for(f"the orphaned {h.role} (pid {h.pid}) to exit", lambda h=h: not alive(h),
                     EXIT_TIMEOUT)
        assert all(port_is_free(p) for p in ports), ports
    finally:  # if the test failed, do not leave the orphans running (ours, by pid)
        for h in found:
            if alive(h):
                os.kill(h.pid, signal.SIGKILL)


def test_sigkilled_owner_of_an_embedded_broker_leaves_no_broker_and_frees_its_port(tmp_path):
    script = textwrap.dedent("""
        import time
        from poise.telemetry.broker import EmbeddedBroker, free_port

        EmbeddedBroker(free_port()).start()
        time.sleep(600)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=tmp_path,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _check_no_helper_left(parent, lambda found: any(
            h.role == "broker" and listening_ports(h.pid) for h in found))
    finally:
        parent.kill()
        parent.wait(30)


def test_sigkilled_poise_run_leaves_neither_its_broker_nor_its_device(tmp_path):
    """``poise run`` as it comes (the embedded broker, the virtual device under the
    real-time process), killed once all three are up."""
    parent = subprocess.Popen(
        [sys.executable, "-m", "poise", "run", "--no-log", "--duration", "120", "--quiet"],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _check_no_helper_left(parent, lambda found: {"broker", "realtime", "device"} <= {
            h.role for h in found} and any(listening_ports(h.pid) for h in found
                                           if h.role == "broker"))
    finally:
        parent.kill()
        parent.wait(30)


def test_a_broker_whose_parent_is_already_gone_does_not_start():
    """The race the ``getppid`` check closes: the launcher died before the broker armed the
    kernel's parent-death signal. A pid that is not our parent stands for it."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(30)
    proc = subprocess.run([sys.executable, "-m", "poise.telemetry.broker", "--port", "0",
                           "--parent-pid", str(gone.pid)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert f"parent process {gone.pid} is gone" in proc.stderr
