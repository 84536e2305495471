"""Plant simulation: ``M(q) q̈ + C(q, q̇) q̇ + D q̇ + G(q) = Aᵀ τ`` with device-side actuator
control (PD on ``qa`` with effort feed-forward), sensors, and a fixed-step integrator.

* :class:`Simulator` — the in-process API: set ``q``, command the actuators, run for T seconds.
* :func:`make_plant` — a :class:`SimPlant` implementing the ``Plant`` protocol of
  :mod:`poise.firmware_bridge.plant` (what ``poise device sim`` runs), optionally with a
  "physical" parameter file that differs from the nominal model.

For models whose family has compiled kernels (planar_tree, planar_pcc: every reference model)
the step and the sensor readout run compiled (:mod:`poise.sim.compiled`, compiled or loaded
from Numba's cache when the simulator is made); ``compiled=False`` gives the numpy reference.

See ``docs/simulator.md`` for the equations, integrator, gains and sensor models.
"""

from poise.sim.actuators import (
    EFFORT_LIMITS,
    MODES,
    ActuatorController,
    ActuatorGains,
    default_gains,
    structural_modes,
)
from poise.sim.dynamics import Dynamics
from poise.sim.params import differences, load_physical
from poise.sim.plant import SimChannel, SimPlant, make_plant
from poise.sim.sensors import COUNTS_PER_RAD, SensorConfig, Sensors
from poise.sim.simulator import DEFAULT_RATE, INTEGRATORS, Simulator, Trajectory

__all__ = [
    "COUNTS_PER_RAD",
    "DEFAULT_RATE",
    "EFFORT_LIMITS",
    "INTEGRATORS",
    "MODES",
    "ActuatorController",
    "ActuatorGains",
    "Dynamics",
    "SensorConfig",
    "Sensors",
    "SimChannel",
    "SimPlant",
    "Simulator",
    "Trajectory",
    "default_gains",
    "differences",
    "load_physical",
    "make_plant",
    "structural_modes",
]
