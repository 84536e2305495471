"""The calibration workflow behind ``poise calibrate``: measure (or read) settled poses, identify
the statics, draw the report, write the calibration file.

:func:`calibrate` runs it for a :class:`CalibrationRequest`; the caller (the CLI) parses the
options, checks the output paths, shows the progress and maps the :class:`CalibrationOutcome`
or the :class:`WorkflowError` to its messages and exit codes. Measured poses are saved after
each one (:mod:`poise.calibration.posefile`), so nothing measured is lost when a later stage
fails. See ``docs/calibration.md``.
"""

from __future__ import annotations

import contextlib
import pathlib
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from poise.calibration.calfile import calibration_document, write_calibration
from poise.calibration.identify import HOLDOUT, Identification, check_options, identify
from poise.calibration.posefile import PoseSaver, load_poses, poses_path
from poise.calibration.poses import Pose, excitation, safe_range
from poise.calibration.regressor import CalibrationError
from poise.calibration.report import plot_report
from poise.calibration.routine import (
    PlantDevice,
    ProgressFn,
    RoutineDevice,
    RoutineResult,
    run_excitation,
)
from poise.calibration.settle import SettleConfig, settle_timeout
from poise.models.base import FloatArray

#: Status-packet timeout of a servo bus during calibration [ms]: the routine is quasi-static,
#: so a slow answer (a busy host, a virtual bus) is waited for rather than called a fault.
BUS_TIMEOUT_MS = 200.0
#: Sync reads repeated before a failed one is a fault, during calibration (as above).
BUS_RETRIES = 5

Say = Callable[[str], None]


class WorkflowError(Exception):
    """A stage could not go on. ``stage``: ``"input"`` (options, poses file, excitation, the
    calibration file), ``"device"`` (the device could not be opened) or ``"fit"`` (the
    identification refused the data)."""

    def __init__(self, message: str, stage: Literal["input", "device", "fit"]) -> None:
        super().__init__(message)
        self.stage = stage


@dataclass(frozen=True)
class DeviceSpec:
    """The device the poses are measured on.

    Attributes:
        device: ``PORT`` (poise protocol), ``dynamixel:PORT``, ``sim`` (``poise device sim``
            behind a pseudo-terminal) or ``inprocess`` (the simulator in this process).
        model: the model as named by the user (built-in name or file), for the simulator.
        sensors: the joint-sensor board beside a Dynamixel bus.
        sim_params: physical parameter file of the simulated robot.
        seed: seed of the in-process simulator.
    """

    device: str
    model: str
    sensors: str | None = None
    sim_params: str | None = None
    seed: int = 0


@dataclass(frozen=True)
class ExcitationPlan:
    """The excitation (:func:`~poise.calibration.poses.excitation`) and its move speed.

    ``levels``: grid levels, one value for all actuators or one per actuator; ``speed``: move
    speed in safe ranges per second; ``frozen``: actuators held at mid-range.
    """

    kind: str = "grid"
    levels: Sequence[int] = (5,)
    count: int = 20
    margin: float = 0.05
    speed: float = 1.0
    seed: int = 0
    frozen: Sequence[int] = ()

    def to_dict(self, settle: SettleConfig, planned: int) -> dict[str, Any]:
        """The routine's description in the poses and calibration files."""
        return {"kind": self.kind, "levels": list(self.levels), "count": self.count,
                "margin": self.margin, "speed": self.speed, "seed": self.seed,
                "frozen": list(self.frozen), "settle": settle.to_dict(), "planned": planned}


@dataclass(frozen=True)
class FitOptions:
    """Options of :func:`~poise.calibration.identify.identify` (``total_mass``: the robot's
    weighed total mass [kg], held exactly; None: not known. ``total_mass_sd``: its standard
    deviation [kg], the total mass then a measurement ``M ± σ_M`` instead; None: exact)."""

    fix: str | None = None
    tie: Sequence[str] | None = None
    holdout: float = HOLDOUT
    kinematics: bool = True
    prior: float | None = None
    total_mass: float | None = None
    total_mass_sd: float | None = None


@dataclass(frozen=True)
class CalibrationRequest:
    """One calibration: where the poses come from and what to write.

    Attributes:
        model_name: the nominal model as named by the user (written into the calibration).
        out: the calibration file (``.json``); measured poses go beside it
            (:func:`~poise.calibration.posefile.poses_path`).
        source: the device to measure on, or a poses / calibration file to refit.
        report: the report figure (PNG), or None.
    """

    model_name: str
    out: pathlib.Path
    source: DeviceSpec | pathlib.Path
    report: pathlib.Path | None = None
    excitation: ExcitationPlan = field(default_factory=ExcitationPlan)
    settle: SettleConfig = field(default_factory=SettleConfig)
    fit: FitOptions = field(default_factory=FitOptions)

    @property
    def measures(self) -> bool:
        """The poses are measured on a device (not read from a file)."""
        return isinstance(self.source, DeviceSpec)


