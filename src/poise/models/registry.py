"""Model files: loading, validation and the registry of built-in models.

A model file is a TOML table whose key ``family`` names the kinematic family; the family
class (``from_dict(data, source)`` / ``describe()``) reads the rest. Built-in models live
in ``poise/models/data/*.toml`` (file stem = model name; a file may add ``aliases``). A user
adds a robot by writing such a file and passing its path to :func:`load_model`.

Validation happens here, at the edge: a bad value raises :class:`ModelError` whose message
names the file, the key, the value and what is allowed, e.g.
``double_pendulum.toml: bodies[1].mass = -1.0: must be > 0``. The keys, their types, ranges
and defaults are declared once per family (:mod:`poise.models.spec`); :class:`Fields` checks
against those declarations, and :mod:`poise.models.schema` turns the same declarations into
the JSON Schema editors use.
"""

from __future__ import annotations

import functools
import importlib
import json
import math
import pathlib
import tomllib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from poise.models.base import FloatArray
from poise.models.spec import IGNORED, MAX_MAGNITUDE, Key, Table

#: family name → "module:Class", imported only when a model of that family is loaded.
FAMILIES: dict[str, str] = {
    "planar_tree": "poise.models.planar_tree:PlanarTree",
    "planar_pcc": "poise.models.planar_pcc:PlanarPCC",
    "dh_chain": "poise.models.dh:DHChain",
    "cc3d": "poise.models.cc3d:CC3D",
}

#: Top-level keys the loader strips before handing the data to the family class
#: (``poise model show --json`` writes derived quantities there; ``poise calibrate`` writes its
#: parameters, uncertainties and provenance under ``calibration``; an editor's ``$schema``).
IGNORED_KEYS = tuple(IGNORED)

DATA_DIR = pathlib.Path(__file__).parent / "data"

_MISSING: Any = object()


class ModelError(ValueError):
    """A model file or description that cannot be used; the message names file, key, value."""


# --------------------------------------------------------------------------- validation


