"""Compiled kernels (poise.kernels) against the numpy reference they must equal.

Every comparison is a norm-based relative error with an absolute floor,

    ‖compiled − reference‖ ≤ RTOL · max(‖reference‖, floor),    RTOL = 1e-12,

where ``floor`` is the natural size of the quantity for the model at hand (the arm's reach
for positions, the largest spring or gravity torque for forces, 1 rad for angles, ...), so a
value that is ~0 by cancellation (a tip on the y axis, ``G_u`` on E) is compared at the scale
of the terms that cancel rather than at its own roundoff. Both implementations round
differently (loops against BLAS, another summation order), so agreement to ~1e-15 relative is
expected and 1e-12 leaves room without hiding a wrong term: any error in a formula shows up at
1e-3 or more.

Configurations are seeded random draws (20 per model) plus Hypothesis for the edge cases
(tiny and large bending angles of the soft arm, rank-deficient matrices).
"""

from __future__ import annotations

import math
import pathlib
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from poise.ik.held import HeldOptions, algorithm1, algorithm2
from poise.ik.held import damped_pinv as ref_damped_pinv
from poise.ik.held_kernels import HeldKernels
from poise.ik.statics import solve_statics
from poise.kernels import (
    NoKernelsError,
    guard,
    held_solve,
    pack,
    steps,
    warm_up,
)
from poise.kernels import cache as kcache
from poise.kernels import cycle as cycle_kernel
from poise.kernels import linalg as kla
from poise.kernels import planar_pcc as kpcc
from poise.kernels.blocks import Layout
from poise.kernels.family import kernels_of
from poise.models import load_model
from poise.models.actuation import blocks as ref_blocks
from poise.models.planar_pcc import f_funcs as ref_f_funcs
from poise.motion.compiled_steppers import CompiledAlg1Stepper, make_compiled_stepper
from poise.motion.params import LiveParams
from poise.motion.safety import SafetyLimits, limit_setpoint
from poise.motion.step import ControlStep
from poise.motion.stepper import make_stepper
from poise.sim.dynamics import Dynamics

RTOL = 1e-12
N_CONFIGS = 20
TREE = ("planar_2link", "double_pendulum", "tendon_3link", "dancer")
PCC = ("soft_arm_stiff", "soft_arm_soft")
MODELS = TREE + PCC
STEPPERS = ("alg1", "alg2", "plain")


def check(compiled, reference, floor: float, what: str) -> None:
    """``‖a − b‖ ≤ RTOL · max(‖b‖, floor)`` (Frobenius norm for matrices)."""
    a = np.asarray(compiled, dtype=float)
    b = np.asarray(reference, dtype=float)
    assert a.shape == b.shape, f"{what}: shape {a.shape} != {b.shape}"
    err = float(np.linalg.norm(a - b))
    scale = max(float(np.linalg.norm(b)), floor)
    assert err <= RTOL * scale, f"{what}: ‖Δ‖ = {err:.3e} > {RTOL:g} × {scale:.3e}"


class Scales:
    """Natural sizes of a model's quantities (the floors of :func:`check`)."""

    def __init__(self, model) -> None:
        lengths = (model.lengths if hasattr(model, "lengths")
                   else np.array([b.length for b in model.spec.bodies]))
        masses = model.masses
        self.length = float(np.sum(lengths))  # reach [m]
        self.mass = float(np.sum(masses))  # [kg]
        # largest spring torque at 1 rad + gravity torque of all the mass at full reach [N·m]
        self.force = float(np.max(model.stiffness, initial=0.0)
                           + model.gravity * self.mass * self.length)
        self.inertia = self.mass * self.length**2  # [kg·m²]
        self.c = float(np.linalg.norm(model.C))  # actuation coordinates per rad
        self.c_inv = float(np.linalg.norm(model.C_inv))


_CACHE: dict[str, tuple] = {}


def setup(name: str):
    """(model, packed, scales), packed and warmed up once per test session."""
    if name not in _CACHE:
        model = load_model(name)
        packed = pack(model)
        warm_up(packed)
        _CACHE[name] = (model, packed, Scales(model))
    return _CACHE[name]


def configurations(model, count: int, seed: int) -> np.ndarray:
    """Random configurations: within the joint limits where finite, else ±π; soft-arm
    angles up to ±8 rad, which covers both branches of the reference's f evaluation
    (series for |θ| < 1, recurrence beyond) and of its fused power series (|θ| ≤ 2π)."""
    rng = np.random.default_rng(seed)
    span = 8.0 if model.family == "planar_pcc" else math.pi
    lo = np.where(np.isfinite(model.q_min), model.q_min, -span)
    hi = np.where(np.isfinite(model.q_max), model.q_max, span)
    return rng.uniform(lo, hi, size=(count, model.n))


# ----------------------------------------------------------------------------- model kernels


