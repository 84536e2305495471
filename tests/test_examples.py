"""The bundled run configurations: found by name from anywhere, listed, shown and copied."""

from __future__ import annotations

import json
import os

import pytest

from poise.cli import main
from poise.controller.config import load_config
from poise.examples import EXAMPLES_DIR, ExampleError, copy, names, path, resolve_config

REFERENCE = {"double_pendulum", "tendon_3link", "soft_arm_stiff", "soft_arm_soft", "dancer",
             "planar_2link"}


def test_every_reference_robot_has_a_bundled_example_inside_the_package():
    assert REFERENCE | {"dynamixel/tendon_arm"} <= set(names())
    assert all(path(n).is_relative_to(EXAMPLES_DIR) and path(n).is_file() for n in names())


def test_a_name_resolves_to_the_bundled_file_from_any_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bundled = EXAMPLES_DIR / "soft_arm_stiff.toml"
    for given in ("soft_arm_stiff", "soft_arm_stiff.toml", "examples/soft_arm_stiff.toml"):
        assert resolve_config(given) == bundled
    assert load_config(resolve_config("soft_arm_stiff")).model.name == "soft_arm_stiff"


def test_an_existing_file_wins_over_a_bundled_example_of_the_same_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    mine = tmp_path / "soft_arm_stiff.toml"
    mine.write_text("[model]\nname = 'double_pendulum'\n")
    assert resolve_config("soft_arm_stiff.toml") == mine.relative_to(tmp_path)
    assert resolve_config(mine) == mine


def test_an_unknown_name_lists_the_bundled_examples(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ExampleError, match=r"nope: no such file.*soft_arm_stiff"):
        resolve_config("nope")
    with pytest.raises(ExampleError, match="not a bundled example"):
        path("nope")


def test_poise_run_reports_an_unknown_config_as_bad_input(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--config", "no_such_example", "--no-mqtt", "--no-log"]) == 2
    assert "not a bundled example" in capsys.readouterr().err


def test_copy_writes_an_editable_file_and_refuses_to_overwrite(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    written = copy("dancer")
    assert written == written.__class__("dancer.toml")
    assert written.read_text() == path("dancer").read_text()
    with pytest.raises(ExampleError, match="exists; pass --force"):
        copy("dancer")
    (tmp_path / "sub").mkdir()
    assert copy("dynamixel/tendon_arm", tmp_path / "sub") == tmp_path / "sub" / "tendon_arm.toml"
    assert copy("dancer", force=True).is_file()


def test_cli_example_list_show_copy(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["example", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["name"] for r in rows} == set(names())
    assert all(r["description"] for r in rows)
    assert main(["example", "show", "soft_arm_stiff"]) == 0
    assert capsys.readouterr().out == path("soft_arm_stiff").read_text()
    assert main(["example", "show", "soft_arm_stiff", "--path"]) == 0
    assert os.path.samefile(capsys.readouterr().out.strip(), path("soft_arm_stiff"))
    assert main(["example", "copy", "planar_2link", "mine.toml"]) == 0
    assert "poise run --config mine.toml" in capsys.readouterr().out
    assert main(["example", "copy", "planar_2link", "mine.toml"]) == 2
    assert "exists" in capsys.readouterr().err
    assert main(["example", "show", "nope"]) == 2
    assert load_config(tmp_path / "mine.toml").model.name == "planar_2link"
