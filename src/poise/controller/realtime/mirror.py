"""What the parent knows of the real-time process's controller without asking it.

:class:`ChildMirror` holds ``state``, ``reason``, ``params``, ``estops``, ``target_status`` and
``target_note`` (and what its step measured of the plant: detuning, spring scale, bodies)
as the child last reported them (its
:class:`~poise.controller.realtime.messages.EstopCount`, ``EventBatch``, ``ParamsChanged``,
``PlanChanged``), republishes the child's events to this process's subscribers, and feeds them
the cycle records read from the shared-memory ring. Reading any of it costs no round trip.
"""

from __future__ import annotations

import math
import threading
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from poise.api.bus import CycleSample, Event, SubscriberHub
from poise.api.state import LATCHED, State
from poise.controller.realtime.messages import (
    EstopCount,
    EventBatch,
    ParamsChanged,
    PlanChanged,
)
from poise.controller.ring import CycleRing, RingError

if TYPE_CHECKING:  # imported where used: spawning the child needs neither (SciPy)
    from poise.motion.params import LiveParams
    from poise.motion.safety import SafetyLimits


#: A plant's bodies: masses [kg] and joint stiffnesses [N·m/rad], one of each per body.
PlantBodies = tuple[tuple[float, ...], tuple[float, ...]]


