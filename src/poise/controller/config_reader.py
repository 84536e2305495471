"""Reading one table of a run configuration by its declarations, with errors that name it.

:class:`TableReader` checks each value against its :class:`~poise.models.spec.Key` (kind,
range, choices) with the conventions of a run configuration (:mod:`poise.models.settings`);
every :class:`ConfigError` names the file (or the command-line flag the value came from), the
dotted key, the value and what is allowed, e.g. ``run.toml: loop.rate = 5000: must be in [10,
1000] Hz``.
"""

from __future__ import annotations

import contextlib
import math
import pathlib
from collections.abc import Mapping
from typing import Any

from poise.models.settings import may_be_empty
from poise.models.spec import Key, Table


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names file, key, value and rule."""


class TableReader:
    """One table read by its declaration; errors name the source, the dotted key and the rule.

    :meth:`get` checks a value against its :class:`~poise.models.spec.Key` (kind, range,
    choices) with the conventions of :mod:`poise.models.settings`; :meth:`value` hands
    out the raw value (or the declared default) for keys a rule of
    :mod:`poise.api.rules` checks.
    """

    def __init__(self, data: Any, name: str, source: str, origins: Mapping[str, str],
                 keys: Table) -> None:
        self.name, self.source, self.origins, self.keys = name, source, origins, keys
        if not isinstance(data, Mapping):
            raise ConfigError(f"{source}: [{name}] = {data!r}: must be a table")
        self.data = data

    def where(self, key: str) -> str:
        dotted = f"{self.name}.{key}"
        origin = self.origins.get(dotted)
        return f"{origin} ({dotted})" if origin else f"{self.source}: {dotted}"

    def fail(self, key: str, value: Any, rule: str) -> ConfigError:
        return ConfigError(f"{self.where(key)} = {value!r}: {rule}")

    def check_keys(self) -> None:
        """Refuse keys not declared (typos such as ``gama``) and missing required ones."""
        for key in self.data:
            if key not in self.keys:
                raise ConfigError(f"{self.where(key)}: unknown key; allowed keys in "
                                  f"[{self.name}] are {', '.join(self.keys)}")
        for key, spec in self.keys.items():
            if spec.required and key not in self.data:
                raise ConfigError(f"{self.where(key)}: missing; {key!r} ({spec.doc}) is "
                                  "required")

    def value(self, key: str) -> Any:
        """The raw value of ``key``, or its declared default."""
        return self.data.get(key, self.keys[key].default)

    def get(self, key: str) -> Any:
        """The value of ``key`` checked against its declaration (``None``: an optional key
        left out); a ``vector`` or ``strings`` value as a tuple, ``tables`` as a list of
        checked mappings."""
        spec = self.keys[key]
        value = self.value(key)
        if value is None and spec.default is None:
            return None
        kind = spec.kind
        if kind == "number":
            return self._number(key, value, spec)
        if kind == "integer":
            return self._integer(key, value, spec)
        if kind == "boolean":
            if not isinstance(value, bool):
                raise self.fail(key, value, "must be true or false")
            return value
        if kind == "string":
            return self._string(key, value, spec)
        if kind == "strings":
            if not isinstance(value, (list, tuple)) or not all(isinstance(v, str)
                                                               for v in value):
                raise self.fail(key, value, "must be a list of strings")
            return tuple(value)
        if kind == "vector":
            return self._vector(key, value, spec)
        if kind == "tables":
            return self._tables(key, value, spec)
        raise TypeError(f"{self.name}.{key}: kind {kind!r} is not read by get()")

    def path(self, key: str, base: pathlib.Path | None) -> str | None:
        """A file name (a ``string`` key), relative to the configuration file's folder
        unless it came from the command line."""
        value = self.get(key)
        if value is None:
            return None
        p = pathlib.Path(value)
        with contextlib.suppress(RuntimeError):  # "~user" of no such user: a plain file name
            p = p.expanduser()
        if not p.is_absolute() and base is not None and self.origins.get(
                f"{self.name}.{key}") is None:
            p = base / p  # relative to the configuration file
        return str(p)

    def _number(self, key: str, value: Any, spec: Key) -> float | str:
        """A finite number within the declared bounds, or one of the declared words."""
        if spec.choices and value in spec.choices:
            return value
        rule = "must be " + " ".join(["a finite number", *_bounds(spec)]) + "".join(
            f" or {c!r}" for c in spec.choices)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(key, value, rule)
        x = float(value)
        if not math.isfinite(x) or not _within(x, spec):
            raise self.fail(key, value, rule)
        return x

    def _integer(self, key: str, value: Any, spec: Key) -> int:
        if spec.choices:
            rule = f"must be one of {', '.join(map(str, spec.choices))}"
        elif spec.ge is not None and spec.le is not None:
            rule = f"must be an integer in [{_fmt(spec.ge)}, {_fmt(spec.le)}]"
        else:
            rule = " ".join(["must be an integer", *_bounds(spec)])
        if isinstance(value, bool) or not isinstance(value, int) or not _within(value, spec) \
                or (spec.choices and value not in spec.choices):
            raise self.fail(key, value, rule)
        return value

    def _string(self, key: str, value: Any, spec: Key) -> str:
        if not isinstance(value, str) or (not value and not may_be_empty(spec)) or (
                spec.choices and value not in spec.choices):
            rule = (f"must be one of {', '.join(map(repr, spec.choices))}" if spec.choices
                    else "must be a non-empty string")
            raise self.fail(key, value, rule)
        return value

    def _vector(self, key: str, value: Any, spec: Key) -> tuple[float, ...]:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = [value]  # a bare number: a list of one
        rule = " ".join(["must be a list of finite numbers", *_bounds(spec)])
        if not isinstance(value, (list, tuple)) or not value:
            raise self.fail(key, value, rule)
        for v in value:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                    or not _within(v, spec):
                raise self.fail(key, value, rule)
        return tuple(float(v) for v in value)

    def _tables(self, key: str, value: Any, spec: Key) -> list[Mapping[str, Any]]:
        if not isinstance(value, (list, tuple)) or not all(isinstance(x, Mapping)
                                                           for x in value):
            raise self.fail(key, value, f"must be an array of tables ([[{self.name}.{key}]])")
        for i, item in enumerate(value):
            row = TableReader(item, f"{self.name}.{key}[{i}]", self.source, self.origins,
                         spec.table or {})
            row.check_keys()
            for name in item:
                row.get(name)
        return list(value)


def _bounds(spec: Key) -> list[str]:
    """The declared bounds as words: ``["> 0", "<= 1000"]``."""
    out = []
    if spec.gt is not None:
        out.append(f"> {_fmt(spec.gt)}")
    if spec.ge is not None:
        out.append(f">= {_fmt(spec.ge)}")
    if spec.le is not None:
        out.append(f"<= {_fmt(spec.le)}")
    return out


def _fmt(x: float) -> str:
    """A bound as written: ``1048575``, ``0.1``, ``1e-06``."""
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def _within(x: float, spec: Key) -> bool:
    return not ((spec.gt is not None and not x > spec.gt)
                or (spec.ge is not None and not x >= spec.ge)
                or (spec.le is not None and not x <= spec.le))


__all__ = ["ConfigError", "TableReader"]
