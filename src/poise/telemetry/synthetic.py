"""A synthetic fixed-rate loop speaking the controller's bus contract.

:class:`SyntheticLoop` is a real producer thread (not a mock): it paces itself on a host clock
(sleep, then spin on ``perf_counter`` for the last fraction of a period), emits one
:class:`CycleSample` per cycle into every subscribed :class:`SampleQueue`, records
:class:`Event` s, and answers commands through a thread-safe ``submit`` with a small state
machine (``inactive`` → ``active`` → ``estop`` …). Telemetry tests and benchmarks use it
where the full controller is not needed; it also shows the interface the MQTT bridge expects of
a command handler.
"""

from __future__ import annotations

import collections
import math
import threading
import time
from typing import Any

from poise.api.bus import Command, CommandResponse, CycleSample, Event, SampleQueue


class SyntheticLoop:
    """A 1 kHz (configurable) loop thread with a command handler.

    Attributes:
        cycles: cycles completed.
        max_lateness_us: worst wake-up lateness seen [µs].
    """

    def __init__(self, rate_hz: float = 1000.0, n: int = 3, m: int = 2, task_dim: int = 2,
                 spin_s: float = 3e-4) -> None:
        self.rate_hz = rate_hz
        self.n, self.m, self.task_dim = n, m, task_dim
        self.spin_s = spin_s
        self._lock = threading.Lock()
        self._subs: list[SampleQueue[CycleSample]] = []
        self._event_subs: list[SampleQueue[Event]] = []
        self._state = "inactive"
        self._params: dict[str, Any] = {
            "algorithm": "alg2", "mode": "ff", "target": [0.3] * task_dim,
            "gains": {"gamma": 0.5, "gamma_z": 0.5, "gamma_e": 0.5, "damping": 0.01},
            "rate_hz": rate_hz, "model": "synthetic", "n": n, "m": m, "task_dim": task_dim,
            "algorithms": ["alg1", "alg2", "plain", "dls"],
        }
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.cycles = 0
        self.max_lateness_us = 0.0
        self.lateness_us: collections.deque[float] = collections.deque(maxlen=600_000)

    # -- the command-handler interface -------------------------------------------------------
    @property
    def state(self) -> str:
        """Current state name."""
        return self._state

    def params(self) -> dict[str, Any]:
        """A copy of the live parameters."""
        with self._lock:
            return {k: (dict(v) if isinstance(v, dict) else v) for k, v in self._params.items()}

    def submit(self, command: Command) -> CommandResponse:
        """Apply ``command`` between two cycles (thread-safe); always answered."""
        with self._lock:
            ok, reason = self._apply(command)
        resp = CommandResponse(id=command.id, command=command.name, accepted=ok, reason=reason)
        self._emit(Event(time.monotonic(), "command", {**resp.as_dict(), "source": command.source}))
        if ok and command.name in ("target", "gains", "algorithm", "mode"):
            self._emit(Event(time.monotonic(), "param", {command.name: command.value}))
        return resp

    def _apply(self, c: Command) -> tuple[bool, str]:
        if c.name == "estop":
            self._transition("estop", "e-stop command")
            return True, ""
        if c.name == "clear":
            if self._state not in ("estop", "error"):
                return False, f"nothing to clear in state {self._state}"
            self._transition("inactive", "cleared")
            return True, ""
        if c.name == "run":
            if self._state in ("estop", "error"):
                return False, f"cannot {c.value} in state {self._state}: clear first"
            self._transition("active" if c.value == "start" else "inactive", f"run {c.value}")
            return True, ""
        if c.name == "target":
            if len(c.value) != self.task_dim:
                return False, f"target needs {self.task_dim} components"
            self._params["target"] = list(c.value)
        elif c.name == "gains":
            self._params["gains"] = {**self._params["gains"], **c.value}
        elif c.name in ("algorithm", "mode"):
            self._params[c.name] = c.value
        else:
            return False, f"unknown command {c.name!r}"
        return True, ""

    def _transition(self, to: str, cause: str) -> None:
        frm, self._state = self._state, to
        if frm != to:
            self._emit(Event(time.monotonic(), "state", {"from": frm, "to": to, "cause": cause}))

    # -- the bus ------------------------------------------------------------------------------
    def subscribe(self, maxlen: int = 10_000) -> SampleQueue[CycleSample]:
        """A new queue that receives every following cycle sample."""
        q: SampleQueue[CycleSample] = SampleQueue(maxlen)
        self._subs.append(q)
        return q

    def events(self, maxlen: int = 1_000, history: bool = False) -> SampleQueue[Event]:
        """A new queue that receives every following event (this loop keeps no history:
        ``history`` is accepted for the controllers' signature)."""
        q: SampleQueue[Event] = SampleQueue(maxlen)
        self._event_subs.append(q)
        return q

    def _emit(self, event: Event) -> None:
        for q in list(self._event_subs):
            q.put(event)

    # -- the loop -----------------------------------------------------------------------------
    def start(self) -> SyntheticLoop:
        self._thread = threading.Thread(target=self._run, name="synthetic-loop", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> SyntheticLoop:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        period = 1.0 / self.rate_hz
        clock = time.perf_counter
        next_t = clock() + period
        last = clock()
        seq = 0
        while not self._stop.is_set():
            remaining = next_t - clock()
            if remaining > self.spin_s:
                time.sleep(remaining - self.spin_s)
            while clock() < next_t:
                pass
            now = clock()
            lateness = (now - next_t) * 1e6
            period_us = (now - last) * 1e6
            last = now
            sample = self._sample(seq, time.monotonic(), lateness, period_us)
            for q in self._subs:
                q.put(sample)
            self.lateness_us.append(lateness)
            self.max_lateness_us = max(self.max_lateness_us, lateness)
            self.cycles += 1
            seq += 1
            next_t += period
            if next_t < clock():  # overrun: skip missed deadlines, keep the phase
                next_t += period * math.ceil((clock() - next_t) / period)

    def _sample(self, seq: int, t: float, lateness: float, period_us: float) -> CycleSample:
        w = 2 * math.pi * 0.5 * t
        q = tuple(0.3 * math.sin(w + i) for i in range(self.n))
        q_bar = tuple(v * 0.99 for v in q)
        target = tuple(self._params["target"])
        x = tuple(q[i % self.n] for i in range(self.task_dim))
        err = math.sqrt(sum((a - b) ** 2 for a, b in zip(target, x, strict=True)))
        return CycleSample(
            t=t, seq=seq, state=self._state, q=q, q_bar=q_bar,
            qa_ref=tuple(q[: self.m]), tau_ff=(), target=target, x=x, task_error=err,
            statics_residual=1e-6 * abs(math.sin(w)), period_us=period_us,
            lateness_us=lateness, compute_us=20.0, latency_us=50.0)
