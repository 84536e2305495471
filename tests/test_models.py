"""Robot models: analytic derivatives, energy consistency, dynamics, reference numbers, files."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from poise.cli import main
from poise.models import (
    FiniteDifferenceDerivatives,
    MechanicalModel,
    ModelError,
    actuation,
    check_derivatives,
    fd_jacobian,
    list_models,
    load_model,
    model_from_dict,
    model_summaries,
)
from poise.models import registry as registry_module
from poise.models.actuation import Gu
from poise.models.derivatives import christoffel_bias, sample_configurations
from poise.models.planar_pcc import f_funcs

PLANAR = ["planar_2link", "double_pendulum", "tendon_3link", "dancer", "soft_arm_stiff",
          "soft_arm_soft"]
MODELS = {name: load_model(name) for name in PLANAR}


def rel_err(a, b) -> float:
    """max|a − b| relative to max|b| (floor 1e-9, so an all-zero reference is absolute)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-9))


def configurations(model, k=4, seed=1):
    return sample_configurations(model, k, seed)


@pytest.fixture(params=PLANAR)
def model(request):
    return MODELS[request.param]


# ---------------------------------------------------------------- protocol and derivatives


def test_every_builtin_planar_model_implements_mechanical_model(model):
    assert isinstance(model, MechanicalModel)
    assert model.C.shape == (model.n, model.n) and model.qa_min.shape == (model.m,)
    np.testing.assert_allclose(model.C_inv @ model.C, np.eye(model.n), atol=1e-12)
    assert model.task_kind == "position" and model.fk(np.zeros(model.n)).shape == (model.task_dim,)


def test_check_derivatives_passes_on_every_builtin_planar_model(model):
    report = check_derivatives(model, samples=5, seed=0)
    assert report.ok, str(report)
    names = {c.name for c in report.checks}
    assert {"task_jacobian", "G", "dG", "J_a", "bias_forces"} <= names
    if model.m < model.n:
        assert {"J_u", "H_ua", "H_uu"} <= names


def test_task_jacobian_matches_central_fd_to_1e_6_relative(model):
    for q in configurations(model):
        assert rel_err(model.task_jacobian(q), fd_jacobian(model.fk, q)) < 1e-6


def test_G_is_gradient_of_potential(model):
    for q in configurations(model):
        assert rel_err(model.G(q), fd_jacobian(model.potential, q)) < 1e-6


def test_dG_is_jacobian_of_G_and_symmetric(model):
    for q in configurations(model):
        H = model.dG(q)
        assert rel_err(H, fd_jacobian(model.G, q)) < 1e-6
        np.testing.assert_allclose(H, H.T, rtol=0, atol=1e-12 * max(1.0, np.abs(H).max()))


def test_actuation_blocks_match_fd_in_actuation_coordinates(model):
    for q in configurations(model, k=2):
        b = actuation.blocks(model, q)

        def at(qa, qu):
            return actuation.join(model, qa, qu)

        assert rel_err(b.Ja, fd_jacobian(lambda a, qu=b.qu: model.fk(at(a, qu)), b.qa)) < 1e-6
        if model.m < model.n:
            assert rel_err(b.Ju, fd_jacobian(lambda u, qa=b.qa: model.fk(at(qa, u)), b.qu)) < 1e-6
            assert rel_err(b.Hua, fd_jacobian(lambda a, u=b.qu: Gu(model, at(a, u)), b.qa)) < 1e-6
            assert rel_err(b.Huu, fd_jacobian(lambda u, a=b.qa: Gu(model, at(a, u)), b.qu)) < 1e-6


def test_mass_matrix_symmetric_positive_definite(model):
    for q in configurations(model):
        M = model.mass_matrix(q)
        np.testing.assert_allclose(M, M.T, rtol=0, atol=1e-14)
        assert np.linalg.eigvalsh(M).min() > 0


def test_bias_forces_equal_christoffel_form_of_mass_matrix(model):
    rng = np.random.default_rng(3)
    for q in configurations(model):
        qd = rng.uniform(-2, 2, model.n)
        assert rel_err(model.bias_forces(q, qd), christoffel_bias(model, q, qd)) < 1e-6


