"""Configuration keys declared on dataclass fields: :func:`setting` and its readers.

A table of a run configuration that becomes a frozen dataclass declares each key on the field
where its value lands, ``port: str = setting("sim", "string", "…")``: default, kind, range and
description in one line, stored as a :class:`~poise.models.spec.Key` in the field's metadata
(:data:`DECLARATION`). :func:`table_keys` reads a dataclass's declarations back. The tables
live in the layer that owns them (``[device]``: :mod:`poise.devices.config`, the others:
:mod:`poise.controller.config_tables`); so this module sits below all of them, beside
:class:`~poise.models.spec.Key`.

Two readers use the declarations, so they cannot disagree: the validator
(:func:`poise.controller.config.config_from_dict`) and the JSON Schema for editors
(:mod:`poise.controller.config_schema`). Both follow the conventions of a run configuration,
which differ from a model file's (:mod:`poise.models.spec`):

* numbers are finite, bounded only as declared (no overall magnitude bound); a number's
  ``choices`` are words allowed instead of it (a rate gain's ``"auto"``);
* a string is non-empty, unless ``""`` is its default (:func:`may_be_empty`);
* a ``vector`` may be written as a bare number, a list of one (``qa_rate = 0.5``);
* ``tables`` (an array of tables) may be empty: the default;
* a key whose default is ``None`` may be left out (TOML has no null): the dataclass says what
  its absence means.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from poise.models.spec import Key, Kind

#: Where :func:`setting` puts a field's declaration (``dataclasses.Field.metadata``).
DECLARATION = "poise.config.key"


def jsonable(value: Any) -> Any:
    """A default as TOML/JSON writes it: a tuple becomes a list."""
    return list(value) if isinstance(value, tuple) else value


def setting(default: Any, kind: Kind, doc: str, **rule: Any) -> Any:
    """A dataclass field that declares the configuration key of the same name.

    Args:
        default: the value when the key is absent (``None``: optional, its absence has a
            meaning the ``doc`` gives).
        kind: what the value is (:data:`poise.models.spec.Kind`).
        doc: what it means, with its unit (shown by editors).
        rule: ``gt``, ``ge``, ``le``, ``choices``, ``table`` … of :class:`Key`.
    """
    key = Key(kind, doc, default=jsonable(default), **rule)
    return dataclasses.field(default=default, metadata={DECLARATION: key})


def table_keys(cls: type) -> dict[str, Key]:
    """The declarations of a dataclass's fields (made with :func:`setting`), in field order."""
    return {f.name: f.metadata[DECLARATION] for f in dataclasses.fields(cls)
            if DECLARATION in f.metadata}


def field_default(cls: type, name: str) -> Any:
    """The default of the dataclass field ``name`` of ``cls``, as TOML writes it."""
    (f,) = (f for f in dataclasses.fields(cls) if f.name == name)
    if f.default is dataclasses.MISSING:
        raise TypeError(f"{cls.__name__}.{name} has no constant default")
    return jsonable(f.default)


def may_be_empty(key: Key) -> bool:
    """Whether ``""`` is a valid value of a ``string`` key: only where it is the default."""
    return key.default == ""


__all__ = ["DECLARATION", "field_default", "jsonable", "may_be_empty", "setting", "table_keys"]
