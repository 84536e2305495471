"""The loop's timing statistics (percentiles computed without holding the GIL), and no
compilation once a run is under way."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import PATIENT_SETTINGS, wait_until
from poise.api.bus import Command
from poise.api.state import State
from poise.controller.config import load_config
from poise.controller.service import Controller
from poise.controller.timing import _QS, PERCENTILES, QUANTITIES, TimingStats, ring_percentiles
from poise.examples import resolve_config

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


def _compiled_signatures() -> dict[str, int]:
    """Signatures compiled so far of every Numba kernel a run may call."""
    import importlib
    import pkgutil

    from numba.core.dispatcher import Dispatcher

    import poise.controller.timing
    import poise.kernels
    import poise.sim.compiled

    modules = [importlib.import_module(f"poise.kernels.{m.name}")
               for m in pkgutil.iter_modules(poise.kernels.__path__)]
    modules += [poise.controller.timing, poise.sim.compiled]
    return {f"{mod.__name__}.{name}": len(obj.signatures) for mod in modules
            for name, obj in vars(mod).items() if isinstance(obj, Dispatcher)}


@pytest.mark.parametrize("example", ["double_pendulum", "soft_arm_stiff"])
def test_no_kernel_compiles_once_a_run_is_under_way(example):
    """Numba compiles a new signature on its first call holding the GIL, for seconds on a
    fresh install: inside a cycle (or beside it, in the real-time process) that stalls the
    loop until the device's watchdog fires. Everything a run calls is compiled (or loaded)
    at start-up: the controller here runs in this process against the virtual device."""
    over = {"loop.rate": (250.0, "t"), "loop.process": ("shared", "t"),
            "mqtt.enabled": (False, "t"), "device.port": ("sim", "t")}
    # a patient watchdog: a stall on a busy machine must not end the run (what is checked here
    # is that no kernel compiles, by Numba's own count of signatures)
    over.update({k: (v, "t") for k, v in PATIENT_SETTINGS.items()})
    ctl = Controller(load_config(resolve_config(example), over))
    try:
        assert ctl.connect().accepted
        before = _compiled_signatures()
        assert ctl.start().accepted and ctl.wait_for(State.RUNNING, timeout=60)
        for algorithm in ("alg2", "plain", "alg1"):
            assert ctl.submit(Command("algorithm", algorithm)).accepted
            seq = ctl.summary()["timing"]["cycles"]
            assert wait_until(lambda s=seq: ctl.summary()["timing"]["cycles"] > s + 50, 60)
        assert ctl.submit(Command("mode", "ff")).accepted
        assert ctl.set_target((np.asarray(ctl.params.target) * 0.95).tolist()).accepted
        seq = ctl.summary()["timing"]["cycles"]
        assert wait_until(lambda: ctl.summary()["timing"]["cycles"] > seq + 50, 60)
        after = _compiled_signatures()
    finally:
        ctl.close()
    assert {k: (before.get(k), v) for k, v in after.items() if v != before.get(k)} == {}