class Fields:
    """Typed, validated access to one table of a model description.

    Every accessor raises :class:`ModelError` with ``"<source>: <prefix><key> = <value>:
    <what is allowed>"``. With ``keys`` (the table's declaration, :mod:`poise.models.spec`),
    :meth:`get` reads a key by its declaration and :meth:`check_keys` refuses undeclared keys.
    """

    def __init__(self, data: Any, source: str, prefix: str = "",
                 keys: Table | None = None) -> None:
        if not isinstance(data, Mapping):
            where = prefix.rstrip(".") or "<top level>"
            raise ModelError(f"{source}: {where} = {data!r}: must be a table")
        self.data = data
        self.source = source
        self.prefix = prefix
        self.keys = keys

    def error(self, key: str, value: Any, allowed: str) -> ModelError:
        """The error for ``key`` holding ``value`` (``allowed`` says what would be valid)."""
        return ModelError(f"{self.source}: {self.prefix}{key} = {value!r}: {allowed}")

    def missing(self, key: str, allowed: str) -> ModelError:
        return ModelError(f"{self.source}: {self.prefix}{key} is missing: {allowed} is required")

    def check_keys(self, allowed: Sequence[str] | None = None) -> None:
        """Refuse unknown keys (catches typos such as ``stifness``); ``allowed`` defaults to
        the declared keys."""
        if allowed is None:
            if self.keys is None:
                raise TypeError("check_keys() needs the allowed keys or a declared table")
            allowed = tuple(self.keys)
        for key in self.data:
            if key not in allowed:
                raise ModelError(
                    f"{self.source}: {self.prefix}{key}: unknown key; allowed keys are "
                    f"{', '.join(allowed)}"
                )

    def has(self, key: str) -> bool:
        return key in self.data

    def get(self, key: str, default: Any = _MISSING, *, size: int | None = None,
            shape: tuple[int, int] | None = None) -> Any:
        """The value of a declared key, checked against its :class:`~poise.models.spec.Key`.

        Args:
            key: a key of this table's declaration.
            default: the value when absent, for defaults computed from other keys; without
                it, the declared constant default applies (or the key is required).
            size: length of a vector whose length depends on the model (``m`` limits).
            shape: shape of a matrix (``(n, n)``).

        Returns:
            ``number``: float; ``integer``: int; ``string``/``direction``: as given (a
            direction may be a float angle); ``strings``: list; ``vector``/``matrix``: arrays;
            ``table``: :class:`Fields`; ``tables``: list of :class:`Fields`.
        """
        spec = self.declared(key)
        if default is _MISSING and not spec.required and spec.default is not None:
            default = spec.default
        kind = spec.kind
        if kind == "number":
            return self.number(key, default, gt=spec.gt, ge=spec.ge, finite=spec.finite)
        if kind == "integer":
            value = self.integer(key, default, ge=None if spec.ge is None else int(spec.ge))
            if spec.choices and value not in spec.choices:
                allowed = " or ".join(str(c) for c in spec.choices)
                raise self.error(key, value, f"must be {allowed} ({spec.doc})")
            return value
        if kind == "string":
            return self.string(key, default, choices=spec.choices)
        if kind == "strings":
            return self.strings(key, default)
        if kind == "vector":
            return self._bounded_vector(key, default, spec, size if size is not None
                                        else spec.size)
        if kind == "matrix":
            if shape is None:
                raise TypeError(f"{self.prefix}{key}: a matrix needs its shape")
            return self.matrix(key, default, shape=shape)
        if kind == "direction":
            value = self._get(key, default, "a direction")
            if isinstance(value, str):
                if value not in spec.choices:
                    raise self.error(key, value, f"must be one of "
                                     f"{', '.join(map(repr, spec.choices))} or an angle from +x "
                                     "in rad")
                return value
            return self.number(key, default)
        if kind == "table":
            value = self._get(key, default, "a table")
            return Fields(value, self.source, f"{self.prefix}{key}.", spec.table)
        if kind == "tables":
            return self.tables(key)
        raise TypeError(f"{self.prefix}{key}: kind {kind!r} is not read by get()")

    def declared(self, key: str) -> Key:
        """The declaration of ``key`` (a programming error when there is none)."""
        if self.keys is None or key not in self.keys:
            raise KeyError(f"{self.prefix}{key} is not a declared key of this table")
        return self.keys[key]

    def _bounded_vector(self, key: str, default: Any, spec: Key,
                        size: int | None) -> FloatArray:
        out = self.vector(key, default, size=size, finite=spec.finite)
        if spec.gt is not None or spec.ge is not None:
            finite = out[np.isfinite(out)]
            low = ((spec.gt is not None and np.any(finite <= spec.gt))
                   or (spec.ge is not None and np.any(finite < spec.ge)))
            if low:
                rule = _number_rule(spec.gt, spec.ge, True).removeprefix("must be ")
                raise self.error(key, out.tolist(), f"every entry must be {rule}")
        return out

    def _get(self, key: str, default: Any, allowed: str) -> Any:
        if key in self.data:
            return self.data[key]
        if default is _MISSING:
            raise self.missing(key, allowed)
        return default

    def number(
        self,
        key: str,
        default: Any = _MISSING,
        *,
        gt: float | None = None,
        ge: float | None = None,
        finite: bool = True,
    ) -> float:
        """A real number, optionally bounded below (``> gt`` or ``>= ge``)."""
        what = _number_rule(gt, ge, finite)
        value = self._get(key, default, what)
        return _check_number(value, gt, ge, finite, lambda: self.error(key, value, what))

    def integer(self, key: str, default: Any = _MISSING, *, ge: int | None = None) -> int:
        what = "an integer" + (f" >= {ge}" if ge is not None else "")
        value = self._get(key, default, what)
        if isinstance(value, bool) or not isinstance(value, int) or (ge is not None and value < ge):
            raise self.error(key, value, f"must be {what}")
        return value

    def string(self, key: str, default: Any = _MISSING, *, choices: Sequence[str] = ()) -> str:
        what = f"one of {', '.join(repr(c) for c in choices)}" if choices else "a string"
        value = self._get(key, default, what)
        if not isinstance(value, str) or (choices and value not in choices):
            raise self.error(key, value, f"must be {what}")
        return value

    def strings(self, key: str, default: Any = _MISSING) -> list[str]:
        value = self._get(key, default, "a list of strings")
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.error(key, value, "must be a list of strings")
        return list(value)

    def vector(
        self,
        key: str,
        default: Any = _MISSING,
        *,
        size: int | None = None,
        finite: bool = True,
    ) -> FloatArray:
        """A list of numbers (``None`` entries read as ±inf where ``finite`` is false)."""
        what = f"a list of {size if size is not None else 'some'} " + (
            "finite numbers" if finite else "numbers (inf or null allowed)")
        value = self._get(key, default, what)
        if not isinstance(value, (list, tuple)) or (size is not None and len(value) != size):
            raise self.error(key, value, f"must be {what}")
        out = np.empty(len(value))
        for i, v in enumerate(value):
            if v is None and not finite:
                out[i] = math.nan  # resolved to ±inf by the caller (lower / upper limit)
                continue
            out[i] = _check_number(v, None, None, finite,
                                   lambda v=v: self.error(key, value, f"must be {what}"))
        return out

    def matrix(self, key: str, default: Any = _MISSING, *, shape: tuple[int, int]) -> FloatArray:
        what = f"a {shape[0]} × {shape[1]} matrix (list of {shape[0]} rows of {shape[1]} numbers)"
        value = self._get(key, default, what)
        ok = isinstance(value, (list, tuple)) and len(value) == shape[0] and all(
            isinstance(r, (list, tuple)) and len(r) == shape[1] for r in value)
        if not ok:
            raise self.error(key, value, f"must be {what}")
        rows = [[_check_number(v, None, None, True,
                               lambda: self.error(key, value, f"must be {what}")) for v in r]
                for r in value]
        return np.array(rows, dtype=float).reshape(shape)

    def table(self, key: str, default: Any = _MISSING) -> Fields:
        value = self._get(key, default, "a table")
        keys = self.keys[key].table if self.keys is not None and key in self.keys else None
        return Fields(value, self.source, f"{self.prefix}{key}.", keys)

    def tables(self, key: str) -> list[Fields]:
        value = self._get(key, _MISSING, "a non-empty list of tables")
        if not isinstance(value, list) or not value:
            raise self.error(key, value, "must be a non-empty list of tables")
        keys = self.keys[key].table if self.keys is not None and key in self.keys else None
        return [Fields(v, self.source, f"{self.prefix}{key}[{i}].", keys)
                for i, v in enumerate(value)]


