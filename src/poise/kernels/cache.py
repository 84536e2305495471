"""Keeping Numba's on-disk cache of the kernels in step with their source.

``numba.njit(cache=True)`` writes each compiled kernel next to its source
(``poise/kernels/__pycache__/*.nbi, *.nbc``; a user-wide cache directory when that is not
writable) and reloads it in the next process, which turns a compile of seconds into a load of
milliseconds. Numba invalidates a cached function only when *its own* source file changes, not
when a function it calls in another file does: after an edit of ``planar_pcc.py`` the cached
Algorithm-1 step in ``steps.py`` would still hold the old code. :func:`ensure_fresh` closes
that gap: it stores a hash of every kernel source file next to the cache and, when the hash
differs, deletes the package's cached kernels so that they are compiled again.

Compiled code outside this package that calls these kernels (``poise.ik.continuum_kernels``
calls :mod:`poise.kernels.linalg`) has the same gap: such a module calls
``ensure_fresh(dispatchers([its module]))`` right after its definitions, which keeps a stamp of
this package's sources next to *its* cache and drops its cached kernels when they change.

Whether a start will compile is known before it does: a run that prepared a model family's
kernels leaves a mark next to the cache (:func:`mark_prepared`, ``poise_prepared.<family>``,
holding the sources' stamp and the Numba and Python versions), so that ``poise run`` can say at
once that a first start compiles, and for about how long (:func:`prepared`).
"""

from __future__ import annotations

import contextlib
import hashlib
import pathlib
import sys
from collections.abc import Iterable
from types import ModuleType

import numba
from numba.core.dispatcher import Dispatcher

PACKAGE_DIR = pathlib.Path(__file__).parent
STAMP_NAME = "poise_kernels.stamp"
#: Prefix of the marks of prepared kernels (:func:`mark_prepared`), one file per key.
PREPARED_PREFIX = "poise_prepared."


def source_stamp() -> str:
    """SHA-256 of the kernel sources (every ``*.py`` of this package, by name)."""
    digest = hashlib.sha256()
    for path in sorted(PACKAGE_DIR.glob("*.py")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def dispatchers(modules: Iterable[ModuleType]) -> list[Dispatcher]:
    """The compiled functions defined in ``modules``."""
    out = []
    for module in modules:
        for value in vars(module).values():
            if isinstance(value, Dispatcher) and value.py_func.__module__ == module.__name__:
                out.append(value)
    return out


def cache_dirs(functions: Iterable[Dispatcher]) -> set[pathlib.Path]:
    """The directories Numba caches ``functions`` in."""
    return {pathlib.Path(f.stats.cache_path) for f in functions}


def ensure_fresh(functions: Iterable[Dispatcher]) -> list[pathlib.Path]:
    """Delete the cached kernels compiled from other sources; returns the files removed.

    Call before any kernel is called in this process (``poise.kernels`` does, on import).
    """
    functions = list(functions)
    stamp = source_stamp()
    stems = {f.py_func.__module__.rsplit(".", 1)[-1] for f in functions}
    removed: list[pathlib.Path] = []
    for directory in sorted(cache_dirs(functions)):
        removed += refresh(directory, stamp, stems)
    return removed


def refresh(directory: pathlib.Path, stamp: str, stems: set[str]) -> list[pathlib.Path]:
    """In one cache directory: if its stamp is not ``stamp``, delete the cache files
    (``<stem>.<function>-<line>.*.nbi|nbc``) of the modules ``stems`` and write ``stamp``."""
    stamp_file = directory / STAMP_NAME
    try:
        if stamp_file.read_text() == stamp:
            return []
    except OSError:
        pass
    removed = []
    for path in directory.glob("*.nb[ic]"):
        if path.name.split(".", 1)[0] in stems:
            path.unlink(missing_ok=True)
            removed.append(path)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        stamp_file.write_text(stamp)
    except OSError:
        pass  # a read-only cache: Numba does not write there either
    return removed


def prepared_stamp() -> str:
    """What a mark of prepared kernels holds: the kernel sources' stamp and the Numba and
    Python versions (a change of any of them makes Numba compile again)."""
    return (f"{source_stamp()} numba {numba.__version__} "
            f"python {sys.version_info[0]}.{sys.version_info[1]}")


def prepared(directory: pathlib.Path, key: str) -> bool:
    """Whether the kernels of ``key`` (a model family) were prepared in ``directory`` from
    the current sources (:func:`mark_prepared`): then they load from the cache instead of
    compiling."""
    try:
        return (directory / f"{PREPARED_PREFIX}{key}").read_text() == prepared_stamp()
    except OSError:
        return False


def mark_prepared(directory: pathlib.Path, key: str) -> None:
    """Note in ``directory`` that the kernels of ``key`` are compiled and cached (after a
    warm-up that completed); nothing when the directory is read-only (no cache there
    either)."""
    with contextlib.suppress(OSError):
        (directory / f"{PREPARED_PREFIX}{key}").write_text(prepared_stamp())
