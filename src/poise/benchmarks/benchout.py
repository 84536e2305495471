"""How every ``poise bench …`` command and ``bench/*.py`` script reports: a table on stdout,
the full result as JSON (to a file, or to stdout alone)."""

from __future__ import annotations

import argparse
import json
import pathlib
from typing import Any


def add_json_option(parser: argparse.ArgumentParser) -> None:
    """``--json [PATH]``: write JSON to PATH, or print only the JSON without PATH."""
    parser.add_argument("--json", nargs="?", const="-", metavar="PATH",
                        help="write JSON to PATH (or to stdout without PATH)")


def add_quiet_option(parser: argparse.ArgumentParser) -> None:
    """``--quiet``: no progress bar (there is none either when stderr is not a terminal)."""
    parser.add_argument("--quiet", action="store_true",
                        help="no progress bar (none either when stderr is not a terminal)")


def emit(result: dict[str, Any], table: str, json_target: str | pathlib.Path | None) -> int:
    """Print ``table`` and write ``result`` as JSON to ``json_target`` (``"-"``: print only
    the JSON; ``None``: no JSON). Returns the exit code (0)."""
    text = json.dumps(result, indent=1) + "\n"
    if json_target == "-":
        print(text, end="")
        return 0
    print(table)
    if json_target:
        path = pathlib.Path(json_target)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path}")
    return 0


def run_each(fn, jobs, workers: int = 1, progress=None) -> list:
    """``[fn(job) for job in jobs]``, in order, in ``workers`` processes when more than one
    (``fn`` and the jobs picklable), calling ``progress(1)`` after each."""
    import concurrent.futures

    out = []
    if workers > 1:
        with concurrent.futures.ProcessPoolExecutor(workers) as pool:
            for result in pool.map(fn, jobs):
                out.append(result)
                if progress is not None:
                    progress(1)
    else:
        for job in jobs:
            out.append(fn(job))
            if progress is not None:
                progress(1)
    return out

