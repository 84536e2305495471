"""The JSON Schema of model files: generated from the declarations the loader validates
against, shipped with the package, and in agreement with ``load_model`` key by key."""

from __future__ import annotations

import copy
import json
import tomllib

import pytest

from poise.cli import main
from poise.models import ModelError, list_models, model_from_dict
from poise.models.registry import DATA_DIR, builtin_path
from poise.models.schema import SCHEMA_FILE, family_keys, model_schema, schema_text

jsonschema = pytest.importorskip("jsonschema")
VALIDATOR = jsonschema.Draft4Validator(model_schema())


def _toml(name: str) -> dict:
    with builtin_path(name).open("rb") as f:
        return tomllib.load(f)


def test_the_schema_is_valid_draft_4_and_the_shipped_copy_is_current():
    jsonschema.Draft4Validator.check_schema(model_schema())
    assert SCHEMA_FILE.read_text(encoding="utf-8") == schema_text(), (
        "regenerate: poise model schema --out src/poise/models/model.schema.json")


def test_cli_prints_the_schema(capsys, tmp_path):
    assert main(["model", "schema"]) == 0
    assert json.loads(capsys.readouterr().out) == model_schema()
    assert main(["model", "schema", "--out", str(tmp_path / "s.json")]) == 0
    assert (tmp_path / "s.json").read_text(encoding="utf-8") == schema_text()


@pytest.mark.parametrize("name", list_models())
def test_every_shipped_model_file_validates_against_the_schema(name):
    errors = [e.message for e in VALIDATOR.iter_errors(_toml(name))]
    assert errors == []


@pytest.mark.parametrize("name", ["double_pendulum", "soft_arm_stiff", "panda", "cc3d_3"])
def test_show_json_output_and_a_calibration_file_validate(name, capsys):
    assert main(["model", "show", name, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert list(VALIDATOR.iter_errors(shown)) == []
    calibrated = {**shown, "calibration": {"parameters": {}}, "$schema": "./model.schema.json"}
    assert list(VALIDATOR.iter_errors(calibrated)) == []
    model_from_dict(calibrated, "calibrated.json")  # the loader ignores the same keys


def _set(data: dict, path: tuple, value) -> dict:
    out = copy.deepcopy(data)
    target = out
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return out


_DELETE = object()


@pytest.mark.parametrize(("name", "path", "value"), [
    ("double_pendulum", ("bodies", 1, "mass"), -1.0),            # > 0
    ("double_pendulum", ("bodies", 0, "stifness"), 2.0),         # unknown key
    ("double_pendulum", ("bodies", 0, "sign"), 2),               # 1 or -1
    ("double_pendulum", ("gravity",), -9.81),                    # >= 0
    ("double_pendulum", ("zero_direction",), "sideways"),        # a name or an angle
    ("double_pendulum", ("task", "kind"), "tip_z"),              # one of the task kinds
    ("double_pendulum", ("bodies", 0, "length"), 1e9),           # |x| <= 1e6 (SI units)
    ("double_pendulum", ("actuation", "m"), 0),                  # >= 1
    ("double_pendulum", ("bodies", 0, "length"), _DELETE),       # required
    ("soft_arm_stiff", ("segments", 0, "stiffness"), -1.0),      # >= 0
    ("soft_arm_stiff", ("mass_points_per_segment",), 2.5),       # an integer
    ("panda", ("convention",), "standard"),                      # only "modified"
    ("panda", ("joints", 2, "mass"), 1.0),                       # unknown key
    ("cc3d_2", ("lengths",), [1.0, -1.0]),                       # every entry > 0
    ("cc3d_2", ("family",), "hexapod"),                          # a known family
])
def test_a_value_the_schema_refuses_the_loader_refuses_too(name, path, value):
    bad = _set(_toml(name), path, value)
    assert list(VALIDATOR.iter_errors(bad)), "the schema accepted it"
    with pytest.raises(ModelError):
        model_from_dict(bad, "bad.toml")


def test_every_declared_key_is_in_the_schema_with_its_description():
    branches = {b["properties"]["family"]["enum"][0]: b for b in model_schema()["oneOf"]}
    for family, keys in family_keys().items():
        props = branches[family]["properties"]
        assert set(keys) <= set(props)
        assert all(props[k]["description"] == keys[k].doc for k in keys)
        assert set(branches[family]["required"]) == {k for k, v in keys.items() if v.required}


def test_every_model_file_in_the_package_is_a_builtin():
    assert sorted(p.stem for p in DATA_DIR.glob("*.toml")) == list_models()
