"""The controller service's former home: :class:`Controller` now lives in
:mod:`poise.controller.service` (with its cycle, :mod:`poise.controller.cycle`, and its
pacing, :mod:`poise.controller.pacing`); ``poise.controller.loop.Controller`` still names it.
"""

from __future__ import annotations

from poise.controller.pacing import SPIN, enter_realtime
from poise.controller.service import Controller, ControllerError

__all__ = ["SPIN", "Controller", "ControllerError", "enter_realtime"]
