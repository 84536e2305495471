"""Shared fixtures."""

from __future__ import annotations

import pytest

from poise.controller.simdevice import SimDevice


@pytest.fixture(scope="session", autouse=True)
def compiled_kernels():
    """Compile (or load from Numba's cache) the kernels of both families once, before any
    test: the service and the simulator compile them at start-up, and on a fresh clone that
    takes a minute, which subprocess tests must not spend inside their own timeouts."""
    from poise.kernels import pack, warm_up
    from poise.models import load_model

    return [warm_up(pack(load_model(name))) for name in ("double_pendulum", "soft_arm_stiff")]


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
