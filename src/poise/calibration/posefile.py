"""The poses file: the measured poses of a calibration run, saved as they are recorded.

``cal.json`` → ``cal.poses.json`` (:func:`poses_path`); ``poise calibrate --from-poses`` reads it
back (or the ``calibration`` table of a calibration file) with :func:`load_poses`. Each save is
atomic, so a crash mid-write leaves the previous version.
"""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Callable, Sequence
from typing import Any

from poise.calibration.poses import Pose


def poses_path(out: str | pathlib.Path) -> pathlib.Path:
    """Where the measured poses go: ``cal.json`` → ``cal.poses.json``."""
    return pathlib.Path(str(out)[: -len(".json")] + ".poses.json")


def save_poses(path: pathlib.Path, poses: Sequence[Pose], device: dict[str, Any],
               routine: dict[str, Any]) -> None:
    """Write the poses file atomically (a crash mid-write leaves the previous version)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"poses": [p.to_dict() for p in poses], "device": device,
                               "routine": routine}, indent=1) + "\n")
    os.replace(tmp, path)


def load_poses(path: str | pathlib.Path) -> tuple[list[Pose], dict[str, Any], dict[str, Any]]:
    """``(poses, device, routine)`` from a poses file or a calibration file."""
    data = json.loads(pathlib.Path(path).read_text())
    table = data.get("calibration", data)
    poses = [Pose.from_dict(d) for d in table["poses"]]
    device = table.get("device", table.get("provenance", {}).get("device_info", {}))
    return poses, device, table.get("routine", {})


class PoseSaver:
    """Saves the poses measured so far after each one, so that nothing measured is lost to a
    crash, a kill or a failure later on (identification, report, calibration file).

    ``warn`` hears, once, that a save failed (measuring goes on: the poses are in memory).
    """

    def __init__(self, path: pathlib.Path, routine: dict[str, Any],
                 warn: Callable[[str], None]) -> None:
        self.path = path
        self.routine = routine
        self.device: dict[str, Any] = {}
        self.poses: list[Pose] = []
        self._warn = warn
        self._warned = False

    def add(self, pose: Pose) -> None:
        self.poses.append(pose)
        try:
            save_poses(self.path, self.poses, self.device,
                       {**self.routine, "status": "running", "recorded": len(self.poses)})
        except OSError as exc:
            if not self._warned:
                self._warned = True
                self._warn(f"cannot save the poses to {self.path}: {exc}")

    def finish(self, poses: Sequence[Pose], device: dict[str, Any]) -> None:
        """The final file, with the routine's status and the device description."""
        self.poses = list(poses)
        save_poses(self.path, self.poses, device, self.routine)


__all__ = ["PoseSaver", "load_poses", "poses_path", "save_poses"]
