"""``poise bench control --plant P --calibrated``: calibrate on the plant, then control with it.

For each robot with a plant, :func:`calibrate_plants` runs ``poise calibrate``'s own workflow
(:func:`poise.calibration.workflow.calibrate`: the default excitation, settle detection and
fit, with the prior :data:`PRIOR` where the data leave a parameter undetermined: ``--prior
0.2``) on the simulated plant in this process (simulated time, ``--device inprocess``), with
the plant weighed (:func:`weigh`: its true total mass as a scale reads it, ``--total-mass``),
and writes the calibration file; the benchmark's cases then run with it as the controller's
statics model (``model.calibration``) against the same plant and the same targets as without
it. What a lab gets from ``poise calibrate`` and then ``poise run --calibration``.

A robot whose calibration is refused (not identifiable) runs no case; the report says why.
"""

from __future__ import annotations

import pathlib
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from poise.benchmarks.benchout import run_each

#: ``poise calibrate --prior``: the stated uncertainty of the nominal model (the ±20 % the
#: automatic feedback gains hold for, :data:`poise.api.rules.GAIN_UNCERTAINTY`). A soft arm's
#: base segment (its stiffness against its own weight) is weakly determined by statics.
PRIOR = 0.2
#: Significant digits of the weighed total mass: a scale's resolution goes with its range
#: (0.1 kg for the dancer's 55 kg, 1 g for a 0.5 kg soft arm).
SCALE_DIGITS = 3


def weigh(robot: str, plant: str) -> tuple[float, float]:
    """``(reading, true)`` [kg]: the plant's true total mass (the sum of its model's masses)
    and what a scale shows, rounded to :data:`SCALE_DIGITS` significant digits."""
    from poise.sim.params import load_physical

    _, physical, _ = load_physical(robot, plant)
    true = float(np.sum(physical.masses))
    return float(f"{true:.{SCALE_DIGITS}g}"), true


def calibrate_on_plant(robot: str, plant: str, folder: str | pathlib.Path, *,
                       seed: int = 0, weighed: bool = True) -> dict[str, Any]:
    """Calibrate ``robot`` (a built-in model) on the plant file ``plant``; JSON-ready record:
    ``file`` (the calibration, None if refused), ``message``, ``poses``, the parameters
    (nominal, identified, standard error), the masses (identified, standard error, the
    plant's), the equilibrium RMS [rad] of the nominal and the calibrated model, the static
    residuals (:mod:`poise.calibration.band`), ``total_mass`` (``weighed_kg``, the scale's
    reading given to the fit, and ``true_kg``; None when not ``weighed``) and ``wall_s``."""
    from poise.calibration.band import describe
    from poise.calibration.regressor import statics_regressor
    from poise.calibration.workflow import (
        CalibrationRequest,
        DeviceSpec,
        FitOptions,
        WorkflowError,
        calibrate,
    )
    from poise.models import load_model
    from poise.sim.params import load_physical

    t0 = time.perf_counter()
    out = pathlib.Path(folder) / f"{robot}.calibration.json"
    reading, true = weigh(robot, str(plant)) if weighed else (None, None)
    request = CalibrationRequest(model_name=robot, out=out, source=DeviceSpec(
        device="inprocess", model=robot, sim_params=str(plant), seed=seed),
        fit=FitOptions(prior=PRIOR, total_mass=reading))
    total_mass = None if reading is None else {
        "weighed_kg": reading, "true_kg": true,
        "how": f"the plant's true total mass to {SCALE_DIGITS} significant digits, as a "
               "scale reads it, given to the fit (--total-mass)"}
    notes: list[str] = []
    try:
        outcome = calibrate(load_model(robot), request, say=lambda _text: None,
                            warn=notes.append)
    except WorkflowError as exc:
        return {"robot": robot, "file": None, "message": str(exc), "poses": 0,
                "total_mass": total_mass, "wall_s": time.perf_counter() - t0}
    ident = outcome.identification
    record: dict[str, Any] = {
        "robot": robot, "file": str(out) if outcome.written else None,
        "message": ident.message if ident is not None else outcome.reason,
        "poses": len(outcome.poses), "notes": notes, "total_mass": total_mass,
        "wall_s": time.perf_counter() - t0}
    if ident is not None:
        _, physical, _ = load_physical(robot, str(plant))
        plant_reg = statics_regressor(physical)
        record.update(
            parameters=[p.to_dict() for p in ident.parameters],
            masses_kg={"coordinates": plant_reg.coordinate_names,
                       "identified": statics_regressor(load_model(robot)).masses_of(
                           ident.pi).tolist(),
                       "std_error": ident.mass_std_error.tolist(),
                       "plant": plant_reg.masses_of(plant_reg.nominal).tolist()},
            equilibrium_rms_rad={"nominal": ident.nominal_equilibrium_rms,
                                 "calibrated": ident.equilibrium_rms},
            prior_held=list(ident.prior_held),
            static_residuals=ident.static_residuals,
            static_summary=describe(ident.static_residuals))
    return record


def _job(args: tuple[str, str, str, int]) -> dict[str, Any]:
    robot, plant, folder, seed = args
    return calibrate_on_plant(robot, plant, folder, seed=seed)


def calibrate_plants(plants: Mapping[str, str], folder: str | pathlib.Path, *, seed: int = 0,
                     workers: int = 1, progress: Callable[[int], Any] | None = None
                     ) -> dict[str, dict[str, Any]]:
    """:func:`calibrate_on_plant` for every ``{robot: plant file}``, in ``workers`` processes;
    ``{robot: record}``."""
    jobs = [(robot, plant, str(folder), seed) for robot, plant in plants.items()]
    return {r["robot"]: r for r in run_each(_job, jobs, workers, progress)}


def table(calibrations: Mapping[str, dict[str, Any]]) -> str:
    """One paragraph per robot: the calibration's verdict and what the statics cannot explain."""
    lines = []
    for robot, rec in calibrations.items():
        eq = rec.get("equilibrium_rms_rad") or {}
        head = (f"{robot}: calibrated on the plant ({rec['poses']} poses, "
                f"{rec['wall_s']:.0f} s)" if rec["file"] else
                f"{robot}: calibration refused, no case run: {rec['message']}")
        if rec["file"] and eq:
            head += (f"; equilibrium RMS {eq['nominal'] * 1e3:.3g} mrad nominal → "
                     f"{eq['calibrated'] * 1e3:.3g} mrad calibrated")
        lines.append(head)
        if rec.get("total_mass"):
            tm = rec["total_mass"]
            lines.append(f"  weighed: {tm['weighed_kg']:g} kg (true {tm['true_kg']:.4g} kg), "
                         "held exactly as the sum of the identified masses")
        if rec.get("masses_kg"):
            mk = rec["masses_kg"]
            lines.append("  masses [kg] identified / plant: " + ", ".join(
                f"{c} {a:.3g} ± {s:.2g} / {b:.3g}" for c, a, s, b in zip(
                    mk["coordinates"], mk["identified"], mk["std_error"], mk["plant"],
                    strict=True)))
        if rec.get("prior_held"):
            lines.append(f"  held near nominal by the prior (±{PRIOR:.0%}): "
                         + ", ".join(rec["prior_held"]))
        if rec.get("static_summary"):
            lines.append(f"  {rec['static_summary']}")
    return "\n".join(lines)


__all__ = ["SCALE_DIGITS", "calibrate_on_plant", "calibrate_plants", "table", "weigh"]
