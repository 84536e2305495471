"""The simulated plant's imperfections (issue 35, item 1): each effect against its textbook
behaviour, on real simulations; without a ``[plant]`` table nothing changes, bit for bit."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from poise.cli import main
from poise.models import ModelError, load_model
from poise.models.registry import builtin_path
from poise.sim import make_plant
from poise.sim.actuators import ActuatorGains
from poise.sim.named import NAMED_PLANTS, named_text, write_named

PERIOD = 0.002  # one sensor frame / control cycle [s]


def plant_file(tmp_path, robot: str, table: str = "", name: str = "plant.toml") -> str:
    """The built-in model file of ``robot`` with ``table`` (TOML) appended."""
    path = tmp_path / name
    path.write_text(builtin_path(robot).read_text() + "\n" + table)
    return str(path)


def _run(plant, refs, tau_ff=None) -> dict[str, np.ndarray]:
    """One command per cycle; the true state and the readings after each step."""
    q, qd, tau, read = [], [], [], []
    for k, ref in enumerate(refs):
        plant.set_actuator_command(ref, None if tau_ff is None else tau_ff[k])
        plant.step(PERIOD)
        q.append(plant.sim._q.copy())
        qd.append(plant.sim._qd.copy())
        tau.append(plant.sim._tau.copy())
        qs, qa, efforts, status = plant.read_sensors()
        read.append(np.array([*qs, *qa, *efforts, status]))
    return {k: np.array(v) for k, v in
            (("q", q), ("qd", qd), ("tau", tau), ("read", read))}


# ------------------------------------------------------------- nothing changes without keys


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("robot", ["double_pendulum", "soft_arm_soft"])
def test_a_plant_file_without_plant_keys_runs_bit_identical_to_the_model(tmp_path, robot,
                                                                         compiled):
    model = load_model(robot)
    refs = [0.5 * np.asarray(model.qa_max) * math.sin(2 * math.pi * k / 400)
            for k in range(600)]
    runs = []
    for params in (None, plant_file(tmp_path, robot, name="copy.toml"),
                   plant_file(tmp_path, robot, "[plant]\n", name="empty.toml")):
        plant = make_plant(robot, params, seed=7, compiled=compiled)
        assert plant.sim.effects is None and plant.sensor_delay == 0
        plant.set_mode("position")
        runs.append(_run(plant, refs))
    for other in runs[1:]:
        for key in ("q", "qd", "tau", "read"):
            assert np.array_equal(runs[0][key], other[key])  # bit for bit, noise included


# ------------------------------------------------------------- friction


def _free_2link(tmp_path, table: str, **kw):
    """planar_2link (no gravity, no springs) with its motors as pure torque sources
    (K_P = K_D = 0): the effort is the feed-forward."""
    gains = ActuatorGains(kp=np.zeros(2), kd=np.zeros(2), effort_limit=np.full(2, 10.0))
    plant = make_plant("planar_2link", plant_file(tmp_path, "planar_2link", table), noise=False,
                       gains=gains, **kw)
    plant.set_mode("position")
    return plant


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_stiction_holds_a_joint_until_the_breakaway_torque_then_it_slides(tmp_path, sign):
    fs, fc = 0.5, 0.3
    plant = _free_2link(tmp_path, f"[plant.friction]\ncoulomb = {fc}\nstiction = {fs}\n")
    rate = 0.2  # [N·m/s] slowly increasing torque on joint 1
    q0 = plant.q.copy()
    breakaway = None
    for k in range(1, 5000):
        torque = sign * rate * k * PERIOD
        plant.set_actuator_command([0.0, 0.0], [torque, 0.0])
        plant.step(PERIOD)
        if abs(plant.q[0] - q0[0]) > 1e-9:
            breakaway = abs(torque)
            break
        assert np.max(np.abs(plant.qd)) < 1e-15  # stuck, not creeping (rounding only)
    assert breakaway is not None
    # the measured band: within 1 % of the stated breakaway (the ramp moves 4e-4 N·m a cycle)
    assert abs(breakaway - fs) <= 0.01 * fs
    # sliding: held at a torque between F_c and F_s the joint keeps moving and speeds up
    # (only the Coulomb level resists once it moves: the stick-slip of Karnopp's model)
    plant.set_actuator_command([0.0, 0.0], [sign * 0.5 * (fs + fc), 0.0])
    speeds = []
    for _ in range(250):
        plant.step(PERIOD)
        speeds.append(sign * plant.qd[0])
    assert speeds[-1] > speeds[0] > 0 and sign * (plant.q[0] - q0[0]) > 1e-3


def test_friction_dissipates_energy_and_the_arm_stops_inside_the_stiction_band(tmp_path):
    fs = np.array([0.27, 0.18])
    path = plant_file(tmp_path, "double_pendulum",
                      "[plant.friction]\ncoulomb = [0.18, 0.12]\nstiction = [0.27, 0.18]\n")
    plant = make_plant("double_pendulum", path, noise=False)
    plant.set_mode("disabled")  # no input: τ = 0
    sim = plant.sim
    sim.reset(q=[0.3, -0.2], qd=[0.8, -0.8])
    energies = [sim.energy()]
    for _ in range(12500):  # 25 s: it swings down, then friction stops it (after ~20 s)
        plant.step(PERIOD)
        energies.append(sim.energy())
    e = np.array(energies)
    # non-increasing, up to the semi-implicit Euler step's bounded energy error (1e-5 of
    # the initial energy: the exact model without damping stays within it, tested in
    # test_sim.py)
    assert np.all(np.diff(e) <= 1e-5 * abs(e[0]))
    assert e[-1] < e[0] - 0.1
    # Coulomb friction stops the arm in finite time, where it can hold the springs and
    # gravity: |G_i(q)| <= F_s,i (the stiction band)
    assert np.max(np.abs(sim.qd)) < 1e-15
    G = load_model("double_pendulum").G(sim.q)
    assert np.all(np.abs(G) <= fs * (1 + 1e-9))


# ------------------------------------------------------------- hysteresis


def bouc_wen_loop_area(Q: float, y: float) -> float:
    """``∮ z dq`` of the steady Bouc–Wen loop (n = 1, A = 1, β = γ = 1/(2y)) for
    ``q`` swept between ±Q: ``4 y Q − 4 y z₀ − z₀²``, ``z₀ = y (1 − exp(−(2Q − z₀)/y))``
    (loading: z linear while negative, then ``y (1 − e^{−Δq/y})``; unloading symmetric)."""
    z0 = y
    for _ in range(200):
        z0 = y * (1.0 - math.exp(-(2 * Q - z0) / y))
    return 4 * y * Q - 4 * y * z0 - z0 * z0


def _loop(tmp_path, amplitude: float, kappa: float, y: float):
    path = plant_file(tmp_path, "double_pendulum",
                      f"[plant.hysteresis]\nstiffness = {kappa}\nyield_angle = {y}\n")
    plant = make_plant("double_pendulum", path, noise=False)
    plant.set_mode("position")
    period = 8.0
    cycles = round(period / PERIOD)
    qs, zs = [], []
    for k in range(2 * cycles + 1):  # the second period is the steady loop
        plant.set_actuator_command([amplitude * math.sin(2 * math.pi * k / cycles)], None)
        plant.step(PERIOD)
        if k >= cycles:
            qs.append(plant.q[0])
            zs.append(plant.sim.hysteresis_z[0])
    q, z = np.array(qs), np.array(zs)
    area = kappa * float(np.sum(0.5 * (z[1:] + z[:-1]) * np.diff(q)))  # ∮ κ z dq [J]
    Q = 0.5 * (q.max() - q.min())
    return area, Q


def test_a_hysteresis_loop_has_the_bouc_wen_area_and_grows_with_amplitude(tmp_path):
    kappa, y = 2.4, 0.05
    areas = []
    for amplitude in (0.02, 0.06):
        area, Q = _loop(tmp_path, amplitude, kappa, y)
        expected = kappa * bouc_wen_loop_area(Q, y)
        # the loop dissipates (area > 0, traversed clockwise in (q, τ_h)) as much as the
        # closed form says, within 2 % (the Euler step and a not quite symmetric sweep)
        assert abs(abs(area) - expected) <= 0.02 * expected
        areas.append(abs(area))
    assert areas[1] > 2 * areas[0]


# ------------------------------------------------------------- dead band, tendons


def test_backlash_the_driven_side_waits_for_the_dead_band_on_a_reversal(tmp_path):
    w = 0.02  # [rad]
    table = (f"[plant.actuators]\ndead_band = [{w}, 0.0]\n"
             "[plant.friction]\ncoulomb = 0.2\n")
    plant = make_plant("planar_2link", plant_file(tmp_path, "planar_2link", table),
                       noise=False)
    plant.set_mode("position")
    speed, up = 0.01, 2500  # [rad/s], cycles up then down
    refs = [speed * PERIOD * (k if k <= up else 2 * up - k) for k in range(2 * up)]
    run = _run(plant, [[r, 0.0] for r in refs])
    q1 = run["q"][:, 0]
    refs = np.array(refs)
    # on the way up the driven side trails the command by half the play
    assert abs((refs[up - 1] - q1[up - 1]) - 0.5 * w) < 0.02 * w
    peak = q1[up - 1]
    moved = np.nonzero(q1[up:] < peak - 1e-6)[0][0] + up
    travel = refs[up - 1] - refs[moved]
    # the command travels the whole dead band before the driven side follows
    assert abs(travel - w) <= 0.03 * w
    assert np.max(np.abs(q1[up:moved] - peak)) < 0.01 * w


def test_a_single_tendon_never_pushes_it_goes_slack(tmp_path):
    path = plant_file(tmp_path, "double_pendulum", "[plant.actuators]\ntendon = 1\n")
    plant = make_plant("double_pendulum", path, noise=False)
    plant.set_mode("position")
    # +0.05 m needs a push on this arm (G_a < 0 there), -0.05 m a pull
    refs = [[0.05]] * 1000 + [[-0.05]] * 1000 + [[0.02]] * 1000
    run = _run(plant, refs)
    tau = run["tau"][:, 0]
    assert np.all(tau >= 0.0)
    assert np.any(tau == 0.0) and np.any(tau > 10.0)  # slack, and taut
    assert np.all(run["read"][:, 3] >= 0.0)  # the tension sensor agrees (no noise)


# ------------------------------------------------------------- sensors and delay


def test_encoder_readings_are_whole_counts_within_half_a_step(tmp_path):
    path = plant_file(tmp_path, "double_pendulum",
                      "[plant.sensors]\ncounts_per_rev = 4096\nq_noise = 3e-4\n")
    plant = make_plant("double_pendulum", path, noise=False)
    assert plant.sensors.counts_per_rad == pytest.approx(4096 / (2 * math.pi), rel=1e-15)
    plant.set_mode("position")
    run = _run(plant, [[0.1 * math.sin(k / 100)] for k in range(1000)])
    step = 2 * math.pi / 4096
    counts = run["read"][:, :2] / step
    assert np.max(np.abs(counts - np.round(counts))) < 1e-6
    assert np.max(np.abs(run["read"][:, :2] - run["q"])) <= 0.5 * step * (1 + 1e-9)
    noisy = make_plant("double_pendulum", path)
    assert np.all(noisy.sensors.q_noise == 3e-4)  # the file's noise, SensorConfig's model


def test_delayed_readings_equal_the_undelayed_ones_n_cycles_earlier(tmp_path):
    n = 2
    refs = [[0.08 * math.sin(k / 50)] for k in range(500)]
    runs = []
    for table in ("", f"[plant.delay]\nsensors = {n}\n"):
        plant = make_plant("double_pendulum", plant_file(tmp_path, "double_pendulum", table),
                           noise=False)
        plant.set_mode("position")
        runs.append(_run(plant, refs))
    now, late = runs
    assert np.array_equal(now["q"], late["q"])  # the arm itself is not delayed
    assert np.array_equal(late["read"][n:], now["read"][:-n])


def test_delayed_commands_act_n_cycles_later(tmp_path):
    n = 3
    refs = [[0.08 * math.sin(k / 50)] for k in range(500)]
    runs = []
    for table in ("", f"[plant.delay]\ncommands = {n}\n"):
        plant = make_plant("double_pendulum", plant_file(tmp_path, "double_pendulum", table),
                           noise=False)
        plant.set_mode("position")
        runs.append(_run(plant, refs))
    now, late = runs
    # the same motion n cycles later (to 1e-12 rad: the rest pose drifts by ~1e-20 rad in
    # the n cycles before the first command arrives)
    assert np.max(np.abs(late["q"][n:] - now["q"][:-n])) < 1e-12


# ------------------------------------------------------------- compiled, validation, names


def test_compiled_and_numpy_steps_agree_with_every_effect(tmp_path):
    path = write_named("soft_arm_stiff", "real", tmp_path)
    states = []
    for compiled in (True, False):
        plant = make_plant("soft_arm_stiff", path, noise=False, compiled=compiled)
        assert plant.sim.compiled is compiled and plant.sim.effects is not None
        plant.set_mode("position")
        run = _run(plant, [[0.02 * math.sin(k / 30), -0.01] for k in range(300)])
        states.append(run)
    for key in ("q", "qd"):
        scale = np.max(np.abs(states[1][key]))
        assert np.max(np.abs(states[0][key] - states[1][key])) <= 1e-9 * scale


@pytest.mark.parametrize("table, where", [
    ("[plant.friction]\ncolomb = 0.1\n", "plant.friction.colomb: unknown key"),
    ("[plant.friction]\ncoulomb = [0.1, 0.1, 0.1]\n", "plant.friction.coulomb = [0.1, 0.1"),
    ("[plant.friction]\ncoulomb = 0.2\nstiction = 0.1\n", "plant.friction.stiction = 0.1"),
    ("[plant.actuators]\ntendon = 2\n", "plant.actuators.tendon = 2"),
    ("[plant.hysteresis]\nstiffness = 1.0\n", "plant.hysteresis.yield_angle"),
    ("[plant.delay]\nsensors = 1.5\n", "plant.delay.sensors = 1.5"),
    ("[plant.backlash]\nwidth = 1\n", "plant.backlash: unknown key"),
])
def test_an_invalid_plant_table_is_refused_naming_file_and_key(tmp_path, table, where):
    path = plant_file(tmp_path, "double_pendulum", table, name="bad.toml")
    with pytest.raises(ModelError) as err:
        make_plant("double_pendulum", path)
    assert str(err.value).startswith("bad.toml: ") and where in str(err.value)


def test_named_plants_exist_for_every_robot_with_actuation_and_are_deterministic(tmp_path):
    from poise.benchmarks.control_protocol import MODELS

    for robot in MODELS:
        for name in NAMED_PLANTS:
            text = named_text(robot, name)
            assert text == named_text(robot, name)
            plant = make_plant(robot, write_named(robot, name, tmp_path))
            assert plant.differences  # it does differ from the model
    real = make_plant("double_pendulum", write_named("double_pendulum", "real", tmp_path))
    assert real.sensor_delay == 2 and real.sim.effects is not None
    assert any(d.startswith("bodies[0].mass") for d in real.differences)


def test_bench_control_runs_on_the_real_plant_and_reports_it(tmp_path, capsys):
    out = tmp_path / "control.json"
    code = main(["bench", "control", "--plant", "real", "--models", "double_pendulum",
                 "--modes", "fb", "--algorithms", "alg1", "--targets", "2", "--quiet",
                 "--json", str(out)])
    assert code == 0
    result = json.loads(out.read_text())
    assert result["plants"] == {"double_pendulum": "double_pendulum=real (named plant, "
                                                   "built in)"}
    (case,) = result["cases"]
    assert len(case["targets"]) == 2
    assert "double_pendulum=real" in capsys.readouterr().out
    assert main(["bench", "control", "--plant", "double_pendulum=nonsense+x", "--models",
                 "double_pendulum", "--targets", "1", "--quiet"]) == 2
