"""Physics tests of the plant simulator (poise.sim).

They run on the simulator's default path, compiled for every reference model
(``tests/test_sim_compiled.py`` asserts that and compares it with the numpy reference); the
energy tests run on both.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from poise.ik.held import algorithm1, plain
from poise.ik.statics import release, solve_statics
from poise.models import load_model, model_from_dict
from poise.models.actuation import Ga, blocks, join, split
from poise.sim import (
    SensorConfig,
    Sensors,
    Simulator,
    default_gains,
    make_plant,
)

REFERENCE = ("double_pendulum", "tendon_3link", "soft_arm_stiff", "soft_arm_soft", "dancer",
             "planar_2link")


def _edited(name: str, edit) -> object:
    data = load_model(name).describe()
    edit(data)
    return model_from_dict(data)


def _hold_at(model, q_bar, sim: Simulator) -> None:
    """Position mode at qa(q̄) with the seed 000 feed-forward τ_ff = G_a(q̄)."""
    qa, _ = split(model, q_bar)
    sim.command(qa, Ga(model, q_bar))
    sim.set_mode("position")


# ---------------------------------------------------------------------------- model terms


@pytest.mark.parametrize("name", REFERENCE)
def test_fused_dynamics_terms_equal_separate_calls(name: str) -> None:
    model = load_model(name)
    rng = np.random.default_rng(3)
    for scale in (1e-9, 0.3, 2.0):
        q, qd = scale * rng.normal(size=model.n), rng.normal(size=model.n)
        M, bias, G = model.dynamics_terms(q, qd)
        np.testing.assert_allclose(M, model.mass_matrix(q), rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(bias, model.bias_forces(q, qd), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(G, model.G(q), rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------- physics


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "numpy"])
def test_energy_is_conserved_without_damping_and_actuation(compiled: bool) -> None:
    """double_pendulum, D = 0, actuators disabled: kinetic + potential drifts < 1e-6 in 10 s."""
    def no_damping(d):
        for b in d["bodies"]:
            b["damping"] = 0.0
    model = _edited("double_pendulum", no_damping)
    sim = Simulator(model, integrator="rk4", rate=5000, compiled=compiled)
    assert sim.compiled == compiled
    sim.reset([1.0, -0.5], [0.5, 1.0])
    e0 = sim.energy()
    traj = sim.run(10.0, record_every=0.05)
    energies = np.array([sim.dynamics.energy(q, qd) for q, qd in zip(traj.q, traj.qd,
                                                                      strict=True)])
    kinetic_range = np.ptp([sim.dynamics.kinetic_energy(q, qd)
                            for q, qd in zip(traj.q, traj.qd, strict=True)])
    assert kinetic_range > 0.2 * abs(e0)  # the motion really exchanges energy
    assert np.max(np.abs(energies - e0)) / abs(e0) < 1e-6


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "numpy"])
def test_semi_implicit_euler_energy_error_stays_bounded(compiled: bool) -> None:
    """The real-time integrator: no secular drift (error at 10 s ≈ error at 5 s, small)."""
    def no_damping(d):
        for b in d["bodies"]:
            b["damping"] = 0.0
    model = _edited("double_pendulum", no_damping)
    sim = Simulator(model, rate=5000, compiled=compiled)
    assert sim.compiled == compiled
    sim.reset([1.0, -0.5], [0.5, 1.0])
    e0 = sim.energy()
    traj = sim.run(10.0, record_every=0.05)
    err = np.abs([sim.dynamics.energy(q, qd) - e0 for q, qd in zip(traj.q, traj.qd,
                                                                     strict=True)]) / abs(e0)
    assert err.max() < 5e-3
    half = len(err) // 2
    assert err[half:].max() < 2.0 * err[:half].max()


@pytest.mark.parametrize(("name", "target"), [("double_pendulum", [0.5]),
                                              ("tendon_3link", [0.6, 1.2])])
def test_held_configuration_stays_put_under_position_hold(name: str, target) -> None:
    model = load_model(name)
    result = algorithm1(model, target)
    assert result.success and result.stable
    sim = Simulator(model, q0=result.q)
    _hold_at(model, result.q, sim)
    sim.run(2.0)
    assert np.max(np.abs(sim.q - result.q)) < 1e-6


def test_plain_ik_configuration_sags_to_where_release_predicts() -> None:
    model = load_model("double_pendulum")
    target = [0.5]
    q_plain = plain(model, target).q
    predicted = release(model, q_plain)
    assert predicted.converged and predicted.stable
    sim = Simulator(model, q0=q_plain)
    _hold_at(model, q_plain, sim)
    sim.run(15.0)
    tip_moved = abs(model.fk(sim.q)[0] - model.fk(q_plain)[0])
    assert tip_moved > 0.02  # clearly measurable sag [m]
    assert np.max(np.abs(sim.q - predicted.q)) < 1e-3  # [rad]
    assert abs(model.fk(sim.q)[0] - model.fk(predicted.q)[0]) < 1e-3  # [m]
    assert np.max(np.abs(sim.qd)) < 1e-4  # settled


def test_stable_held_configuration_recovers_from_a_push() -> None:
    model = load_model("double_pendulum")
    q_bar = algorithm1(model, [0.5]).q
    sim = Simulator(model, q0=q_bar)
    _hold_at(model, q_bar, sim)
    sim.push([0.8, -0.8])  # velocity impulse [rad/s]
    traj = sim.run(12.0, record_every=0.02)
    assert np.max(np.abs(traj.q - q_bar)) > 0.05  # the push moved it
    assert np.max(np.abs(sim.q - q_bar)) < 1e-4
    assert np.max(np.abs(sim.qd)) < 1e-3


def test_unstable_dancer_target_falls_at_the_linearised_rate() -> None:
    """Upright, gesture leg raised (qa = (0, π, 0), qu = 0): H_uu < 0, so it falls."""
    model = load_model("dancer")
    q_bar = join(model, np.array([0.0, math.pi, 0.0]), np.zeros(1))
    b = blocks(model, q_bar)
    assert np.linalg.norm(b.Gu) < 1e-9 and b.Huu[0, 0] < 0  # an unstable equilibrium
    sim = Simulator(model, q0=q_bar + np.array([1e-3, 0.0, 0.0, 0.0]))
    _hold_at(model, q_bar, sim)
    traj = sim.run(16.0, record_every=0.05)
    lean = np.abs(traj.q[:, 0])
    assert lean.max() > 0.3
    t_fall = traj.t[np.argmax(lean > 0.3)]
    # Linearised q_u dynamics with the actuators locked: M_uu λ² + D_uu λ + H_uu = 0.
    c_inv = model.C_inv
    m_uu = (c_inv.T @ model.mass_matrix(q_bar) @ c_inv)[3, 3]
    d_uu = (c_inv.T @ np.diag(model.damping) @ c_inv)[3, 3]
    lam = (-d_uu + math.sqrt(d_uu**2 - 4 * m_uu * b.Huu[0, 0])) / (2 * m_uu)
    early = (traj.t > 2.0) & (traj.t < 6.0)
    rate = np.polyfit(traj.t[early], np.log(lean[early]), 1)[0]
    assert rate == pytest.approx(lam, rel=0.05)
    assert t_fall < 15.0
    # The same perturbation at a stable target (qa = 0) dies out.
    stable = Simulator(model, q0=np.array([1e-3, 0.0, 0.0, 0.0]))
    _hold_at(model, np.zeros(4), stable)
    stable.run(4.0)
    assert abs(stable.q[0]) < 1e-3


def test_disabled_actuators_apply_no_effort_and_hold_latches_position() -> None:
    model = load_model("soft_arm_stiff")
    sim = Simulator(model)
    sim.run(0.01)
    assert np.all(sim.tau == 0.0)
    sim.reset(np.array([0.2, 0.2, 0.2, -0.1, -0.1]))
    qa0 = sim.qa
    sim.set_mode("hold")
    sim.run(1.0)
    # Stiff hold: the actuators stay within the PD offset G_a / K_P of where they were.
    offset = np.abs(Ga(model, sim.q)) / sim.gains.kp
    assert np.all(np.abs(sim.qa - qa0) < 2 * offset + 1e-6)


def test_effort_is_clipped_to_the_limit() -> None:
    model = load_model("double_pendulum")
    sim = Simulator(model)
    sim.command([0.1])
    sim.set_mode("position")
    sim.step(1e-3)
    assert abs(sim.tau[0]) == pytest.approx(sim.gains.effort_limit[0])


def test_default_gains_are_stiff_but_resolved_by_the_integrator() -> None:
    for name in REFERENCE:
        model = load_model(name)
        gains = default_gains(model, 5000.0)
        assert gains.omega * (1 / 5000.0) <= 0.2 + 1e-12
        assert gains.omega >= 2 * math.pi * 50 - 1e-9


# ---------------------------------------------------------------------------- parameters


def test_parameter_file_changes_the_dynamics(tmp_path) -> None:
    """Masses −15 %: the robot settles where solve_statics on the edited model says."""
    nominal = load_model("double_pendulum")
    data = nominal.describe()
    for b in data["bodies"]:
        b["mass"] *= 0.85
    path = tmp_path / "physical.json"
    path.write_text(json.dumps(data))
    physical = load_model(str(path))

    q_bar = algorithm1(nominal, [0.5]).q  # what the host computes on its nominal model
    qa, qu = split(nominal, q_bar)
    plant = make_plant("double_pendulum", str(path), noise=False, q0=q_bar)
    assert any("mass" in d for d in plant.differences)
    plant.set_actuator_command(qa.tolist(), Ga(nominal, q_bar).tolist())
    plant.set_mode("position")
    for _ in range(1500):
        plant.step(0.01)
    expected = solve_statics(physical, qa, qu).q
    assert np.max(np.abs(plant.q - expected)) < 1e-3
    assert np.max(np.abs(plant.q - q_bar)) > 1e-2  # measurably off the nominal pose


def test_parameter_file_of_another_robot_is_refused(tmp_path) -> None:
    path = tmp_path / "other.json"
    path.write_text(json.dumps(load_model("tendon_3link").describe()))
    with pytest.raises(ValueError, match=r"n \(coordinates\) is 3, the model has 2"):
        make_plant("double_pendulum", str(path))


# ---------------------------------------------------------------------------- sensors


def test_encoder_quantisation_step() -> None:
    cfg = SensorConfig(counts_per_rad=1000.0, q_noise=0.0)
    sensors = Sensors(cfg, n=2, m=1, seed=1)
    rng = np.random.default_rng(0)
    for _ in range(200):
        q = rng.uniform(-3, 3, size=2)
        counts = sensors.encoders(q) * 1000.0
        np.testing.assert_allclose(counts, np.round(counts), atol=1e-9)
        assert np.all(np.abs(sensors.encoders(q) - q) <= 0.5e-3 + 1e-12)


def test_sensor_noise_and_bias_statistics_match_configuration() -> None:
    cfg = SensorConfig(counts_per_rad=1e4, q_noise=2e-3, q_bias=1e-3, qa_noise=1e-4,
                       qa_bias=-5e-4, effort_noise=0.5, effort_bias=0.2)
    sensors = Sensors(cfg, n=2, m=1, seed=7)
    k = 20000
    q = np.array([0.3, -1.2])
    enc = np.array([sensors.encoders(q) for _ in range(k)]) - q
    qa = np.array([sensors.actuator_positions(np.array([0.01])) for _ in range(k)]) - 0.01
    tau = np.array([sensors.efforts(np.array([3.0])) for _ in range(k)]) - 3.0
    expected_std = math.sqrt(2e-3**2 + (1e-4) ** 2 / 12)  # noise + quantisation
    np.testing.assert_allclose(enc.mean(axis=0), 1e-3, atol=5 * 2e-3 / math.sqrt(k))
    np.testing.assert_allclose(enc.std(axis=0), expected_std, rtol=0.03)
    assert qa.mean() == pytest.approx(-5e-4, abs=5 * 1e-4 / math.sqrt(k))
    assert qa.std() == pytest.approx(1e-4, rel=0.03)
    assert tau.mean() == pytest.approx(0.2, abs=5 * 0.5 / math.sqrt(k))
    assert tau.std() == pytest.approx(0.5, rel=0.03)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_same_seed_same_readings(seed: int) -> None:
    a = make_plant("double_pendulum", seed=seed)
    b = make_plant("double_pendulum", seed=seed)
    for plant in (a, b):
        plant.set_mode("position")
        plant.step(0.002)
    assert a.read_sensors() == b.read_sensors()


def test_noise_false_gives_exact_actuator_readings() -> None:
    plant = make_plant("soft_arm_stiff", noise=False)
    _, qa, tau, _ = plant.read_sensors()
    assert qa == [0.0, 0.0] and tau == [0.0, 0.0]


# ---------------------------------------------------------------------------- plant protocol


@pytest.mark.parametrize("name", REFERENCE)
def test_make_plant_implements_the_plant_protocol(name: str) -> None:
    from poise.firmware_bridge.plant import Plant, channel_messages

    plant = make_plant(name)
    assert isinstance(plant, Plant)
    model = load_model(name)
    chans = channel_messages(plant)  # packs: names and units fit the wire
    assert len(chans) == model.n + model.m
    assert [c.kind for c in plant.describe()] == ["coordinate"] * model.n + ["actuator"] * model.m
    assert plant.mode == "disabled" and plant.time == 0.0
    plant.set_actuator_command([0.0] * model.m, None)
    plant.set_mode("position")
    plant.step(0.002)
    assert plant.time == pytest.approx(0.002)
    q, qa, tau, status = plant.read_sensors()
    assert len(q) == model.n and len(qa) == model.m and len(tau) == model.m
    assert isinstance(status, int) and 0 <= status < 1 << 16


def test_actuator_channel_units_follow_the_model() -> None:
    tendon = make_plant("double_pendulum").describe()[-1]
    assert (tendon.unit, tendon.effort_unit, tendon.lower, tendon.upper) == ("m", "N", -0.12, 0.12)
    motors = make_plant("dancer").describe()[4:]
    assert all(c.unit == "rad" and c.effort_unit == "N*m" for c in motors)
    assert [c.upper for c in motors] == [1.5, 2.6, 3.0]
    free = make_plant("planar_2link").describe()[0]
    assert free.lower == -1e9 and free.upper == 1e9


def test_rate_below_5khz_is_refused() -> None:
    with pytest.raises(ValueError, match="5000"):
        make_plant("double_pendulum", rate=1000)


def test_device_endpoint_drives_the_simulated_plant() -> None:
    from poise.firmware_bridge.device import DeviceEndpoint

    plant = make_plant("soft_arm_stiff")
    endpoint = DeviceEndpoint(plant, rate_hz=500)
    for i in range(1, 51):
        endpoint.tick(i / 500)
    assert plant.time == pytest.approx(50 / 500 - 1 / 500)
    assert endpoint.outgoing()  # sensor frames were queued


def test_fused_soft_arm_terms_fall_back_beyond_the_series_range() -> None:
    model = load_model("soft_arm_soft")
    q = np.array([7.0, -0.2, 0.1, 6.9, -7.5])  # |θ| > 2π: general evaluation
    qd = np.array([0.3, -1.0, 0.5, 2.0, 0.1])
    M, bias, G = model.dynamics_terms(q, qd)
    np.testing.assert_allclose(M, model.mass_matrix(q), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(bias, model.bias_forces(q, qd), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(G, model.G(q), rtol=1e-12, atol=1e-14)


def test_bench_sim_reports_compiled_and_numpy_in_one_run(capsys) -> None:
    from poise.cli import main

    assert main(["bench", "sim", "--models", "planar_2link", "--integrators", "euler",
                 "--duration", "0.01", "--repeat", "1", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    (row,) = result["results"]
    case = row["euler"]
    for path in ("compiled", "numpy"):
        assert case[path]["rtf"] > 0 and case[path]["rtf_cpu"] > 0
        assert case[path]["step_us"] == pytest.approx(1e6 / (case[path]["rtf"] * 5000.0))
    assert case["ratio"] == pytest.approx(case["compiled"]["rtf"] / case["numpy"]["rtf"])
    assert len(result["loadavg_before"]) == 3 and result["goal"]["rtf"] == 50.0


def test_bench_sim_refuses_bad_arguments(capsys) -> None:
    from poise.cli import main

    assert main(["bench", "sim", "--models", "no_such_robot", "--quiet"]) == 2
    assert "no_such_robot" in capsys.readouterr().err
    assert main(["bench", "sim", "--duration", "0.0001", "--quiet"]) == 2
    assert "at least one frame" in capsys.readouterr().err
    assert main(["bench", "sim", "--repeat", "0", "--quiet"]) == 2
    assert "--repeat" in capsys.readouterr().err