def test_kinetic_energy_of_mass_points_matches_mass_matrix(model):
    """½ q̇ᵀ M q̇ ≥ Σ ½ m |ṗ|² of the mass points (equality for point masses; rods add I ψ̇²)."""
    rng = np.random.default_rng(4)
    q, qd = configurations(model, k=1)[0], rng.uniform(-1, 1, model.n)
    v = fd_jacobian(lambda t: model.mass_points(q + t[0] * qd), np.zeros(1))[..., 0]
    t_points = 0.5 * np.sum(model.masses * np.sum(v * v, axis=1))
    t_matrix = 0.5 * qd @ model.mass_matrix(q) @ qd
    if model.family == "planar_pcc":
        assert abs(t_matrix - t_points) < 1e-8 * t_matrix
    else:
        psid = model.S @ qd
        assert abs(t_matrix - t_points - 0.5 * model.inertias @ psid**2) < 1e-8 * t_matrix


def test_derivative_check_detects_a_wrong_G():
    class Wrong:
        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def G(self, q):
            return self.inner.G(q) * 1.001

    report = check_derivatives(Wrong(MODELS["double_pendulum"]), samples=2)
    assert not report.ok
    assert {c.name for c in report.failures()} >= {"G"}


def test_check_derivatives_covers_pose_models_with_geometric_jacobian():
    try:
        panda = load_model("panda")
    except ModelError as exc:  # the dh_chain family may be absent in a partial checkout
        pytest.skip(str(exc))
    report = check_derivatives(panda, samples=2)
    assert report.ok, str(report)
    assert {c.name for c in report.checks} == {"jacobian_v", "jacobian_w"}


def test_finite_difference_mixin_reproduces_analytic_derivatives():
    dp = MODELS["double_pendulum"]

    class FDPendulum(FiniteDifferenceDerivatives):
        def fk(self, q):
            return dp.fk(q)

        def potential(self, q):
            return dp.potential(q)

    fd = FDPendulum()
    q = np.array([0.4, -0.7])
    assert rel_err(fd.task_jacobian(q), dp.task_jacobian(q)) < 1e-8
    assert rel_err(fd.G(q), dp.G(q)) < 1e-8
    assert rel_err(fd.dG(q), dp.dG(q)) < 1e-5


# ---------------------------------------------------------------- change of coordinates


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(PLANAR),
       q=arrays(np.float64, 5, elements=st.floats(-3.0, 3.0, allow_nan=False)))
def test_change_of_coordinates_round_trips(name, q):
    model = MODELS[name]
    q = q[: model.n]
    qa, qu = actuation.split(model, q)
    assert qa.shape == (model.m,) and qu.shape == (model.n - model.m,)
    np.testing.assert_allclose(actuation.join(model, qa, qu), q, rtol=0, atol=1e-12)


def test_tendon_3link_unactuated_direction_is_unit_and_orthogonal_to_tendons():
    C = MODELS["tendon_3link"].C
    np.testing.assert_allclose(C[:2] @ C[2], 0.0, atol=1e-15)
    assert abs(np.linalg.norm(C[2]) - 1) < 1e-15 and np.linalg.det(C) > 0


# ---------------------------------------------------------------- reference numbers


@pytest.mark.parametrize(("q2_deg", "det", "sigma_min"),
                         [(90, 0.2000, 0.2863), (10, 0.0347, 0.0354), (1, 0.0035, 0.0035)])
def test_planar_2link_reproduces_seed_002_det_and_sigma_min(q2_deg, det, sigma_min):
    J = MODELS["planar_2link"].task_jacobian(np.array([0.3, math.radians(q2_deg)]))
    assert round(np.linalg.det(J), 4) == det
    assert round(np.linalg.svd(J, compute_uv=False).min(), 4) == sigma_min


@pytest.mark.parametrize("q_deg", [(-9.8, 84.3), (63.0, -84.3)])
def test_planar_2link_seed_002_ik_solutions_reach_target(q_deg):
    """Seed 002 prints the angles to 0.1°: the tip is within 0.1° × reach ≈ 1.6 mm."""
    x = MODELS["planar_2link"].fk(np.radians(q_deg))
    assert np.linalg.norm(x - [0.6, 0.3]) < 2e-3


