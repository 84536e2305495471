"""The compiled simulator (poise.sim.compiled) against the numpy reference.

States are compared as

    ‖compiled − reference‖ ≤ RTOL · max(‖reference‖, floor),    RTOL = 1e-9,

after 300 internal steps (30 frames of 2 ms at 5 kHz), with ``floor`` the natural size of the
quantity (1 rad, 1 rad/s, the effort limits). The two paths do the same arithmetic in another
order (loops against BLAS and LAPACK ``dposv``, the PD law as ``K_P (q̄a − A q)`` against
``K_P q̄a − (K_P A) q``), so each step differs by a few ulps; the stiff actuator loop
multiplies an ulp of ``qa`` by ``K_P`` (up to 1.3e7 N/m), which is the largest term. Measured
over all six reference models, both integrators and all three modes: ≤ 4e-14 on ``q`` and
``q̇``, ≤ 5e-13 on ``τ``. 1e-9 leaves three orders of magnitude for other machines' BLAS while
any wrong or missing term (a damping ``D q̇``, a stage of RK4, the clip) shows at 1e-6 or more
in 300 steps. The physics tests of ``tests/test_sim.py`` run on the compiled path (the
default, asserted here); its energy tests run on both.
"""

from __future__ import annotations

import numpy as np
import pytest

from poise.models import load_model
from poise.models.actuation import Ga
from poise.sim import INTEGRATORS, MODES, SensorConfig, Sensors, Simulator, make_plant
from poise.sim.compiled import advance, readout
from poise.sim.sensors import (
    STATUS_NONFINITE,
    STATUS_Q_LIMIT,
    STATUS_QA_LIMIT,
    STATUS_SATURATED,
)

REFERENCE = ("double_pendulum", "tendon_3link", "soft_arm_stiff", "soft_arm_soft", "dancer",
             "planar_2link")
RTOL = 1e-9
FRAMES = 30  # of 2 ms: 300 internal steps at 5 kHz


def close(a, b, floor: float, what: str) -> None:
    """``‖a − b‖ ≤ RTOL · max(‖b‖, floor)``."""
    err = float(np.linalg.norm(np.asarray(a) - np.asarray(b)))
    scale = max(float(np.linalg.norm(b)), floor)
    assert err <= RTOL * scale, f"{what}: ‖Δ‖ = {err:.3e} > {RTOL:g} × {scale:.3e}"


def _pair(model, integrator: str, mode: str, seed: int) -> tuple[Simulator, Simulator]:
    """A compiled and a numpy simulator from the same moving state, same command and mode."""
    rng = np.random.default_rng(seed)
    q0 = rng.uniform(-0.3, 0.3, model.n)  # [rad]
    qd0 = rng.uniform(-1.0, 1.0, model.n)  # [rad/s]
    qa_ref = np.asarray(model.C[: model.m]) @ rng.uniform(-0.3, 0.3, model.n)
    sims = (Simulator(model, integrator=integrator), Simulator(model, integrator=integrator,
                                                               compiled=False))
    for sim in sims:
        sim.reset(q0, qd0)
        sim.command(qa_ref, Ga(model, q0))
        sim.set_mode(mode)
    return sims


# ----------------------------------------------------------------------------- the step


@pytest.mark.parametrize("name", REFERENCE)
def test_reference_models_simulate_compiled_by_default(name: str) -> None:
    model = load_model(name)
    assert Simulator(model).compiled
    assert make_plant(name).sim.compiled
    assert not Simulator(model, compiled=False).compiled


@pytest.mark.parametrize("integrator", INTEGRATORS)
@pytest.mark.parametrize("name", REFERENCE)
def test_compiled_steps_equal_the_numpy_reference(name: str, integrator: str) -> None:
    model = load_model(name)
    limit = float(np.linalg.norm(Simulator(model).gains.effort_limit))
    for seed, mode in enumerate(MODES):
        fast, ref = _pair(model, integrator, mode, seed)
        assert fast.compiled and not ref.compiled
        q0, qd0 = ref.q, ref.qd
        for _ in range(FRAMES):
            fast.step(0.002)
            ref.step(0.002)
        moved = float(np.linalg.norm(ref.q - q0) + np.linalg.norm(ref.qd - qd0))
        assert moved > 1e-2, f"{name} {mode}: the state hardly changed ({moved:.1e})"
        what = f"{name} {integrator} {mode}"
        close(fast.q, ref.q, 1.0, f"{what} q")
        close(fast.qd, ref.qd, 1.0, f"{what} q̇")
        close(fast.tau, ref.tau, limit, f"{what} τ")
        assert fast.steps == ref.steps == 10 * FRAMES
        assert fast.time == ref.time


