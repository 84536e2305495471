"""What ``poise run`` and ``poise warmup`` show while the kernels compile.

A first start compiles the model's kernels with Numba (about 1–2 min on the 2-core reference
machine); later starts load them from Numba's cache in about a second. The controller reports
each step of its warm-up (:class:`poise.kernels.warmup.KernelProgress`); :class:`CompileView`
turns that into, on stderr:

* a line at once saying that a first start compiles, for about how long, and that
  ``poise warmup`` does it ahead of time;
* on a terminal a bar (:mod:`poise.progress`: the step running, its number, the time so far);
  piped or redirected, one line per step instead (a CI log, ``docker build``);
* a last line with the time it took and where the cache is.

A start from the cache shows nothing (``poise warmup`` says one line per model), and
``--quiet`` nothing at all. Stdout is never written (``--json`` output stays clean).
"""

from __future__ import annotations

import sys
import threading
from typing import IO, TYPE_CHECKING

from poise.progress import progress_bar, shows_bar

if TYPE_CHECKING:  # the view is made before the kernels (numba) are imported
    from poise.kernels.warmup import KernelProgress

#: How long a first start compiles, as measured on the 2-core reference machine
#: (docs/kernels.md, "The cache").
FIRST_START = "about 1–2 min on a 2-core machine"
#: How often the bar is redrawn while one step compiles (its clock moves on) [s].
REDRAW = 1.0


class CompileView:
    """The progress callback of a warm-up (:class:`KernelProgress`), drawn on ``stream``.

    Args:
        prog: the command, first on each line (``poise run``).
        quiet: ``--quiet``: show nothing.
        every_model: also say a line for each model loaded from the cache (``poise
            warmup``); otherwise a start from the cache shows nothing.
        hint: name ``poise warmup`` in the first line (``poise run``).
        stream: where to write (default stderr).

    Call :meth:`close` when the warm-up is over or abandoned (a bar is cleared). Safe to call
    from another thread than the one that made it (``poise run``: the thread reading the
    real-time process), one call at a time.
    """

    def __init__(self, prog: str, *, quiet: bool = False, every_model: bool = False,
                 hint: bool = True, stream: IO[str] | None = None) -> None:
        self.prog, self.quiet, self.every_model, self.hint = prog, quiet, every_model, hint
        self.stream = sys.stderr if stream is None else stream
        self._bar = None
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def __call__(self, p: KernelProgress) -> None:
        if self.quiet or (p.cached and not self.every_model):
            return
        with self._lock:
            if p.done == 0:
                self._begin(p)
            if p.done < p.total:
                self._step(p)
            else:
                self._end(p)

    def close(self) -> None:
        """Clear the bar, if one is drawn (a warm-up that stopped half-way)."""
        with self._lock:
            self._close_bar()

    # -- the three moments --------------------------------------------------------------

    def _begin(self, p: KernelProgress) -> None:
        self._close_bar()
        if not p.cached:
            ahead = "; 'poise warmup' compiles them ahead of time" if self.hint else ""
            self._say(f"compiling the kernels for {p.model} (first start only, "
                      f"{FIRST_START}){ahead}")
        if shows_bar(self.stream):
            verb = "loading" if p.cached else "compiling"
            self._bar = progress_bar(p.total, f"{verb} {p.model}", unit="kernel",
                                     stream=self.stream)
            self._stop.clear()
            threading.Thread(target=self._redraw, args=(self._bar,), name="poise-compile-bar",
                             daemon=True).start()

    def _step(self, p: KernelProgress) -> None:
        if self._bar is not None:
            self._bar.update(p.done - self._bar.n)
            self._bar.set_postfix_str(p.name)
        elif not p.cached:
            self._say(f"compiling {p.done + 1}/{p.total}: {p.name} ({p.seconds:.0f} s so far)")

    def _end(self, p: KernelProgress) -> None:
        self._close_bar()
        if not p.cached:
            self._say(f"kernels for {p.model} compiled in {p.seconds:.0f} s and cached in "
                      f"{p.cache_dir}: later starts load them in about a second")
        else:
            self._say(f"kernels for {p.model} loaded from the cache in {p.seconds:.1f} s "
                      f"({p.cache_dir})")

    # -- output -------------------------------------------------------------------------

    def _say(self, text: str) -> None:
        print(f"{self.prog}: {text}", file=self.stream, flush=True)

    def _close_bar(self) -> None:
        if self._bar is not None:
            self._stop.set()
            self._bar.close()
            self._bar = None

    def _redraw(self, bar) -> None:  # type: ignore[no-untyped-def]
        """Redraw ``bar`` every :data:`REDRAW` s until it is closed: its clock moves on
        while one step compiles for tens of seconds."""
        while not self._stop.wait(REDRAW):
            with self._lock:
                if bar is not self._bar:
                    return
                bar.refresh()


__all__ = ["FIRST_START", "CompileView"]
