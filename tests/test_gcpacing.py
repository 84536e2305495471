"""The garbage collector between control cycles (poise.controller.gcpacing): off while the
loop runs, the same collections by the same thresholds after a cycle, given back after."""

from __future__ import annotations

import gc
import weakref

import pytest

from poise.controller.gcpacing import CollectorPacing


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def _cycle_garbage() -> weakref.ref:
    """A reference cycle nobody refers to (only the cyclic collector frees it)."""
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


@pytest.fixture
def collector():
    old = gc.get_threshold()
    enabled = gc.isenabled()
    gc.enable()
    gc.collect()
    yield
    gc.set_threshold(*old)
    (gc.enable if enabled else gc.disable)()


def test_nothing_is_collected_inside_a_cycle_and_all_of_it_after(collector):
    gc.set_threshold(200, 10, 10)
    with CollectorPacing() as pacing:
        assert not gc.isenabled()
        garbage = _cycle_garbage()
        keep = [(i,) * 2 for i in range(1000)]  # far past the threshold: no collection
        assert garbage() is not None and gc.get_count()[0] >= 1000
        pacing.after_cycle()  # the cycle is over: collect
        assert garbage() is None
        assert gc.get_count()[0] < 200 and pacing.collections[0] == 1
        pacing.after_cycle()  # below the threshold: nothing
        assert pacing.collections == [1, 0, 0]
        del keep
    assert gc.isenabled()


def test_older_generations_follow_the_thresholds(collector):
    gc.set_threshold(50, 3, 2)
    kept = []
    with CollectorPacing() as pacing:
        for _ in range(40):
            kept.append([[i] for i in range(60)])  # 61 more containers alive each cycle
            pacing.after_cycle()
    young, middle, old = pacing.collections
    assert young > middle > old > 0
    assert young + middle + old == 40  # one collection per cycle past the threshold


def test_an_application_that_switched_the_collector_off_keeps_it_off(collector):
    gc.disable()
    with CollectorPacing() as pacing:
        garbage = _cycle_garbage()
        _ = [[i] for i in range(5000)]
        pacing.after_cycle()
        assert garbage() is not None and pacing.collections == [0, 0, 0]
    assert not gc.isenabled()
    gc.collect()
