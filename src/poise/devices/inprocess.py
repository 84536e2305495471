"""An in-process plant as a :class:`~poise.devices.base.Device`, stepped in simulated time.

:class:`SimulatedDevice` wraps a :class:`~poise.sim.plant.SimPlant` (the simulator and sensor
models behind ``poise device sim``): each :meth:`~SimulatedDevice.read` advances the plant by
one period of *simulated* time and returns what its sensors report, so a loop that reads,
computes and writes runs as fast as the computer allows and gives the same result on a slow or
busy machine (deterministic for a given seed). Times in the samples are simulated seconds.

Tests and fast studies use it (:class:`poise.controller.simulate.SimulatedLoop`); the
real-time service uses the same plant behind a pty (``poise device sim``), or in its own process
as :class:`RealTimeSimulatedDevice` (``[device] port = "inprocess"``): the plant kept in step
with the wall clock, polled at the loop's deadlines (what the dashboard's tests and demo run).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

from poise.devices.base import DeviceError, DeviceInfo, Sample, Status
from poise.sim.sensors import STATUS_SATURATED


class SimulatedDevice:
    """The plant ``plant`` read ``rate`` times per simulated second (see the module docstring).

    Args:
        plant: a :class:`~poise.sim.plant.SimPlant` (``poise.sim.make_plant``).
        rate: samples per simulated second [Hz].
        name: what :meth:`describe` calls it.
    """

    def __init__(self, plant: Any, *, rate: float = 500.0,
                 name: str = "sim (in process)") -> None:
        if not rate > 0:
            raise DeviceError(f"rate = {rate} Hz: must be > 0")
        self.plant = plant
        self.period = 1.0 / float(rate)
        chans = list(plant.describe())
        kinds = [c["kind"] if isinstance(c, dict) else c.kind for c in chans]
        acts = [c for c, k in zip(chans, kinds, strict=True) if k == "actuator"]
        self._info = DeviceInfo(
            name=name, n_q=kinds.count("coordinate"), n_a=len(acts),
            qa_min=tuple(float(_get(c, "lower")) for c in acts),
            qa_max=tuple(float(_get(c, "upper")) for c in acts),
            rate_hz=float(rate), polled=False)
        self._armed = False
        self._estop = False
        self._seq = 0

    def describe(self) -> DeviceInfo:
        return self._info

    @property
    def connected(self) -> bool:
        return True

    def configure(self, rate_hz: float | None = None, watchdog_ms: float | None = None) -> None:
        """The sample rate [Hz] (simulated time); a plant in process has no watchdog."""
        if rate_hz is not None:
            self.period = 1.0 / float(rate_hz)

    def read(self, timeout: float | None = None) -> Sample:
        """Advance the plant by one period and return its sensors."""
        self.plant.step(self.period)
        return self.latest()

    def read_nowait(self) -> Sample | None:
        """Each read advances the plant: nothing is ever waiting (None)."""
        return None

    def latest(self) -> Sample:
        """The sensors now (the plant is not advanced)."""
        q, qa, tau, plant_status = self.plant.read_sensors()
        status = Status(0)
        if int(plant_status) & STATUS_SATURATED:  # as the firmware reports it
            status |= Status.SATURATED
        if self._armed:
            status |= Status.ARMED
        if self._estop:
            status |= Status.ESTOP
        self._seq += 1
        t = float(self.plant.time)
        return Sample(host_time=t, device_time_us=round(t * 1e6), q=tuple(q), qa=tuple(qa),
                      efforts=tuple(tau), status=int(status), seq=self._seq)

    def write(self, qa: Sequence[float], tau_ff: Sequence[float] | None = None) -> None:
        """The actuator setpoint (ignored while disarmed, as a device ignores it)."""
        if self._armed:
            self.plant.set_actuator_command([float(x) for x in qa],
                                            None if tau_ff is None else list(tau_ff))

    def arm(self, clear_estop: bool = False) -> None:
        """Actuators follow setpoints, starting at their measured positions (no jump)."""
        if self._estop and not clear_estop:
            raise DeviceError("e-stop latched: clear it first")
        self._estop = False
        _, qa, _, _ = self.plant.read_sensors()
        self.plant.set_actuator_command(list(qa), None)
        self.plant.set_mode("position")
        self._armed = True

    def disarm(self) -> None:
        """The actuators hold where they are (the virtual device's safe state)."""
        self._armed = False
        self.plant.set_mode("hold")

    def estop(self) -> None:
        self._estop = True
        self.disarm()

    def clear(self) -> None:
        self._estop = False

    def close(self) -> None:
        self.disarm()

    def stats(self) -> dict[str, object]:
        return {"simulated_time_s": float(self.plant.time), "samples": self._seq}


class RealTimeSimulatedDevice(SimulatedDevice):
    """The plant in real time: a polled device whose every poll (:meth:`latest`, :meth:`read`)
    first advances the plant, in whole periods, to the wall clock, and stamps the sample with
    the host clock (``time.perf_counter``) as a serial device's reader thread does.

    A controller paces it from its own clock (``polled``: host pacing). A poll after a long
    pause advances at most :data:`MAX_CATCH_UP` [s] of plant time; the rest is skipped.
    """

    MAX_CATCH_UP = 0.1

    def __init__(self, plant: Any, *, rate: float = 500.0,
                 name: str = "sim (in process, real time)") -> None:
        super().__init__(plant, rate=rate, name=name)
        self._info = dataclasses.replace(self._info, rate_hz=0.0, polled=True)
        self._wall = time.perf_counter()  # the wall-clock time the plant has reached [s]

    def read(self, timeout: float | None = None) -> Sample:
        """The sensors now (a poll: the plant is first brought up to the wall clock)."""
        return self.latest()

    def latest(self) -> Sample:
        """Advance the plant to the wall clock and return its sensors (host-clock time)."""
        now = time.perf_counter()
        steps = round((now - self._wall) / self.period)
        if steps * self.period > self.MAX_CATCH_UP:  # a long pause: skip, don't race
            steps = round(self.MAX_CATCH_UP / self.period)
            self._wall = now - steps * self.period
        for _ in range(max(steps, 0)):
            self.plant.step(self.period)
        self._wall += max(steps, 0) * self.period
        return super().latest()._replace(host_time=now)


def _get(channel: Any, key: str) -> Any:
    return channel[key] if isinstance(channel, dict) else getattr(channel, key)


__all__ = ["RealTimeSimulatedDevice", "SimulatedDevice"]
