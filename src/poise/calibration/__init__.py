"""Statics calibration: excitation routine, settle detection, identification, calibration files.

At a settled pose ``K (q − q0) + G_grav(q) = Aᵀ τ`` holds and is linear in the parameters
(stiffness, rest offsets, gravity moments or masses, tendon moment arms), so N poses give
``Y π = 0``, solved by least squares with one known quantity fixing the scale::

    from poise.calibration import excitation, run_excitation, PlantDevice, identify
    refs = excitation(model, levels=5)                      # grid, loading then unloading
    run = run_excitation(PlantDevice(make_plant(...)), refs)  # or RoutineDevice(device)
    result = identify(model, run.poses)                      # rank, cond, std errors, held out
    doc = calibration_document(result, run.poses, model_name="double_pendulum", device=run.device)
    write_calibration("cal.json", doc)                       # poise.models.load_model reads it

Modules: :mod:`~poise.calibration.regressor` (``Y(q, τ)`` per family and the map back to a
model description), :mod:`~poise.calibration.identify` (fit, identifiability, statistics),
:mod:`~poise.calibration.poses` (poses, excitation, synthetic data),
:mod:`~poise.calibration.settle`, :mod:`~poise.calibration.routine` (the device routine),
:mod:`~poise.calibration.calfile`, :mod:`~poise.calibration.report`; the stages of the fit
(:mod:`~poise.calibration.grouping`, :mod:`~poise.calibration.holdout`,
:mod:`~poise.calibration.lsq`, :mod:`~poise.calibration.diagnosis`); the ``poise calibrate``
workflow (:mod:`~poise.calibration.workflow`, :mod:`~poise.calibration.posefile`).
See ``docs/calibration.md``.
"""

from poise.calibration.calfile import (
    FORMAT,
    calibration_document,
    read_calibration,
    write_calibration,
)
from poise.calibration.identify import (
    DEFAULT_TIES,
    Identification,
    NotIdentifiableError,
    ParameterEstimate,
    identify,
    parameter_groups,
    parse_fix,
)
from poise.calibration.poses import Pose, excitation, safe_range, synthetic_poses
from poise.calibration.regressor import (
    CalibrationError,
    Parameter,
    StaticsRegressor,
    statics_regressor,
)
from poise.calibration.report import plot_report
from poise.calibration.routine import (
    DeviceStopped,
    PlantDevice,
    RoutineDevice,
    RoutineResult,
    run_excitation,
)
from poise.calibration.settle import SettleConfig, SettleDetector

__all__ = [
    "DEFAULT_TIES",
    "FORMAT",
    "CalibrationError",
    "DeviceStopped",
    "Identification",
    "NotIdentifiableError",
    "Parameter",
    "ParameterEstimate",
    "PlantDevice",
    "Pose",
    "RoutineDevice",
    "RoutineResult",
    "SettleConfig",
    "SettleDetector",
    "StaticsRegressor",
    "calibration_document",
    "excitation",
    "identify",
    "parameter_groups",
    "parse_fix",
    "plot_report",
    "read_calibration",
    "run_excitation",
    "safe_range",
    "statics_regressor",
    "synthetic_poses",
    "write_calibration",
]
