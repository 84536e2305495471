"""When the service's cycle runs: the loop thread and its two clocks (``loop.pacing``).

* ``device`` (default): the device streams sensor frames at the loop rate and the loop answers
  each one as soon as it arrives (a blocking read); if it fell behind it skips to the newest
  frame of the device's backlog (``Device.read_nowait``), counted as missed (the loop was
  still busy when it came) or coalesced (a device burst while the loop was idle).
  Latency = frame arrival → setpoint written. With the wire path (``loop.wire``) the read is
  the port's undecoded bytes (``RawReads.read_raw``) and the cycle answers them on the wire
  path where it can (:meth:`~poise.controller.cycle.Cycle.run_wire`).
* ``host``: the loop keeps its own clock (sleep, then spin on ``perf_counter`` for the last
  :data:`SPIN`) and uses the newest frame at each deadline; for devices that must be polled or
  stream at another rate. Latency then includes the frame's age. A polled device (a servo
  bus) is always host-paced: each deadline reads the bus once. Deadlines slept through are
  skipped and counted as missed.

The garbage collector runs in the slack between cycles (:class:`~poise.controller.gcpacing.
CollectorPacing`), never in one. :class:`Pacer` only decides when; what a cycle does is
:class:`~poise.controller.cycle.Cycle`'s.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any

from poise.api.state import State
from poise.controller.cycle import Cycle
from poise.controller.gcpacing import CollectorPacing
from poise.devices.affinity import CpuPlan, pin_thread
from poise.devices.base import DeviceError, DeviceTimeout
from poise.firmware_bridge.lifetime import fifo

#: Host pacing spins on the clock for this long before each deadline [s].
SPIN = 0.25e-3


def enter_realtime(priority: int) -> dict[str, Any]:
    """Prepare the calling (loop) thread for the cycle; returns what was done, JSON-ready.

    * ``gc.freeze()``: every object made during start-up (models, kernels, configuration)
      moves to the permanent generation, so the collector never scans them again during a
      cycle.
    * ``priority`` > 0: ``SCHED_FIFO`` at that priority for this thread (Linux: a thread is
      a task, ``pid 0`` is the caller). Needs ``CAP_SYS_NICE`` or an ``rtprio`` limit
      (docs/controller.md); refused, the thread keeps the normal scheduler and the reason is
      reported.
    """
    import gc

    gc.collect()
    gc.freeze()
    return {"gc_frozen": gc.get_freeze_count(), **fifo(priority)}


class Pacer:
    """The loop thread's clock (see the module docstring).

    Args:
        cycle: the cycle it runs.
        priority: ``loop.priority`` (``SCHED_FIFO``; 0: the normal scheduler).
        cpu_plan: where the loop thread runs (``loop.cpu``), or None with ``unpinned``
            saying why it is not pinned.
        sensor_hold: a device-paced read waits this long for a frame before the cycle holds
            [s]; host pacing: the oldest frame a cycle uses [s].
    """

    def __init__(self, cycle: Cycle, priority: int, cpu_plan: CpuPlan | None, unpinned: str,
                 sensor_hold: float) -> None:
        self.cycle = cycle
        self.priority = priority
        self.cpu_plan, self.unpinned = cpu_plan, unpinned
        self.sensor_hold = sensor_hold
        self.period = cycle.period
        #: ``device`` or ``host`` (set at connect: a polled device is host-paced).
        self.mode = "device"
        #: ``loop.busy_poll`` where the device supports it (set at connect).
        self.busy_poll = False
        #: Set: the loop thread ends.
        self.quit = threading.Event()
        #: The collector's pacing (the loop's once it runs).
        self.gc = CollectorPacing()
        #: What the loop thread got (:func:`enter_realtime`, the CPU): JSON-ready.
        self.realtime: dict[str, Any] = {}

    def run(self) -> None:
        """The loop thread: real-time set-up, then the clock until :attr:`quit`; a crash
        latches a fault with the reason (never dies silently)."""
        self.realtime = {**enter_realtime(self.priority), **self._pin(),
                         "busy_poll": self.busy_poll}
        self.cycle.hub.announce("info", code="realtime", **self.realtime)
        try:
            with CollectorPacing() as self.gc:
                if self.mode == "host":
                    self.host_paced()
                else:
                    self.device_paced()
        except Exception as exc:
            self.cycle.faults.fault(f"control loop crashed: {type(exc).__name__}: {exc}")
            raise

    def _pin(self) -> dict[str, Any]:
        """The loop thread onto its CPU (``loop.cpu``); what was done, JSON-ready."""
        plan = self.cpu_plan
        if plan is None:
            return {"cpu": None, "unpinned": self.unpinned}
        refused = pin_thread(frozenset({plan.loop}))
        if refused:
            return {"cpu": None, "unpinned": refused}
        return {**plan.as_dict(), "loop_tid": threading.get_native_id()}

    def device_paced(self) -> None:
        """Each sensor frame starts a cycle, the newest of a backlog only (module docstring);
        ``period`` is the time between the frames answered."""
        cycle, quit, gc = self.cycle, self.quit, self.gc
        hold_after = self.sensor_hold
        prev: float | None = None
        busy_until = -math.inf  # perf_counter when the last cycle finished
        while not quit.is_set():
            device = cycle.device
            if device is None:
                return
            wire = cycle.wire
            turn = None if wire is None else cycle.wire_turn(wire)
            try:
                if wire is None:
                    sample = device.read(timeout=hold_after)
                else:
                    read = wire.device.read_raw(hold_after)
            except DeviceTimeout:
                cycle.no_frame(time.perf_counter() - cycle.last_frame_time)
                gc.after_cycle()  # no frame for a while: still collect
                continue
            except DeviceError as exc:
                self._failed(exc)
                gc.after_cycle()
                continue
            if wire is not None:
                if read is not None:  # a read, not yet decoded: the wire cycle answers it
                    t0 = time.perf_counter()
                    period = self.period if prev is None else read.host_time - prev
                    if turn is not None and cycle.run_wire(wire, turn, read, t0, period):
                        prev = read.host_time
                        gc.after_cycle()
                        busy_until = time.perf_counter()
                        continue
                    if turn is not None:  # the wire path could have answered it: declined
                        wire.passed += 1
                    wire.device.feed_raw(read)  # the ordinary way: decoded, counted, queued
                newest = device.read_nowait()
                if newest is None:  # part of a frame, or no sensor frame
                    continue
                sample = newest
            missed = coalesced = 0
            nowait = device.read_nowait  # the device's backlog
            while True:  # answer the newest frame only
                older = sample
                try:
                    newer = nowait()
                except DeviceError:
                    break
                if newer is None:
                    break
                sample = newer
                # Skipped: missed if it arrived while the previous cycle was still running
                # (the host fell behind), coalesced if the loop was idle (a device burst).
                if older.host_time < busy_until:
                    missed += 1
                else:
                    coalesced += 1
            t0 = time.perf_counter()
            period = self.period if prev is None else sample.host_time - prev
            prev = sample.host_time
            cycle.count_skipped(missed, coalesced)
            cycle.run(sample, t0, t0 - sample.host_time, period)
            gc.after_cycle()  # the garbage collector in the slack, not in a cycle
            busy_until = time.perf_counter()

    def host_paced(self) -> None:
        """A cycle at each deadline of the host's own clock on the newest frame (module
        docstring); ``period`` is the time between the wake-ups."""
        cycle, quit, gc = self.cycle, self.quit, self.gc
        hold_after = self.sensor_hold
        period = self.period
        deadline = time.perf_counter()
        prev_t0: float | None = None
        while not quit.is_set():
            device = cycle.device
            if device is None:
                return
            gc.after_cycle()  # the slack before the next deadline, whatever came last
            deadline += period
            left = deadline - time.perf_counter()
            if left > SPIN:
                time.sleep(left - SPIN)
            while time.perf_counter() < deadline:
                pass
            t0 = time.perf_counter()
            late = t0 - deadline
            if late > period:
                skipped = int(late // period)
                cycle.count_skipped(skipped)
                deadline += skipped * period
            try:
                sample = device.latest()
            except DeviceError as exc:
                self._failed(exc)
                continue
            if sample is None or t0 - sample.host_time > hold_after:
                cycle.no_frame(t0 - (sample.host_time if sample else cycle.last_frame_time))
                continue
            measured = period if prev_t0 is None else t0 - prev_t0
            prev_t0 = t0
            cycle.run(sample, t0, t0 - deadline, measured)

    def _failed(self, exc: DeviceError) -> None:
        """A read failed (a servo's hardware error, a bus that stopped answering): fault,
        once; then wait a sensor-hold interval before the next try."""
        if self.cycle.sm.state in (State.RUNNING, State.READY):
            self.cycle.faults.fault(f"device error: {exc}")
        self.quit.wait(self.sensor_hold)


__all__ = ["SPIN", "Pacer", "enter_realtime"]