def test_soft_arm_held_set_is_flat_without_gravity():
    arm = load_model("soft_arm", gravity=0.0)
    rng = np.random.default_rng(5)
    for a, b in rng.uniform(-2, 2, size=(20, 2)):
        q = np.array([a, a, a, b, b])
        assert np.max(np.abs(actuation.Gu(arm, q))) < 1e-12
    off = np.array([0.3, 0.1, 0.3, 0.2, 0.2])
    assert np.max(np.abs(actuation.Gu(arm, off))) > 1e-3
    # and the zero set of the (linear) G_u is exactly that 2-D plane: rank(∂G_u/∂q) = 3
    assert np.linalg.matrix_rank(actuation.blocks(arm, off).Huu) == 3


def test_double_pendulum_held_set_is_line_through_origin_without_gravity():
    dp = load_model("double_pendulum", gravity=0.0)
    q1, q2 = np.array([0.3, -0.5]), np.array([-1.1, 0.8])
    gu = actuation.Gu
    # G_u is linear in q …
    np.testing.assert_allclose(gu(dp, 2 * q1 + 3 * q2), 2 * gu(dp, q1) + 3 * gu(dp, q2),
                               atol=1e-12)
    # … its zero set is the line spanned by the null direction of ∂G_u/∂q (through the origin)
    row = fd_jacobian(lambda q: gu(dp, q), np.zeros(2))[0]
    direction = np.array([-row[1], row[0]]) / np.linalg.norm(row)
    for t in np.linspace(-3, 3, 7):
        assert abs(gu(dp, t * direction)[0]) < 1e-12
    assert abs(gu(dp, direction + 0.1 * row / np.linalg.norm(row))[0]) > 1e-2
    assert abs(gu(dp, np.zeros(2))[0]) == 0.0


def test_soft_arm_kinematics_smooth_at_zero_curvature():
    arm = MODELS["soft_arm_stiff"]
    straight = np.array([0.0, -1.0])  # 5 × 0.2 m pointing down
    np.testing.assert_allclose(arm.fk(np.zeros(5)), straight, atol=1e-15)
    tiny = np.full(5, 1e-9)
    # first-order exact: fk(θ) = fk(0) + J(0) θ + O(θ²) with θ² ~ 1e-18
    predicted = arm.fk(np.zeros(5)) + arm.task_jacobian(np.zeros(5)) @ tiny
    np.testing.assert_allclose(arm.fk(tiny), predicted, rtol=0, atol=1e-16)
    assert rel_err(arm.task_jacobian(np.zeros(5)), fd_jacobian(arm.fk, np.zeros(5))) < 1e-8
    g_lin = arm.G(np.zeros(5)) + arm.dG(np.zeros(5)) @ tiny
    np.testing.assert_allclose(arm.G(tiny), g_lin, rtol=0, atol=1e-15)
    assert rel_err(arm.dG(tiny), arm.dG(np.zeros(5))) < 1e-8


@pytest.mark.parametrize("theta", [1e-3, 0.5, 0.999, 1.001, 2.0, 5.0])
def test_soft_arm_single_bent_segment_matches_circular_arc(theta):
    arm = MODELS["soft_arm_stiff"]
    L, psi = 0.2, -math.pi / 2
    r = L / theta
    end1 = np.array([r * (math.sin(psi + theta) - math.sin(psi)),
                     -r * (math.cos(psi + theta) - math.cos(psi))])
    tip = end1 + 0.8 * np.array([math.cos(psi + theta), math.sin(psi + theta)])
    np.testing.assert_allclose(arm.fk(np.array([theta, 0, 0, 0, 0])), tip, atol=1e-12)


def test_f_functions_match_quadrature_on_both_sides_of_series_switch():
    t = np.linspace(0.0, 1.0, 20001)
    for z in [0.0, 1e-9j, 0.5j, 0.999j, 1.001j, 3.0j, -2.0 + 1.0j]:
        f = f_funcs(np.array(z))
        for d in range(3):
            y = t**d * np.exp(z * t)
            simpson = (y[0] + y[-1] + 4 * y[1:-1:2].sum() + 2 * y[2:-1:2].sum()) / 60000
            assert abs(f[d] - simpson) < 1e-13


