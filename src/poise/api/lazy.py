"""Names of a package imported on first use (PEP 562), one helper for every package that
defers its heavy modules (importing ``poise.controller.config`` must not load the loop, Numba
and SciPy with it)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package``: each name of ``homes`` (name → the module
    that defines it) imported from its module at the first access; any other name an
    ``AttributeError``, as Python raises it."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(home), name)

    return __getattr__


__all__ = ["lazy_exports"]
