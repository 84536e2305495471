"""The JSON Schema of model files, generated from the families' key declarations.

The same :class:`~poise.models.spec.Key` tables that :class:`~poise.models.registry.Fields`
validates against become the schema, so editors (Taplo / Even Better TOML, VS Code for JSON)
complete and check exactly what ``load_model`` accepts, key by key. Cross-key rules (limits in
order, a parent before its child, an invertible ``n × n`` ``C``) are only in the validator.

The schema is JSON Schema draft 4, the draft Taplo implements: ``exclusiveMinimum`` is a
boolean beside ``minimum``, and a constant is a one-element ``enum``. A copy ships with the
package (:data:`SCHEMA_FILE`, ``poise model schema`` prints it); a test keeps it equal to
:func:`model_schema`.
"""

from __future__ import annotations

import importlib
import json
import math
import pathlib
from typing import Any

from poise.models.registry import FAMILIES
from poise.models.spec import IGNORED, MAX_MAGNITUDE, Key, Table

#: The copy shipped as package data.
SCHEMA_FILE = pathlib.Path(__file__).parent / "model.schema.json"
#: Where the shipped copy is published (for ``#:schema`` directives that use a URL).
SCHEMA_URL = ("https://raw.githubusercontent.com/poise-robotics/poise/main/src/poise/models/"
              "model.schema.json")
DRAFT = "http://json-schema.org/draft-04/schema#"


def family_keys() -> dict[str, Table]:
    """family name → the declaration of its top-level table (``KEYS`` of its module)."""
    out = {}
    for family, target in FAMILIES.items():
        module = importlib.import_module(target.split(":")[0])
        out[family] = module.KEYS
    return out


def _number(gt: float | None, ge: float | None, finite: bool, le: float | None = None,
            magnitude: float | None = MAX_MAGNITUDE) -> dict[str, Any]:
    """A number's bounds: the declared ones; a finite number without one is bounded by
    ``±magnitude`` (model files: :data:`MAX_MAGNITUDE`; ``None``: no such bound)."""
    out: dict[str, Any] = {"type": "number"}
    if gt is not None:
        out.update(minimum=gt, exclusiveMinimum=True)
    elif ge is not None:
        out["minimum"] = ge
    elif finite and magnitude is not None:
        out["minimum"] = -magnitude
    if le is not None:
        out["maximum"] = le
    elif finite and magnitude is not None:
        out["maximum"] = magnitude
    return out


def _default(value: Any) -> Any:
    """A default as JSON, or None when JSON cannot say it (±inf)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def key_schema(key: Key, magnitude: float | None = MAX_MAGNITUDE) -> dict[str, Any]:
    """The schema of one key's value (``magnitude``: the bound of finite numbers declared
    without one, see :func:`_number`)."""
    kind = key.kind
    if kind == "number":
        out = _number(key.gt, key.ge, key.finite, key.le, magnitude)
    elif kind == "integer":
        out = {"type": "integer"}
        if key.ge is not None:
            out["minimum"] = key.ge
        if key.le is not None:
            out["maximum"] = key.le
        if key.choices:
            out["enum"] = list(key.choices)
    elif kind == "boolean":
        out = {"type": "boolean"}
    elif kind == "string":
        out = {"type": "string"}
        if key.choices:
            out["enum"] = list(key.choices)
    elif kind == "strings":
        out = {"type": "array", "items": {"type": "string"}}
    elif kind == "vector":
        item = _number(key.gt, key.ge, key.finite, key.le, magnitude)
        if not key.finite:
            item["type"] = ["number", "null"]
        out = {"type": "array", "items": item}
        if key.size is not None:
            out.update(minItems=key.size, maxItems=key.size)
    elif kind == "matrix":
        out = {"type": "array", "minItems": 1,
               "items": {"type": "array", "minItems": 1,
                         "items": _number(None, None, True, magnitude=magnitude)}}
    elif kind == "direction":
        out = {"anyOf": [{"type": "string", "enum": list(key.choices)},
                         _number(None, None, True, magnitude=magnitude)]}
    elif kind == "table":
        out = table_schema(key.table or {}, magnitude)
    elif kind == "tables":
        out = {"type": "array", "minItems": 1, "items": table_schema(key.table or {}, magnitude)}
    elif kind == "ignored":
        out = {"type": "object"}
    else:  # pragma: no cover - a new kind must be added here
        raise ValueError(f"no schema for kind {kind!r}")
    out["description"] = key.doc
    default = _default(key.default)
    if default is not None and not key.required:
        out["default"] = default
    return out


def table_schema(keys: Table, magnitude: float | None = MAX_MAGNITUDE) -> dict[str, Any]:
    """A table: its declared keys, the required ones, and nothing else."""
    out: dict[str, Any] = {
        "type": "object",
        "properties": {name: key_schema(key, magnitude) for name, key in keys.items()},
        "additionalProperties": False,
    }
    required = [name for name, key in keys.items() if key.required]
    if required:
        out["required"] = required
    return out


def model_schema() -> dict[str, Any]:
    """The JSON Schema of a model file (TOML, or JSON with the same content): one branch per
    family, selected by ``family``."""
    branches = []
    for family, keys in family_keys().items():
        branch = table_schema({**keys, **IGNORED})
        branch["title"] = f'family = "{family}"'
        branches.append(branch)
    return {
        "$schema": DRAFT,
        "id": SCHEMA_URL,
        "title": "poise model file",
        "description": "A robot model for poise (docs/models.md): the key 'family' selects "
                       "the kinematic family and its keys. SI units, angles in rad.",
        "type": "object",
        "required": ["family"],
        "properties": {"family": {"type": "string", "enum": list(FAMILIES),
                                  "description": "kinematic family: selects the model class"}},
        "oneOf": branches,
    }


def schema_text() -> str:
    """:func:`model_schema` as the text of :data:`SCHEMA_FILE`."""
    return json.dumps(model_schema(), indent=2, ensure_ascii=False) + "\n"


__all__ = ["SCHEMA_FILE", "SCHEMA_URL", "family_keys", "key_schema", "model_schema",
           "schema_text", "table_schema"]