@pytest.mark.parametrize("name", MODELS)
def test_model_kernels_equal_reference_at_random_configurations(name):
    model, packed, s = setup(name)
    fam, arr = kernels_of(packed.arrays), packed.arrays
    for q in configurations(model, N_CONFIGS, seed=1):
        check(fam.fk(arr, q), model.fk(q), s.length, f"{name} h(q)")
        check(steps.fk(packed.args, q), model.fk(q), s.length, f"{name} steps.fk")
        check(steps.G(packed.args, q), model.G(q), s.force, f"{name} steps.G")
        check(fam.task_jacobian(arr, q), model.task_jacobian(q), s.length, f"{name} ∂h/∂q")
        check(fam.G(arr, q), model.G(q), s.force, f"{name} G")
        check(fam.dG(arr, q), model.dG(q), s.force, f"{name} ∂G/∂q")
        check([fam.potential(arr, q)], [model.potential(q)], s.force, f"{name} U")
        x, jac, g, dg = fam.statics_terms(arr, q)
        ref = (model.statics_terms(q) if hasattr(model, "statics_terms")
               else (model.fk(q), model.task_jacobian(q), model.G(q), model.dG(q)))
        for a, b, floor, what in zip((x, jac, g, dg), ref,
                                     (s.length, s.length, s.force, s.force),
                                     ("h", "∂h/∂q", "G", "∂G/∂q"), strict=True):
            check(a, b, floor, f"{name} statics_terms {what}")


@pytest.mark.parametrize("name", MODELS)
def test_dynamics_kernels_equal_reference(name):
    model, packed, s = setup(name)
    fam, arr = kernels_of(packed.arrays), packed.arrays
    rng = np.random.default_rng(2)
    dyn = Dynamics(model, compiled=False)  # the numpy reference
    assert Dynamics(model).compiled  # what the simulator runs by default
    for q in configurations(model, N_CONFIGS, seed=2):
        qd = rng.uniform(-3.0, 3.0, model.n)  # [rad/s]
        tau = rng.uniform(-1.0, 1.0, model.m) * s.force / max(s.c, 1e-300)
        M, bias, g = fam.dynamics_terms(arr, q, qd)
        check(M, model.mass_matrix(q), s.inertia, f"{name} M")
        check(bias, model.bias_forces(q, qd), s.inertia * 9.0, f"{name} C(q, q̇) q̇")
        check(g, model.G(q), s.force, f"{name} G (dynamics)")
        acc = dyn.acceleration(q, qd, tau)
        # q̈ = M⁻¹ f: its rounding grows with cond(M), so the floor is the size of M⁻¹ f's terms
        floor = float(np.linalg.norm(np.linalg.inv(model.mass_matrix(q)), 2)) * s.force
        check(steps.acceleration(packed.args, q, qd, tau), acc, floor, f"{name} q̈")


@pytest.mark.parametrize("name", MODELS)
def test_actuation_blocks_equal_reference(name):
    model, packed, s = setup(name)
    layout = Layout(model.n, model.m, model.task_dim)
    floors = {"q": 1.0, "qa": s.c, "qu": s.c, "x": s.length,
              "Ga": s.force * s.c_inv, "Gu": s.force * s.c_inv,
              "Ja": s.length * s.c_inv, "Ju": s.length * s.c_inv,
              "Hua": s.force * s.c_inv**2, "Huu": s.force * s.c_inv**2,
              "Haa": s.force * s.c_inv**2}
    for q in configurations(model, N_CONFIGS, seed=3):
        fields = layout.fields(steps.blocks(packed.args, q))
        ref = ref_blocks(model, q)
        check(fields["q"], q, 1.0, f"{name} q")
        for key, floor in floors.items():
            if key != "q":
                check(fields[key], getattr(ref, key), floor, f"{name} {key}")


@settings(max_examples=60, deadline=None, derandomize=True)
@given(theta=st.one_of(st.floats(-12.0, 12.0),
                       st.sampled_from([0.0, 1e-300, -1e-12, 0.999999999, 1.0, -1.0000001,
                                        2 * math.pi, -2 * math.pi])),
       s=st.sampled_from([1.0, 0.5, 0.1, 0.9]))
def test_soft_arm_f_functions_equal_reference_across_the_series_switch(theta, s):
    """f_d(iθs) are O(1) (|f_d| ≤ 1/(d+1)) and vanish at some θ (f₀(2πi) = 0): floor 1."""
    ref = [f[()] for f in ref_f_funcs(np.array(1j * s * theta))]
    got = kpcc.f_funcs(s * theta)
    for d in range(3):
        check([got[d].real, got[d].imag], [ref[d].real, ref[d].imag], 1.0 / (d + 1), f"f{d}")


@settings(max_examples=25, deadline=None, derandomize=True)
@given(q=arrays(np.float64, 5, elements=st.one_of(
    st.floats(-7.0, 7.0), st.sampled_from([0.0, 1e-10, -1e-7, 1.0, 2 * math.pi]))))
def test_soft_arm_statics_equal_reference_at_tiny_and_large_bending(q):
    model, packed, s = setup("soft_arm_soft")
    fam = kernels_of(packed.arrays)
    got = fam.statics_terms(packed.arrays, q)
    for a, b, floor in zip(got, model.statics_terms(q), (s.length, s.length, s.force, s.force),
                           strict=True):
        check(a, b, floor, "soft_arm_soft statics_terms")


# ----------------------------------------------------------------------------- linear algebra


