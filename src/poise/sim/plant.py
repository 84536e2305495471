"""The simulated device: a :class:`Simulator` behind the ``Plant`` protocol of
:mod:`poise.firmware_bridge.plant` (implemented structurally: ``sim`` sits below
``firmware_bridge`` and does not import it).

Channels: the ``n`` coordinates (joint encoders; named after the model's bodies, or
``theta1 …`` for a soft arm; unit ``rad``; limits ``q_min``/``q_max`` with ±1e9 for unlimited),
then the ``m`` actuators (named ``tendon1 …`` with unit ``m`` / effort ``N`` when the actuation
row has entries other than 0, ±1, i.e. pulley radii or tendon offsets; otherwise a motor on a
joint, named ``<joint>_m``, unit ``rad`` / effort ``N*m``; limits ``qa_min``/``qa_max``).

Status bits (``read_sensors``, defined in :mod:`poise.sim.sensors`): :data:`STATUS_SATURATED`
an effort at its limit, :data:`STATUS_QA_LIMIT` an actuator outside its limits,
:data:`STATUS_Q_LIMIT` a coordinate outside its limits, :data:`STATUS_NONFINITE` the state is not
finite (the simulation blew up).

A compiled simulator (:attr:`Simulator.compiled <poise.sim.Simulator.compiled>`) also reads its
sensors compiled (:func:`poise.sim.compiled.readout`); otherwise the numpy
:class:`~poise.sim.Sensors` methods are used. Both take the noise from the same seeded stream.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from poise.models.base import FloatArray, MechanicalModel
from poise.sim.actuators import MODES, ActuatorGains
from poise.sim.imperfections import PlantEffects, read_effects
from poise.sim.params import load_physical
from poise.sim.sensors import (
    SATURATION_TOL,
    STATUS_NONFINITE,
    STATUS_Q_LIMIT,
    STATUS_QA_LIMIT,
    STATUS_SATURATED,
    SensorConfig,
    Sensors,
)
from poise.sim.simulator import DEFAULT_RATE, Simulator

#: Stand-in for an infinite limit on the wire [channel unit].
UNLIMITED = 1e9


@dataclass(frozen=True, slots=True)
class SimChannel:
    """One channel (the ``ChannelLike`` shape of :mod:`poise.firmware_bridge.plant`): the one
    concrete channel description, for the simulator, hardware drivers and tests alike."""

    name: str
    kind: str
    unit: str
    lower: float
    upper: float
    effort_unit: str = ""
    effort_limit: float = 0.0


def _limit(x: float) -> float:
    return float(np.clip(x, -UNLIMITED, UNLIMITED))


def _short(name: str, size: int = 16) -> str:
    raw = name.encode("utf-8")[:size]
    return raw.decode("utf-8", errors="ignore")


def coordinate_names(model: MechanicalModel) -> list[str]:
    """Names of the coordinates: body names (planar trees) or ``theta1 …``."""
    spec = getattr(model, "spec", None)
    bodies = getattr(spec, "bodies", None)
    if bodies is not None and len(bodies) == model.n:
        return [_short(b.name) for b in bodies]
    return [f"theta{i + 1}" for i in range(model.n)]


def actuator_is_motor(model: MechanicalModel, j: int) -> bool:
    """Row j of ``A`` holds only 0 and ±1: a motor on joint coordinates (rad, N·m)."""
    row = np.asarray(model.C[j], dtype=float)
    return bool(np.all(np.isin(np.abs(row), (0.0, 1.0))))


def channels(model: MechanicalModel, effort_limit: FloatArray) -> list[SimChannel]:
    """The channel description of a simulated robot (coordinates, then actuators)."""
    names = coordinate_names(model)
    out = [SimChannel(names[i], "coordinate", "rad", _limit(model.q_min[i]),
                      _limit(model.q_max[i])) for i in range(model.n)]
    for j in range(model.m):
        if actuator_is_motor(model, j):
            joint = int(np.argmax(np.abs(model.C[j])))
            name, unit, effort_unit = _short(f"{names[joint][:14]}_m"), "rad", "N*m"
        else:
            name, unit, effort_unit = f"tendon{j + 1}", "m", "N"
        out.append(SimChannel(name, "actuator", unit, _limit(model.qa_min[j]),
                              _limit(model.qa_max[j]), effort_unit, float(effort_limit[j])))
    return out


class SimPlant:
    """A simulated robot as a device endpoint drives it (the ``Plant`` protocol).

    Attributes:
        sim: the :class:`Simulator` (true state, gains, integrator).
        nominal: the named model; ``physical``: the simulated one (from the parameter file).
        differences: parameters in which ``physical`` differs from ``nominal``.
        sensors: the sensor models (noise generator seeded).
    """

    def __init__(self, sim: Simulator, sensors: Sensors, *, nominal: MechanicalModel | None = None,
                 differences: Sequence[str] = (), sensor_delay: int = 0,
                 command_delay: int = 0) -> None:
        self.sim = sim
        self.physical = sim.model
        self.nominal = nominal if nominal is not None else sim.model
        self.differences = list(differences)
        self.sensors = sensors
        self._channels = tuple(channels(self.physical, sim.gains.effort_limit))
        n, m = self.physical.n, self.physical.m
        self._split = (n, n + m)
        self._readings = np.empty(n + 2 * m)
        #: Transport delays [cycles = calls of :meth:`step`] of the sensor readings and of the
        #: actuator commands (``[plant.delay]`` of the plant file).
        self.sensor_delay, self.command_delay = int(sensor_delay), int(command_delay)
        # the true states of the last sensor_delay + 1 steps, oldest first (q, q̇, τ)
        self._past: list[tuple[FloatArray, FloatArray, FloatArray]] = []
        self._pending: list[tuple[int, list[float], list[float] | None]] = []
        self._steps = 0
        if self.sensor_delay:
            self._remember()
        # the compiled readout with its matrix A and channel table, when the sim is compiled
        self._readout = None
        self._A: FloatArray | None = None
        self._sensor_table: FloatArray | None = None
        if sim.kernels is not None:
            from poise.sim.compiled import readout

            self._readout = readout
            self._A = sim.kernels.A
            self._sensor_table = sim.kernels.sensor_table(
                sensors, *(np.asarray(x, dtype=float) for x in (
                    self.physical.q_min, self.physical.q_max, self.physical.qa_min,
                    self.physical.qa_max, sim.gains.effort_limit)))

    # --------------------------------------------------------------- the Plant protocol

    @property
    def time(self) -> float:
        """Simulated time [s]."""
        return self.sim.time

    def describe(self) -> tuple[SimChannel, ...]:
        return self._channels

    def set_mode(self, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"mode {mode!r}: must be one of {', '.join(MODES)}")
        if self._pending:  # a mode acts now, with the newest command (no jump on arming)
            _, ref, ff = self._pending[-1]
            self._pending.clear()
            self.sim.command(ref, ff)
        self.sim.set_mode(mode)

    def set_actuator_command(self, qa_ref: Sequence[float],
                             tau_ff: Sequence[float] | None) -> None:
        if self.command_delay:
            self._pending.append((self._steps + self.command_delay, list(qa_ref),
                                  None if tau_ff is None else list(tau_ff)))
            return
        self.sim.command(qa_ref, tau_ff)

    def step(self, dt: float) -> None:
        if self._pending:
            while self._pending and self._pending[0][0] <= self._steps:
                _, ref, ff = self._pending.pop(0)
                self.sim.command(ref, ff)
        self._steps += 1
        if self.sim.finite:
            self.sim.step(dt)
        else:  # blown up: keep the clock running, report NaN (the endpoint faults)
            self.sim.time += float(dt)
        if self.sensor_delay:
            self._remember()

    def _remember(self) -> None:
        """Keep the true state for the delayed sensors (the last ``sensor_delay + 1``)."""
        sim = self.sim
        self._past.append((sim._q.copy(), sim._qd.copy(), sim._tau.copy()))
        if len(self._past) > self.sensor_delay + 1:
            self._past.pop(0)

    def _sensed(self) -> tuple[FloatArray, FloatArray, FloatArray]:
        """The true ``(q, q̇, τ)`` the sensors report now: ``sensor_delay`` steps old (the
        oldest kept at the start)."""
        if self.sensor_delay:
            return self._past[0]
        sim = self.sim
        return sim._q, sim._qd, sim._tau

    def read_sensors(self) -> tuple[list[float], list[float], list[float], int]:
        s = self.sensors
        if self._readout is not None:
            out = self._readings
            q, qd, tau = self._sensed()
            status = self._readout(self._A, q, qd, tau, s.normals(out.size),
                                   self._sensor_table, s.counts_per_rad, out)
            a, b = self._split
            return out[:a].tolist(), out[a:b].tolist(), out[b:].tolist(), status
        return self.read_sensors_reference()

    def read_sensors_reference(self) -> tuple[list[float], list[float], list[float], int]:
        """:meth:`read_sensors` in numpy (:class:`Sensors`; what the compiled readout is
        compared with)."""
        sim, s = self.sim, self.sensors
        q, qd, tau = self._sensed()
        qa = sim.dynamics.A @ q
        status = 0
        lim = sim.gains.effort_limit
        if np.any((lim > 0) & (np.abs(tau) >= lim * (1 - SATURATION_TOL))):
            status |= STATUS_SATURATED
        if np.any(qa < self.physical.qa_min) or np.any(qa > self.physical.qa_max):
            status |= STATUS_QA_LIMIT
        if np.any(q < self.physical.q_min) or np.any(q > self.physical.q_max):
            status |= STATUS_Q_LIMIT
        if not (np.all(np.isfinite(q)) and np.all(np.isfinite(qd))):
            status |= STATUS_NONFINITE
        return (s.encoders(q).tolist(), s.actuator_positions(qa).tolist(),
                s.efforts(tau).tolist(), status)

    # --------------------------------------------------------------- for tests and tools

    @property
    def q(self) -> FloatArray:
        """True configuration (n,) [rad]."""
        return self.sim.q

    @property
    def qd(self) -> FloatArray:
        """True velocity (n,) [rad/s]."""
        return self.sim.qd

    @property
    def mode(self) -> str:
        return self.sim.mode

    def __repr__(self) -> str:
        return (f"SimPlant({self.physical.name!r}, rate={self.sim.rate:g} Hz, "
                f"mode={self.mode!r}, t={self.time:.3f} s)")


def make_plant(model_name: str, params_file: str | None = None, *, seed: int | None = 0,
               noise: bool = True, rate: float = DEFAULT_RATE, integrator: str = "euler",
               sensors: SensorConfig | None = None, gains: ActuatorGains | None = None,
               q0: Sequence[float] | None = None, compiled: bool = True) -> SimPlant:
    """A simulated device for a built-in (or file) model, optionally with "physical" parameters.

    Args:
        model_name: built-in model name (or a model file path): the nominal robot.
        params_file: a model file in the schema of ``poise model show NAME --json`` (or TOML)
            describing the physical robot; same family, ``n`` and ``m`` as ``model_name``.
            Its optional ``[plant]`` table (else the model file's) adds the imperfections of
            :mod:`poise.sim.imperfections`: friction, dead band, tendons, hysteresis, sensor
            resolution and noise (over ``sensors``), transport delays.
        seed: seed of the sensor noise generator.
        noise: ``False``: no random sensor noise (quantisation and bias stay).
        rate: internal integration rate [Hz] (≥ 5 kHz).
        integrator: ``"euler"`` (semi-implicit, default) or ``"rk4"``.
        sensors: sensor noise/bias/resolution (default :class:`SensorConfig`).
        gains: actuator gains and effort limits (default: tuned on the physical robot).
        q0: initial configuration (default zeros).
        compiled: step and read with the compiled kernels when the family has them (compiled
            or loaded from Numba's cache here, before the first step); ``False``: numpy.

    Raises:
        ValueError: unknown model, invalid file, or a file that does not match the model.
    """
    nominal, physical, diff = load_physical(model_name, params_file)
    effects = plant_effects(model_name, params_file, physical.n, physical.m)
    config = effects.sensor_config(sensors or SensorConfig())
    if not noise:
        config = config.noiseless()
    sim = Simulator(physical, rate=rate, integrator=integrator, gains=gains, q0=q0,
                    name=nominal.name, compiled=compiled, effects=effects)
    return SimPlant(sim, Sensors(config, physical.n, physical.m, seed), nominal=nominal,
                    differences=[*diff, *effects.describe()],
                    sensor_delay=effects.sensor_delay, command_delay=effects.command_delay)


def plant_effects(model_name: str, params_file: str | None, n: int, m: int) -> PlantEffects:
    """The ``[plant]`` table of the parameter file, else of the model file (a built-in model
    has none): the imperfections of the simulated robot.

    Raises:
        ValueError: (a :class:`~poise.models.ModelError`) an invalid table; the message names
            the file and the key.
    """
    return read_effects(params_file if params_file is not None else model_name, n, m)


__all__ = ["STATUS_NONFINITE", "STATUS_QA_LIMIT", "STATUS_Q_LIMIT", "STATUS_SATURATED",
           "UNLIMITED", "SimChannel", "SimPlant", "channels", "coordinate_names", "make_plant",
           "plant_effects"]