def test_dancer_zero_configuration_geometry_and_centre_of_mass():
    dancer = MODELS["dancer"]
    q = np.zeros(4)
    segments = {name: seg for name, seg in zip(["stance", "torso", "gesture", "arm"],
                                               dancer.body_points(q), strict=True)}
    np.testing.assert_allclose(segments["stance"], [[0, 0], [0, 0.9]], atol=1e-15)
    np.testing.assert_allclose(segments["torso"], [[0, 0.9], [0, 1.5]], atol=1e-15)
    np.testing.assert_allclose(segments["gesture"], [[0, 0.9], [0, 0.0]], atol=1e-15)
    np.testing.assert_allclose(segments["arm"], [[0, 1.5], [0, 0.9]], atol=1e-15)
    # COM height (10·0.45 + 30·1.2 + 10·0.45 + 4·1.2) / 54 = 0.92222 m
    np.testing.assert_allclose(dancer.fk(q), [0.0, 49.8 / 54], atol=1e-14)


def test_dancer_positive_angles_are_counter_clockwise():
    dancer = MODELS["dancer"]
    stance_tip = dancer.body_points(np.array([0.1, 0, 0, 0]))[0][1]
    assert stance_tip[0] < 0  # CCW from up: leans to −x


def test_dancer_upright_with_raised_gesture_leg_is_unstable():
    """H_uu = k0 − g Σ m y_com: the COM climbs past k0 / (m g) ≈ 1.04 m when the leg is up."""
    dancer = MODELS["dancer"]
    assert actuation.blocks(dancer, np.zeros(4)).Huu[0, 0] == pytest.approx(
        550 - 9.81 * 49.8, rel=1e-12)
    raised = actuation.blocks(dancer, np.array([0.0, 0.0, math.pi, 0.0]))
    assert raised.Huu[0, 0] < 0


def test_double_pendulum_task_is_horizontal_tip_position_clockwise_from_up():
    dp = MODELS["double_pendulum"]
    q = np.array([0.4, 0.3])
    assert dp.fk(q)[0] == pytest.approx(math.sin(0.4) + math.sin(0.7), abs=1e-15)
    # hanging straight down is the gravity potential minimum (springs aside): G_grav = 0
    np.testing.assert_allclose(dp.with_gravity(9.81).G(np.array([math.pi, 0.0]))
                               - dp.stiffness * [math.pi, 0.0], 0.0, atol=1e-12)


def test_mass_points_and_body_points_shapes(model):
    q = np.zeros(model.n)
    pts = model.mass_points(q)
    assert pts.shape == (model.masses.size, 2)
    assert model.masses.sum() == pytest.approx(model.total_mass)
    assert all(p.ndim == 2 and p.shape[1] == 2 for p in model.body_points(q))


# ---------------------------------------------------------------- files and registry


def test_model_description_round_trips_to_identical_model(model):
    desc = model.describe()
    again = model_from_dict(json.loads(json.dumps(desc)))
    assert again.describe() == desc
    rng = np.random.default_rng(6)
    q, qd = rng.uniform(-1, 1, model.n), rng.uniform(-1, 1, model.n)
    for f in ("fk", "task_jacobian", "G", "dG", "mass_matrix"):
        np.testing.assert_array_equal(getattr(again, f)(q), getattr(model, f)(q))
    np.testing.assert_array_equal(again.bias_forces(q, qd), model.bias_forces(q, qd))
    assert again.potential(q) == model.potential(q)


def test_list_models_names_every_builtin_and_alias_loads():
    names = list_models()
    assert set(PLANAR) <= set(names)
    assert load_model("soft_arm").name == "soft_arm_stiff"
    assert load_model("soft_arm_soft").stiffness[0] == 0.1


def test_gravity_override_changes_only_gravity():
    dp = load_model("double_pendulum", gravity=0.0)
    assert dp.gravity == 0.0
    np.testing.assert_allclose(dp.G(np.array([0.2, 0.1])), [12 * 0.2, 8 * 0.1], atol=1e-15)


def test_user_model_file_loads_by_path(tmp_path):
    path = tmp_path / "pendulum.toml"
    path.write_text("""
family = "planar_tree"
name = "pendulum"
zero_direction = "down"
[[bodies]]
length = 0.5
mass = 2.0
[actuation]
m = 1
C = [[1.0]]
[task]
kind = "tip_xy"
""")
    p = load_model(path)
    np.testing.assert_allclose(p.fk(np.zeros(1)), [0.0, -0.5], atol=1e-15)
    assert p.qa_min[0] == -np.inf and p.inertias[0] == pytest.approx(2.0 * 0.25 / 12)