@settings(max_examples=60, deadline=None, derandomize=True)
@given(shape=st.tuples(st.integers(1, 4), st.integers(1, 4)),
       rank_drop=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_pinv_equals_numpy_pinv_including_rank_deficient(shape, rank_drop, seed):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=shape)
    if rank_drop and min(shape) > 1:
        a[-1] = 2.0 * a[0]  # a repeated row: rank min(shape) − 1
    check(kla.pinv(a), np.linalg.pinv(a), 1.0 / max(np.linalg.norm(a), 1e-300), "pinv")
    got, ok = kla.damped_pinv(a, 0.0)
    assert ok
    check(got, np.linalg.pinv(a), 1.0 / max(np.linalg.norm(a), 1e-300), "damped_pinv λ=0")
    # λ > 0 inverts the Gram matrix a aᵀ + λ² I (or aᵀ a + λ² I): any two inversions of it
    # agree only to cond · ε (cond ≈ σ_max² / λ² ≈ 1e5 when a is rank-deficient), so the
    # relative error is divided by that condition number before the RTOL comparison.
    lam = 1e-2
    got, ok = kla.damped_pinv(a, lam)
    assert ok
    ref = ref_damped_pinv(a, lam)
    gram = a @ a.T if a.shape[0] <= a.shape[1] else a.T @ a
    cond = float(np.linalg.cond(gram + lam**2 * np.eye(gram.shape[0])))
    rel = float(np.linalg.norm(got - ref)) / float(np.linalg.norm(ref))
    assert rel / cond <= RTOL, f"damped_pinv: relative error {rel:.2e} at cond {cond:.2e}"


@settings(max_examples=60, deadline=None, derandomize=True)
@given(n=st.integers(0, 5), repeated=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_eigh_equals_numpy_eigh_including_repeated_eigenvalues(n, repeated, seed):
    """Eigenvalues equal numpy's; the vectors differ by sign (and within a repeated
    eigenspace), so they are checked through ``V diag(λ) Vᵀ = A`` and ``VᵀV = I``."""
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(n, n))
    a = a + a.T
    if repeated and n > 1:
        v = np.linalg.qr(rng.normal(size=(n, n)))[0]
        lam = np.sort(rng.normal(size=n))
        lam[1] = lam[0]  # a double eigenvalue
        a = v @ np.diag(lam) @ v.T
        a = 0.5 * (a + a.T)
    vals, vecs = kla.eigh(a)
    scale = max(float(np.linalg.norm(a)), 1.0)
    check(vals, np.linalg.eigvalsh(a), scale, "eigenvalues")
    check(vecs @ np.diag(vals) @ vecs.T, a, scale, "V Λ Vᵀ")
    check(vecs.T @ vecs, np.eye(n), 1.0, "VᵀV")


@settings(max_examples=60, deadline=None, derandomize=True)
@given(shape=st.tuples(st.integers(1, 4), st.integers(1, 4)), seed=st.integers(0, 2**32 - 1))
def test_smallest_singular_value_equals_numpy_svd(shape, seed):
    a = np.random.default_rng(seed).normal(size=shape)
    ref = np.linalg.svd(a, compute_uv=False)
    check([kla.smallest_singular(a)], [ref.min()], float(ref.max()), "σ_min")


def test_solve_reports_exactly_singular_matrices_like_numpy_raises():
    singular = np.array([[1.0, 2.0], [2.0, 4.0]])
    with pytest.raises(np.linalg.LinAlgError):
        np.linalg.solve(singular, np.ones(2))
    _, ok = kla.solve_vec(singular, np.ones(2))
    assert not ok
    a = np.array([[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]])
    x, ok = kla.solve_vec(a, np.array([1.0, -2.0, 0.5]))
    assert ok
    check(x, np.linalg.solve(a, np.array([1.0, -2.0, 0.5])), 1.0, "solve")
    assert kla.is_positive_definite(a) and not kla.is_positive_definite(-a)
    assert not kla.is_positive_definite(np.array([[1.0, 2.0], [2.0, 1.0]]))


# ----------------------------------------------------------------------------- steppers


def start_configuration(model, seed: int) -> np.ndarray:
    """A random start away from kinematic singularities (σ_min/σ_max of ∂h/∂q ≥ 0.05).

    Near a singularity the damped inverse solves a system of condition ~σ_max²/λ² ≈ 1e4
    (λ = 1e-2), where any two correct implementations differ by that many ulps (1e-12
    relative): a property of the input, not of the kernels, so the step tests avoid it.
    """
    rng = np.random.default_rng(seed)
    while True:
        q = configurations(model, 1, seed=int(rng.integers(2**31)))[0] * 0.3
        sv = np.linalg.svd(model.task_jacobian(q), compute_uv=False)
        if sv.min() >= 0.05 * sv.max():
            return q


def params(algorithm: str, target, *, update="dls", gamma=2.0, gamma_z=2.0, gamma_e=20.0,
           damping=1e-2) -> LiveParams:
    return LiveParams(algorithm, update, gamma, gamma_z, gamma_e, damping,
                      np.asarray(target, dtype=float), "ff")


def compare_steppers(name: str, algorithm: str, p: LiveParams, q0, *, dt: float,
                     cycles: int = 8, x_meas=None, at_limit: list | None = None) -> tuple:
    """Step the reference and the compiled stepper side by side from ``q0``; each commits
    its own (clipped) proposal. Returns both steppers; ``at_limit`` gets, per cycle, whether
    an actuator was at a limit."""
    model, packed, s = setup(name)
    ref = make_stepper(algorithm, model)
    got = make_compiled_stepper(algorithm, model, packed)
    assert got is not None and got.name == ref.name == algorithm
    ref.reset(q0, model.qa_min, model.qa_max)
    got.reset(q0, model.qa_min, model.qa_max)
    for cycle in range(cycles):
        where = f"{name} {algorithm} cycle {cycle}"
        x = None if x_meas is None else x_meas(cycle)
        qa_r = ref.propose(p, x, dt)
        qa_c = got.propose(p, x, dt)
        check(qa_c, qa_r, s.c, f"{where} proposed qa")
        ref.commit(np.clip(qa_r, model.qa_min, model.qa_max))
        got.commit(np.clip(qa_c, model.qa_min, model.qa_max))
        check(got.q_bar, ref.q_bar, 1.0, f"{where} q̄")
        check(got.qa, ref.qa, s.c, f"{where} qa")
        check(got.tau, ref.tau, s.force * s.c_inv, f"{where} τ")
        check(got.x_bar, ref.x_bar, s.length, f"{where} x̄")
        check([got.residual], [ref.residual], s.force * s.c_inv, f"{where} residual")
        if at_limit is not None:
            at_limit.append(bool(np.any(got.qa >= model.qa_max - 1e-10)
                                 or np.any(got.qa <= model.qa_min + 1e-10)))
    return ref, got


