"""The excitation routine: drive the actuators through the excitation set and record settled poses.

For each actuator reference of the excitation (:func:`~poise.calibration.poses.excitation`):

1. move there along a smooth (cosine) profile no faster than ``speed`` — a step would excite the
   slow unactuated modes and cost seconds of settling;
2. hold the reference until the robot has settled (:mod:`~poise.calibration.settle`) or the
   timeout expires;
3. average ``q``, ``qa`` and ``τ`` over a short window and record a
   :class:`~poise.calibration.poses.Pose`.

The routine answers every sensor frame with a setpoint (which also feeds the device watchdog).
It stops early, keeping the poses recorded so far:

* ``aborted`` — Ctrl-C (``KeyboardInterrupt``) or the ``abort`` event: the device is disarmed
  cleanly (its safe mode holds the actuators where they are);
* ``estop`` — the device reports a latched e-stop, or the ``estop`` event is set (the routine then
  sends EStop): like the controller, nothing more is sent and the device is not re-armed; the
  e-stop stays latched until someone clears it;
* ``fault`` — the device disarmed itself (watchdog) or stopped streaming.

Devices: :class:`RoutineDevice` wraps any open :class:`~poise.devices.base.Device` (a real
device, ``poise device sim`` on a pty, a Dynamixel bus with its joint-sensor board);
:class:`PlantDevice` drives a plant in process
(``poise.sim.make_plant``) without real-time pacing, for fast tests.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from poise.calibration.poses import Direction, Pose
from poise.calibration.settle import TIMEOUT_MIN, SettleConfig, SettleDetector
from poise.firmware_bridge import messages as msg
from poise.models.base import FloatArray


class DeviceStopped(RuntimeError):
    """The device stopped the routine (e-stop, watchdog, lost stream); ``status`` says which."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class Reading:
    """One sensor sample: time [s], measured ``q``, ``qa``, ``τ`` and the device status word."""

    t: float
    q: FloatArray
    qa: FloatArray
    tau: FloatArray
    status: int
    truth: tuple[FloatArray, FloatArray, FloatArray] | None = None


class CalibrationDevice(Protocol):
    """What the routine needs from a device."""

    n: int
    m: int

    def info(self) -> dict[str, Any]:
        """Provenance: device (port or ``sim``), firmware id, rate."""
        ...

    def arm(self) -> None: ...

    def command(self, qa_ref: FloatArray) -> None: ...

    def read(self, timeout: float) -> Reading:
        """The next sample (blocks); raises :class:`DeviceStopped` on e-stop/watchdog/silence."""
        ...

    def disarm(self) -> None: ...

    def estop(self) -> None: ...


def _check_status(status: int) -> None:
    if status & msg.Status.ESTOP:
        raise DeviceStopped("estop", "the device reports a latched e-stop")
    if status & msg.Status.WATCHDOG:
        raise DeviceStopped("fault", "the device watchdog tripped (setpoints stopped arriving)")
    if not status & msg.Status.ARMED:
        raise DeviceStopped("fault", "the device disarmed itself")