@dataclass(frozen=True)
class CalibrationOutcome:
    """What a calibration did.

    Attributes:
        status: the routine's status (``complete``, ``aborted``, ``estop``, …); ``complete``
            for poses read from a file.
        reason: why the routine stopped early ("" if it did not).
        poses: the poses measured or read.
        planned: poses the excitation planned (0 for poses read from a file).
        poses_file: where the measured poses were saved (None for poses read from a file).
        identification: the fit (None when the routine stopped early).
        written: the calibration file was written (the fit was identifiable).
    """

    status: str
    reason: str
    poses: list[Pose]
    planned: int = 0
    poses_file: pathlib.Path | None = None
    identification: Identification | None = None
    written: bool = False

    @property
    def complete(self) -> bool:
        return self.status == "complete"


def calibrate(model: Any, request: CalibrationRequest, *, say: Say, warn: Say,
              progress: ProgressFn | None = None,
              estop: threading.Event | None = None) -> CalibrationOutcome:
    """Measure or read the poses, identify, draw the report, write the calibration file.

    Args:
        model: the nominal model (:func:`poise.models.load_model`).
        request: what to do.
        say: hears the notes of the workflow (where the poses go, how many were kept).
        warn: hears problems that do not stop it (a poses file or report not written).
        progress: the routine's progress ``(done, total, pose, phase)``.
        estop: set it to e-stop the device and stop the routine.

    Returns:
        The outcome; ``written`` only when the fit is identifiable. A routine stopped early
        returns before the fit (its poses are kept in the poses file).

    Raises:
        WorkflowError: a stage could not go on (its ``stage`` says which); fit options that
            the fit would refuse (``--fix``, ``--tie``, ``--total-mass``, ``--total-mass-sd``)
            stop it as ``input`` before any pose is measured.
    """
    fit = request.fit
    try:
        check_options(model, fix=fit.fix, tie=fit.tie, prior=fit.prior,
                      total_mass=fit.total_mass, total_mass_sd=fit.total_mass_sd)
    except CalibrationError as exc:
        raise WorkflowError(f"{exc}" + (" (nothing was run)" if request.measures else ""),
                            "input") from None
    if isinstance(request.source, DeviceSpec):
        saved = poses_path(request.out)
        settle = request.settle if request.settle.timeout is not None else replace(
            request.settle, timeout=settle_timeout(model))
        result, routine_info = measure_poses(model, request.source, request.excitation,
                                             settle, saved, say=say, warn=warn,
                                             progress=progress, estop=estop)
        poses, device_info = result.poses, result.device
        if not result.complete:
            say(f"routine stopped ({result.status}: {result.reason}); "
                f"{len(poses)} of {result.planned} poses kept in {saved}")
            return CalibrationOutcome(result.status, result.reason, poses, result.planned,
                                      saved)
        say(f"{len(poses)} poses saved to {saved}")
        kept = f" (the poses are kept in {saved})"
    else:
        try:
            poses, device_info, routine_info = load_poses(request.source)
        except (OSError, ValueError, KeyError) as exc:
            raise WorkflowError(f"--from-poses {request.source}: {exc}", "input") from None
        saved, kept = None, ""
    try:
        ident = identify(model, poses, fix=fit.fix, tie=fit.tie, holdout=fit.holdout,
                         kinematics=fit.kinematics, prior=fit.prior,
                         total_mass=fit.total_mass, total_mass_sd=fit.total_mass_sd)
    except CalibrationError as exc:
        raise WorkflowError(f"{exc}{kept}", "fit") from None
    if request.report:
        try:
            plot_report(ident, poses, request.report, title=f"statics calibration of "
                        f"{model.name} ({device_info.get('device', '')})")
        except (OSError, ValueError) as exc:  # checked before; the disk may still fill up
            warn(f"could not write the report {request.report}: {exc}")
    outcome = CalibrationOutcome("complete", "", poses, routine_info.get("planned", 0), saved,
                                 ident)
    if not ident.identifiable:
        # the data are kept (poses file) so that a better excitation can be added, but no
        # calibration is written
        return outcome
    doc = calibration_document(ident, poses, model_name=request.model_name,
                               device=device_info, routine=routine_info)
    try:
        write_calibration(request.out, doc)
    except (OSError, CalibrationError) as exc:
        raise WorkflowError(f"cannot write {request.out}: {exc}{kept}", "input") from None
    return CalibrationOutcome("complete", "", poses, outcome.planned, saved, ident, written=True)


