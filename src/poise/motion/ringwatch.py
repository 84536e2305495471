"""Feedback that rings on the plant: the automatic rate gain backed off (issue 35).

The automatic gains are chosen on the loop linearised at the model (:mod:`poise.motion.
bounds`), with a margin over a family of plants whose springs are off by ±20 %. The
linearisation knows neither a tendon's dead band, nor the plant's own sensor delay, nor how
far the plant's held map is from the model's near a fold, and there a gain the model finds
well damped can make the real loop ring: ``soft_arm_stiff`` on the ``real`` plant (bench
control, target 17: the plant holds it past where the model's workspace ends) arrived within
0.2 mm, and 0.5 s later the loop at Γ = 5 /s rang up to 190 mm through the tendons' dead
band and never settled; at Γ ≤ 2 /s it settles in under 2 s.

:class:`RingWatch` watches the task error the IK integrates (the aim minus the measurement)
after the move, in feedback: its swing over each window of one damped period of the slowest
structural mode, half the norm of its componentwise range (a static error has none, an
approach as much as it moved in the window). When the swing did not fall below
:data:`SUSTAIN` × the window before in :data:`WINDOWS` windows in a row and stands above
:data:`FLOOR` × the tolerance, the loop rings: :attr:`RingWatch.scale`, by which the step
multiplies the *automatic* rate gains (an explicit gain is the user's), halves, down to
:data:`MIN_SCALE`, and the watch starts again. A sway of the structure decays faster
(ζ ≥ 0.05 on the reference robots: 0.73 per period at most), and so do a push taken back and
the integrator's own approach, so on the exact model the scale stays 1. A new plan starts at 1
again (its gain is made for its target).

**Feedback that drives the error away.** Near a fold of the held map the plant's held
Jacobian can differ from the model's so much that the integrator's loop has the wrong sign
in a direction: the error then grows slowly, without swinging, and faster as the arm nears
the fold, until the arm falls (the dancer on ``real``, Algorithm 2, a 1.2 m lean over the
pointe: sampled re-targeting ended at 17 mm, its next correction past a fold of the model;
the integrator alone took the error to 20 mm over 20 s, then to 264 mm in 15 s, the pointe
over). Halving the gain only slows that. So while the integrator is the only one acting on
the error (``alone``: the corrections of :mod:`poise.motion.retarget` ended), a cycle whose
error exceeds :data:`AWAY` × the least window mean of the plan (and that mean plus
:data:`FLOOR` × the tolerance) stops the automatic rate gains (:attr:`RingWatch.scale` 0)
until the next target: the arm holds the setpoint where the error was still small (the
lean above: held 40 mm off, not fallen). A static error, an approach, a sway around the
least mean and friction's creep of a few millimetres stay below it, so where feedback
converges nothing changes.

**A static error that feedback barely moves.** Where friction holds the plant (the dancer on
``real``: its pointe stuck within its stiction band after a move), the plant answers the
integrator with a fraction of what the model's held map says, and an error of a few
millimetres creeps away at 0.1–0.3 mm/s (bench target 9: 5.4 mm at 13 s, still 3.1 mm at
21 s, failing its trial). So a window that swung less than the tolerance (no sway, no ring),
whose mean error is above :data:`RAISE_FLOOR` × the tolerance and above :data:`CREEP` × the
mean of the window before (feedback took less than a fifth of it in a damped period), doubles
the scale, up to :data:`RAISE_TO`: the automatic gains are at most 2 × their 0.3 × the
stability bound (:data:`poise.motion.bounds.DEFAULT_FRACTION`), within the bound at the model
and its stated uncertainty. A ring halves it again, and an error driven away stops it, as
above. On the exact model an error above the floor decays within a window, and nothing
changes.
"""

from __future__ import annotations

import math
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import numpy as np

from poise.models.base import FloatArray

if TYPE_CHECKING:
    from poise.motion.planner import TargetPlan

#: A ring: the swing does not fall below this fraction of the window before ...
SUSTAIN = 0.9
#: ... in this many windows in a row ...
WINDOWS = 1
#: ... and exceeds this multiple of the tolerance.
FLOOR = 3.0
#: Feedback alone drives the error away when a cycle's error exceeds this multiple of the
#: least window mean of the plan (and that mean plus FLOOR × the tolerance): the automatic
#: rate gains stop until the next target.
AWAY = 2.0
#: A static error that feedback barely moves doubles the scale, up to this ...
RAISE_TO = 2.0
#: ... a window whose mean error is above this fraction of the window's before ...
CREEP = 0.8
#: ... and above this multiple of the tolerance, its swing below the tolerance.
RAISE_FLOOR = 1.5
#: Each ring halves the scale, down to this.
MIN_SCALE = 1.0 / 16.0


