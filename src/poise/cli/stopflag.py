"""SIGINT/SIGTERM as a flag: the handler only assigns an attribute (no lock, no I/O), so it
cannot deadlock whatever the interrupted main thread holds; long-running commands poll it.

``poise`` installs it first thing (so a signal during start-up is not lost or turned into a
traceback); commands that want Ctrl-C to interrupt them as usual get the default handlers
back with :func:`restore`.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopFlag:
    """True once SIGINT or SIGTERM arrived; ``signal`` says which."""

    def __init__(self) -> None:
        self.signal: int | None = None

    def __call__(self, signum: int, _frame: FrameType | None) -> None:
        self.signal = signum

    def __bool__(self) -> bool:
        return self.signal is not None

    @property
    def name(self) -> str:
        return signal.Signals(self.signal).name if self.signal is not None else ""


_installed: StopFlag | None = None


def _main_thread() -> bool:
    """Signal handlers can only be set from the main thread (``poise`` called as a library
    from another thread leaves them alone)."""
    return threading.current_thread() is threading.main_thread()


def install() -> StopFlag:
    """Route SIGINT and SIGTERM to the process's one :class:`StopFlag` (idempotent; off the
    main thread a flag that no signal sets)."""
    global _installed
    if not _main_thread():
        return StopFlag()
    if _installed is None or signal.getsignal(signal.SIGINT) is not _installed:
        _installed = StopFlag()
        for sig in SIGNALS:
            signal.signal(sig, _installed)
    return _installed


def restore_quietly() -> None:
    """The default handlers again, dropping a signal that already came (it was handled)."""
    global _installed
    if not _main_thread():
        return
    _installed = None
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def restore() -> None:
    """The default handlers again (Ctrl-C raises KeyboardInterrupt, SIGTERM ends the
    process); a signal that already came is re-raised now."""
    flag = _installed
    restore_quietly()
    if flag:
        signal.raise_signal(flag.signal)  # type: ignore[arg-type]
