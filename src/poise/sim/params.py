"""The "physical" robot: a nominal model plus an optional parameter file that overrides it.

The parameter file has the schema ``poise model show NAME --json`` prints (dump it, edit numbers,
pass it back; TOML works too). It must describe the same kind of robot as the named model:
same family, same number of coordinates ``n`` and actuators ``m``. Everything else (masses,
lengths, stiffness, damping, gravity, even ``C``) may differ; :func:`differences` lists what does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from poise.models import load_model
from poise.models.base import MechanicalModel


def _flatten(value: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(value, Mapping):
        for key, item in value.items():
            _flatten(item, f"{prefix}.{key}" if prefix else str(key), out)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _flatten(item, f"{prefix}[{i}]", out)
    else:
        out[prefix] = value


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, int | float) and isinstance(b, int | float) \
            and not isinstance(a, bool) and not isinstance(b, bool):
        return a == b or (math.isnan(a) and math.isnan(b)) or \
            math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15)
    return a == b


def differences(nominal: MechanicalModel, physical: MechanicalModel) -> list[str]:
    """Parameters that differ, as ``"key: nominal → physical"`` (keys in the file schema)."""
    a: dict[str, Any] = {}
    b: dict[str, Any] = {}
    _flatten(nominal.describe(), "", a)
    _flatten(physical.describe(), "", b)
    out = []
    for key in sorted(set(a) | set(b), key=lambda k: (k not in a, k)):
        if key in ("name", "description") or key.startswith("aliases"):
            continue
        va, vb = a.get(key, "<absent>"), b.get(key, "<absent>")
        if not _same(va, vb):
            out.append(f"{key}: {va!r} → {vb!r}")
    return out


def load_physical(model_name: str, params_file: str | None = None
                  ) -> tuple[MechanicalModel, MechanicalModel, list[str]]:
    """``(nominal, physical, differences)`` for a model name and an optional parameter file.

    Raises:
        ValueError: (a :class:`~poise.models.ModelError` for unreadable or invalid files) when
            the file is not a mechanical model of the same family, ``n`` and ``m`` as
            ``model_name``; the message says what differs.
    """
    nominal = load_model(model_name)
    if not hasattr(nominal, "mass_matrix") or not hasattr(nominal, "m"):
        raise ValueError(f"model {model_name!r} has no dynamics (family "
                         f"{getattr(nominal, 'family', '?')!r}); the simulator needs a "
                         "planar_tree or planar_pcc model")
    if params_file is None:
        return nominal, nominal, []
    physical = load_model(params_file)
    problems = []
    for what, x, y in (("family", getattr(nominal, "family", None),
                        getattr(physical, "family", None)),
                       ("n (coordinates)", nominal.n, getattr(physical, "n", None)),
                       ("m (actuators)", nominal.m, getattr(physical, "m", None))):
        if x != y:
            problems.append(f"{what} is {y!r}, the model has {x!r}")
    if problems:
        raise ValueError(f"parameter file {params_file}: does not describe the robot "
                         f"{model_name!r}: {'; '.join(problems)}")
    return nominal, physical, differences(nominal, physical)


__all__ = ["differences", "load_physical"]