class RingWatch:
    """The ring watch of one control step (see the module docstring).

    Args:
        period: the loop period Δt [s].
        tolerance: the IK tolerance [task units] (:data:`FLOOR` × it is the least ring).
    """

    def __init__(self, period: float, tolerance: float) -> None:
        self.period = float(period)
        self.tolerance = float(tolerance)
        #: The factor on the automatic rate gains (1: none backed off).
        self.scale = 1.0
        #: Rings seen over the whole run.
        self.rings = 0
        self._window = 0
        self._count = 0
        self._low: FloatArray = np.zeros(0)
        self._high: FloatArray = np.zeros(0)
        self._swings: list[float] = []
        #: Plans whose feedback alone drove the error away (their rate gains stopped).
        self.halts = 0
        # this window's sum of error norms, and the least window mean of the plan [task units]
        self._sum = 0.0
        self._least = math.inf
        self._last_mean = math.inf  # the window before's mean error [task units]
        #: Windows whose static error feedback barely moved (the scale doubled).
        self.raises = 0

    def begin(self, plan: TargetPlan | None) -> None:
        """A new plan: the scale back to 1 and its least error forgotten, the window one
        damped period of its slowest structural mode (no watch without one)."""
        self.scale = 1.0
        self._swings, self._count = [], 0
        self._sum, self._least, self._last_mean = 0.0, math.inf, math.inf
        slow = plan.loop.slowest_mode() if plan is not None and plan.loop is not None else None
        if slow is None or not math.isfinite(slow.period):
            self._window = 0
            return
        self._window = max(1, math.ceil(slow.damped_period / self.period))

    def reset(self) -> None:
        """Not watching this cycle (a move, a followed reference): the windows start again
        (the plan's least error is kept)."""
        if self._count or self._swings:
            self._swings, self._count, self._sum = [], 0, 0.0
        self._last_mean = math.inf

    def observe(self, error: FloatArray, alone: bool = False) -> bool:
        """One cycle's task error (task_dim,) [task units]; True when it found a ring (then
        :attr:`scale` has halved) or, ``alone`` (the integrator the only one acting on the
        error), feedback driving the error away (then :attr:`scale` is 0 until the next
        plan). A window of a static error that feedback barely moved doubles :attr:`scale`
        (up to :data:`RAISE_TO`; False)."""
        if not self._window:
            return False
        size = float(np.linalg.norm(error))
        self._sum += size
        if alone and self.scale > 0.0 and size > max(AWAY * self._least,
                                                     self._least + FLOOR * self.tolerance):
            self.scale = 0.0
            self.halts += 1
            self._swings, self._count, self._sum = [], 0, 0.0
            return True
        if self._count == 0:
            if self._low.shape != np.shape(error):
                self._low, self._high = np.empty(np.shape(error)), np.empty(np.shape(error))
            self._low[:] = error
            self._high[:] = error
        else:
            np.minimum(self._low, error, out=self._low)
            np.maximum(self._high, error, out=self._high)
        self._count += 1
        if self._count < self._window:
            return False
        swings = self._swings
        swings.append(0.5 * float(np.linalg.norm(self._high - self._low)))
        mean, self._sum = self._sum / self._count, 0.0
        self._count = 0
        before, self._last_mean = self._last_mean, mean
        self._least = min(self._least, mean)
        if 0.0 < self.scale < RAISE_TO and swings[-1] < self.tolerance and \
                mean > max(RAISE_FLOOR * self.tolerance, CREEP * before):
            self.scale = min(RAISE_TO, 2.0 * self.scale)
            self.raises += 1
            self._swings = []
            return False
        if len(swings) > WINDOWS + 1:
            del swings[0]  # the last WINDOWS + 1 swings
        if len(swings) <= WINDOWS:
            return False
        sustained = all(later >= SUSTAIN * earlier for earlier, later in pairwise(swings))
        if not (sustained and swings[-1] > FLOOR * self.tolerance and self.scale > MIN_SCALE):
            return False
        self.scale = max(MIN_SCALE, 0.5 * self.scale)
        self.rings += 1
        self._swings = []
        return True

    def summary(self) -> dict[str, Any]:
        """JSON-ready: the scale on the automatic gains, the rings seen, the plans whose
        gains stopped and the windows that raised them."""
        return {"gain_scale": self.scale, "rings": self.rings, "halts": self.halts,
                "raises": self.raises}


__all__ = ["AWAY", "CREEP", "FLOOR", "MIN_SCALE", "RAISE_FLOOR", "RAISE_TO", "SUSTAIN",
           "WINDOWS", "RingWatch"]