_GOOD_BODY = "[[bodies]]\nname = 'a'\nlength = 1.0\nmass = 1.0\n"
_GOOD_TAIL = "[actuation]\nm = 1\nC = [[1.0, 0.0], [0.0, 1.0]]\n[task]\nkind = 'tip_xy'\n"


@pytest.mark.parametrize(("text", "expected"), [
    (_GOOD_BODY + "[[bodies]]\nname = 'b'\nlength = 1.0\nmass = -1.0\n" + _GOOD_TAIL,
     "bad.toml: bodies[1].mass = -1.0: must be > 0"),
    (_GOOD_BODY + "[[bodies]]\nname = 'b'\nparent = 'x'\nlength = 1.0\nmass = 1.0\n"
     + _GOOD_TAIL, "bad.toml: bodies[1].parent = 'x': must be 'base' or a body listed before"),
    (_GOOD_BODY + "[[bodies]]\nname = 'b'\nlength = 1.0\nmass = 1.0\nstifness = 2.0\n"
     + _GOOD_TAIL, "bad.toml: bodies[1].stifness: unknown key"),
    (_GOOD_BODY + "[[bodies]]\nname = 'b'\nlength = 1.0\nmass = 1.0\n"
     + "[actuation]\nm = 1\nC = [[1.0, 1.0], [1.0, 1.0]]\n[task]\nkind = 'tip_xy'\n",
     "bad.toml: actuation.C = [[1.0, 1.0], [1.0, 1.0]]: must be invertible"),
    (_GOOD_BODY + "[[bodies]]\nname = 'b'\nlength = 1.0\nmass = 1.0\n"
     + "[actuation]\nm = 1\nC = [[1.0, 0.0], [0.0, 1.0]]\n[task]\nkind = 'tip_z'\n",
     "bad.toml: task.kind = 'tip_z': must be one of 'tip_x', 'tip_xy', 'com_xy'"),
    (_GOOD_BODY + "[[bodies]]\nname = 'b'\nmass = 1.0\n" + _GOOD_TAIL,
     "bad.toml: bodies[1].length is missing"),
    (_GOOD_BODY + "[[bodies]]\nname = 'b'\nlength = 1.0\nmass = 1.0\n"
     + "[actuation]\nm = 1\nC = [[1.0, 0.0], [0.0, 1.0]]\nqa_min = [0.5]\nqa_max = [0.1]\n"
     + "[task]\nkind = 'tip_xy'\n", "bad.toml: actuation.qa_max = [0.1]: must be >= qa_min"),
])
def test_malformed_model_file_raises_model_error_naming_file_key_value(tmp_path, text, expected):
    path = tmp_path / "bad.toml"
    path.write_text("family = 'planar_tree'\nname = 'bad'\n" + text)
    with pytest.raises(ModelError) as info:
        load_model(path)
    assert expected in str(info.value)


def test_unknown_family_and_unknown_model_name_are_model_errors(tmp_path):
    path = tmp_path / "odd.toml"
    path.write_text("family = 'hexapod'\nname = 'odd'\n")
    with pytest.raises(ModelError, match=r"odd.toml: family = 'hexapod': must be one of"):
        load_model(path)
    with pytest.raises(ModelError, match="unknown; built-in models are"):
        load_model("no_such_robot")
    with pytest.raises(ModelError, match="not valid TOML"):
        (tmp_path / "broken.toml").write_text("family = \n")
        load_model(tmp_path / "broken.toml")


def test_listing_reports_a_family_that_fails_to_import_instead_of_crashing(monkeypatch):
    monkeypatch.setitem(registry_module.FAMILIES, "planar_pcc", "poise.no_such_module:X")
    rows = {r["name"]: r for r in model_summaries()}
    assert "error" in rows["soft_arm_stiff"] and "no_such_module" in rows["soft_arm_stiff"]["error"]
    assert rows["double_pendulum"]["n"] == 2 and "error" not in rows["double_pendulum"]


# ---------------------------------------------------------------- CLI


