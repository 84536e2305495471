"""The virtual device never outlives the process that started it: its parent is SIGKILLed (no
clean-up runs in the parent at all) and the ``poise device sim`` child must exit by itself and
remove its temporary link directory. Real processes, real signals, no mocks.

Orphans are re-parented to PID 1, which may not reap them: a child that has exited but stays a
zombie counts as gone (it runs nothing and holds no pty).
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

pytestmark = pytest.mark.skipif(not pathlib.Path("/proc/self/stat").exists(),
                                reason="needs /proc to find child processes")

#: Generous bounds for a loaded 2-core machine [s].
START_TIMEOUT = 60.0
EXIT_TIMEOUT = 30.0


def _stat(pid: int) -> tuple[str, int] | None:
    """``(state, ppid)`` of ``pid`` from /proc, or None when it does not exist."""
    try:
        text = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return fields[0], int(fields[1])


def running(pid: int) -> bool:
    """The process exists and has not exited (a zombie has exited)."""
    st = _stat(pid)
    return st is not None and st[0] not in ("Z", "X")


def cmdline(pid: int) -> list[str]:
    try:
        return pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except OSError:
        return []


def sim_children(parent: int) -> list[int]:
    """Pids of the running ``poise device sim`` processes below ``parent`` (its children, or
    the children of its real-time process: ``poise run`` runs the controller in a process of
    its own, which starts the device)."""
    parents: dict[int, int] = {}
    for entry in pathlib.Path("/proc").iterdir():
        if entry.name.isdigit():
            st = _stat(int(entry.name))
            if st is not None:
                parents[int(entry.name)] = st[1]

    def below(pid: int) -> bool:
        for _ in range(4):  # child, grandchild, ...
            pid = parents.get(pid, 0)
            if pid == parent:
                return True
        return False

    return [pid for pid in parents if below(pid) and running(pid)
            and "device" in cmdline(pid) and "sim" in cmdline(pid)]


def link_of(pid: int) -> pathlib.Path:
    args = cmdline(pid)
    return pathlib.Path(args[args.index("--link") + 1])


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(30)


def _check_orphan_cleans_up(parent: subprocess.Popen, stderr: pathlib.Path) -> None:
    wait_for("the parent to start its virtual device",
             lambda: bool(sim_children(parent.pid)) or parent.poll() is not None, START_TIMEOUT)
    assert parent.poll() is None, f"the parent exited early: {stderr.read_text()[-2000:]}"
    (child,) = sim_children(parent.pid)
    try:
        link = link_of(child)
        assert link.parent.name.startswith("poise-sim-")
        wait_for("the device's pty link", lambda: link.is_symlink(), START_TIMEOUT)
        assert "--parent-pid" in cmdline(child) and "--own-link-dir" in cmdline(child)

        parent.send_signal(signal.SIGKILL)  # no atexit, no finally, no SimDevice.stop()
        parent.wait(30)
        wait_for(f"the orphaned device (pid {child}) to exit", lambda: not running(child),
                 EXIT_TIMEOUT)
        wait_for(f"its link directory {link.parent} to be removed",
                 lambda: not link.parent.exists(), EXIT_TIMEOUT)
    finally:  # if the test failed, do not leave the orphan spinning (it is ours, by pid)
        if running(child) and "sim" in cmdline(child):
            os.kill(child, signal.SIGTERM)


def test_sigkilled_poise_run_leaves_no_device_and_no_temp_dir(tmp_path):
    stderr = tmp_path / "stderr.txt"
    with stderr.open("w") as err:
        parent = subprocess.Popen(
            [sys.executable, "-m", "poise", "run", "--no-mqtt", "--no-log", "--duration", "120",
             "--quiet"], cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=err)
    try:
        _check_orphan_cleans_up(parent, stderr)
    finally:
        _kill(parent)


def test_sigkilled_owner_of_a_simdevice_leaves_no_device_and_no_temp_dir(tmp_path):
    script = textwrap.dedent("""
        import time
        from poise.devices.simdevice import SimDevice

        device = SimDevice("double_pendulum", rate=200)
        device.start()
        time.sleep(600)
    """)
    stderr = tmp_path / "stderr.txt"
    with stderr.open("w") as err:
        parent = subprocess.Popen([sys.executable, "-c", script], cwd=tmp_path,
                                  stdout=subprocess.DEVNULL, stderr=err)
    try:
        _check_orphan_cleans_up(parent, stderr)
    finally:
        _kill(parent)


def test_device_whose_parent_is_already_gone_does_not_start(tmp_path):
    """The race the ``getppid`` check closes: the parent died before the child armed the
    kernel's parent-death signal. A pid that is not our parent stands for it."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(30)
    link_dir = tmp_path / "owned"
    link_dir.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "poise", "device", "sim", "--model", "double_pendulum",
         "--link", str(link_dir / "device"), "--own-link-dir", "--parent-pid", str(gone.pid)],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert f"parent process {gone.pid} is gone" in proc.stderr
    assert "PTY" not in proc.stdout
    assert not link_dir.exists()