def test_the_effort_clip_and_the_disabled_mode_act_in_the_compiled_step() -> None:
    """A large reference error saturates τ at ±τ_max; disabled applies none."""
    model = load_model("double_pendulum")
    sim = Simulator(model)
    sim.command([0.1])
    sim.set_mode("position")
    sim.step(1e-3)
    assert sim.tau[0] == pytest.approx(sim.gains.effort_limit[0], rel=1e-15)
    sim.command([-0.1])
    sim.step(1e-3)
    assert sim.tau[0] == pytest.approx(-sim.gains.effort_limit[0], rel=1e-15)
    sim.set_mode("disabled")
    sim.step(1e-3)
    assert np.all(sim.tau == 0.0)


def test_no_kernel_compiles_inside_a_step() -> None:
    """Made once (compiled or loaded then), a plant stepped in every mode and integrator, and
    read, adds no compiled specialisation: the argument types of a run are those of the
    warm-up."""
    plants = [make_plant("tendon_3link", integrator=i) for i in INTEGRATORS]
    before = (len(advance.signatures), len(readout.signatures))
    for plant in plants:
        for mode in MODES:
            plant.set_actuator_command([0.01, 0.02], [1.0, 2.0])
            plant.set_mode(mode)
            plant.step(0.002)
            plant.step(1e-4)  # one internal step
            plant.read_sensors()
        plant.sim.push([0.1, 0.0, 0.0])
        plant.sim.run(0.01, record_every=0.005)
    assert (len(advance.signatures), len(readout.signatures)) == before


class _NoKernels:
    """A model whose family has no compiled kernels (delegates everything else)."""

    family = "no_kernels"

    def __init__(self, model) -> None:
        self._model = model

    def __getattr__(self, name: str):
        return getattr(self._model, name)


def test_a_family_without_kernels_falls_back_to_numpy() -> None:
    model = load_model("planar_2link")
    other = _NoKernels(model)
    sim = Simulator(other)
    assert not sim.compiled
    ref = Simulator(model)
    for s in (sim, ref):
        s.reset([0.2, -0.1], [0.5, 0.0])
        s.command([0.3, -0.2])
        s.set_mode("position")
        s.run(0.06)
    close(sim.q, ref.q, 1.0, "fallback q")
    close(sim.qd, ref.qd, 1.0, "fallback q̇")


def test_a_blown_up_state_is_reported_and_the_clock_runs_on() -> None:
    plant = make_plant("double_pendulum", noise=False)
    plant.sim.push([1e200, -1e200])  # finite, but the next step overflows
    plant.step(0.002)
    assert not plant.sim.finite
    *_, status = plant.read_sensors()
    assert status & STATUS_NONFINITE
    t = plant.time
    plant.step(0.002)  # no integration of a NaN state, the clock still advances
    assert plant.time == pytest.approx(t + 0.002)


# ----------------------------------------------------------------------------- the sensors


def _read_both(plant_fast, plant_ref):
    """The compiled readout of one plant and the numpy readout of its twin (same seed)."""
    return plant_fast.read_sensors(), plant_ref.read_sensors_reference()


@pytest.mark.parametrize("name", REFERENCE)
def test_compiled_sensor_readout_equals_the_numpy_sensors(name: str) -> None:
    """Same state, same seed: encoders and efforts bit for bit, actuator positions to the
    rounding of ``A q`` (a loop against numpy's dot), the same status bits."""
    model = load_model(name)
    config = SensorConfig(q_noise=2e-3, q_bias=1e-3, qa_noise=1e-4, qa_bias=-2e-4,
                          effort_noise=0.3, effort_bias=0.1)
    fast = make_plant(name, sensors=config, seed=5)
    ref = make_plant(name, sensors=config, seed=5)
    rng = np.random.default_rng(4)
    for _ in range(50):
        q = rng.uniform(-1.0, 1.0, model.n)
        for plant in (fast, ref):
            plant.sim.reset(q, 0.1 * q)
            plant.sim.command(np.asarray(model.C[: model.m]) @ q + rng.uniform(-0.05, 0.05),
                              None)
        (q1, qa1, tau1, s1), (q2, qa2, tau2, s2) = _read_both(fast, ref)
        assert q1 == q2 and tau1 == tau2 and s1 == s2
        close(qa1, qa2, 1e-3, f"{name} q̃a")