class RoutineDevice:
    """Any :class:`~poise.devices.base.Device` as the routine's device: the poise wire protocol
    (a real device, or ``poise device sim`` on a pty), a Dynamixel bus with a joint-sensor
    board (a composite), ... (see :func:`poise.devices.factory.open_device`).

    A streaming device is answered frame by frame; a polled one (a servo bus) is read at
    ``poll_rate`` (the host paces it) and each joint-sensor frame is returned once. Sample times
    are the device's clock where it has one (a sensor board's), else the host's.

    Args:
        device: the open device (disarmed). It must measure q.
        port: where it is (provenance).
        poll_rate: reads per second of a polled device [Hz].

    Raises:
        DeviceStopped: the device does not measure q (a servo bus without its sensor board).
    """

    def __init__(self, device: Any, *, port: str = "", poll_rate: float = 200.0) -> None:
        self.device = device
        self.description = device.describe()
        d = self.description
        if not d.measures_q:
            raise DeviceStopped("fault", f"{d.name} does not measure q: calibration needs the "
                                "joint sensors (a sensor board, --sensors PORT)")
        self.n = int(d.n_q)
        self.m = int(d.n_a)
        self.port = port
        self._period = 1.0 / float(poll_rate)
        self._next_poll = 0.0
        self._armed = False
        self._last_us = 0
        self._wraps = 0

    def info(self) -> dict[str, Any]:
        d = self.description
        return {"device": self.port, "firmware_id": d.name,
                "rate_hz": d.rate_hz if not d.polled else 1.0 / self._period, **d.extra}

    #: Device watchdog during the routine [ms]: the excitation is quasi-static (each pose is
    #: held until it settles), so a host stall of a few hundred ms must not abort it; the
    #: device still drops to its safe state if the host goes away for longer.
    WATCHDOG_MS = 500

    def arm(self) -> None:
        from poise.devices.base import DeviceError

        try:
            self.device.configure(watchdog_ms=float(self.WATCHDOG_MS))
        except DeviceError as exc:
            raise DeviceStopped("fault", f"the device refused a {self.WATCHDOG_MS} ms "
                                f"watchdog: {exc}") from None
        try:
            self.device.arm()
        except DeviceError as exc:
            raise DeviceStopped("fault", f"the device refused to arm: {exc}") from None
        # samples queued before the Arm was applied do not carry ARMED yet: skip them
        deadline = time.monotonic() + 2.0
        while True:
            s = self.read(1.0)
            if s.status & msg.Status.ARMED:
                break
            if time.monotonic() > deadline:
                raise DeviceStopped("fault", "the device acknowledged Arm but does not report "
                                    "ARMED")
        self._armed = True

    def command(self, qa_ref: FloatArray) -> None:
        from poise.devices.base import DeviceError

        try:
            self.device.write([float(x) for x in qa_ref], None)
        except DeviceError as exc:
            raise DeviceStopped("fault", f"setpoint refused: {exc}") from None

    def read(self, timeout: float) -> Reading:
        from poise.devices.base import DeviceError, DeviceTimeout

        polled = self.description.polled
        deadline = time.monotonic() + timeout
        while True:
            if polled:  # the host paces a polled device
                now = time.perf_counter()
                if self._next_poll > now:
                    time.sleep(self._next_poll - now)
                self._next_poll = max(self._next_poll + self._period, time.perf_counter())
            try:
                sample = self.device.read(timeout)
            except DeviceTimeout as exc:
                raise DeviceStopped("fault", f"no sensor frame: {exc}") from None
            except DeviceError as exc:
                raise DeviceStopped("fault", f"device error: {exc}") from None
            us = int(sample.device_time_us)
            # a polled composite repeats the sensor board's frame until the next one: the
            # settle detector wants each measurement once, stamped with the board's clock
            if not (polled and us and us == self._last_us):
                break
            if time.monotonic() > deadline:
                raise DeviceStopped("fault", f"no new sensor frame for {timeout:g} s")
        if not us:
            t = sample.host_time
        else:
            if us < self._last_us:
                self._wraps += 1
            self._last_us = us
            t = (us + self._wraps * 2**32) * 1e-6
        if self._armed:
            _check_status(int(sample.status))
        return Reading(t, np.asarray(sample.q, dtype=float), np.asarray(sample.qa, dtype=float),
                       np.asarray(sample.efforts, dtype=float), int(sample.status))

    def disarm(self) -> None:
        self._armed = False
        with contextlib.suppress(Exception):
            self.device.disarm()

    def estop(self) -> None:
        self._armed = False
        with contextlib.suppress(Exception):
            self.device.estop()


class PlantDevice:
    """A plant (``poise.sim.make_plant``) driven in process at ``rate`` samples per simulated
    second, as fast as the computer allows (no real-time pacing).

    With ``record_truth`` every reading also carries the simulator's true ``(q, qa, τ)``, and
    the routine records a second, noise-free pose list from the same run
    (:attr:`RoutineResult.true_poses`): the sensors' noise and quantisation are then the only
    difference between the two fits.
    """

    def __init__(self, plant: Any, *, rate: float = 500.0, name: str = "sim (in process)",
                 record_truth: bool = False) -> None:
        self.plant = plant
        self.record_truth = record_truth
        chans = list(plant.describe())
        kinds = [c["kind"] if isinstance(c, dict) else c.kind for c in chans]
        self.n = kinds.count("coordinate")
        self.m = kinds.count("actuator")
        self.dt = 1.0 / float(rate)
        self.name = name
        self._armed = False
        self._estop = False

    def info(self) -> dict[str, Any]:
        return {"device": self.name, "firmware_id": "in-process",
                "rate_hz": round(1.0 / self.dt)}

    def arm(self) -> None:
        if self._estop:
            raise DeviceStopped("estop", "e-stop latched")
        _, qa, _, _ = self.plant.read_sensors()
        self.plant.set_actuator_command(list(qa), None)
        self.plant.set_mode("position")
        self._armed = True

    def command(self, qa_ref: FloatArray) -> None:
        if self._armed:
            self.plant.set_actuator_command([float(x) for x in qa_ref], None)

    def read(self, timeout: float) -> Reading:
        self.plant.step(self.dt)
        q, qa, tau, _ = self.plant.read_sensors()
        status = (msg.Status.ARMED if self._armed else 0) | (msg.Status.ESTOP if self._estop
                                                            else 0)
        if self._armed or self._estop:
            _check_status(int(status))
        truth = None
        if self.record_truth:
            sim = self.plant.sim
            truth = (sim.q, sim.qa, sim.tau)
        return Reading(float(self.plant.time), np.asarray(q, dtype=float),
                       np.asarray(qa, dtype=float), np.asarray(tau, dtype=float), int(status),
                       truth)

    def disarm(self) -> None:
        self._armed = False
        self.plant.set_mode("hold")

    def estop(self) -> None:
        self._armed = False
        self._estop = True
        self.plant.set_mode("disabled")


