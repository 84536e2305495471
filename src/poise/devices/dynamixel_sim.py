"""A virtual Dynamixel X-series bus on a pseudo-terminal, driving the plant simulator, plus a
poise-protocol joint-sensor board on a second pty.

:class:`VirtualDynamixelBus` answers Protocol 2.0 packets (:mod:`poise.sim.dxl_protocol`) for
one emulated servo (:class:`poise.sim.dxl_servo.XServo`) per actuator of a simulated robot:
ping (also broadcast), read, write, sync read, sync write and reboot; other instructions answer
an instruction error. In real time it steps the plant (:func:`poise.sim.make_plant`): Goal
Position becomes the actuator reference, and Present Position / Velocity / Current report the
simulated ``qa``, ``q̇a`` and effort, through the same :class:`ServoConfig` conversion as
:class:`~poise.devices.dynamixel.DynamixelDevice` (same defaults: IDs 1 … m, spool radius
0.01 m, zero 2048 counts).

Emulation, and where it simplifies:

* the plant has one actuator mode: ``position`` while every servo's torque is on and its
  operating mode is a position mode (3, 4 or 5), ``disabled`` otherwise, so one servo's
  shutdown drops the whole arm;
* goal positions are tracked by the simulator's PD law (no profile, no return delay time);
  mode 5's goal current is stored but the effort limit stays the simulator's;
* status packets of a sync read are written in the order of the instruction's ID list;
* every instruction packet addressed to a servo (its ID or the broadcast ID) feeds its Bus
  Watchdog (98), checked at every tick; a tick more than ``LATE_PERIODS`` late (this
  process was not running) is not counted as the host's silence.

The joint-sensor board is the poise wire protocol (:class:`~poise.firmware_bridge.device.
DeviceEndpoint` on a :class:`~poise.firmware_bridge.device.PtyDevice`) over a plant *view*
with the robot's n coordinates and no actuators, so a composite device (sensor board + servo
bus) measures the configuration q that the servos alone cannot.

Command line (``python -m poise.devices.dynamixel_sim --model tendon_3link``) prints
``PTY <bus path>`` and ``SENSORS <sensor board path>`` as its first two lines; its threads run
at ``SCHED_FIFO`` :func:`default_fifo_priority` (19) where the OS grants it
(``--fifo-priority``).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import select
import signal
import sys
import threading
import time
import tomllib
import tty
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from poise.devices.dynamixel_config import ServoConfig, servos_from_config, with_defaults
from poise.firmware_bridge.device import LATE_PERIODS
from poise.sim.dxl_protocol import (
    BROADCAST_ID,
    ErrorCode,
    Instruction,
    Packet,
    PacketDecoder,
    encode_status,
)
from poise.sim.dxl_servo import XM430_W350, XServo

#: |Present Velocity| above which the Moving flag is set [0.229 rev/min units].
MOVING_THRESHOLD = 10
POSITION_MODES = (3, 4, 5)


class JointSensorView:
    """The coordinates of a plant, without its actuators (a joint-encoder board).

    Implements the ``Plant`` protocol for a :class:`~poise.firmware_bridge.device.
    DeviceEndpoint`; the owner of the plant steps it (``step`` does nothing here) and both
    sides share ``lock``.
    """

    def __init__(self, plant, lock: threading.Lock) -> None:  # type: ignore[no-untyped-def]
        self.plant = plant
        self.lock = lock
        self._channels = tuple(c for c in plant.describe() if c.kind == "coordinate")

    @property
    def time(self) -> float:
        return float(self.plant.time)

    def describe(self):  # type: ignore[no-untyped-def]
        return self._channels

    def set_mode(self, mode: str) -> None:
        """No actuators: nothing to switch."""

    def set_actuator_command(self, qa_ref: Sequence[float],
                             tau_ff: Sequence[float] | None) -> None:
        """No actuators: nothing to command."""

    def step(self, dt: float) -> None:
        """The bus steps the plant."""

    def read_sensors(self) -> tuple[list[float], list[float], list[float], int]:
        with self.lock:
            q, _, _, status = self.plant.read_sensors()
        return list(q), [], [], int(status)


@dataclass
class BusStats:
    """What the virtual bus counted."""

    packets: int = 0
    replies: int = 0
    ignored: int = 0


@dataclass
class VirtualDynamixelBus:
    """Emulated X-series servos on a pty, driving ``plant`` in real time.

    Args:
        plant: a :class:`~poise.sim.plant.SimPlant` (its actuators, one servo each).
        servos: the conversion per actuator (default: :func:`default_servos` of the plant's m).
        rate: how often the plant is stepped and the present values refreshed [Hz].
        model_number: what the servos report at address 0.
        operating_mode: their initial Operating Mode (factory default 3; the device sets 4).

    Attributes:
        short_replies: fault injection: this many of the next status packets answering a
            read or sync read carry ``short_by`` data bytes fewer than asked (a truncated
            reply, or one meant for another instruction), each with a valid CRC.
        short_by: see ``short_replies`` (default 1).
    """

    plant: object
    servos: Sequence[ServoConfig] | None = None
    rate: float = 1000.0
    model_number: int = XM430_W350
    operating_mode: int = 3
    short_replies: int = 0
    short_by: int = 1
    lock: threading.Lock = field(default_factory=threading.Lock)
    stats: BusStats = field(default_factory=BusStats)
    path: str = ""
    _units: dict[int, XServo] = field(default_factory=dict)
    _master: int = -1
    _slave: int = -1
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        m = len([c for c in self.plant.describe() if c.kind == "actuator"])  # type: ignore[attr-defined]
        self.servos = with_defaults(self.servos, m)
        if len(self.servos) != m:
            raise ValueError(f"{len(self.servos)} servos configured for a plant with {m} "
                             "actuators")
        if not (math.isfinite(self.rate) and self.rate > 0):
            raise ValueError(f"rate = {self.rate} Hz: must be > 0")
        self._cfg = {s.id: s for s in self.servos}
        for s in self.servos:
            self._units[s.id] = XServo(s.id, model_number=self.model_number,
                                       operating_mode=self.operating_mode)
        self._decoder = PacketDecoder()
        self._mode = ""
        self._refs: tuple[float, ...] = ()
        self._refresh_present()

    # ------------------------------------------------------------------ servos

    def servo(self, servo_id: int) -> XServo:
        """The emulated servo of ID ``servo_id`` (for tests: fault injection, inspection)."""
        return self._units[servo_id]

    def _on_bus(self) -> dict[int, XServo]:
        """Responsive servos by their current ID (a write to address 7 renumbers one)."""
        return {u.id: u for u in self._units.values() if u.responsive}

    # ------------------------------------------------------------------ plant coupling

    def _couple(self, dt: float, now: float) -> None:
        """Run the Bus Watchdogs at ``now`` [s, monotonic], apply torque/goal to the plant,
        step it by ``dt`` [s] and refresh the present values."""
        plant = self.plant
        units = [self._units[s.id] for s in self.servos]  # type: ignore[union-attr]
        for u in units:
            u.check_watchdog(now)
        active = all(u.torque_on and u.get("Operating Mode") in POSITION_MODES for u in units)
        refs = tuple(s.qa(u.get("Goal Position"))
                     for s, u in zip(self.servos, units, strict=True))  # type: ignore[arg-type]
        with self.lock:
            if refs != self._refs:
                plant.set_actuator_command(list(refs), None)  # type: ignore[attr-defined]
                self._refs = refs
            mode = "position" if active else "disabled"
            if mode != self._mode:
                plant.set_mode(mode)  # type: ignore[attr-defined]
                self._mode = mode
            if dt > 0:
                plant.step(dt)  # type: ignore[attr-defined]
        self._refresh_present()

    def _refresh_present(self) -> None:
        sim = self.plant.sim  # type: ignore[attr-defined]
        with self.lock:
            qa, qad, tau = sim.qa, sim.qad, sim.tau
        for j, s in enumerate(self.servos):  # type: ignore[arg-type]
            vel = s.velocity_units(float(qad[j])) if math.isfinite(qad[j]) else 0
            pos = s.counts(float(qa[j])) if math.isfinite(qa[j]) else 0
            cur = s.current_units(float(tau[j])) if math.isfinite(tau[j]) else 0
            self._units[s.id].set_present(pos, vel, cur, abs(vel) > MOVING_THRESHOLD)

    # ------------------------------------------------------------------ packets

    def handle(self, packet: Packet, now: float | None = None) -> list[bytes]:
        """The status packets answering one instruction packet (possibly none) that arrived
        at ``now`` [s, monotonic; default: now]."""
        self.stats.packets += 1
        if packet.error is not None:  # a status packet on the bus: not for a servo
            self.stats.ignored += 1
            return []
        bus = self._on_bus()
        inst, pid, p = packet.instruction, packet.id, packet.params
        t = time.monotonic() if now is None else now
        addressed = bus.values() if pid == BROADCAST_ID else [bus[pid]] if pid in bus else []
        for unit in addressed:  # every instruction packet feeds the Bus Watchdog
            unit.feed(t)
        if inst == Instruction.PING:
            targets = sorted(bus) if pid == BROADCAST_ID else ([pid] if pid in bus else [])
            return [encode_status(i, bus[i].alert, bus[i].get("Model Number").to_bytes(2, "little")
                                  + bytes([bus[i].get("Firmware Version")])) for i in targets]
        if inst == Instruction.SYNC_READ:
            if pid != BROADCAST_ID or len(p) < 5:
                return []
            address, length = p[0] | (p[1] << 8), p[2] | (p[3] << 8)
            out = []
            for i in p[4:]:
                if i in bus:
                    error, data = bus[i].read(address, length)
                    out.append(encode_status(i, error, self._shorten(data)))
            return out
        if inst == Instruction.SYNC_WRITE:
            if pid != BROADCAST_ID or len(p) < 5:
                return []
            address, length = p[0] | (p[1] << 8), p[2] | (p[3] << 8)
            chunk = 1 + length
            for k in range(4, len(p) - chunk + 1, chunk):
                unit = bus.get(p[k])
                if unit is not None:
                    unit.write(address, p[k + 1:k + chunk])
            return []
        if pid == BROADCAST_ID:
            if inst == Instruction.WRITE and len(p) >= 3:
                for unit in bus.values():
                    unit.write(p[0] | (p[1] << 8), p[2:])
            return []
        unit = bus.get(pid)
        if unit is None:
            return []
        level = unit.get("Status Return Level")
        if inst == Instruction.READ:
            if len(p) != 4:
                return [encode_status(pid, ErrorCode.DATA_LENGTH | unit.alert)]
            error, data = unit.read(p[0] | (p[1] << 8), p[2] | (p[3] << 8))
            return [encode_status(pid, error, self._shorten(data))] if level >= 1 else []
        if inst == Instruction.WRITE:
            if len(p) < 3:
                return [encode_status(pid, ErrorCode.DATA_LENGTH | unit.alert)]
            error = unit.write(p[0] | (p[1] << 8), p[2:])
            return [encode_status(pid, error)] if level >= 2 else []
        if inst == Instruction.REBOOT:
            reply = [encode_status(pid, unit.alert)]
            unit.reboot()
            return reply
        return [encode_status(pid, ErrorCode.INSTRUCTION | unit.alert)]

    def _shorten(self, data: bytes) -> bytes:
        """``data`` without its last ``short_by`` bytes while :attr:`short_replies` asks."""
        if self.short_replies <= 0 or not data:
            return data
        self.short_replies -= 1
        return data[:max(0, len(data) - self.short_by)]

    def receive(self, data: bytes, now: float | None = None) -> list[bytes]:
        """Feed host bytes that arrived at ``now`` [s, monotonic; default: now]; the replies
        to every complete packet, in order."""
        out: list[bytes] = []
        t = time.monotonic() if now is None else now
        for packet in self._decoder.feed(data):
            out.extend(self.handle(packet, t))
        bus = self._on_bus()
        for pid in self._decoder.bad_crc_ids:  # the addressed servo reports the CRC error
            if pid in bus:
                out.append(encode_status(pid, ErrorCode.CRC | bus[pid].alert))
        self._decoder.bad_crc_ids.clear()
        self.stats.replies += len(out)
        return out

    # ------------------------------------------------------------------ pty, thread

    def start(self) -> str:
        """Open a raw pty and serve it from a daemon thread; returns the slave path."""
        master, slave = os.openpty()
        tty.setraw(slave)
        os.set_blocking(master, False)
        self._master, self._slave = master, slave
        self.path = os.ttyname(slave)
        self._thread = threading.Thread(target=self._run, name="poise-dxl-bus", daemon=True)
        self._thread.start()
        return self.path

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        for fd in (self._master, self._slave):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._master = self._slave = -1

    def _run(self) -> None:
        """Serve packets between plant steps of at most one period each: a reply waits for at
        most one step, and when the plant is slower than real time (a busy machine) its clock
        falls behind rather than the bus going deaf."""
        period = 1.0 / self.rate
        next_tick = time.monotonic() + period
        while not self._stop.is_set():
            timeout = max(0.0, next_tick - time.monotonic())
            try:
                ready, _, _ = select.select([self._master], [], [], timeout)
            except (OSError, ValueError):
                return
            if ready:
                try:
                    data = os.read(self._master, 4096)
                except (BlockingIOError, InterruptedError):
                    data = b""
                except OSError:  # EIO: nobody has the slave open
                    data = b""
                    self._stop.wait(0.001)
                if data:
                    for reply in self.receive(data):
                        self._write(reply)
            now = time.monotonic()
            if now >= next_tick:
                if now - next_tick > LATE_PERIODS * period:  # this process was not running
                    for unit in self._units.values():
                        unit.excuse(now - next_tick)
                self._couple(period, now)
                next_tick = max(next_tick + period, now)

    def _write(self, data: bytes) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._master, data)


@dataclass
class DynamixelSim:
    """A running virtual bus and joint-sensor board (see :func:`start_dynamixel_sim`)."""

    bus: VirtualDynamixelBus
    board: object
    plant: object

    @property
    def bus_path(self) -> str:
        return self.bus.path

    @property
    def sensors_path(self) -> str:
        return self.board.path  # type: ignore[attr-defined]

    def stop(self) -> None:
        self.board.stop()  # type: ignore[attr-defined]
        self.bus.stop()


def start_dynamixel_sim(model: str, rate: float = 1000.0, *,
                        servos: Sequence[ServoConfig] | None = None,
                        params: str | None = None, sensor_rate: int = 500,
                        watchdog_ms: int = 100, seed: int | None = 0,
                        model_number: int = XM430_W350,
                        operating_mode: int = 3) -> DynamixelSim:
    """Build the plant of ``model`` and start the virtual bus and the joint-sensor board.

    Args:
        model: built-in robot model (or model file) to simulate.
        rate: bus tick rate [Hz]: plant steps and present-value refreshes.
        servos: the conversion per actuator (default: IDs 1 … m, the device's defaults).
        params: plant parameter file (the "physical" robot, ``poise device sim --params``).
        sensor_rate: the sensor board's stream rate [Hz].
        watchdog_ms: the sensor board's watchdog [ms] (it has no actuators to make safe).
        seed: sensor noise seed.
        model_number, operating_mode: what the emulated servos start with.
    """
    from poise.firmware_bridge.device import DeviceEndpoint, PtyDevice
    from poise.sim import make_plant

    plant = make_plant(model, params, seed=seed)
    bus = VirtualDynamixelBus(plant, servos, rate=rate, model_number=model_number,
                              operating_mode=operating_mode)
    endpoint = DeviceEndpoint(JointSensorView(plant, bus.lock), rate_hz=sensor_rate,
                              watchdog_ms=watchdog_ms, firmware_id="poise-dxl-joints")
    board = PtyDevice(endpoint)
    bus.start()
    try:
        board.start()
    except BaseException:
        bus.stop()
        raise
    return DynamixelSim(bus, board, plant)


def serve_dynamixel_sim(model: str, rate: float = 1000.0, **kwargs: object
                        ) -> tuple[str, str, Callable[[], None]]:
    """Start a virtual Dynamixel bus for ``model``: ``(bus pty path, sensor-board pty path,
    stop)``. Keyword arguments as :func:`start_dynamixel_sim`."""
    sim = start_dynamixel_sim(model, rate, **kwargs)  # type: ignore[arg-type]
    return sim.bus_path, sim.sensors_path, sim.stop


def default_fifo_priority() -> int:
    """The command line bus's ``SCHED_FIFO`` priority: one below a controller's default
    ``loop.priority``, as the virtual device a controller starts itself."""
    from poise.api.rules import DEFAULT_LOOP_PRIORITY

    return max(0, DEFAULT_LOOP_PRIORITY - 1)


def _realtime(priority: int | None) -> None:
    """``SCHED_FIFO`` at ``priority`` for this process's threads, started after it: virtual
    servos answer as hardware does, whatever else the computer runs (a normal-scheduler bus
    missed the 34 ms status timeout of a real-time controller on a busy 2-core machine).
    ``None``: :func:`default_fifo_priority`, quietly the normal scheduler where refused; a
    refusal of an explicit priority is said on stderr."""
    from poise.firmware_bridge.lifetime import fifo

    if priority == 0:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))  # needs no privilege
        return
    got = fifo(default_fifo_priority() if priority is None else priority)
    if priority is not None and "refused" in got:
        print(f"poise-dynamixel-sim: {got['refused']}: normal scheduler", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m poise.devices.dynamixel_sim --model NAME``: prints ``PTY <path>`` and
    ``SENSORS <path>``, then serves until SIGTERM / Ctrl-C / ``--duration``."""
    ap = argparse.ArgumentParser(prog="poise-dynamixel-sim",
                                 description="A virtual Dynamixel X-series bus on a pty "
                                 "driving the simulated robot, plus a joint-sensor board.")
    ap.add_argument("--model", required=True, metavar="NAME", help="robot model to simulate")
    ap.add_argument("--rate", type=float, default=1000.0, metavar="HZ",
                    help="bus tick rate: plant steps per second (default 1000)")
    ap.add_argument("--sensor-rate", type=int, default=500, metavar="HZ",
                    help="sensor board stream rate [Hz] (default 500)")
    ap.add_argument("--params", metavar="FILE", help="plant parameter file")
    ap.add_argument("--config", metavar="FILE",
                    help="a TOML file whose [[device.servos]] tables set the servo IDs and "
                    "conversion (default: IDs 1 … m, spool radius 0.01 m, zero 2048)")
    ap.add_argument("--parent-pid", type=int, metavar="PID",
                    help="exit when process PID dies")
    ap.add_argument("--duration", type=float, metavar="S", help="stop after S seconds")
    ap.add_argument("--fifo-priority", type=int, metavar="P",
                    help="SCHED_FIFO priority of the bus's threads (0: the normal scheduler; "
                    f"default {default_fifo_priority()}, one below a controller's default "
                    "loop.priority, where the OS grants it)")
    args = ap.parse_args(argv)
    _realtime(args.fifo_priority)
    servos = None
    try:
        if args.config:
            with open(args.config, "rb") as f:
                doc = tomllib.load(f)
            servos = servos_from_config(doc.get("device", {}).get("servos", []),
                                        where=f"{args.config}: device.servos") or None
        sim = start_dynamixel_sim(args.model, args.rate, servos=servos, params=args.params,
                                  sensor_rate=args.sensor_rate)
    except (ValueError, KeyError, OSError, tomllib.TOMLDecodeError) as exc:
        print(f"poise-dynamixel-sim: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    with contextlib.suppress(ValueError):  # not the main thread
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
    if args.parent_pid is not None:
        from poise.firmware_bridge.lifetime import watch_parent
        if not watch_parent(args.parent_pid, stop.set):
            sim.stop()
            return 1
    print(f"PTY {sim.bus_path}", flush=True)
    print(f"SENSORS {sim.sensors_path}", flush=True)
    t_end = math.inf if args.duration is None else time.monotonic() + args.duration
    try:
        while not stop.is_set() and time.monotonic() < t_end:
            stop.wait(min(0.1, max(0.0, t_end - time.monotonic())))
    except KeyboardInterrupt:
        pass
    finally:
        sim.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["DynamixelSim", "JointSensorView", "VirtualDynamixelBus", "default_fifo_priority",
           "main", "serve_dynamixel_sim", "start_dynamixel_sim"]