def test_cli_model_list_json(capsys):
    assert main(["model", "list", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert (rows["double_pendulum"]["n"], rows["double_pendulum"]["m"],
            rows["double_pendulum"]["task_dim"]) == (2, 1, 1)
    assert (rows["soft_arm_stiff"]["n"], rows["soft_arm_stiff"]["m"]) == (5, 2)
    assert rows["soft_arm_stiff"]["aliases"] == ["soft_arm"]


def test_cli_model_list_table(capsys):
    assert main(["model", "list"]) == 0
    out = capsys.readouterr().out
    assert "dancer" in out and "planar_tree" in out


def test_cli_model_show_json_reloads_as_equivalent_model(capsys, tmp_path):
    assert main(["model", "show", "tendon_3link", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["derived"]["n"] == 3 and data["derived"]["m"] == 2
    assert data["derived"]["qa_max"] == [0.12, 0.12]
    path = tmp_path / "copy.json"
    path.write_text(json.dumps(data))
    again, orig = load_model(path), MODELS["tendon_3link"]
    q = np.array([0.1, -0.2, 0.3])
    np.testing.assert_array_equal(again.G(q), orig.G(q))
    assert again.describe() == orig.describe()


def test_cli_model_show_text_and_unknown_name(capsys):
    assert main(["model", "show", "dancer"]) == 0
    out = capsys.readouterr().out
    assert "stance_leg" in out and "total_mass" in out
    assert main(["model", "show", "no_such_robot"]) == 2
    assert "unknown" in capsys.readouterr().err


@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_random_planar_trees_round_trip_and_have_consistent_derivatives(data):
    """Any valid tree (random parents, attach points, signs, offsets, springs) is consistent."""
    n = data.draw(st.integers(1, 4))
    pos = st.floats(0.1, 2.0)
    bodies = []
    for i in range(n):
        length = data.draw(pos)
        parent = data.draw(st.integers(-1, i - 1))
        bodies.append({
            "name": f"b{i}", "parent": "base" if parent < 0 else f"b{parent}",
            "attach": 0.0 if parent < 0 else bodies[parent]["length"] * data.draw(st.floats(0, 1)),
            "length": length, "mass": data.draw(pos), "com": length * data.draw(st.floats(0, 1)),
            "sign": data.draw(st.sampled_from([1, -1])), "offset": data.draw(st.floats(-3, 3)),
            "stiffness": data.draw(st.floats(0, 20)), "rest": data.draw(st.floats(-1, 1)),
        })
    desc = {"family": "planar_tree", "name": "random", "gravity": 9.81,
            "zero_direction": data.draw(st.sampled_from(["up", "+x", 0.3])), "bodies": bodies,
            "actuation": {"m": n, "C": np.eye(n).tolist()},
            "task": {"kind": data.draw(st.sampled_from(["tip_x", "tip_xy", "com_xy"]))}}
    model = model_from_dict(desc)
    assert model_from_dict(model.describe()).describe() == model.describe()
    report = check_derivatives(model, samples=2, seed=data.draw(st.integers(0, 100)))
    assert report.ok, str(report)
    assert np.linalg.eigvalsh(model.mass_matrix(np.zeros(n))).min() > 0


@pytest.mark.parametrize("name", ["soft_arm_stiff", "soft_arm_soft"])
def test_fused_statics_terms_equal_separate_calls(name):
    model = load_model(name)
    rng = np.random.default_rng(3)
    # Random shapes, one just inside the series' range (|θ| ≤ 2π) and one beyond it.
    qs = [rng.normal(size=model.n) for _ in range(5)]
    qs += [np.full(model.n, 6.28), np.array([7.0, -0.5, 0.2, 0.0, 1e-9])]
    for q in qs:
        x, jac, g, dg = model.statics_terms(q)
        # Equal to rounding: the fused path sums a power series, the separate calls use f_d.
        np.testing.assert_allclose(x, model.fk(q), rtol=0, atol=1e-14)
        np.testing.assert_allclose(jac, model.task_jacobian(q), rtol=0, atol=1e-14)
        np.testing.assert_allclose(g, model.G(q), rtol=0, atol=1e-13)
        np.testing.assert_allclose(dg, model.dG(q), rtol=0, atol=1e-13)