def _number_rule(gt: float | None, ge: float | None, finite: bool) -> str:
    if gt is not None:
        return f"must be > {gt:g}"
    if ge is not None:
        return f"must be >= {ge:g}"
    return "must be a finite number" if finite else "must be a number"


def _check_number(value: Any, gt: float | None, ge: float | None, finite: bool, err) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise err()
    x = float(value)
    if math.isnan(x) or (finite and math.isinf(x)):
        raise err()
    if math.isfinite(x) and abs(x) > MAX_MAGNITUDE:
        raise ModelError(f"{err()}: |value| must be <= {MAX_MAGNITUDE:g} (SI units)")
    if (gt is not None and not x > gt) or (ge is not None and not x >= ge):
        raise err()
    return x


def limits(fields: Fields, lo_key: str, hi_key: str, size: int) -> tuple[FloatArray, FloatArray]:
    """Lower/upper limit vectors (missing or ``null`` entries: unlimited); checks lo ≤ hi."""
    lo = fields.get(lo_key, [None] * size, size=size)
    hi = fields.get(hi_key, [None] * size, size=size)
    lo = np.where(np.isnan(lo), -np.inf, lo)
    hi = np.where(np.isnan(hi), np.inf, hi)
    if np.any(lo > hi):
        raise fields.error(hi_key, fields.data.get(hi_key), f"must be >= {lo_key} elementwise")
    return lo, hi


def limit_list(values: FloatArray) -> list[float | None]:
    """JSON-ready limits: infinite entries become ``None`` (read back as unlimited)."""
    return [None if math.isinf(v) else float(v) for v in values]


def actuation_matrix(fields: Fields, n: int) -> tuple[int, FloatArray, FloatArray]:
    """Read ``m`` and the change of coordinates ``C`` (n × n, invertible); returns m, C, C⁻¹."""
    m = fields.get("m")
    if m > n:
        raise fields.error("m", m, f"must be <= n = {n}")
    c = fields.get("C", shape=(n, n))
    cond = np.linalg.cond(c)
    if not np.isfinite(cond) or cond > 1e12:
        raise fields.error("C", c.tolist(), "must be invertible (condition number < 1e12)")
    return m, c, np.linalg.inv(c)


# --------------------------------------------------------------------------- registry


def _family_class(family: str, source: str) -> Any:
    spec = FAMILIES.get(family)
    if spec is None:
        raise ModelError(
            f"{source}: family = {family!r}: must be one of {', '.join(map(repr, FAMILIES))}")
    module_name, class_name = spec.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ModelError(f"{source}: family = {family!r}: its module {module_name} cannot be "
                         f"imported ({exc})") from exc
    return getattr(module, class_name)


