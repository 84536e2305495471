"""The install: a headless core that never loads Qt or matplotlib, extras that say how to get
them, and package metadata that matches what the code expects (issue 16)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap
import tomllib

import pytest

from conftest import PATIENT_WATCHDOG
from poise.api.extras import EXTRAS, MissingExtra, install_hint, require

ROOT = pathlib.Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
GUI_AND_PLOTS = ("PySide6", "pyqtgraph", "matplotlib")


def _python(code: str, cwd: pathlib.Path, timeout: float = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("QT_QPA_PLATFORM", None)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_headless_commands_never_import_qt_or_matplotlib(tmp_path):
    """Importing poise, building the whole command line (every command module) and running
    headless commands — a solve, a model listing, the bundled examples, a one-second
    ``poise run`` on the simulated device, a log export — leave PySide6, pyqtgraph and
    matplotlib unloaded."""
    done = _python(f"""
        import json, sys
        import poise
        from poise.cli import build_parser, main
        build_parser()
        import poise.calibration, poise.controller.service, poise.telemetry.service
        import poise.telemetry.export, poise.telemetry.reader, poise.devices.dynamixel_config
        codes = [
            main(["solve", "--model", "double_pendulum", "--algorithm", "alg1",
                  "--target", "0.6", "--json"]),
            main(["model", "list"]),
            main(["example", "list"]),
            main(["run", "--config", "double_pendulum", "--duration", "1", "--no-mqtt",
                  "--log", "run.mcap", "--quiet", *{list(PATIENT_WATCHDOG)!r}]),
            main(["log", "info", "run.mcap"]),
            main(["log", "export", "run.mcap", "--out", "csv"]),
        ]
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in {GUI_AND_PLOTS!r})
        print("RESULT", json.dumps({{"codes": codes, "loaded": loaded}}))
    """, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.rsplit("RESULT ", 1)[1])
    codes = result["codes"]
    assert codes[:3] == [0, 0, 0] and codes[3] in (0, 1) and codes[4:] == [0, 0], done.stderr
    assert result["loaded"] == []
    assert list((tmp_path / "csv").glob("run_*.csv"))


@pytest.mark.parametrize(("blocked", "argv", "extra"), [
    ("matplotlib", ["plot", "held-set", "--out", "held.png"], "plot"),
    ("matplotlib", ["log", "plot", "run.mcap"], "plot"),
    ("matplotlib", ["calibrate", "--model", "double_pendulum", "--device", "inprocess",
                    "--out", "cal.json", "--report", "cal.png"], "plot"),
    ("PySide6", ["dashboard", "--screenshot", "x.png"], "gui"),
    ("pyqtgraph", ["bench", "dashboard"], "gui"),
    ("pyarrow", ["log", "export", "run.mcap", "--format", "parquet"], "parquet"),
])
def test_a_command_whose_extra_is_missing_names_the_pip_install(tmp_path, blocked, argv, extra):
    """With the module made unimportable (``sys.modules[name] = None``), the command exits 2
    at once with one line naming ``pip install 'poise[EXTRA]'`` — no traceback, and before
    any long work (the calibration never starts)."""
    (tmp_path / "run.mcap").write_bytes(b"")
    done = _python(f"""
        import sys
        sys.modules[{blocked!r}] = None
        from poise.cli import main
        sys.exit(main({argv!r}))
    """, tmp_path, timeout=120)
    assert done.returncode == 2, done.stderr
    assert f"pip install 'poise[{extra}]'" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "cal.poses.json").exists()


def test_require_raises_missing_extra_with_the_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(MissingExtra, match=r"--report needs matplotlib.*pip install "
                                           r"'poise\[plot\]'") as info:
        require("plot", "--report")
    assert isinstance(info.value, ImportError) and info.value.extra == "plot"
    with pytest.raises(ValueError, match="unknown extra"):
        install_hint("qt")


def test_extras_of_the_code_are_the_extras_of_pyproject():
    """Every extra the code names exists in pyproject, ``all`` installs each of them, and the
    test extra installs ``all`` (so the whole suite runs, GUI and plots included)."""
    optional = PYPROJECT["project"]["optional-dependencies"]
    assert set(EXTRAS) <= set(optional)
    (everything,) = optional["all"]
    assert set(everything.removeprefix("poise[").removesuffix("]").split(",")) == set(EXTRAS)
    assert "poise[all]" in optional["test"]


def test_core_dependencies_leave_out_the_gui_and_plots_and_pin_no_upper_qt():
    core = " ".join(PYPROJECT["project"]["dependencies"]).lower()
    assert not any(name.lower() in core for name in (*GUI_AND_PLOTS, "pyside6-essentials"))
    assert "tqdm" in core
    qt = next(d for d in PYPROJECT["project"]["optional-dependencies"]["gui"]
              if d.lower().startswith("pyside6"))
    assert "<" not in qt and "!=6.12.0" in qt  # the known-bad release, not a ceiling


def test_metadata_and_build_requirement_are_consistent():
    """``license = "MIT"`` (an SPDX string) and ``license-files`` need setuptools >= 77."""
    project = PYPROJECT["project"]
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    assert (ROOT / "LICENSE").is_file()
    assert PYPROJECT["build-system"]["requires"] == ["setuptools>=77"]
    assert project["classifiers"] and project["keywords"]
    assert project["urls"]["Homepage"].startswith("https://github.com/")
    data = PYPROJECT["tool"]["setuptools"]["package-data"]["poise"]
    assert {"models/model.schema.json", "controller/config.schema.json", "examples/*.toml",
            "examples/*/*.toml"} <= set(data)


def test_the_continuum_benchmark_ships_in_the_package():
    """``poise bench vvl`` runs the packaged protocol (an installed wheel has no bench/)."""
    from poise.benchmarks.scripts import load

    assert load("vvl").__name__ == "poise.benchmarks.vvl"


def test_output_to_a_closed_pipe_ends_quietly_as_sigpipe_would():
    """``poise model list | head -0``: the reader is gone before the first line. The command
    ends with 141 (128 + SIGPIPE, what ``cat`` reports there) and says nothing on stderr,
    not a BrokenPipeError traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # closed before the command writes anything: every write fails
    try:
        out = subprocess.run([sys.executable, "-m", "poise", "model", "list"],
                             stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120,
                             check=False)
    finally:
        os.close(write_end)
    assert out.returncode == 141, out.stderr
    assert out.stderr == ""
