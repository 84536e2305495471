"""The optional parts of poise (``pip install 'poise[EXTRA]'``) and the one check that needs them.

The core (``poise run``, ``solve``, ``calibrate``, ``device``, ``log info|export``) runs on a
headless robot computer with no Qt and no matplotlib. Everything else is an extra, declared in
``pyproject.toml`` and named here, so that a command whose extra is missing says which
``pip install`` to run instead of failing with a bare ``ModuleNotFoundError``::

    from poise.api.extras import require
    require("plot", "poise log plot")   # raises MissingExtra naming pip install 'poise[plot]'
"""

from __future__ import annotations

import importlib

#: extra → the top-level modules it provides (the keys are the extras of pyproject.toml).
EXTRAS: dict[str, tuple[str, ...]] = {
    "gui": ("PySide6", "pyqtgraph"),
    "plot": ("matplotlib",),
    "parquet": ("pyarrow",),
    "dynamixel": ("dynamixel_sdk",),
    "foxglove": ("foxglove",),
}


class MissingExtra(ImportError):
    """A feature needs an optional dependency that is not installed (or cannot be imported).

    The message names the feature, the missing module and the command that installs it.
    """

    def __init__(self, extra: str, feature: str, module: str, reason: str) -> None:
        self.extra = extra
        self.feature = feature
        super().__init__(
            f"{feature} needs {module}, which cannot be imported ({reason}); install it "
            f"with: pip install 'poise[{extra}]'", name=module)


def install_hint(extra: str) -> str:
    """``pip install 'poise[EXTRA]'`` for one of :data:`EXTRAS`."""
    if extra not in EXTRAS:
        raise ValueError(f"unknown extra {extra!r}; the extras are {', '.join(EXTRAS)}")
    return f"pip install 'poise[{extra}]'"


def require(extra: str, feature: str) -> None:
    """Import the modules of ``extra``, or raise :class:`MissingExtra` for ``feature``.

    Call it before long work (a calibration that ends in a figure checks ``plot`` first).

    Args:
        extra: a key of :data:`EXTRAS` (``"gui"``, ``"plot"`` …).
        feature: what needs it, as the user typed it (``"poise dashboard"``, ``"--report"``).

    Raises:
        MissingExtra: a module of the extra cannot be imported.
    """
    install_hint(extra)  # validates the name
    for module in EXTRAS[extra]:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise MissingExtra(extra, feature, module, str(exc) or type(exc).__name__) \
                from exc


__all__ = ["EXTRAS", "MissingExtra", "install_hint", "require"]
