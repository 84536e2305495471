"""Progress bars of long work (a calibration, a benchmark, a log export), with ``tqdm``.

One rule for every command: the bar goes to stderr, and only when stderr is a terminal and the
user did not ask for ``--quiet``. Piped or redirected output (a log file, CI, a test) gets no
bar at all, so stdout tables and JSON stay clean and nothing is written that only a terminal can
draw.

Library functions that take long accept ``progress: ProgressFn | None`` and call it with the
number of units just finished; the command makes the bar and passes ``bar.update``::

    with progress_bar(len(targets), "ik lm", unit="solve", quiet=args.quiet) as bar:
        report = run_ik_benchmark(model, ..., progress=bar.update)
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import IO, Any

from tqdm import tqdm

#: Called with the number of units of work just finished (≥ 1).
ProgressFn = Callable[[int], Any]


def shows_bar(stream: IO[str] | None = None, *, quiet: bool = False) -> bool:
    """Whether a bar is drawn on ``stream`` (default stderr): not quiet, and a terminal."""
    stream = sys.stderr if stream is None else stream
    if quiet or stream is None:
        return False
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def progress_bar(total: float | None, desc: str, *, unit: str = "it", quiet: bool = False,
                 stream: IO[str] | None = None) -> tqdm:
    """A ``tqdm`` bar on ``stream`` (default stderr), disabled unless :func:`shows_bar`.

    A disabled bar accepts every call (``update``, ``set_postfix_str``, ``close``) and draws
    nothing. The bar is cleared when closed (``leave=False``): the result printed after it is
    what stays on the screen.

    Args:
        total: units of work (``None``: unknown, a counter without a bar).
        desc: what is running, shown before the bar.
        unit: name of one unit (``"pose"``, ``"solve"``, ``"row"``).
        quiet: ``--quiet``: no bar.
        stream: where to draw (default ``sys.stderr``).
    """
    stream = sys.stderr if stream is None else stream
    return tqdm(total=total, desc=desc, unit=unit, file=stream, leave=False,
                disable=not shows_bar(stream, quiet=quiet), dynamic_ncols=True,
                mininterval=0.2)


__all__ = ["ProgressFn", "progress_bar", "shows_bar"]
