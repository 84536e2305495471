"""Feedback stalled at an actuator limit: the service re-plans from the measured state.

Sampled re-targeting (:mod:`poise.motion.retarget`) removes a static error left by a plant that
differs from the model; when the actuator limits keep its correction from the target (an
actuator at its limit on a branch of the held family that cannot reach it on the true robot),
the control cycle announces ``info`` ``stalled_at_limit`` with the live target, the mismatch
``m̂`` it measured and ``aim = x̄ + m̂``: where the model must go for the plant to reach the
target (:meth:`Cycle._retarget_events <poise.controller.cycle.Cycle._retarget_events>`).

:class:`StallReplanner` hears that event (a subscriber of the controller's events, in its own
thread, never in the control cycle) and plans ``aim`` from the measured state: the planner's
starts (q̄, the measured q, the last goal, more where none reaches it) find another member
of the held family that reaches it within the limits, and its move from q̄ is chosen on the
model. The plan goes to the controller as a ``target`` command from source ``replan`` whose
value is the live target and whose ``prepared`` is a :class:`Replan`: the command room adopts
the plan and keeps the live target, so feedback then aims at the target itself, not at
``aim``. Once per target: a second stall on the same target is left to the continuous
integrator (the event says so). An e-stop latched after the stall was heard cancels the
re-plan (``Command.estops``). The same class serves the in-process controller and the
real-time process's parent, which plans here and hands the plan to the child
(``loop.replan_on_stall``, on by default).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from poise.api.bus import Command, CommandResponse, Event, SubscriberHub

if TYPE_CHECKING:
    from poise.motion.planner import TargetPlan

#: The command source of a re-plan (in the ``command`` and ``param`` events).
SOURCE = "replan"
#: The event of a stall.
STALL_CODE = "stalled_at_limit"


@dataclass(frozen=True)
class Replan:
    """A stall's re-plan, a ``target`` command's ``prepared``: adopt ``plan`` (aimed at
    ``aim``, its move from q̄ chosen) and keep ``target`` as the live target."""

    plan: TargetPlan
    target: np.ndarray
    aim: np.ndarray


class StallReplanner:
    """Re-plans a stalled target in a thread of its own (see the module docstring).

    Args:
        hub: the controller whose events announce the stalls.
        plan_aim: plans ``aim`` from the measured state with its move from q̄ (in this
            thread); None where it is unreachable within the limits.
        submit: hands the ``target`` command and its :class:`Replan` to the controller.
        announce: publishes what the re-planner did (an ``info`` event) where no command
            carries it.
    """

    def __init__(self, hub: SubscriberHub, plan_aim: Callable[[np.ndarray], TargetPlan | None],
                 submit: Callable[[Command, Replan], CommandResponse],
                 announce: Callable[..., Any]) -> None:
        self._plan_aim, self._submit, self._announce = plan_aim, submit, announce
        self._hub = hub
        self._events = hub.events(maxlen=1000, history=False)
        self._stop = threading.Event()
        self._replanned: list[float] | None = None  # the last target re-planned for
        self.replans = 0
        self._thread = threading.Thread(target=self._run, name="poise-replan", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop listening (the thread ends within its wait)."""
        self._stop.set()
        self._hub.unsubscribe(self._events)
        self._thread.join(timeout=2.0)

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self._events.wait(0.2):
                continue
            stalls = [e for e in self._events.drain() if _is_stall(e)]
            if stalls:
                self.handle(stalls[-1].data)

    def handle(self, data: dict[str, Any]) -> bool:
        """One stall event's data (``target``, ``aim``): plan and hand it over; whether a
        re-plan was accepted."""
        since = getattr(self._hub, "estops", None)  # an e-stop after this cancels it
        target = [float(v) for v in data["target"]]
        aim = np.asarray(data["aim"], dtype=float)
        if self._replanned == target:
            self._announce("info", code="replan_skipped", target=target,
                           text="stalled again after a re-plan to this target: the "
                                "continuous integrator carries on alone")
            return False
        self._replanned = target
        try:
            plan = self._plan_aim(aim)
        except ValueError as exc:  # UnstableTarget, a gain refused at the new goal
            plan, why = None, str(exc)
        else:
            why = "no held configuration reaches it within the actuator limits"
        if plan is None or not plan.reachable:
            self._announce("info", code="replan_failed", target=target, aim=aim.tolist(),
                           text=f"re-plan after the stall: {why}")
            return False
        response = self._submit(Command("target", target, source=SOURCE, estops=since),
                                Replan(plan, np.asarray(target), aim))
        self.replans += int(response.accepted)
        return response.accepted


def _is_stall(event: Event) -> bool:
    return event.kind == "info" and event.data.get("code") == STALL_CODE \
        and "target" in event.data and "aim" in event.data


__all__ = ["SOURCE", "STALL_CODE", "Replan", "StallReplanner"]
