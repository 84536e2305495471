"""Targets answered at once, their plans finished in the background: :class:`PlanRefiner`.

With ``loop.live_targets`` a target received while the loop runs is adopted as soon as its
quick plan is made (:meth:`MotionPlanner.quick_plan
<poise.motion.motion_planner.MotionPlanner.quick_plan>`, milliseconds): the move towards it
starts at the next cycle. What the full plan would also have brought, the parameters at the
target (stability bound, automatic gains) and in ``fb`` the model's predicted response to the
move, is computed afterwards (:meth:`MotionPlanner.refine
<poise.motion.motion_planner.MotionPlanner.refine>`) by one worker thread here and handed to
whoever owns the plan: the service applies it
(:meth:`CommandRoom.apply_refinement <poise.controller.commands.CommandRoom.apply_refinement>`),
the real-time process's parent sends it to the child
(:class:`~poise.controller.realtime.messages.PlanRefined`).

One thread and one waiting job: a newer target's job replaces the one not yet begun, and a job
that is no longer the newest when its refinement ends is dropped (a generation counter). A
newer target therefore never waits for an older one's background work, and the older one's
result never overwrites the newer one's parameters.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from poise.motion.motion_planner import MotionPlanner, MotionState, Move
    from poise.motion.planner import TargetPlan


@dataclass(frozen=True)
class QuickTarget:
    """A target's quick plan, adopted at once; its refinement, made later (by the service,
    or by the real-time process's parent, which makes this too and hands it over as
    ``Controller.submit``'s ``prepared``), names it by ``serial``."""

    plan: TargetPlan
    serial: int


@dataclass(frozen=True)
class RefineJob:
    """One quick plan to finish.

    Attributes:
        plan: the quick plan adopted.
        state: where its move started (``move_from``: q̄ then) and the parameters then.
        serial: the number the plan's owner knows it by.
        generation: the refiner's generation when it was queued (newer jobs: higher).
        queued: when it was queued (``time.monotonic()``) [s].
    """

    plan: TargetPlan
    state: MotionState
    serial: int
    generation: int
    queued: float


class PlanRefiner:
    """One worker thread that refines the newest quick plan (see the module docstring).

    Args:
        planner: gives the planner to refine with (the caller's, with its current limits
            and steppers), called in the worker thread for each job.
        done: called in the worker thread with each job that is still the newest when its
            refinement ends, its outcome (a :class:`~poise.motion.motion_planner.Move`, or
            the exception the planner raised) and the seconds since it was queued.
        cpus: the CPUs the worker thread runs on (off the control loop's; None: where the
            OS puts it).
        name: the worker thread's name.
    """

    def __init__(self, planner: Callable[[], MotionPlanner],
                 done: Callable[[RefineJob, Move | Exception, float], None], *,
                 cpus: frozenset[int] | None = None, name: str = "poise-plan-refine") -> None:
        self._planner, self._done = planner, done
        self._cpus, self._name = cpus, name
        self._cond = threading.Condition()
        self._job: RefineJob | None = None
        self._generation = 0
        #: The worker thread and what ends it (made at the first job after :meth:`close`).
        self._thread: threading.Thread | None = None
        self._quit = threading.Event()
        #: Jobs replaced before they began, or dropped as stale when they ended.
        self.dropped = 0
        #: Jobs handed to ``done``, and how many of those calls raised.
        self.done = 0
        self.errors = 0

    def submit(self, plan: TargetPlan, state: MotionState, serial: int) -> RefineJob:
        """Queue ``plan``'s refinement in place of any job not yet begun (that one, and one
        under way, are stale from now on); the worker thread starts at the first job."""
        with self._cond:
            self._generation += 1
            if self._job is not None:
                self.dropped += 1
            job = self._job = RefineJob(plan, state, serial, self._generation,
                                        time.monotonic())
            if self._thread is None:
                self._quit = threading.Event()
                self._thread = threading.Thread(target=self._run, args=(self._quit,),
                                                name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify()
        return job

    def cancel(self) -> None:
        """Drop the job not yet begun and make the one under way stale (a target planned in
        full, or none, replaced the quick plan)."""
        with self._cond:
            self._generation += 1
            if self._job is not None:
                self.dropped += 1
                self._job = None

    def stale(self, job: RefineJob) -> bool:
        """Whether a newer job (or a cancel) came after ``job``."""
        return job.generation != self._generation

    def close(self, timeout: float = 1.0) -> None:
        """End the worker thread: what waits is dropped, a refinement under way is waited
        for at most ``timeout`` [s] and its result dropped. A later :meth:`submit` starts
        a new one."""
        with self._cond:
            self.cancel()
            thread, self._thread = self._thread, None
            self._quit.set()
            self._cond.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _take(self, quit_: threading.Event) -> RefineJob | None:
        with self._cond:
            while self._job is None and not quit_.is_set():
                self._cond.wait()
            if quit_.is_set():
                return None
            job, self._job = self._job, None
            return job

    def _run(self, quit_: threading.Event) -> None:
        if self._cpus:
            from poise.devices.affinity import pin_thread

            pin_thread(self._cpus)  # refused: it runs where the OS puts it
        while True:
            job = self._take(quit_)
            if job is None:
                return
            outcome: Move | Exception
            try:
                outcome = self._planner().refine(job.plan, job.state)
            except Exception as exc:  # the owner says so (and applies what it can)
                outcome = exc
            with self._cond:
                stale = self.stale(job) or quit_.is_set()
                if stale:
                    self.dropped += 1
            if stale:
                continue
            self.done += 1
            try:
                self._done(job, outcome, time.monotonic() - job.queued)
            except Exception:  # an owner's failure must not end the thread
                self.errors += 1


__all__ = ["PlanRefiner", "QuickTarget", "RefineJob"]
