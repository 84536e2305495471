"""The JSON Schema of run configurations, generated from the declarations the loader reads by.

Every table's keys are the :class:`~poise.models.spec.Key` declarations of
:data:`poise.controller.config_tables.TABLE_KEYS` (their dataclass fields, ``MQTT_KEYS``,
``SERVO_KEYS``), turned into a schema by the same functions as the model files'
(:func:`poise.models.schema.key_schema`) with the conventions of a run configuration
(:mod:`poise.models.settings`): no overall magnitude bound on numbers, non-empty strings,
a bare number for a vector, an array of tables that may be empty. So an editor (Taplo / Even
Better TOML) completes and checks exactly the keys, types, ranges, defaults and descriptions
``load_config`` accepts. Rules across keys (a gain ``<= loop.rate``, ``sensor_fault >=
sensor_hold``, servos only on a Dynamixel bus, the broker URL's form, the characters of
``robot_id``) are the validator's alone.

Draft 4, as for model files (the draft Taplo implements). A copy ships with the package
(:data:`SCHEMA_FILE`; ``poise example schema`` prints it); a test keeps it equal to
:func:`config_schema`.
"""

from __future__ import annotations

import json
import pathlib
import typing
from typing import Any

from poise.controller.config_spec import MQTT_DOC
from poise.controller.config_tables import TABLE_KEYS, Config
from poise.models.schema import DRAFT
from poise.models.schema import key_schema as model_key_schema
from poise.models.settings import may_be_empty
from poise.models.spec import Key, Table

#: The copy shipped as package data.
SCHEMA_FILE = pathlib.Path(__file__).parent / "config.schema.json"
#: Where the shipped copy is published (for ``#:schema`` directives that use a URL).
SCHEMA_URL = ("https://raw.githubusercontent.com/poise-robotics/poise/main/src/poise/controller/"
              "config.schema.json")


def key_schema(key: Key) -> dict[str, Any]:
    """The schema of one key's value, with the run configuration's conventions."""
    if key.kind == "tables":  # may be empty (the default), each item by the same conventions
        out: dict[str, Any] = {"type": "array", "items": table_schema(key.table or {}),
                               "description": key.doc}
        if key.default is not None:
            out["default"] = key.default
        return out
    out = model_key_schema(key, magnitude=None)
    if key.kind == "number" and key.choices:  # a number, or one of the declared words
        number = {k: v for k, v in out.items() if k not in ("description", "default")}
        out = {"anyOf": [number, {"type": "string", "enum": list(key.choices)}],
               **{k: v for k, v in out.items() if k in ("description", "default")}}
    if key.kind == "string" and not key.choices and not may_be_empty(key):
        out["minLength"] = 1
    if key.kind == "vector":  # a bare number is a list of one
        array = {k: v for k, v in out.items() if k not in ("description", "default")}
        array["minItems"] = 1
        out = {"anyOf": [array, dict(out["items"])],
               **{k: v for k, v in out.items() if k in ("description", "default")}}
    return out


def table_schema(keys: Table) -> dict[str, Any]:
    """A table: its declared keys, the required ones, and nothing else."""
    out: dict[str, Any] = {
        "type": "object",
        "properties": {name: key_schema(key) for name, key in keys.items()},
        "additionalProperties": False,
    }
    required = [name for name, key in keys.items() if key.required]
    if required:
        out["required"] = required
    return out


def _table_doc(name: str) -> str:
    """A table's description: its dataclass's docstring (``[mqtt]``: :data:`MQTT_DOC`)."""
    if name == "mqtt":
        return MQTT_DOC
    doc = typing.get_type_hints(Config)[name].__doc__ or ""
    return " ".join(doc.replace("``", "").split())


def config_schema() -> dict[str, Any]:
    """The JSON Schema of a run configuration (the TOML file of ``poise run --config``)."""
    return {
        "$schema": DRAFT,
        "id": SCHEMA_URL,
        "title": "poise run configuration",
        "description": "A run configuration of the poise controller (docs/config.md, "
                       "docs/controller.md): every table and key optional, defaults = the "
                       "`poise run` demo. SI units unless a key says otherwise.",
        "type": "object",
        "properties": {name: {**table_schema(keys), "description": _table_doc(name)}
                       for name, keys in TABLE_KEYS.items()},
        "additionalProperties": False,
    }


def schema_text() -> str:
    """:func:`config_schema` as the text of :data:`SCHEMA_FILE`."""
    return json.dumps(config_schema(), indent=2, ensure_ascii=False) + "\n"


__all__ = ["SCHEMA_FILE", "SCHEMA_URL", "config_schema", "key_schema", "schema_text",
           "table_schema"]