def test_sigterm_ends_the_device_cleanly_and_removes_its_own_link_dir(tmp_path):
    link_dir = tmp_path / "owned"
    link_dir.mkdir()
    link = link_dir / "device"
    proc = subprocess.Popen(
        [sys.executable, "-m", "poise", "device", "sim", "--model", "double_pendulum",
         "--link", str(link), "--own-link-dir", "--parent-pid", str(os.getpid())],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()
        assert first.startswith("PTY /dev/"), proc.stderr.read()
        assert link.is_symlink() and os.readlink(link) == first.split()[1]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(EXIT_TIMEOUT) == 0, proc.stderr.read()
        assert not link_dir.exists()
    finally:
        _kill(proc)


@pytest.mark.parametrize(("inherited", "after"), [(5, 4), (1, 0)])
def test_a_virtual_device_runs_one_priority_below_the_controller_that_started_it(inherited,
                                                                                 after):
    """``poise device sim`` started from a SCHED_FIFO p thread drops to p − 1 (at p = 1 to
    the normal scheduler), before its threads start, so the control loop preempts it; where
    the OS refuses real-time scheduling nothing changes and it says so."""
    code = textwrap.dedent(f"""
        import os
        from poise.firmware_bridge.lifetime import yield_to_parent
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param({inherited}))
        except PermissionError:
            print("refused", yield_to_parent(), os.sched_getscheduler(0) == os.SCHED_OTHER)
        else:
            said = yield_to_parent()
            import threading
            seen = []
            t = threading.Thread(target=lambda: seen.append(os.sched_getparam(0).sched_priority))
            t.start(); t.join()
            print("granted", said, os.sched_getparam(0).sched_priority, seen[0],
                  os.sched_getscheduler(0) == (os.SCHED_FIFO if {after} else os.SCHED_OTHER))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout.split()
    if out[0] == "refused":
        assert out[1:] == ["normal", "scheduler", "True"]
        return
    said = " ".join(out[1:-3])
    assert said == f"SCHED_FIFO {inherited} -> " + (str(after) if after else "normal scheduler")
    assert out[-3:] == [str(after), str(after), "True"], out  # and its threads inherit it


def _catches_sighup(pid: int) -> bool:
    """``pid`` has a handler for SIGHUP (the device's parent-death signal is armed)."""
    try:
        status = pathlib.Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt"))
    return bool(int(caught, 16) & (1 << (signal.SIGHUP - 1)))


def test_a_device_whose_parent_dies_during_its_start_up_gives_up_at_once(tmp_path):
    """The parent dies while the device is still starting (here its parameter file is a
    FIFO nobody writes: a start-up step that would never end, like a long kernel compile).
    The device must not finish starting first: it exits at once, without ever opening its
    pty, and removes its link directory."""
    fifo = tmp_path / "never-written.toml"
    os.mkfifo(fifo)
    link_dir = tmp_path / "owned"
    link_dir.mkdir()
    out = tmp_path / "device-stdout.txt"
    script = textwrap.dedent(f"""
        import os, subprocess, sys, time
        device = subprocess.Popen(
            [sys.executable, "-m", "poise", "device", "sim", "--model", "double_pendulum",
             "--params", {str(fifo)!r}, "--link", {str(link_dir / "device")!r},
             "--own-link-dir", "--parent-pid", str(os.getpid())],
            stdout=open({str(out)!r}, "w"), stderr=subprocess.DEVNULL)
        print(device.pid, flush=True)
        time.sleep(600)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    try:
        wait_for("the device to arm its parent-death signal", lambda: _catches_sighup(child),
                 START_TIMEOUT)
        parent.send_signal(signal.SIGKILL)
        parent.wait(30)
        wait_for(f"the starting device (pid {child}) to exit", lambda: not running(child),
                 EXIT_TIMEOUT)
        assert "PTY" not in out.read_text()
        assert not link_dir.exists()
    finally:
        if running(child) and "sim" in cmdline(child):
            os.kill(child, signal.SIGKILL)
        _kill(parent)
