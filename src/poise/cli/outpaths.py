"""Check output paths before long work: a command that measures for minutes must not discover at
the end that it cannot write its result.

:func:`check_output` refuses a path whose folder is missing, is a file, or is not writable, and
a path that is itself a folder. It creates nothing: folders are the user's to make.
"""

from __future__ import annotations

import os
import pathlib
import sys


def check_output(path: str | os.PathLike[str], option: str) -> str | None:
    """Why ``path`` (given as ``option``, e.g. ``--out``) cannot be written, or None if it can.

    The message names the option, the path and what is wrong with it.
    """
    p = pathlib.Path(path)
    where = f"{option} {os.fspath(path)}"
    if p.is_dir():
        return f"{where}: is a folder, not a file"
    parent = p.parent
    if not parent.is_dir():
        ancestor = parent
        while not ancestor.exists() and ancestor != ancestor.parent:
            ancestor = ancestor.parent
        if ancestor.exists() and not ancestor.is_dir():
            return (f"{where}: {os.fspath(ancestor)} is a file, not a folder; "
                    "give a path in an existing folder")
        return f"{where}: folder {os.fspath(parent)} does not exist; create it first"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{where}: folder {os.fspath(parent)} is not writable"
    if p.exists() and not os.access(p, os.W_OK):
        return f"{where}: the file exists and is not writable"
    return None


def check_image(path: str | os.PathLike[str], option: str) -> str | None:
    """Like :func:`check_output`, and the suffix must be a format matplotlib writes.

    Raises:
        poise.api.extras.MissingExtra: matplotlib is not installed (``poise[plot]``).
    """
    problem = check_output(path, option)
    if problem is not None:
        return problem
    from poise.api.extras import require

    require("plot", option)
    from matplotlib.backend_bases import FigureCanvasBase

    formats = FigureCanvasBase.get_supported_filetypes()
    suffix = pathlib.Path(path).suffix.lower().lstrip(".")
    if suffix not in formats:
        return (f"{option} {os.fspath(path)}: unknown image format {suffix!r}; use one of "
                + ", ".join(f".{f}" for f in sorted(formats)))
    return None


def print_or_write(text: str, out: str | os.PathLike[str] | None, command: str) -> int:
    """``text`` on stdout, or into the file ``out`` (``--out``); the exit code.

    Returns:
        0, or 2 with a message naming ``command`` and the path when it cannot be written.
    """
    if out is None:
        print(text, end="")
        return 0
    problem = check_output(out, "--out")
    if problem is None:
        try:
            pathlib.Path(out).write_text(text, encoding="utf-8")
        except OSError as exc:
            problem = f"--out {os.fspath(out)}: {exc.strerror}"
    if problem is not None:
        print(f"{command}: {problem}", file=sys.stderr)
        return 2
    print(f"wrote {os.fspath(out)}", file=sys.stderr)
    return 0


__all__ = ["check_image", "check_output", "print_or_write"]