# ----------------------------------------------------------------------------- the routine


@dataclass
class RoutineResult:
    """What the routine recorded and how it ended.

    Attributes:
        poses: settled (and timed-out, flagged) poses, in visiting order.
        status: ``complete``, ``aborted``, ``estop`` or ``fault``.
        reason: why it stopped early ('' when complete).
        planned: number of poses in the excitation.
        duration: device time spent [s].
        device: provenance from the device (:meth:`CalibrationDevice.info`).
        true_poses: the same poses from the simulator's true state (``PlantDevice`` with
            ``record_truth``), else empty.
    """

    poses: list[Pose]
    status: str
    reason: str
    planned: int
    duration: float
    device: dict[str, Any] = field(default_factory=dict)
    true_poses: list[Pose] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return self.status == "complete"


ProgressFn = Callable[[int, int, Pose | None, str], None]


def run_excitation(
    device: CalibrationDevice,
    refs: Sequence[tuple[FloatArray, Direction]],
    *,
    settle: SettleConfig | None = None,
    speed: FloatArray | float | None = None,
    qa_range: tuple[FloatArray, FloatArray] | None = None,
    progress: ProgressFn | None = None,
    abort: threading.Event | None = None,
    estop: threading.Event | None = None,
    read_timeout: float = 1.0,
) -> RoutineResult:
    """Visit ``refs`` on ``device`` and record a settled pose at each.

    Args:
        device: a :class:`CalibrationDevice` (:class:`LinkDevice`, :class:`PlantDevice`).
        refs: actuator references with their direction tags (from
            :func:`~poise.calibration.poses.excitation`).
        settle: settle thresholds.
        speed: largest actuator speed of the moves [actuator units/s]; default: the safe
            range in 2 s.
        qa_range: ``(lo, hi)`` safe actuator range (for ``speed`` and ``qa_tol`` defaults; every
            reference must lie inside it).
        progress: called ``(done, total, pose, phase)`` after each pose (and at the start).
        abort: set it to stop cleanly (like Ctrl-C).
        estop: set it to e-stop the device and stop.
        read_timeout: a sensor frame must arrive within this time [s].

    Returns:
        :class:`RoutineResult`; the device is disarmed (or e-stopped) on return.
    """
    settle = settle or SettleConfig()
    refs = [(np.asarray(r, dtype=float), d) for r, d in refs]
    vmax, qa_tol = _move_limits(refs, device.m, settle, speed, qa_range)
    detector = SettleDetector(settle, qa_tol)
    poses: list[Pose] = []
    true_poses: list[Pose] = []
    status, reason = "complete", ""
    t_start = math.nan
    t_now = math.nan
    info = device.info()
    if progress:
        progress(0, len(refs), None, "arming")
    try:
        device.arm()
        first = device.read(read_timeout)
        t_start = t_now = first.t
        current = first.qa.copy()
        for k, (target, direction) in enumerate(refs):
            if estop is not None and estop.is_set():
                raise DeviceStopped("estop", "e-stop requested")
            if abort is not None and abort.is_set():
                raise KeyboardInterrupt
            t_now = _move(device, current, target, vmax, read_timeout, abort, estop)
            current = target
            pose, truth, t_now = _settle_and_record(device, target, direction, detector, settle,
                                                    read_timeout, abort, estop)
            poses.append(pose)
            if truth is not None:
                true_poses.append(truth)
            if progress:
                progress(k + 1, len(refs), pose, "settled" if pose.settled else "timeout")
    except KeyboardInterrupt:
        status, reason = "aborted", "interrupted by the user"
    except DeviceStopped as exc:
        status, reason = exc.status, exc.reason
    finally:
        if status == "estop":
            device.estop()
        else:
            device.disarm()
    return RoutineResult(poses=poses, status=status, reason=reason, planned=len(refs),
                         duration=float(t_now - t_start) if math.isfinite(t_start) else 0.0,
                         device=info, true_poses=true_poses)