def model_from_dict(data: Mapping[str, Any], source: str = "<dict>") -> Any:
    """Build a model from a description (the schema of the model files, see docs/models.md).

    Keys listed in :data:`IGNORED_KEYS` (``derived``) are dropped first, so the output of
    ``poise model show --json`` loads back.
    """
    fields = Fields(data, source)
    family = fields.string("family", choices=tuple(FAMILIES))
    clean = {k: v for k, v in data.items() if k not in IGNORED_KEYS}
    return _family_class(family, source).from_dict(clean, source)


def _read_toml(path: pathlib.Path) -> dict[str, Any]:
    """A model file: TOML, or JSON when the name ends in ``.json`` (``show --json`` output)."""
    try:
        with path.open("rb") as fh:
            if path.suffix == ".json":
                data = json.load(fh)
                if not isinstance(data, dict):
                    raise ModelError(f"{path.name}: must hold a JSON object (a table)")
                return data
            return tomllib.load(fh)
    except OSError as exc:
        raise ModelError(f"{path}: cannot be read ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ModelError(f"{path.name}: not valid TOML ({exc})") from None
    except json.JSONDecodeError as exc:
        raise ModelError(f"{path.name}: not valid JSON ({exc})") from None


@functools.lru_cache(maxsize=1)
def _index() -> dict[str, pathlib.Path]:
    """Built-in names and aliases → file (aliases are read from the files)."""
    index: dict[str, pathlib.Path] = {}
    for path in sorted(DATA_DIR.glob("*.toml")):
        index[path.stem] = path
    for path in sorted(DATA_DIR.glob("*.toml")):
        try:
            aliases = _read_toml(path).get("aliases", [])
        except ModelError:
            continue
        for alias in aliases if isinstance(aliases, list) else []:
            if isinstance(alias, str):
                index.setdefault(alias, path)
    return index


def list_models() -> list[str]:
    """Names of the built-in models (file stems, sorted; aliases not repeated)."""
    return sorted(p.stem for p in DATA_DIR.glob("*.toml"))


def model_aliases() -> dict[str, str]:
    """Alias → canonical built-in name."""
    return {k: p.stem for k, p in _index().items() if k != p.stem}


def builtin_path(name: str) -> pathlib.Path:
    """The file of a built-in model (by name or alias)."""
    try:
        return _index()[name]
    except KeyError:
        raise ModelError(f"model {name!r}: unknown; built-in models are "
                         f"{', '.join(sorted(_index()))}, or pass the path of a .toml file"
                         ) from None


def load_model(name_or_path: str | pathlib.Path, *, gravity: float | None = None) -> Any:
    """Load a built-in model by name (or alias) or a model file by path.

    Args:
        name_or_path: ``"double_pendulum"``, ``"soft_arm"`` … or a path to a ``.toml`` file
            (or a ``.json`` file such as the output of ``poise model show --json``).
        gravity: override the file's gravity magnitude [m/s²] (e.g. ``0.0``).

    Raises:
        ModelError: unknown name, unreadable or invalid file.
    """
    text = str(name_or_path)
    is_path = (isinstance(name_or_path, pathlib.Path) or text.endswith((".toml", ".json"))
               or "/" in text)
    path = pathlib.Path(text) if is_path else builtin_path(text)
    model = model_from_dict(_read_toml(path), source=path.name)
    if gravity is not None:
        g = float(gravity)
        if not math.isfinite(g) or g < 0:
            raise ModelError(f"{path.name}: gravity override = {gravity!r}: must be >= 0")
        model = model.with_gravity(g)
    return model


def model_summaries() -> list[dict[str, Any]]:
    """One row per built-in model: name, aliases, family, n, m, task_dim (or ``error``).

    A model whose family module fails to import (or whose file is invalid) is reported with
    its ``error`` instead of stopping the listing.
    """
    aliases = model_aliases()
    rows = []
    for name in list_models():
        path = DATA_DIR / f"{name}.toml"
        row: dict[str, Any] = {"name": name,
                               "aliases": sorted(a for a, c in aliases.items() if c == name)}
        try:
            data = _read_toml(path)
            row["family"] = data.get("family")
            model = model_from_dict(data, source=path.name)
            row.update(n=model.n, m=getattr(model, "m", None), task_dim=model.task_dim,
                       task_kind=model.task_kind)
        except Exception as exc:  # report, never crash the listing
            row["error"] = f"{type(exc).__name__}: {exc}"
        rows.append(row)
    return rows
