"""The loop's timing statistics: percentiles computed without holding the GIL."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from poise.controller.timing import _QS, PERCENTILES, QUANTITIES, TimingStats, ring_percentiles

values = st.lists(st.floats(-1e6, 1e6, allow_nan=False, allow_subnormal=False), min_size=0,
                  max_size=300)


@settings(max_examples=300, deadline=None)
@given(st.lists(values, min_size=1, max_size=4), st.integers(0, 40))
def test_ring_percentiles_equal_numpys_and_ignore_the_unwritten_slots(rows, pad):
    size = max(len(r) for r in rows) + pad
    ring = np.full((len(rows), max(size, 1)), np.nan)
    for k, r in enumerate(rows):
        ring[k, :len(r)] = r
        np.random.default_rng(k).shuffle(ring[k])  # NaN slots anywhere
    got = ring_percentiles(ring, _QS)
    for k, r in enumerate(rows):
        if r:
            np.testing.assert_allclose(got[k], np.percentile(r, _QS), rtol=1e-12, atol=1e-9)
        else:
            assert np.isnan(got[k]).all()


def test_percentiles_run_without_the_gil_so_the_loop_thread_is_never_held_up():
    assert ring_percentiles.targetoptions.get("nogil") is True


def test_summary_reports_every_quantity_and_the_counters():
    t = TimingStats(size=1000)
    rng = np.random.default_rng(0)
    lat = rng.uniform(100, 900, 700)
    for x in lat:
        t.record(1000.0, 5.0, 50.0, float(x), overrun=x > 850)
    t.missed = 7
    s = t.summary()
    assert set(QUANTITIES) <= set(s)
    assert list(s["latency_us"]) == list(PERCENTILES)
    for key, q in PERCENTILES.items():
        assert s["latency_us"][key] == round(float(np.percentile(lat, q)), 1)
    assert s["cycles"] == 700 and s["missed"] == 7 and s["overruns"] == int((lat > 850).sum())
    assert s["window"] == 700
