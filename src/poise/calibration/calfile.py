"""Calibration files: a model description plus a top-level ``calibration`` table.

The file is JSON in the model schema (``poise.models.load_model(path)`` loads it as the
calibrated model; the loader ignores the ``calibration`` key), so ``poise run --calibration FILE``
and every other tool use it as the statics model. ``calibration`` holds:

* ``parameters`` — one row per identified parameter: name, kind, unit, nominal, value,
  standard error, fixed (the scale);
* ``masses`` — the body / segment masses implied by the gravity parameters, with standard errors;
* ``scale`` — the known quantity that fixed the scale; ``total_mass`` — the weighed total mass,
  held exactly or with its standard deviation ``sd`` a measurement, and the identified sum of
  the masses with its standard error (null when none was given); ``ties`` — tied parameter
  kinds;
* ``statistics`` — rank, condition numbers, singular values, σ̂, residuals (fit and held-out),
  equilibrium prediction errors, kinematic residuals, actuator coverage;
* ``qa_offset`` — the actuator position offsets of the kinematic fit (``qa = A q + o``);
* ``poses`` — every pose used (and held out), as recorded;
* ``routine`` — how the data were taken (excitation, settle thresholds, status);
* ``provenance`` — date (UTC, ISO 8601), device, firmware id, package version, nominal model.
"""

from __future__ import annotations

import datetime as _dt
import json
import pathlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from poise import __version__
from poise.calibration.identify import Identification, NotIdentifiableError
from poise.calibration.poses import Pose
from poise.calibration.regressor import CalibrationError

FORMAT = "poise-calibration/1"


def calibration_document(
    result: Identification,
    poses: Sequence[Pose],
    *,
    model_name: str,
    device: dict[str, Any] | None = None,
    routine: dict[str, Any] | None = None,
    date: str | None = None,
) -> dict[str, Any]:
    """The calibration file's content (a model description with a ``calibration`` table).

    Raises:
        NotIdentifiableError: the result is not identifiable (no calibration is written).
    """
    if not result.identifiable or result.description is None:
        raise NotIdentifiableError(result)
    doc = dict(result.description)
    masses_names = [p.name for p in result.parameters if p.kind in ("mass", "mass_moment")]
    coords = [n[n.index("[") + 1:-1] for n in masses_names]
    key = "bodies" if "bodies" in doc else "segments"
    masses = [float(b["mass"]) for b in doc[key]]
    doc["calibration"] = {
        "format": FORMAT,
        "parameters": [p.to_dict() for p in result.parameters],
        "masses": [{"coordinate": c, "value": mv, "std_error": float(se), "unit": "kg"}
                   for c, mv, se in zip(coords, masses, result.mass_std_error, strict=False)],
        "scale": {"parameter": result.fixed[0], "value": result.fixed[1],
                  "why": "known from the drawing (the equations are homogeneous)"},
        "total_mass": None if result.total_mass is None else {
            "value": result.total_mass, "sd": result.total_mass_sd, "unit": "kg",
            "constrained": result.total_mass_constrained,
            "sum": float(sum(masses)), "sum_std_error": result.mass_sum_std_error,
            "why": _total_mass_why(result)},
        "ties": list(result.ties),
        "groups": list(result.groups),
        "qa_offset": [{"value": float(v), "std_error": float(s)}
                      for v, s in zip(result.qa_offset, result.qa_offset_std_error,
                                      strict=False)],
        "statistics": result.statistics(),
        "message": result.message,
        "poses": [p.to_dict() for p in poses],
        "routine": routine or {},
        "provenance": {
            "date": date or _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "device": (device or {}).get("device", ""),
            "firmware_id": (device or {}).get("firmware_id", ""),
            "device_info": device or {},
            "package": "poise", "package_version": __version__,
            "nominal_model": model_name,
        },
    }
    return _jsonable(doc)


def _total_mass_why(result: Identification) -> str:
    if result.total_mass_sd is not None:
        return (f"weighed total mass {result.total_mass:g} ± {result.total_mass_sd:g} kg: "
                "one measurement of the sum of the masses in the fit"
                if result.total_mass_constrained else
                f"weighed total mass {result.total_mass:g} ± {result.total_mass_sd:g} kg: "
                "implied by the scale alone within its precision, not in the fit")
    return ("weighed: the sum of the masses held exactly in the fit"
            if result.total_mass_constrained else
            "weighed: implied by the scale alone, not a constraint")


def write_calibration(path: str | pathlib.Path, document: dict[str, Any]) -> pathlib.Path:
    """Write ``document`` as JSON; the name must end in ``.json`` (the model loader reads the
    format from the suffix)."""
    p = pathlib.Path(path)
    if p.suffix != ".json":
        raise CalibrationError(f"{p}: a calibration file must end in .json (it is a JSON model "
                               "file that poise.models.load_model reads)")
    tmp = p.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(document, indent=1) + "\n")
    tmp.replace(p)
    return p


def read_calibration(path: str | pathlib.Path) -> tuple[Any, dict[str, Any]]:
    """``(model, calibration table)`` of a calibration file."""
    from poise.models import load_model

    p = pathlib.Path(path)
    data = json.loads(p.read_text())
    return load_model(p), data.get("calibration", {})


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    if isinstance(x, (np.floating, float)):
        v = float(x)
        return v if np.isfinite(v) else None
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, np.bool_):
        return bool(x)
    return x


__all__ = ["FORMAT", "calibration_document", "read_calibration", "write_calibration"]