@pytest.mark.parametrize("algorithm", STEPPERS)
@pytest.mark.parametrize("name", MODELS)
def test_compiled_stepper_equals_reference_over_consecutive_cycles(name, algorithm):
    model, _, _ = setup(name)
    rng = np.random.default_rng(4)
    for trial, (dt, scale) in enumerate(((1e-3, 1.0), (0.05, 10.0))):
        q0 = start_configuration(model, seed=10 + trial)
        target = model.fk(configurations(model, 1, seed=20 + trial)[0] * 0.3)
        p = params(algorithm, target, gamma=2.0 * scale, gamma_z=2.0 * scale,
                   gamma_e=min(20.0 * scale, 0.9 / dt))
        ref, got = compare_steppers(name, algorithm, p, q0, dt=dt)
        if algorithm == "alg1":
            assert got.fallbacks == ref.fallbacks
    # feedback mode: the error uses a measured task value
    q0 = start_configuration(model, seed=30)
    noise = rng.normal(scale=1e-3, size=(8, model.task_dim))
    p = params(algorithm, model.fk(q0) + 0.05)
    compare_steppers(name, algorithm, p, q0, dt=1e-3,
                     x_meas=lambda c: model.fk(q0) + noise[c])


@pytest.mark.parametrize("update", ("dls", "pinv", "transpose", "inverse"))
@pytest.mark.parametrize("name", ("double_pendulum", "tendon_3link", "dancer", "soft_arm_stiff"))
def test_alg1_every_update_law_equals_reference(name, update):
    model, _, _ = setup(name)
    q0 = start_configuration(model, seed=40)
    target = model.fk(configurations(model, 1, seed=41)[0] * 0.3)
    p = params("alg1", target, update=update, damping=0.0 if update == "pinv" else 1e-2)
    if update == "inverse" and model.task_dim != model.m:
        compiled = make_compiled_stepper("alg1", model, setup(name)[1])
        compiled.reset(q0, model.qa_min, model.qa_max)
        with pytest.raises(ValueError, match="square Jacobian"):
            compiled.propose(p, None, 1e-3)
        return
    compare_steppers(name, "alg1", p, q0, dt=1e-2)


@pytest.mark.parametrize("name", ("tendon_3link", "dancer", "soft_arm_soft"))
def test_alg2_and_plain_without_damping_equal_reference(name):
    """λ = 0: exact solves for square ``Ja``, the SVD pseudo-inverse otherwise (dancer)."""
    model, _, _ = setup(name)
    q0 = start_configuration(model, seed=50)
    target = model.fk(configurations(model, 1, seed=51)[0] * 0.3)
    for algorithm in ("alg2", "plain"):
        compare_steppers(name, algorithm, params(algorithm, target, damping=0.0), q0, dt=1e-2)


@pytest.mark.parametrize("name", ("double_pendulum", "soft_arm_soft", "dancer"))
def test_alg1_fallback_to_the_statics_solver_equals_reference(name):
    """An actuator jump too large for four warm-started Newton steps: both steppers fall
    back to the full statics solver and land on the same held configuration."""
    model, packed, s = setup(name)
    ref = make_stepper("alg1", model)
    got = make_compiled_stepper("alg1", model, packed)
    q0 = np.zeros(model.n)
    ref.reset(q0, model.qa_min, model.qa_max)
    got.reset(q0, model.qa_min, model.qa_max)
    jump = np.where(np.isfinite(model.qa_max), 0.9 * model.qa_max, 1.0)
    ref.commit(jump)
    got.commit(jump)
    assert ref.fallbacks == got.fallbacks == 1
    check(got.q_bar, ref.q_bar, 1.0, "q̄ after fallback")
    check(got.tau, ref.tau, s.force * s.c_inv, "τ after fallback")


def held_start(model, fraction: float) -> np.ndarray:
    """The held configuration (stable branch) with every actuator at ``fraction`` of its
    upper limit (1 where unbounded): bent, away from the straight arm's singularity."""
    top = np.where(np.isfinite(model.qa_max), model.qa_max, 1.0)
    return solve_statics(model, fraction * top, np.zeros(model.n - model.m)).q


