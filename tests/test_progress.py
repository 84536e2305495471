"""Progress bars (tqdm) of long work: on a terminal only, never with --quiet or when stderr is
piped or redirected (issue 16)."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time

import numpy as np
import pytest

from poise.calibration import Pose
from poise.progress import progress_bar, shows_bar
from poise.telemetry.export import export, rows_to_export
from poise.telemetry.reader import LogContents

BENCH = ["bench", "sim", "--models", "planar_2link", "--integrators", "euler", "--duration",
         "0.02", "--repeat", "1"]


class Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_a_bar_is_drawn_on_a_terminal_only_and_never_with_quiet():
    assert shows_bar(Terminal()) and not shows_bar(Terminal(), quiet=True)
    assert not shows_bar(io.StringIO())
    for stream, drawn in ((Terminal(), True), (io.StringIO(), False)):
        with progress_bar(10, "work", unit="step", stream=stream) as bar:
            for _ in range(10):
                bar.update(1)
        assert ("work" in stream.getvalue()) is drawn
    quiet = Terminal()
    with progress_bar(10, "work", stream=quiet, quiet=True) as bar:
        bar.update(10)
    assert quiet.getvalue() == ""


def test_the_calibration_bar_counts_poses_and_shows_the_last_one(monkeypatch):
    from poise.cli.calibrate_cmd import _PoseBar

    pose = Pose(qa_ref=np.array([0.05]), q=np.zeros(2), qa=np.array([0.05]), tau=np.zeros(1),
                direction="loading", settled=True, settle_time=1.25,
                q_std=np.zeros(2), tau_std=np.zeros(1), samples=10)
    for stream, quiet, drawn in ((Terminal(), False, True), (Terminal(), True, False),
                                 (io.StringIO(), False, False)):
        monkeypatch.setattr(sys, "stderr", stream)
        bar = _PoseBar(2, quiet=quiet)
        bar.show(0, 2, None, "arming")
        bar.show(1, 2, pose, "settled")
        bar.bar.refresh()
        text = stream.getvalue()
        bar.close()
        assert ("calibration" in text and "1/2" in text and "settled in 1.25 s" in text) is drawn
        assert drawn or stream.getvalue() == ""


def test_log_export_reports_every_row_written(tmp_path):
    contents = LogContents(path="run.mcap", messages={
        "/sensors": [{"t": float(i), "q": [0.1, 0.2]} for i in range(25_000)],
        "/events": [{"t": 1.0, "kind": "state", "data": {"to": "active"}}]})
    seen: list[int] = []
    paths = export(contents, "csv", tmp_path, progress=seen.append)
    assert len(paths) == 2 and sum(seen) == rows_to_export(contents) == 25_001
    assert max(seen) <= 10_000  # reported as it goes, not once at the end


def _run_on_pty(argv: list[str]) -> str:
    """Run ``poise ARGV`` with stderr on a pseudo-terminal; what it drew there."""
    leader, follower = pty.openpty()
    # a new pty has 0 × 0 cells, where tqdm draws nothing: give it a terminal's 24 × 80
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "poise", *argv], stdout=subprocess.DEVNULL,
                            stderr=follower, stdin=subprocess.DEVNULL)
    os.close(follower)
    chunks = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.5)
        if ready:
            try:
                data = os.read(leader, 4096)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    proc.wait(timeout=30)
    os.close(leader)
    assert proc.returncode == 0
    return b"".join(chunks).decode(errors="replace")


@pytest.mark.skipif(not hasattr(pty, "openpty"), reason="needs a pseudo-terminal")
def test_benchmark_bar_on_a_terminal_and_none_with_quiet_or_a_pipe():
    assert "bench sim" in _run_on_pty(BENCH)
    assert "bench sim" not in _run_on_pty([*BENCH, "--quiet"])
    piped = subprocess.run([sys.executable, "-m", "poise", *BENCH], capture_output=True,
                           text=True, timeout=120)
    assert piped.returncode == 0
    assert piped.stderr == "" and "\r" not in piped.stdout


VVL = ["bench", "vvl", "--segments", "2", "--size", "20", "--groups", "2", "--workers", "1",
       "--methods", "jacobian"]


@pytest.mark.skipif(not hasattr(pty, "openpty"), reason="needs a pseudo-terminal")
def test_continuum_benchmark_bar_on_a_terminal_and_group_lines_without_one():
    """``poise bench vvl`` draws a bar of targets on a terminal (the last group in its
    postfix); with ``--quiet`` or a pipe there is no bar, and each group is a line instead."""
    drawn = _run_on_pty(VVL)
    assert "bench vvl" in drawn and "/40" in drawn  # 40 targets: 2 groups of 20
    quiet = _run_on_pty([*VVL, "--quiet"])
    assert "bench vvl" not in quiet and quiet.count("N=2 jacobian group") == 2
    piped = subprocess.run([sys.executable, "-m", "poise", *VVL], capture_output=True,
                           text=True, timeout=120)
    assert piped.returncode == 0
    assert "\r" not in piped.stderr and piped.stderr.count("N=2 jacobian group") == 2
    assert "| 2 | jacobian |" in piped.stdout
