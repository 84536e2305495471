"""Start the dashboard: ``run(url, robot)`` opens the window and runs the Qt event loop."""

from __future__ import annotations

import pathlib
import sys

import pyqtgraph as pg
from PySide6 import QtCore, QtWidgets

from poise.gui.client import MqttLink
from poise.gui.window import DashboardWindow


def application() -> QtWidgets.QApplication:
    """The process's QApplication (created on first use) with the dashboard's plot options."""
    pg.setConfigOptions(antialias=False, foreground="k", background="w")
    app = QtWidgets.QApplication.instance()
    if app is None:
        app = QtWidgets.QApplication(sys.argv[:1])
        app.setApplicationName("poise dashboard")
    return app


def screenshot(widget: QtWidgets.QWidget, path: str | pathlib.Path) -> pathlib.Path:
    """Render ``widget`` (offscreen too) into a PNG file."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not widget.grab().save(str(path)):
        raise OSError(f"could not write {path}")
    return path


def run(url: str, robot: str | None = None, *, screenshot_path: str | None = None,
        after: float = 3.0, size: tuple[int, int] = (1500, 900)) -> int:
    """Open the dashboard on broker ``url``; with ``screenshot_path``, save a picture of the
    window after ``after`` seconds and exit. Returns the exit code."""
    app = application()
    link = MqttLink(url, robot)
    window = DashboardWindow(link, robot)
    window.resize(*size)
    link.start()
    window.show()
    if screenshot_path:
        def shoot() -> None:
            window.frame()
            out = screenshot(window, screenshot_path)
            print(f"wrote {out}")
            window.close()
            app.quit()

        QtCore.QTimer.singleShot(int(after * 1000), shoot)
    code = app.exec()
    window.close()
    return int(code)
