"""``poise calibrate`` never loses measured work: output paths are checked before any device
work, the poses are saved as they are measured (a SIGKILL mid-routine keeps them), and a refit
from too few poses says plainly that nothing validated it."""

from __future__ import annotations

import json
import pathlib
import signal
import subprocess
import sys
import time

import pytest
from tests.test_sim_lifetime import cmdline, running, wait_for

from poise.calibration import Pose, excitation, identify, synthetic_poses
from poise.calibration.identify import poses_for_holdout
from poise.cli import main as cli_main
from poise.models import load_model

#: A port that does not exist: reaching the device step would fail with exit code 3.
NO_PORT = "/dev/poise-no-such-port"


def calibrate(*args: str) -> list[str]:
    return ["calibrate", "--model", "double_pendulum", *args]


@pytest.mark.parametrize("option", ["--out", "--report"])
def test_output_under_a_file_is_refused_before_any_device_work(tmp_path, capsys, option):
    held = tmp_path / "held.png"
    held.write_bytes(b"\x89PNG\r\n\x1a\n")
    bad = held / ("cal.json" if option == "--out" else "report.png")
    args = {"--out": str(tmp_path / "cal.json"), "--report": str(tmp_path / "report.png")}
    args[option] = str(bad)
    code = cli_main(calibrate("--device", NO_PORT, "--out", args["--out"],
                              "--report", args["--report"]))
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"{option} {bad}" in err and f"{held} is a file, not a folder" in err
    assert "nothing was run" in err and NO_PORT not in err  # the device was never touched
    assert held.is_file() and list(tmp_path.iterdir()) == [held]  # nothing written


@pytest.mark.parametrize("option", ["--out", "--report"])
def test_output_in_a_missing_folder_is_refused_and_no_folder_is_created(tmp_path, capsys,
                                                                        option):
    missing = tmp_path / "runs" / "today"
    args = {"--out": str(tmp_path / "cal.json"), "--report": str(tmp_path / "report.png")}
    args[option] = str(missing / ("cal.json" if option == "--out" else "report.png"))
    code = cli_main(calibrate("--device", NO_PORT, "--out", args["--out"],
                              "--report", args["--report"]))
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"{option} {args[option]}: folder {missing} does not exist" in err
    assert not (tmp_path / "runs").exists()


def test_report_in_an_unknown_image_format_is_refused_before_running(tmp_path, capsys):
    code = cli_main(calibrate("--device", NO_PORT, "--out", str(tmp_path / "cal.json"),
                              "--report", str(tmp_path / "cal.pgn")))
    err = capsys.readouterr().err
    assert code == 2 and "unknown image format 'pgn'" in err and ".png" in err


def test_output_checks_pass_and_the_device_step_is_reached(tmp_path, capsys):
    """The control case: with good paths the command goes on to the device (and fails there,
    with its own exit code), so the refusals above really happen before the device step."""
    code = cli_main(calibrate("--device", NO_PORT, "--out", str(tmp_path / "cal.json"),
                              "--report", str(tmp_path / "cal.png")))
    err = capsys.readouterr().err
    assert code == 3 and NO_PORT in err


def _devices_of(parent: int) -> list[int]:
    """Pids of the ``poise device sim`` processes started for ``parent`` (``--parent-pid``)."""
    out = []
    for entry in pathlib.Path("/proc").iterdir():
        if entry.name.isdigit():
            args = cmdline(int(entry.name))
            if "sim" in args and "--parent-pid" in args and \
                    args[args.index("--parent-pid") + 1] == str(parent):
                out.append(int(entry.name))
    return out


def _poses(path) -> list[Pose]:
    return [Pose.from_dict(d) for d in json.loads(path.read_text())["poses"]]


