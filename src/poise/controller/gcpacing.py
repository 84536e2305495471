"""Python's cyclic garbage collector run between control cycles, never inside one.

CPython collects the youngest generation whenever 700 more container objects (tuples, lists,
dicts, dataclass instances) were allocated than freed; a cycle allocates a few dozen, so every
few dozen cycles one of them would pay for a collection (tens of µs, more for the older
generations) between its sensor frame and its setpoint. :class:`CollectorPacing` turns the
automatic collector off while the loop runs and makes the same collections, by the same
thresholds, right after a cycle has written its setpoint (:meth:`after_cycle`), in the slack
before the next frame. ``gc.freeze()`` at start-up (:func:`poise.controller.pacing.enter_realtime`)
already keeps the start-up objects out of every collection.
"""

from __future__ import annotations

import gc


class CollectorPacing:
    """Use as ``with CollectorPacing() as gc_pacing:`` around the loop, calling
    :meth:`after_cycle` after each cycle (the collector is process-wide: other threads'
    garbage is collected there too). A threshold of 0 (the collector switched off by the
    application) stays off."""

    def __init__(self) -> None:
        self.thresholds = gc.get_threshold()
        self.was_enabled = gc.isenabled()
        #: Collections made after a cycle, by generation.
        self.collections = [0, 0, 0]

    def __enter__(self) -> CollectorPacing:
        gc.disable()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.was_enabled:
            gc.enable()

    def after_cycle(self) -> None:
        """Collect what the automatic collector would have collected by now (nothing most
        cycles: one ``gc.get_count()``)."""
        t0, t1, t2 = self.thresholds
        c0, c1, c2 = gc.get_count()
        if not self.was_enabled or t0 <= 0 or c0 < t0:
            return
        generation = 2 if t2 > 0 and c1 >= t1 and c2 >= t2 else 1 if t1 > 0 and c1 >= t1 \
            else 0
        gc.collect(generation)
        self.collections[generation] += 1


__all__ = ["CollectorPacing"]