def _move_limits(refs: Sequence[tuple[FloatArray, Direction]], m: int, settle: SettleConfig,
                 speed: FloatArray | float | None,
                 qa_range: tuple[FloatArray, FloatArray] | None) -> tuple[FloatArray, FloatArray]:
    """``(v_max, qa_tol)`` per actuator: the moves' peak speed (default the safe range in 2 s)
    and the settle test's reference tolerance (default 5 % of the range); the range is
    ``qa_range`` (every reference must lie inside it, ValueError if not) or the references'
    own."""
    if qa_range is None:
        allr = np.array([r for r, _ in refs])
        lo, hi = allr.min(axis=0), allr.max(axis=0)
    else:
        lo, hi = (np.asarray(x, dtype=float) for x in qa_range)
        for r, _ in refs:
            if np.any(r < lo - 1e-12) or np.any(r > hi + 1e-12):
                raise ValueError(f"excitation reference {r.tolist()} outside the safe range "
                                 f"[{lo.tolist()}, {hi.tolist()}]")
    width = np.where(hi - lo > 0, hi - lo, 1.0)
    vmax = width / 2.0 if speed is None else np.broadcast_to(np.asarray(speed, float), (m,))
    qa_tol = 0.05 * width if settle.qa_tol is None else np.full(m, settle.qa_tol)
    return vmax, qa_tol


def _poll(abort: threading.Event | None, estop: threading.Event | None) -> None:
    if estop is not None and estop.is_set():
        raise DeviceStopped("estop", "e-stop requested")
    if abort is not None and abort.is_set():
        raise KeyboardInterrupt


def _move(device: CalibrationDevice, start: FloatArray, target: FloatArray, vmax: FloatArray,
          timeout: float, abort: threading.Event | None,
          estop: threading.Event | None) -> float:
    """Cosine profile from ``start`` to ``target``; peak speed ≤ ``vmax`` (π/2 × mean)."""
    delta = target - start
    duration = float(np.max(np.abs(delta) * (math.pi / 2) / vmax)) if delta.size else 0.0
    r = device.read(timeout)
    t0 = r.t
    while True:
        _poll(abort, estop)
        s = 1.0 if duration <= 0 else min((r.t - t0) / duration, 1.0)
        device.command(start + delta * 0.5 * (1.0 - math.cos(math.pi * s)))
        if s >= 1.0:
            return r.t
        r = device.read(timeout)


def _settle_and_record(device: CalibrationDevice, target: FloatArray, direction: Direction,
                       detector: SettleDetector, cfg: SettleConfig, timeout: float,
                       abort: threading.Event | None,
                       estop: threading.Event | None) -> tuple[Pose, Pose | None, float]:
    detector.reset()
    r = device.read(timeout)
    t0 = r.t
    settled = False
    while True:
        _poll(abort, estop)
        device.command(target)
        elapsed = r.t - t0
        if detector.add(r.t, r.q, r.qa, target) and elapsed >= cfg.min_time:
            settled = True
            break
        if elapsed >= (cfg.timeout if cfg.timeout is not None else TIMEOUT_MIN):
            break
        r = device.read(timeout)
    settle_time = r.t - t0
    qs, qas, taus = [], [], []
    truths = []
    t1 = r.t
    while True:
        r = device.read(timeout)
        _poll(abort, estop)
        device.command(target)
        qs.append(r.q)
        qas.append(r.qa)
        taus.append(r.tau)
        if r.truth is not None:
            truths.append(r.truth)
        if r.t - t1 >= cfg.average:
            break
    Q, QA, TAU = np.array(qs), np.array(qas), np.array(taus)
    pose = Pose(qa_ref=target.copy(), q=Q.mean(axis=0), qa=QA.mean(axis=0), tau=TAU.mean(axis=0),
                direction=direction, settled=settled, settle_time=float(settle_time),
                q_std=Q.std(axis=0), tau_std=TAU.std(axis=0), samples=len(qs))
    truth = None
    if truths:
        tq, tqa, ttau = (np.array([x[i] for x in truths]).mean(axis=0) for i in range(3))
        truth = Pose(qa_ref=target.copy(), q=tq, qa=tqa, tau=ttau, direction=direction,
                     settled=settled, settle_time=float(settle_time),
                     q_std=np.zeros_like(tq), tau_std=np.zeros_like(ttau), samples=len(truths))
    return pose, truth, r.t


__all__ = [
    "CalibrationDevice",
    "DeviceStopped",
    "PlantDevice",
    "Reading",
    "RoutineDevice",
    "RoutineResult",
    "run_excitation",
]