def test_poses_are_on_disk_as_soon_as_measured_even_if_calibrate_is_killed(tmp_path):
    """SIGKILL ``poise calibrate --device sim`` after its first pose: the pose is already in
    ``cal.poses.json`` (what ``--from-poses`` reads), and its device does not outlive it."""
    from tests.test_calibration_sim import truth_description  # fast-settling truth

    params = tmp_path / "truth.json"
    params.write_text(json.dumps(truth_description("double_pendulum")))
    out = tmp_path / "cal.json"
    poses_file = tmp_path / "cal.poses.json"
    with (tmp_path / "stderr.txt").open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "poise", *calibrate(
                "--device", "sim", "--sim-params", str(params), "--levels", "4",
                "--out", str(out), "--settle-window", "0.3", "--hold", "0.2",
                "--average", "0.2", "--velocity-tol", "4e-3", "--change-tol", "6e-4")],
            stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + 120  # generous: a busy 2-core machine
        while not poses_file.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert poses_file.exists(), (tmp_path / "stderr.txt").read_text()[-2000:]
        devices = _devices_of(proc.pid)
        assert len(devices) == 1  # its ``poise device sim``, told our pid
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    wait_for("the killed calibration's device to exit",
             lambda: not any(running(pid) for pid in devices), 30)
    poses = _poses(poses_file)
    assert 1 <= len(poses) <= 7
    assert all(len(p.q) == 2 and len(p.qa) == 1 for p in poses)
    assert "measured poses are saved to" in (tmp_path / "stderr.txt").read_text()
    assert not out.exists()
    # the refit reads them (too few to identify anything, but read without a usage error)
    refit = subprocess.run([sys.executable, "-m", "poise", *calibrate(
        "--from-poses", str(poses_file), "--out", str(tmp_path / "refit.json"))],
        capture_output=True, text=True, timeout=120)
    assert refit.returncode in (0, 1), refit.stderr


# ------------------------------------------------------------------ too few poses to validate


def _synthetic(count: int) -> list[Pose]:
    model = load_model("double_pendulum")
    poses = synthetic_poses(model, excitation(model, levels=4), q_noise=1e-4, tau_noise=1e-3,
                            samples=5)
    assert len(poses) >= count
    return poses[:count]


def test_three_poses_fit_but_are_not_claimed_validated():
    model = load_model("double_pendulum")
    result = identify(model, _synthetic(3))
    assert result.identifiable and not result.validated
    assert not result.holdout_index
    needed = poses_for_holdout(0.2, model.n, result.n_free - model.m)
    assert needed == 5
    assert "NOT validated" in result.message and "identified" not in result.message
    assert f"validation needs at least {needed}" in result.message
    stats = result.statistics()
    assert stats["validated"] is False and stats["holdout_rms"] is None


def test_the_pose_count_given_for_validation_is_enough():
    model = load_model("double_pendulum")
    four, five = identify(model, _synthetic(4)), identify(model, _synthetic(5))
    assert not four.validated and "at least 5" in four.validation
    assert five.validated and five.holdout_index
    assert "validated on 1 held-out pose(s) of 5" in five.message


def test_holdout_switched_off_is_said_so():
    result = identify(load_model("double_pendulum"), _synthetic(7), holdout=0.0)
    assert not result.validated and "switched off" in result.validation


def test_refit_from_three_poses_prints_no_nan_and_no_validated_claim(tmp_path):
    poses = tmp_path / "three.poses.json"
    poses.write_text(json.dumps({"poses": [p.to_dict() for p in _synthetic(3)],
                                 "device": {}, "routine": {}}))
    base = [sys.executable, "-m", "poise", *calibrate("--from-poses", str(poses),
                                                      "--out", str(tmp_path / "cal.json"))]
    text = subprocess.run(base, capture_output=True, text=True, timeout=120)
    assert text.returncode == 0, text.stderr
    assert "nan" not in text.stdout.lower()
    assert "NOT validated" in text.stdout
    assert "No held-out validation: 3 settled pose(s) are too few" in text.stdout
    assert "validation needs at least 5" in text.stdout
    as_json = subprocess.run([*base, "--json"], capture_output=True, text=True, timeout=120)
    summary = json.loads(as_json.stdout)
    assert summary["statistics"]["validated"] is False
    assert summary["statistics"]["holdout_rms"] is None
    assert "NOT validated" in summary["message"]
