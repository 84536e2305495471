"""The arm for Foxglove's 3D panel: ``foxglove.SceneUpdate`` and ``foxglove.FrameTransforms``.

Both are Foxglove's well-known schemas in their JSON-schema encoding (the schema files are
Foxglove's own, shipped in ``foxglove_schemas/``), so the 3D panel draws them as they are, in a
log (:class:`~poise.telemetry.log.LogWriter`) or live
(:class:`~poise.telemetry.foxglove_live.FoxgloveLive`).

The geometry is the model's own: ``body_points(q)`` for the planar families (the polylines the
dashboard draws), :func:`poise.models.cc3d.backbone` for continuum arms, the joint frames
``frames(q)`` for Denavit–Hartenberg chains; nothing is recomputed here. Each scene message holds
three entities in the frame :data:`BASE_FRAME`, all stamped with the cycle's Unix time:

* ``arm`` — the measured configuration ``q`` (line strips, a sphere at each polyline end);
* ``arm_predicted`` — the predicted ``q̄`` (grey line strips);
* ``target`` — ``x̄``: a sphere at a position target; for a horizontal-tip task (``tip_x``,
  task size 1) the vertical line ``x = x̄`` (its target set, as on the dashboard).

Each entity's ``metadata`` carries the cycle's ``seq``, host monotonic ``t`` [s] and ``state``.
Planar models live in their x–y plane with gravity along −y; the transform
:data:`WORLD_FRAME` → :data:`BASE_FRAME` turns that plane upright (base y → world z, a +90°
rotation about x) so the arm hangs down in Foxglove's z-up world. 3-D models (cc3d, DH chains)
use the identity.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
import math
from typing import Any

import numpy as np

from poise.api.bus import CycleSample
from poise.models.base import FloatArray
from poise.models.cc3d import CC3D, backbone
from poise.telemetry.clock import split_ns

#: Frame of the drawing (the model's base coordinates) and the fixed root frame.
BASE_FRAME = "poise_base"
WORLD_FRAME = "world"
#: Log / live topics and their Foxglove schema names.
SCENE_TOPIC = "/scene"
TF_TOPIC = "/tf"
SCENE_SCHEMA = "foxglove.SceneUpdate"
TF_SCHEMA = "foxglove.FrameTransforms"
#: Points per continuum segment along the backbone.
BACKBONE_POINTS = 12
#: Colours (those of the dashboard's arm view, ``poise.gui.arm``) as RGBA in [0, 1].
ARM_RGBA = (0x1F / 255, 0x3B / 255, 0x57 / 255, 1.0)
GHOST_RGBA = (0xA8 / 255, 0xB3 / 255, 0xBD / 255, 0.8)
TARGET_RGBA = (0xD6 / 255, 0x27 / 255, 0x28 / 255, 1.0)
#: Line widths [px] (scale-invariant: the same on screen for a 0.3 m and a 3 m arm).
ARM_PX, GHOST_PX, TARGET_PX = 4.0, 3.0, 2.0

_IDENTITY = {"x": 0.0, "y": 0.0, "z": 0.0, "w": 1.0}
_UPRIGHT = {"x": math.sqrt(0.5), "y": 0.0, "z": 0.0, "w": math.sqrt(0.5)}  # +90° about x
_ZERO_DURATION = {"sec": 0, "nsec": 0}


@functools.cache
def foxglove_schema(name: str) -> bytes:
    """The JSON schema of ``foxglove.<name>`` (``SceneUpdate``, ``FrameTransforms``) as shipped."""
    files = importlib.resources.files("poise.telemetry") / "foxglove_schemas"
    return (files / f"{name}.json").read_bytes()


def schema_for(schema_name: str) -> dict[str, Any]:
    """The decoded JSON schema of ``foxglove.SceneUpdate`` or ``foxglove.FrameTransforms``."""
    return json.loads(foxglove_schema(schema_name.removeprefix("foxglove.")))


def drawable(model: Any) -> bool:
    """True if :func:`arm_polylines` can draw ``model``."""
    return hasattr(model, "body_points") or isinstance(model, CC3D) or hasattr(model, "frames")


def is_planar(model: Any) -> bool:
    """Planar families draw with ``body_points`` in their x–y plane."""
    return hasattr(model, "body_points")


def arm_polylines(model: Any, q: FloatArray) -> list[FloatArray]:
    """The robot at configuration ``q`` as polylines ``(k, 3)`` [m] in its base frame.

    Planar models: their ``body_points(q)`` (what the dashboard draws) with z = 0. Continuum
    arms (:class:`~poise.models.cc3d.CC3D`): the backbone at nominal lengths. Chains with
    ``frames(q)`` (DH): one polyline through the origins of the base, joint and flange frames.
    """
    q = np.asarray(q, dtype=float)
    if hasattr(model, "body_points"):
        out = []
        for part in model.body_points(q):
            xy = np.asarray(part, dtype=float).reshape(-1, 2)
            out.append(np.column_stack([xy, np.zeros(len(xy))]))
        return out
    if isinstance(model, CC3D):
        kappa, phi = model.split(q)
        return [backbone(kappa, phi, model.L, points=BACKBONE_POINTS)]
    if hasattr(model, "frames"):
        return [np.asarray(model.frames(q), dtype=float)[:, :3, 3]]
    raise TypeError(f"no drawing for model {getattr(model, 'name', model)!r}")


def _time(ns: int) -> dict[str, int]:
    sec, nsec = split_ns(ns)
    return {"sec": sec, "nsec": nsec}


def _vec(p: Any) -> dict[str, float]:
    return {"x": float(p[0]), "y": float(p[1]), "z": float(p[2])}


def _rgba(c: tuple[float, float, float, float]) -> dict[str, float]:
    return {"r": c[0], "g": c[1], "b": c[2], "a": c[3]}


def _line(points: FloatArray, color: tuple[float, float, float, float], px: float
          ) -> dict[str, Any]:
    return {"type": 0, "pose": {"position": _vec((0, 0, 0)), "orientation": dict(_IDENTITY)},
            "thickness": px, "scale_invariant": True, "points": [_vec(p) for p in points],
            "color": _rgba(color), "colors": [], "indices": []}


def _sphere(center: Any, diameter: float, color: tuple[float, float, float, float]
            ) -> dict[str, Any]:
    d = float(diameter)
    return {"pose": {"position": _vec(center), "orientation": dict(_IDENTITY)},
            "size": {"x": d, "y": d, "z": d}, "color": _rgba(color)}


class ArmScene:
    """Scene and transform messages of one model (sizes computed once, from its reach).

    Args:
        model: a drawable model (:func:`drawable`).
    """

    def __init__(self, model: Any) -> None:
        if not drawable(model):
            raise TypeError(f"no drawing for model {getattr(model, 'name', model)!r}")
        self.model = model
        self.planar = is_planar(model)
        self.task_dim = int(getattr(model, "task_dim", 0))
        rest = np.vstack(arm_polylines(model, np.zeros(model.n)))
        self.base = rest[0]
        reach = float(np.max(np.linalg.norm(rest - self.base, axis=1)))
        self.reach = reach if math.isfinite(reach) and reach > 0 else 1.0

    def _entity(self, entity_id: str, stamp: dict[str, int], s: CycleSample,
                **primitives: list[dict[str, Any]]) -> dict[str, Any]:
        entity: dict[str, Any] = {
            "timestamp": stamp, "frame_id": BASE_FRAME, "id": entity_id,
            "lifetime": dict(_ZERO_DURATION), "frame_locked": False,
            "metadata": [{"key": "seq", "value": str(s.seq)}, {"key": "t", "value": repr(s.t)},
                         {"key": "state", "value": str(s.state)}],
            "arrows": [], "cubes": [], "spheres": [], "cylinders": [], "lines": [],
            "triangles": [], "texts": [], "models": []}
        entity.update(primitives)
        return entity

    def _arm(self, q: tuple[float, ...], color: tuple[float, float, float, float], px: float,
             joints: bool) -> dict[str, list[dict[str, Any]]]:
        """Line strips (and end spheres) of configuration ``q``; nothing if it is not finite."""
        if len(q) != self.model.n or not all(math.isfinite(v) for v in q):
            return {}
        parts = arm_polylines(self.model, np.asarray(q))
        out: dict[str, list[dict[str, Any]]] = {"lines": [_line(p, color, px) for p in parts]}
        if joints:
            ends = [p[i] for p in parts for i in (0, -1)]
            out["spheres"] = [_sphere(e, 0.03 * self.reach, color) for e in ends]
        return out

    def _target(self, target: tuple[float, ...]) -> dict[str, list[dict[str, Any]]]:
        t = [float(v) for v in target]
        if not t or not all(math.isfinite(v) for v in t):
            return {}
        size = 0.05 * self.reach
        if self.planar and len(t) == 1:  # tip_x: the vertical line x = x̄
            y0 = float(self.base[1])
            line = np.array([[t[0], y0 - self.reach, 0.0], [t[0], y0 + self.reach, 0.0]])
            return {"lines": [_line(line, TARGET_RGBA, TARGET_PX)]}
        if self.planar and len(t) >= 2:
            return {"spheres": [_sphere((t[0], t[1], 0.0), size, TARGET_RGBA)]}
        if len(t) >= 3:  # 3-D task: its first three components are the position
            return {"spheres": [_sphere(t[:3], size, TARGET_RGBA)]}
        return {}

    def scene(self, s: CycleSample, stamp_ns: int) -> dict[str, Any]:
        """The ``foxglove.SceneUpdate`` of one cycle, stamped ``stamp_ns`` (Unix ns)."""
        stamp = _time(stamp_ns)
        return {"deletions": [], "entities": [
            self._entity("arm", stamp, s, **self._arm(s.q, ARM_RGBA, ARM_PX, True)),
            self._entity("arm_predicted", stamp, s,
                         **self._arm(s.q_bar, GHOST_RGBA, GHOST_PX, False)),
            self._entity("target", stamp, s, **self._target(s.target)),
        ]}

    def transforms(self, stamp_ns: int) -> dict[str, Any]:
        """The ``foxglove.FrameTransforms`` placing :data:`BASE_FRAME` in :data:`WORLD_FRAME`."""
        return {"transforms": [{
            "timestamp": _time(stamp_ns), "parent_frame_id": WORLD_FRAME,
            "child_frame_id": BASE_FRAME, "translation": _vec((0, 0, 0)),
            "rotation": dict(_UPRIGHT if self.planar else _IDENTITY)}]}