def test_every_status_bit_matches_the_reference() -> None:
    """dancer (joint and motor limits ±1.5, ±2.6, ±3 rad): at rest none; a joint past its
    limit raises the coordinate and the actuator bit; a saturated motor; a blown-up state."""
    fast, ref = make_plant("dancer", seed=1), make_plant("dancer", seed=1)
    cases = {  # what → (q, actuator reference, mode)
        "rest": (np.zeros(4), np.zeros(3), "disabled"),
        "limits": (np.array([0.0, 1.6, 0.0, 0.0]), np.zeros(3), "disabled"),
        "saturated": (np.zeros(4), np.array([1.0, 0.0, 0.0]), "position"),
    }
    expected = {"rest": 0, "limits": STATUS_Q_LIMIT | STATUS_QA_LIMIT,
                "saturated": STATUS_SATURATED}
    for what, (q, qa_ref, mode) in cases.items():
        for plant in (fast, ref):
            plant.set_actuator_command(qa_ref.tolist(), None)
            plant.set_mode(mode)
            plant.sim.reset(q)  # τ at q: the PD law with the reference far away
        (*_, s1), (*_, s2) = _read_both(fast, ref)
        assert s1 == s2 == expected[what], f"{what}: {s1:#x}, reference {s2:#x}"
    for plant in (fast, ref):
        plant.sim.push([1e200, -1e200, 0.0, 0.0])
        plant.step(0.002)
    (*_, s1), (*_, s2) = _read_both(fast, ref)
    assert s1 == s2 and s1 & STATUS_NONFINITE


def test_block_drawn_noise_is_the_stream_of_one_draw_per_reading() -> None:
    """Sensors draw normals in blocks; the readings equal those of drawing per call."""
    cfg = SensorConfig(counts_per_rad=0.0, q_noise=1.0, qa_noise=1.0, effort_noise=1.0)
    sensors = Sensors(cfg, n=3, m=2, seed=11)
    rng = np.random.default_rng(11)
    for _ in range(3000):  # past a block boundary (4096 normals)
        np.testing.assert_array_equal(sensors.encoders(np.zeros(3)), rng.standard_normal(3))
        np.testing.assert_array_equal(sensors.actuator_positions(np.zeros(2)),
                                      rng.standard_normal(2))
        np.testing.assert_array_equal(sensors.efforts(np.zeros(2)), rng.standard_normal(2))


def test_compiled_and_numpy_plants_read_the_same_with_one_seed() -> None:
    """A whole run through the plant protocol: compiled and numpy plants, same seed and
    commands, give the same readings (encoder counts equal; the rest to rounding)."""
    fast = make_plant("soft_arm_soft", seed=3)
    ref = make_plant("soft_arm_soft", seed=3, compiled=False)
    assert fast.sim.compiled and not ref.sim.compiled
    for plant in (fast, ref):
        plant.set_actuator_command([0.01, -0.003], [1.0, 0.5])
        plant.set_mode("position")
    for _ in range(100):
        fast.step(0.002)
        ref.step(0.002)
        (q1, qa1, tau1, s1), (q2, qa2, tau2, s2) = fast.read_sensors(), ref.read_sensors()
        assert q1 == q2 and s1 == s2
        close(qa1, qa2, 1e-3, "q̃a")
        close(tau1, tau2, float(np.linalg.norm(fast.sim.gains.effort_limit)), "τ̃")


def test_compiled_simulator_cache_follows_the_kernel_sources() -> None:
    """The simulator kernels call poise.kernels; their Numba cache keeps the kernels' source
    stamp, so an edit there recompiles them (:func:`poise.kernels.cache.ensure_fresh`)."""
    import poise.sim.compiled as compiled
    from poise.kernels import cache

    functions = cache.dispatchers([compiled])
    assert {f.py_func.__name__ for f in functions} >= {"advance", "readout"}
    for directory in cache.cache_dirs(functions):
        assert (directory / cache.STAMP_NAME).read_text() == cache.source_stamp()