@pytest.mark.parametrize("name", MODELS)
def test_compiled_statics_solver_equals_reference(name):
    """Random actuators and warm starts far from the solution (±1 rad), so that the line
    search and, on the dancer, the negative-curvature step are taken."""
    model, packed, _ = setup(name)
    solver = HeldKernels(model, packed)
    rng = np.random.default_rng(70)
    top = np.where(np.isfinite(model.qa_max), model.qa_max, 1.0)
    iterations = []
    for trial in range(12):
        qa = rng.uniform(-top, top)
        qu0 = rng.uniform(-1.0, 1.0, model.n - model.m)
        ref = solve_statics(model, qa, qu0, tol=1e-10)
        state, qu, it, converged = solver.statics(qa, qu0, 1e-10)
        where = f"{name} statics solve {trial}"
        assert (it, bool(converged)) == (ref.iterations, ref.converged), where
        check(state[:model.n], ref.q, 1.0, f"{where} q")
        check(qu, ref.qu, 1.0, f"{where} qu")
        iterations.append(it)
    if model.n > model.m:
        assert max(iterations) >= 4  # not only one-step solves


def _targets(model, count: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    top = np.where(np.isfinite(model.qa_max), model.qa_max, 1.0)
    return [model.fk(solve_statics(model, rng.uniform(-0.7 * top, 0.7 * top),
                                   np.zeros(model.n - model.m)).q) for _ in range(count)]


def compare_solves(model, solver, target, q0, **kwargs) -> None:
    """The compiled and the numpy solve agree: status, iterations, restarts exactly; ``q``,
    the error history and σ_min to RTOL."""
    got = solver(model, target, q0, record_path=True, **kwargs)
    ref = solver(model, target, q0, record_path=True, compiled=False, **kwargs)
    where = f"{model.name} {solver.__name__} {kwargs}"
    assert (got.status, got.iterations, got.restarts) == (ref.status, ref.iterations,
                                                          ref.restarts), where
    check(got.q, ref.q, 1.0, f"{where} q")
    scale = float(ref.residual_history[0])
    check(got.residual_history, ref.residual_history, scale, f"{where} history")
    check(got.path, ref.path, 1.0, f"{where} path")
    check([got.sigma_min], [ref.sigma_min], 1.0, f"{where} σ_min")
    check([got.min_eig_Huu], [ref.min_eig_Huu], 1.0, f"{where} min eig H_uu")


@pytest.mark.parametrize("name", ("double_pendulum", "tendon_3link", "dancer",
                                  "soft_arm_stiff", "soft_arm_soft"))
def test_compiled_offline_solves_equal_reference(name):
    """Algorithm 1 with every update law and Algorithm 2, from a bent start."""
    model, _, _ = setup(name)
    q0 = held_start(model, 0.05)
    updates = ["dls", "pinv", "transpose"] + (["inverse"] if model.task_dim == model.m else [])
    for k, target in enumerate(_targets(model, 3, seed=80)):
        compare_solves(model, algorithm1, target, q0, update=updates[k % len(updates)])
        compare_solves(model, algorithm1, target, q0, damping=0.05, gain=0.7)
        if name != "dancer":  # its Algorithm-2 transients wander for 1,000+ iterations
            compare_solves(model, algorithm2, target, q0, dt=0.5,
                           options=HeldOptions(max_iter=3000))
    if name == "dancer":
        target = model.fk(held_start(model, 0.15))  # a short Algorithm-2 solve
        compare_solves(model, algorithm2, target, q0, dt=0.5, damping=1e-3)


def test_compiled_alg2_restarts_equal_reference():
    """tendon_3link, benchmark target 1 (seed 0): the first attempt stalls at a limit and one
    restart from the grid solves it, in both implementations alike."""
    from poise.benchmarks.held_ik import reachable_targets

    model, _, _ = setup("tendon_3link")
    target = reachable_targets(model, 20, np.random.default_rng(0))[1]
    q0 = held_start(model, 0.05)
    compare_solves(model, algorithm2, target, q0, dt=0.5, options=HeldOptions(max_iter=3000))
    assert algorithm2(model, target, q0, dt=0.5).restarts == 1


@pytest.mark.parametrize("name", ("tendon_3link", "soft_arm_stiff", "soft_arm_soft"))
def test_alg2_stepper_at_an_actuator_limit_equals_reference(name):
    """A target that needs actuator 1 beyond its limit: the limit-aware rates (bounded least
    squares) and the statics-law commit after the clip, cycle by cycle."""
    model, _, _ = setup(name)
    q0 = held_start(model, 0.05)
    beyond = 0.3 * model.qa_max
    beyond[0] = 1.3 * model.qa_max[0]
    target = model.fk(solve_statics(model, beyond, np.zeros(model.n - model.m)).q)
    p = params("alg2", target, gamma_z=5.0, gamma_e=10.0, damping=0.0)
    at_limit: list[bool] = []
    compare_steppers(name, "alg2", p, q0, dt=0.05, cycles=60, at_limit=at_limit)
    assert sum(at_limit) >= 10  # the limits were active for a good part of the run


def _limits_for(model, rng) -> SafetyLimits:
    """Position limits inside the model's (some infinite where the model's are), rate limits
    of every kind: finite, infinite (none) and zero (a frozen actuator)."""
    m = model.m
    lo = np.where(np.isfinite(model.qa_min), model.qa_min, -2.0)
    hi = np.where(np.isfinite(model.qa_max), model.qa_max, 2.0)
    rate = rng.uniform(0.05, 2.0, m) * (hi - lo)
    rate[rng.random(m) < 0.2] = math.inf
    return SafetyLimits(np.where(rng.random(m) < 0.2, -math.inf, lo),
                        np.where(rng.random(m) < 0.2, math.inf, hi), rate)


def guard_kernel(stepper, proposed, move, q, windup, saturated, arrays, dt):
    """The guard kernel as the one-call cycle calls it, from a compiled stepper's q̄a."""
    band, qa_min, qa_max, rate = arrays
    return guard.guard(stepper.qa, np.asarray(proposed, dtype=float),
                       np.zeros(0) if move is None else np.asarray(move, dtype=float),
                       stepper._A, np.asarray(q, dtype=float), band, windup, saturated,
                       qa_min, qa_max, rate, dt)


@pytest.mark.parametrize("algorithm", STEPPERS)
@pytest.mark.parametrize("name", MODELS)
def test_one_call_cycle_equals_the_four_kernel_calls(name, algorithm):
    """``CompiledStepper.cycle`` (one kernel: h(q), propose, guard, commit) gives exactly
    what the four kernels called one by one give, over consecutive cycles: feedback and
    feed-forward, an approach move or not, the anti-windup on or off, the device saturated
    or not, a projection of the measured error or none (then the IK steps with
    ``x̄ − Π (x̄ − h(q))``); a non-finite proposal commits nothing in either."""
    model, packed, _ = setup(name)
    rng = np.random.default_rng(23)
    limits = _limits_for(model, rng)
    arrays = ControlStep(model, limits, 1e-3)._limit_arrays()
    one, four = (make_compiled_stepper(algorithm, model, packed) for _ in range(2))
    q0 = start_configuration(model, seed=41)
    for stepper in (one, four):
        stepper.reset(q0, limits.qa_min, limits.qa_max)
    p = params(algorithm, model.fk(q0) + 0.03)
    for cycle in range(16):
        q = q0 + rng.normal(scale=3e-3, size=model.n)
        fb, saturated = cycle % 2 == 0, cycle % 5 == 4
        move = four.qa + 0.01 if cycle % 7 == 3 else None
        windup = fb and move is None
        projection = None
        if cycle % 3 == 0:  # the projection off a random direction w: I − w wᵀ
            w = rng.normal(size=model.task_dim)
            projection = np.eye(model.task_dim) - np.outer(w, w) / float(w @ w)
        x_meas, x_used, status = one.cycle(p, q, fb, move, windup, saturated, arrays, 1e-3,
                                           projection)
        want_x = steps.fk(packed.args, q)
        want_used = want_x if fb else four.x_bar
        x_ik = want_x if projection is None else \
            p.target - kla.matvec(projection, p.target - want_x)  # as the kernel sums it
        proposed = four.propose(p, x_ik if fb else None, 1e-3)
        qa_safe, want_status = guard_kernel(four, proposed, move, q, windup, saturated, arrays,
                                            1e-3)
        four.commit(qa_safe)
        where = f"{name} {algorithm} cycle {cycle}"
        assert status == want_status, where
        for got, want in ((x_meas, want_x), (x_used, want_used), (one.state, four.state)):
            np.testing.assert_array_equal(got, want, err_msg=where)
    before = one.state.copy()
    bad = replace(p, target=np.full(model.task_dim, math.nan))
    _, _, status = one.cycle(bad, q0, False, None, False, False, arrays, 1e-3)
    assert status & one.NONFINITE, f"{name} {algorithm}: a NaN target went unnoticed"
    np.testing.assert_array_equal(one.state, before)  # nothing committed


@pytest.mark.parametrize("name", MODELS)
def test_cycle_guard_equals_the_reference_chain(name):
    """The compiled guard (approach move, anti-windup, rate and position limits) equals
    ControlStep's numpy chain, in every branch: no move / a move, feedback or not, the device
    saturated or not, a rate limit that binds, none, or zero; a non-finite proposal is
    refused by both."""
    model, packed, s = setup(name)
    rng = np.random.default_rng(7)
    held = 0
    for trial in range(60):
        limits = _limits_for(model, rng)
        if trial % 10 == 9:
            limits.qa_rate[0] = 0.0
        ref_step = ControlStep(model, limits, 1e-3, stepper_factory=make_stepper)
        got_step = ControlStep(model, limits, 1e-3,
                               stepper_factory=lambda a, mdl: make_compiled_stepper(a, mdl,
                                                                                    packed))
        q = configurations(model, 1, seed=100 + trial)[0] * 0.3
        ref_step.reset(q, "alg1")
        got_step.reset(q, "alg1")
        ref, got = ref_step.stepper, got_step.stepper
        check(got.qa, ref.qa, s.c, "start qa")
        q_meas = q + rng.normal(scale=0.05, size=model.n)
        proposed = ref.qa + rng.normal(scale=0.05, size=model.m) * rng.choice([0.01, 1, 100])
        move = None if trial % 3 else ref.qa + rng.normal(scale=0.02, size=model.m)
        fb, saturated = bool(trial % 2), bool(trial % 5 == 0)
        windup = fb and move is None
        want, ref_held = proposed if move is None else move, 0
        if windup:
            before = ref_step.windup_holds
            want = ref_step._anti_windup(ref.qa, proposed, q_meas, saturated)
            ref_held = ref_step.windup_holds - before
            held += ref_held
        with np.errstate(divide="ignore", invalid="ignore"):  # a zero rate limit: 0/0, x/0
            want = limit_setpoint(limits, ref.qa, want, 1e-3)[0]
        qa_safe, status = guard_kernel(got, proposed, move, q_meas, windup, saturated,
                                       got_step._limit_arrays(), 1e-3)
        check(qa_safe, want, s.c, f"{name} trial {trial} setpoint")
        assert bool(status & got.HELD) == bool(ref_held), f"{name} trial {trial} held"
        assert not status & got.NONFINITE
        bad = proposed.copy()
        bad[-1] = math.nan
        assert guard_kernel(got, bad, move, q_meas, windup, saturated,
                            got_step._limit_arrays(), 1e-3)[1] & got.NONFINITE
    assert held > 0  # the anti-windup branch was exercised


@pytest.mark.parametrize("mode", ("ff", "fb"))
@pytest.mark.parametrize("name", MODELS)
def test_control_step_on_kernels_equals_the_reference_step(name, mode):
    """A whole ControlStep cycle (fk, propose, guard, commit, the finite check) on a compiled
    stepper equals the same step on the numpy reference, over consecutive cycles from a noisy
    measured configuration, with the device reporting saturation now and then."""
    model, packed, s = setup(name)
    rng = np.random.default_rng(11)
    limits = SafetyLimits(model.qa_min, model.qa_max, np.full(model.m, 0.5))
    steps_ = {kind: ControlStep(model, limits, 1e-3, stepper_factory=factory) for kind, factory
              in (("ref", make_stepper),
                  ("got", lambda a, mdl: make_compiled_stepper(a, mdl, packed)))}
    q0 = start_configuration(model, seed=40)
    p = replace(params("alg1", model.fk(q0) + 0.05), mode=mode)
    holds = []
    for cycle in range(12):
        q = q0 + rng.normal(scale=2e-3, size=model.n)
        out = {k: st_.update(q, p, saturated=cycle % 4 == 3) for k, st_ in steps_.items()}
        where = f"{name} {mode} cycle {cycle}"
        check(out["got"].qa, out["ref"].qa, s.c, f"{where} qa")
        check(out["got"].tau, out["ref"].tau, s.force * s.c_inv, f"{where} τ")
        check(out["got"].x_meas, out["ref"].x_meas, s.length, f"{where} h(q)")
        check(out["got"].x_used, out["ref"].x_used, s.length, f"{where} x used")
        check(out["got"].q_bar, out["ref"].q_bar, 1.0, f"{where} q̄")
        holds.append((steps_["got"].windup_holds, steps_["ref"].windup_holds))
    assert all(a == b for a, b in holds)


def test_compiled_stepper_arrays_are_not_changed_by_later_cycles():
    model, packed, _ = setup("soft_arm_stiff")
    got = make_compiled_stepper("alg2", model, packed)
    got.reset(np.zeros(model.n), model.qa_min, model.qa_max)
    p = params("alg2", [0.3, -0.8])
    got.commit(got.propose(p, None, 1e-3))
    held = (got.q_bar, got.qa, got.tau, got.x_bar)
    copies = [a.copy() for a in held]
    for _ in range(3):
        got.commit(got.propose(p, None, 1e-3))
    for a, b in zip(held, copies, strict=True):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(got.q_bar, copies[0])


def test_stepping_after_warm_up_compiles_nothing_new():
    """Warm-up compiled every signature a cycle and an offline solve use; a read-only or int
    input is converted rather than compiled for."""
    model, packed, _ = setup("tendon_3link")
    entries = (steps.blocks, steps.propose, steps.commit, steps.acceleration, steps.fk, steps.G,
               guard.guard, guard.finite_prefix, cycle_kernel.cycle, held_solve.statics_solve,
               held_solve.alg1_attempt, held_solve.alg2_attempt)
    before = {f: len(f.signatures) for f in entries}
    target = model.fk(np.full(model.n, 0.2))
    target.setflags(write=False)
    for algorithm in STEPPERS:
        stepper = make_compiled_stepper(algorithm, model, packed)
        stepper.reset(np.zeros(model.n), model.qa_min, model.qa_max)
        for mode_x in (None, target):
            qa = stepper.propose(params(algorithm, target), mode_x, 1e-3)
            stepper.commit(qa.astype(np.float32))
    limits = SafetyLimits(model.qa_min, model.qa_max, np.full(model.m, 0.5))
    control = ControlStep(model, limits, 1e-3,
                          stepper_factory=lambda a, mdl: make_compiled_stepper(a, mdl, packed))
    for mode in ("ff", "fb"):  # the cycle's own calls: fk, guard, the finite check
        control.update(np.full(model.n, 0.1), replace(params("alg1", target), mode=mode),
                       saturated=True)
    zeros = np.zeros(model.n)
    steps.acceleration(packed.args, zeros, zeros, np.zeros(model.m))
    steps.fk(packed.args, zeros)
    steps.G(packed.args, zeros)
    for record in (False, True):  # offline solves, a restart included (tendon target 1)
        algorithm1(model, target, record_path=record, update="pinv")
        algorithm2(model, [-1.19537957, -0.25442861], np.full(model.n, 0.1).astype(np.int64),
                   record_path=record, max_step=None)
    assert {f: len(f.signatures) for f in entries} == before


def test_the_controllers_warm_up_loads_what_its_cycles_call_and_not_the_stepwise_kernels():
    """``stepper_factory`` (the controller) warms up without the step-by-step kernels: in a
    fresh process, cycles of every algorithm in both modes, with an approach move and a
    saturated device, then load nothing more (the one-call cycle's compiled code holds its
    callees'), and ``propose``, ``commit`` and the guard's kernels stay unloaded."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        from dataclasses import replace
        import numpy as np
        from poise.motion.params import LiveParams
        from poise.motion.safety import SafetyLimits
        from poise.motion.step import ControlStep, stepper_factory
        from poise.kernels import cache, cycle, guard, held_solve, steps, wire
        from poise.models import load_model

        model = load_model("double_pendulum")
        factory, report = stepper_factory(model, dynamics=False)
        assert not [k for k in report.kernels if k.split()[0] in ("propose", "commit",
                                                                   "guard")], report.kernels
        stepwise = (steps.propose, steps.commit, guard.guard, guard.finite_prefix)
        every = cache.dispatchers([steps, cycle, guard, held_solve, wire])
        before = {f: len(f.signatures) for f in every}
        assert all(before[f] == 0 for f in stepwise), before
        limits = SafetyLimits(model.qa_min, model.qa_max, np.full(model.m, 0.5))
        control = ControlStep(model, limits, 1e-3, stepper_factory=factory)
        target = np.asarray(model.fk(np.full(model.n, 0.2)), dtype=float)
        q = np.full(model.n, 0.1)
        for algorithm in ("alg1", "alg2", "plain"):
            p = LiveParams(algorithm, "dls", 2.0, 2.0, 20.0, 1e-2, target, "ff")
            for mode in ("ff", "fb"):
                control.update(q, replace(p, mode=mode))
                control.adopt(control.make_plan(target, q, 1e-3))  # an approach move
                for saturated in (False, True, False):
                    control.update(q, replace(p, mode=mode), saturated=saturated)
                assert control.move is not None
        after = {f: len(f.signatures) for f in every}
        assert after == before, [f.__name__ for f in every if after[f] != before[f]]
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=600, check=False)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


@pytest.mark.parametrize("name", ("panda", "cc3d_3"))
def test_families_without_kernels_get_none_and_a_clear_error(name):
    model = load_model(name)
    assert make_compiled_stepper("alg1", model) is None
    with pytest.raises(NoKernelsError, match=rf"family '{model.family}' has no compiled kernels"):
        pack(model)


def test_the_comparison_detects_a_tiny_change_of_one_model_parameter():
    """The tolerance is tight enough to see a wrong number: one spring stiffer by 1e-9
    relative in the packed arrays fails the G check and the stepper comparison."""
    model, packed, s = setup("tendon_3link")
    arrays = packed.arrays._replace(stiffness=packed.arrays.stiffness * (1 + 1e-9))
    wrong = pack(model).__class__(packed.name, packed.family, packed.n, packed.m,
                                  packed.task_dim, arrays, tuple(arrays))
    q = configurations(model, 1, seed=60)[0]
    with pytest.raises(AssertionError):
        check(steps.G(wrong.args, q), model.G(q), s.force, "G of the perturbed model")
    ref = make_stepper("alg1", model)
    got = make_compiled_stepper("alg1", model, wrong)
    q0 = start_configuration(model, seed=61)
    ref.reset(q0, model.qa_min, model.qa_max)
    got.reset(q0, model.qa_min, model.qa_max)
    p = params("alg1", model.fk(q0) + 0.05)
    got.commit(got.propose(p, None, 1e-3))
    ref.commit(ref.propose(p, None, 1e-3))
    with pytest.raises(AssertionError):
        check(got.tau, ref.tau, s.force * s.c_inv, "τ of the perturbed model")


def test_alg1_stepper_is_the_class_the_factory_makes():
    model, packed, _ = setup("double_pendulum")
    assert isinstance(make_compiled_stepper("alg1", model, packed), CompiledAlg1Stepper)


# ----------------------------------------------------------------------------- cache


def test_stale_cache_is_cleared_when_the_sources_change(tmp_path):
    stale = [tmp_path / "steps.alg1_commit-137.py311.nbi",
             tmp_path / "steps.alg1_commit-137.py311.1.nbc"]
    other = tmp_path / "someone_else.f-1.py311.nbi"
    for path in (*stale, other):
        path.write_bytes(b"x")
    (tmp_path / kcache.STAMP_NAME).write_text("old sources")
    removed = kcache.refresh(tmp_path, "new sources", {"steps"})
    assert sorted(removed) == sorted(stale)
    assert other.exists() and not any(p.exists() for p in stale)
    assert (tmp_path / kcache.STAMP_NAME).read_text() == "new sources"
    assert kcache.refresh(tmp_path, "new sources", {"steps"}) == []  # fresh: nothing to do


def test_cache_guard_covers_every_kernel_module():
    """Every module of ``poise.kernels`` with compiled functions is in ``KERNEL_MODULES``,
    and the continuum kernels outside the package (they call ``poise.kernels.linalg``) keep
    the kernels' source stamp next to their own cache."""
    import importlib
    import pkgutil

    import poise.ik.continuum_kernels as continuum
    import poise.kernels

    for info in pkgutil.iter_modules(poise.kernels.__path__):
        module = importlib.import_module(f"poise.kernels.{info.name}")
        if kcache.dispatchers([module]):
            assert module in poise.kernels.KERNEL_MODULES, info.name
    functions = kcache.dispatchers([continuum])
    assert functions
    for directory in kcache.cache_dirs(functions):
        assert (directory / kcache.STAMP_NAME).read_text() == kcache.source_stamp()


def test_source_stamp_covers_every_kernel_module():
    import poise.kernels

    stamp = kcache.source_stamp()
    assert len(stamp) == 64
    names = {p.name for p in kcache.PACKAGE_DIR.glob("*.py")}
    assert {"steps.py", "planar_pcc.py", "planar_tree.py", "linalg.py"} <= names
    assert pathlib.Path(poise.kernels.__file__).parent == kcache.PACKAGE_DIR
