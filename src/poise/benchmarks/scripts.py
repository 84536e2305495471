"""Benchmarks that may live outside the package: found by name for ``poise bench``.

:func:`load` prefers the packaged module ``poise.benchmarks.<name>`` (installed everywhere);
until a benchmark has moved there, it falls back to ``bench/<name>.py`` of the source checkout
this package runs from (an editable install). A benchmark module has ``main(argv) -> int``.
"""

from __future__ import annotations

import importlib
import importlib.util
import pathlib
import sys
from types import ModuleType

#: ``bench/`` of the source checkout (exists only when poise runs from one).
CHECKOUT_BENCH = pathlib.Path(__file__).resolve().parents[3] / "bench"


def load(name: str) -> ModuleType | None:
    """The benchmark module ``name`` (``"held_ik"``, ``"vvl"``), or None when neither the
    package nor a source checkout has it.

    A checkout file is imported once as ``poise_bench_<name>`` and kept in ``sys.modules``
    (process pools pickle its functions by that module name).
    """
    packaged = f"poise.benchmarks.{name}"
    try:
        return importlib.import_module(packaged)
    except ModuleNotFoundError as exc:
        if exc.name != packaged:
            raise
    module_name = f"poise_bench_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    file = CHECKOUT_BENCH / f"{name}.py"
    if not file.is_file():
        return None
    spec = importlib.util.spec_from_file_location(module_name, file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module


__all__ = ["CHECKOUT_BENCH", "load"]
