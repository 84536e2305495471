"""The package's layers (docs/architecture.md): nothing imports upward. The contract is
pyproject.toml's ``[tool.importlinter]``, checked here by import-linter on the real import
graph, so that CI fails on a new upward import; and the shared vocabulary (``poise.api``)
imports the standard library only."""

from __future__ import annotations

import pathlib
import sys

import grimp
from importlinter.cli import lint_imports

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_the_layers_contract_holds(monkeypatch):
    monkeypatch.chdir(ROOT)  # import-linter reads pyproject.toml from the working directory
    assert lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True) == 0


def test_the_shared_vocabulary_imports_the_standard_library_only():
    graph = grimp.build_graph("poise", include_external_packages=True)
    api = [m for m in graph.modules if m == "poise.api" or m.startswith("poise.api.")]
    assert len(api) >= 8, api
    outside = {(m, imported) for m in api
               for imported in graph.find_modules_directly_imported_by(m)
               if not imported.startswith("poise.api")
               and imported.split(".")[0] not in sys.stdlib_module_names}
    assert not outside, sorted(outside)
