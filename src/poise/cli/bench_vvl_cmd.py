"""``poise bench vvl``: the seed 001 III-B benchmark (Jacobian vs DLS vs VVL on cc3d_N).

Thin: the protocol, tables and figures live in ``bench/vvl.py`` of the source tree (the
benchmark is not part of the installed package); this command loads that file and runs it.
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import sys
from types import ModuleType

BENCH_FILE = pathlib.Path(__file__).resolve().parents[3] / "bench" / "vvl.py"


def _load() -> ModuleType | None:
    if not BENCH_FILE.is_file():
        return None
    spec = importlib.util.spec_from_file_location("poise_bench_vvl", BENCH_FILE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # needed for process pools (pickling of the job function)
    spec.loader.exec_module(module)
    return module


def register(commands: argparse._SubParsersAction, groups: dict) -> None:
    """Add ``poise bench vvl``."""
    parser = groups["bench"].add_parser(
        "vvl", help="continuum IK: Jacobian vs DLS vs VVL on cc3d_2…7 (seed 001 III-B)",
        description="Seed 001 III-B protocol. --quick: one group of 1,000 targets per N.")
    module = _load()
    if module is not None:
        module.add_arguments(parser)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    module = _load()
    if module is None:
        print(f"bench vvl: {BENCH_FILE} not found (run from a source checkout)", file=sys.stderr)
        return 2
    return module.run_cli(args)