class ChildMirror(SubscriberHub):
    """The child controller's observable state, as it last reported it (see the module
    docstring). A subclass sets ``_params`` (the live parameters it starts from) before any
    ``ParamsChanged`` can arrive."""

    def __init__(self) -> None:
        SubscriberHub.__init__(self)
        self._state = State.IDLE
        self._reason = ""
        self._estops = 0  # the child's Controller.estops, as it last reported it
        self._target = ("", "")
        self._changed = threading.Condition()
        self._dead = ""  # the death reason once the child is gone unexpectedly
        self._params: LiveParams
        #: Cycle records overwritten in the ring before the parent read them.
        self.samples_lost = 0
        self._since = 0
        self._last_sample: CycleSample | None = None
        self._plan_goal: np.ndarray | None = None  # the child's current plan's q_goal
        self._limits: SafetyLimits | None = None  # the child's safety limits (its plans')
        self._last_summary: dict[str, Any] = {}
        self._detuning = 0.0  # the child's step's detuning (its move_sway events)
        self._spring_scale = 0.0  # the child's step's spring scale (its spring_scale events)
        self._plant_bodies: PlantBodies | None = None  # its plant_estimate events'
        self._final: dict[str, Any] | None = None

    @property
    def state(self) -> State:
        """The real-time controller's state (mirrored; no round trip)."""
        return self._state

    @property
    def reason(self) -> str:
        """Why a latched state (fault, estop) was entered; empty otherwise."""
        return self._reason

    @property
    def params(self) -> LiveParams:
        """The live parameters the next cycle uses (mirrored)."""
        return self._params

    @property
    def estops(self) -> int:
        """The child's ``Controller.estops`` as it last reported it (never ahead of the
        child's: a command stamped with it is refused there if an e-stop latched since)."""
        return self._estops

    @property
    def target_status(self) -> str:
        """``reachable``, ``unreachable`` or ``""`` (see ``Controller.target_status``)."""
        return self._target[0]

    @property
    def target_note(self) -> str:
        """Why the target is unreachable ('' otherwise)."""
        return self._target[1]

    @property
    def detuning(self) -> float:
        """How far the plant's modes are from the model's, as the child's step measured
        after its moves (its last ``info`` ``move_sway`` event; :mod:`poise.motion.sway`):
        the parent's plans allow for it."""
        return self._detuning

    @property
    def spring_scale(self) -> float:
        """The plant's springs' scale as the child's step measured where the plant rested
        (its last ``info`` ``spring_scale`` event; :mod:`poise.motion.springs`): the
        parent's plans are aimed with it."""
        return self._spring_scale

    @property
    def plant_bodies(self) -> PlantBodies | None:
        """The plant's bodies (masses [kg], joint stiffnesses [N·m/rad]) as the child's step
        estimated them from the held efforts (its last ``info`` ``plant_estimate`` event;
        :mod:`poise.motion.masses`): the parent's plans are aimed for that plant. None: the
        child plans on the model."""
        return self._plant_bodies

    def wait_for(self, *states: State, timeout: float = 5.0) -> bool:
        """Block until the state is one of ``states``; False on timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: self._state in states, timeout)

    # -- what the child reports (the reader thread) --------------------------------------

    def _on_estops(self, msg: EstopCount) -> None:
        self._estops = msg.estops

    def _on_params(self, msg: ParamsChanged) -> None:
        self._params = type(self._params).from_dict(msg.values)

    def _on_plan(self, msg: PlanChanged) -> None:
        self._target = (msg.status, msg.note)
        self._plan_goal = None if msg.goal is None else np.asarray(msg.goal, dtype=float)
        self._limits = msg.limits

    def _on_events(self, msg: EventBatch) -> None:
        """The child's events, in order: a state change mirrored, then published here."""
        for ev in msg.events:
            if ev.kind == "state":
                to, frm = State(ev.data["to"]), ev.data.get("from")
                with self._changed:
                    self._state = to
                    if to in LATCHED:
                        self._reason = str(ev.data.get("cause", ""))
                    elif frm in (s.value for s in LATCHED) or to == State.IDLE:
                        self._reason = ""
                    self._changed.notify_all()
            elif ev.kind == "info" and ev.data.get("code") == "move_sway":
                self._detuning = float(ev.data.get("detuning", self._detuning))
            elif ev.kind == "info" and ev.data.get("code") == "spring_scale":
                self._spring_scale = float(ev.data.get("spring_scale", self._spring_scale))
            elif ev.kind == "info" and ev.data.get("code") == "plant_estimate":
                masses, stiffness = ev.data.get("masses"), ev.data.get("stiffness")
                self._plant_bodies = None if masses is None or stiffness is None else \
                    (tuple(map(float, masses)), tuple(map(float, stiffness)))
            self._publish(ev)

    def _drain_ring(self, ring: CycleRing) -> None:
        """The cycle records the child wrote since the last read, to every subscriber."""
        try:
            samples, self._since, lost = ring.read_new(self._since)
        except RingError:
            return
        self.samples_lost += lost
        if not samples:
            return
        self._last_sample = samples[-1]
        for sub in self._sample_subs:
            for s in samples:
                sub.put(s)

    def _died(self, code: int | None) -> str:
        """The child is gone unexpectedly (exit code ``code``): ``fault`` with the reason
        "real-time process died (exit code …)", its events published; returns the reason."""
        reason = f"real-time process died (exit code {code})"
        with self._changed:
            old = self._state
            self._dead = reason
            self._state, self._reason = State.FAULT, reason
            self._changed.notify_all()
        now = time.monotonic()
        self._publish(Event(now, "state", {"from": old.value, "to": State.FAULT.value,
                                           "cause": reason}))
        self._publish(Event(now, "fault", {"source": "host", "code": "realtime_died",
                                           "reason": reason, "exit_code": code}))
        return reason

    def _local_summary(self) -> dict[str, Any]:
        """The last known summary, updated with the last cycle record and the state."""
        out = dict(self._final or self._last_summary)
        s = self._last_sample
        if s is not None:
            out.update(_finite({"q": list(s.q), "q_bar": list(s.q_bar), "x": list(s.x),
                                "target": list(s.target), "task_error": s.task_error,
                                "statics_residual": s.statics_residual}))
            if s.qa_ref:
                out["qa_ref"] = list(s.qa_ref)
        out.update(state=self._state.value, reason=self._reason)
        out.setdefault("reached", False)
        out.setdefault("timing", {})
        return out


def _finite(v: Any) -> Any:
    """``v`` with every non-finite float None (a summary is JSON)."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_finite(x) for x in v]
    return v


__all__ = ["ChildMirror", "PlantBodies"]
