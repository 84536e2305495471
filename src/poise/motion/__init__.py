"""poise.motion: everything that turns a target into an actuator reference.

* :mod:`~poise.motion.motion_planner` — :class:`~poise.motion.motion_planner.MotionPlanner`,
  the one entry point from a target to its move; :mod:`~poise.motion.options` — what plans
  depend on (:class:`~poise.motion.options.MotionOptions`);
* :mod:`~poise.motion.planner` — the held goal of a target (Algorithm 1 / 2 from the current
  state) and its approach;
* :mod:`~poise.motion.stability`, :mod:`~poise.motion.bounds` — the structural modes of the
  held configuration and the feedback loop's stability bound;
* :mod:`~poise.motion.shaping`, :mod:`~poise.motion.warp`, :mod:`~poise.motion.dwell` — the
  move's profile (input shaping, equilibrium warp, dwell);
* :mod:`~poise.motion.reference` — the model's predicted response to a move, and the choice
  of move on the model;
* :mod:`~poise.motion.trajectory` — a time-parametrised task-space trajectory: its spline and
  its shaped preview; :mod:`~poise.motion.waypoints` — its waypoints read and validated;
  :mod:`~poise.motion.trajectory_check` — the check, before it starts, that the arm can
  follow it;
* :mod:`~poise.motion.params` — the live parameters a cycle reads;
* :mod:`~poise.motion.stepper`, :mod:`~poise.motion.compiled_steppers` — one IK step per
  cycle (numpy reference and compiled);
* :mod:`~poise.motion.step` — :class:`~poise.motion.step.ControlStep`, the cycle's logic as a
  pure object; :mod:`~poise.motion.safety` — the setpoint's limits.

It imports from ``ik``, ``sim``, ``kernels`` and ``models``, never from ``controller``.
"""


from poise.api.lazy import lazy_exports

#: Names imported on first use (PEP 562): importing one module does not load Numba and SciPy.
_HOME = {
    "MotionPlanner": "poise.motion.motion_planner", "Move": "poise.motion.motion_planner",
    "MotionState": "poise.motion.motion_planner", "MotionOptions": "poise.motion.options",
    "ControlStep": "poise.motion.step", "LiveParams": "poise.motion.params",
    "make_compiled_stepper": "poise.motion.compiled_steppers",
    "make_stepper": "poise.motion.stepper",
}


__getattr__ = lazy_exports(__name__, _HOME)


__all__ = sorted(_HOME)
