"""The statics model a run configuration names: ``[model]`` loaded, calibrated, re-weighed.

:func:`build_model` turns a :class:`~poise.controller.config_tables.ModelConfig` into the
:class:`ControllerModel` the controller runs: the built-in model or model file, the calibration
file applied over it, the gravity override.
"""

from __future__ import annotations

import json
import pathlib
import tomllib
from dataclasses import dataclass, field
from typing import Any

from poise.controller.config_reader import ConfigError
from poise.controller.config_tables import ModelConfig


@dataclass(frozen=True)
class ControllerModel:
    """The statics model the controller runs, and where it came from.

    Attributes:
        model: the :class:`~poise.models.MechanicalModel`.
        source: built-in name or file it was loaded from.
        calibration: the calibration file's ``calibration`` metadata (empty without one).
    """

    model: Any
    source: str
    calibration: dict[str, Any] = field(default_factory=dict)


def build_model(cfg: ModelConfig) -> ControllerModel:
    """Load ``cfg.name``, apply the calibration file and the gravity override.

    A calibration file is in the model schema (``poise model show --json`` output, TOML or
    JSON) plus a ``calibration`` metadata table. With a ``family`` key it is the whole model;
    without one its keys override the base model's description.

    Raises:
        ConfigError: unknown model, one without actuators (a pose chain), unreadable
            or invalid calibration file.
    """
    from poise.models import ModelError, load_model, model_from_dict
    from poise.models.base import MechanicalModel

    try:
        model = load_model(cfg.name)
    except ModelError as exc:
        raise ConfigError(f"model.name = {cfg.name!r}: {exc}") from None
    if not isinstance(model, MechanicalModel):  # a pose chain: no statics to hold
        raise ConfigError(f"model.name = {cfg.name!r}: poise run does not drive this model: "
                          f"it must be a model with actuators and statics (family "
                          f"{getattr(model, 'family', '?')} has none; a pose model for "
                          f"'poise solve')")
    meta: dict[str, Any] = {}
    if cfg.calibration is not None:
        p = pathlib.Path(cfg.calibration)
        try:
            text = p.read_bytes()
            data = json.loads(text) if p.suffix == ".json" else tomllib.loads(text.decode())
        except OSError as exc:
            raise ConfigError(f"model.calibration = {str(p)!r}: cannot be read "
                              f"({exc.strerror})") from None
        except (ValueError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"model.calibration = {str(p)!r}: not valid "
                              f"{'JSON' if p.suffix == '.json' else 'TOML'} ({exc})") from None
        if not isinstance(data, dict):
            raise ConfigError(f"model.calibration = {str(p)!r}: must hold a table")
        meta = dict(data.pop("calibration", {}) or {})
        merged = data if "family" in data else {**model.describe(), **data}
        merged.pop("derived", None)
        try:
            model = model_from_dict(merged, source=p.name)
        except ModelError as exc:
            raise ConfigError(f"model.calibration = {str(p)!r}: {exc}") from None
        meta.setdefault("file", str(p))
    if cfg.gravity is not None:
        model = model.with_gravity(cfg.gravity)
    return ControllerModel(model=model, source=cfg.name, calibration=meta)


__all__ = ["ControllerModel", "build_model"]
