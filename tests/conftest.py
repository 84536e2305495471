"""Shared fixtures."""

from __future__ import annotations

import pytest

from poise.controller.simdevice import SimDevice


@pytest.fixture
def sim_device():
    """Start ``poise device sim`` subprocesses: ``sim_device(model, *flags, rate=500,
    params=None)`` returns a started :class:`~poise.controller.simdevice.SimDevice` (its
    ``path`` is a symlink to the current pty, stable across ``--disconnect-after``); all are
    stopped at the end of the test."""
    devices: list[SimDevice] = []

    def start(model: str, *flags: str, rate: float = 500, params: str | None = None
              ) -> SimDevice:
        device = SimDevice(model, rate=rate, params=params, extra=flags)
        devices.append(device)
        device.start()
        return device

    yield start
    for device in devices:
        device.stop()