def measure_poses(model: Any, spec: DeviceSpec, plan: ExcitationPlan, settle: SettleConfig,
                  saved: pathlib.Path, *, say: Say, warn: Say,
                  progress: ProgressFn | None = None,
                  estop: threading.Event | None = None) -> tuple[RoutineResult, dict[str, Any]]:
    """Run the excitation routine on the device, saving each pose to ``saved`` as it comes.

    Returns:
        The routine's result and its description (for the calibration file).

    Raises:
        WorkflowError: a bad excitation (``input``) or a device that cannot be opened
            (``device``).
    """
    try:
        levels = plan.levels[0] if len(plan.levels) == 1 else tuple(plan.levels)
        refs = excitation(model, kind=plan.kind, levels=levels, count=plan.count,
                          margin=plan.margin, seed=plan.seed, frozen=tuple(plan.frozen))
        qa_range = safe_range(model, plan.margin)
    except (ValueError, IndexError) as exc:
        raise WorkflowError(f"excitation: {exc}", "input") from None
    routine_info = plan.to_dict(settle, len(refs))
    saver = PoseSaver(saved, routine_info, warn)
    say(f"measured poses are saved to {saved} as they are recorded (refit with --from-poses)")

    def record(done: int, total: int, pose: Pose | None, phase: str) -> None:
        if progress is not None:
            progress(done, total, pose, phase)
        if pose is not None:
            saver.add(pose)

    speed = plan.speed * (qa_range[1] - qa_range[0])
    with _routine_device(spec, model) as device:
        saver.device = device.info()
        result = run_excitation(device, refs, settle=settle, speed=speed, qa_range=qa_range,
                                progress=record, estop=estop)
    routine_info.update(status=result.status, reason=result.reason,
                        duration=result.duration, recorded=len(result.poses))
    try:
        saver.finish(result.poses, result.device)
    except OSError as exc:  # checked before; a full disk or a folder removed meanwhile
        warn(f"could not save the poses to {saved}: {exc}")
    return result, routine_info


@contextlib.contextmanager
def _routine_device(spec: DeviceSpec, model: Any) -> Iterator[PlantDevice | RoutineDevice]:
    """The routine's view of ``spec``: the simulator in this process, or the opened device."""
    if spec.device == "inprocess":
        from poise.sim import make_plant

        try:
            plant = make_plant(spec.model, spec.sim_params, seed=spec.seed)
        except (ValueError, OSError) as exc:
            raise WorkflowError(f"cannot build the simulated plant: {exc}", "device") from None
        yield PlantDevice(plant)
        return
    with open_device(spec, model.m, model.qa_min, model.qa_max) as (opened, port):
        yield RoutineDevice(opened, port=port)


@contextlib.contextmanager
def open_device(spec: DeviceSpec, m: int, qa_min: FloatArray,
                qa_max: FloatArray) -> Iterator[tuple[Any, str]]:
    """The device of ``spec`` (:func:`poise.devices.factory.open_device`, as ``poise run`` opens
    it) and the port to describe it by; closed (and a virtual device stopped) on exit."""
    from poise.api.rules import split_device
    from poise.controller.config import DeviceConfig
    from poise.devices.base import DeviceError
    from poise.devices.factory import open_device as open_configured

    protocol, port = split_device(spec.device)
    if spec.sensors and protocol != "dynamixel":
        raise WorkflowError("--sensors goes with --device dynamixel:PORT (a servo bus)",
                            "device")
    cfg = DeviceConfig(port=port, protocol=protocol, sensors=spec.sensors, timeout=3.0,
                       sim_params=spec.sim_params, timeout_ms=BUS_TIMEOUT_MS,
                       retries=BUS_RETRIES)
    try:
        opened = open_configured(cfg, model=spec.model, m=m, rate=500.0, reconnect=False,
                                 qa_min=qa_min, qa_max=qa_max)
    except DeviceError as exc:
        raise WorkflowError(f"cannot connect to {spec.device}: {exc}", "device") from None
    try:
        sim = opened.sim
        yield opened.device, (f"sim:{getattr(sim, 'pty', '') or opened.port}" if sim is not None
                              else spec.device)
    finally:
        with contextlib.suppress(DeviceError):
            opened.device.close()


__all__ = [
    "BUS_RETRIES",
    "BUS_TIMEOUT_MS",
    "CalibrationOutcome",
    "CalibrationRequest",
    "DeviceSpec",
    "ExcitationPlan",
    "FitOptions",
    "WorkflowError",
    "calibrate",
    "measure_poses",
    "open_device",
]
