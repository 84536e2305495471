"""Finite-difference derivatives, and a check of every analytic derivative of a model.

* :func:`fd_jacobian` — central differences ``(f(q + h e_j) − f(q − h e_j)) / 2h``
  (truncation error O(h²), round-off O(ε/h); h = 1e-6 balances them for O(1) functions).
* :class:`FiniteDifferenceDerivatives` — a mixin giving ``task_jacobian``, ``G`` and ``dG``
  from ``fk`` and ``potential`` for user models without analytic derivatives.
* :func:`check_derivatives` — compares each analytic derivative of a model (task Jacobian,
  ``G`` vs ``∇U``, ``dG`` vs ``∂G/∂q``, and through :mod:`poise.models.actuation` ``J_a``,
  ``J_u``, ``H_ua``, ``H_uu``; the bias forces vs the Christoffel form of ``M``; for pose
  models the geometric Jacobian vs the finite-difference pose twist) with central FD.

Relative error of an analytic ``A`` against its FD estimate ``F``:
``max|A − F| / max(max|F|, 1)``: relative for large quantities, absolute below unit size (a
Jacobian entry that is exactly 0 must not make the error infinite). The report is ``ok``
when every error is below :data:`DEFAULT_TOLERANCE` = 1e-6, far above FD noise (~1e-9 with
h = 1e-6 on the reference models) and far below a wrong sign or a missing term (O(1)).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from poise.models import actuation
from poise.models.base import FloatArray

DEFAULT_TOLERANCE = 1e-6
"""Largest accepted relative error of an analytic derivative vs central FD (h = 1e-6)."""


def fd_jacobian(f: Callable[[FloatArray], Any], q: FloatArray, h: float = 1e-6) -> FloatArray:
    """Central finite-difference derivative of ``f`` at ``q``.

    Returns shape ``f(q).shape + (n,)``: (n,) for a scalar ``f`` (the gradient), (k, n) for a
    vector ``f`` (the Jacobian), (a, b, n) for a matrix.
    """
    q = np.asarray(q, dtype=float)
    cols = []
    for j in range(q.size):
        dq = np.zeros_like(q)
        dq[j] = h
        cols.append((np.asarray(f(q + dq), float) - np.asarray(f(q - dq), float)) / (2 * h))
    return np.stack(cols, axis=-1)


class FiniteDifferenceDerivatives:
    """Mixin: ``task_jacobian``, ``G`` and ``dG`` by central differences.

    For a user model without analytic derivatives: subclass it and write ``fk`` and
    ``potential`` only (methods the class defines itself take precedence)::

        class MyArm(FiniteDifferenceDerivatives):
            def fk(self, q): ...
            def potential(self, q): ...

    ``fd_step`` is h for ``task_jacobian`` and ``G``; ``dG`` differentiates the FD ``G``
    again with h = 1e-4, which keeps the nested round-off near 1e-7 relative. Expect ~2n
    evaluations per Jacobian: fine for statics, slow for a 1 kHz loop.
    """

    fd_step: float = 1e-6

    def task_jacobian(self, q: FloatArray) -> FloatArray:
        return fd_jacobian(self.fk, q, self.fd_step)  # type: ignore[attr-defined]

    def G(self, q: FloatArray) -> FloatArray:
        return fd_jacobian(self.potential, q, self.fd_step)  # type: ignore[attr-defined]

    def dG(self, q: FloatArray) -> FloatArray:
        H = fd_jacobian(self.G, q, 1e-4)
        return 0.5 * (H + H.T)


@dataclass(frozen=True)
class DerivativeCheck:
    """One comparison: quantity ``name`` at sample ``sample``."""

    name: str
    sample: int
    error: float
    """Relative error ``max|A − F| / max(max|F|, 1)``."""
    scale: float
    """``max|F|``, the size of the finite-difference estimate."""


@dataclass(frozen=True)
class DerivativeReport:
    """Every check of :func:`check_derivatives`; ``ok`` when all errors ≤ ``tolerance``."""

    model: str
    tolerance: float
    checks: list[DerivativeCheck] = field(default_factory=list)
    configurations: list[list[float]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.error <= self.tolerance for c in self.checks)

    def worst(self) -> dict[str, float]:
        """Largest error per quantity."""
        out: dict[str, float] = {}
        for c in self.checks:
            out[c.name] = max(out.get(c.name, 0.0), c.error)
        return out

    def failures(self) -> list[DerivativeCheck]:
        return [c for c in self.checks if c.error > self.tolerance]

    def __str__(self) -> str:
        lines = [f"{self.model}: {'ok' if self.ok else 'FAILED'} (tolerance {self.tolerance:g})"]
        lines += [f"  {k:<14} {v:.2e}" for k, v in self.worst().items()]
        return "\n".join(lines)


def _rel(a: FloatArray, f: FloatArray) -> tuple[float, float]:
    a, f = np.asarray(a, float), np.asarray(f, float)
    if a.shape != f.shape:
        return float("inf"), float(np.max(np.abs(f), initial=0.0))
    scale = float(np.max(np.abs(f), initial=0.0))
    return float(np.max(np.abs(a - f), initial=0.0) / max(scale, 1.0)), scale


def sample_configurations(model: Any, samples: int, seed: int) -> FloatArray:
    """Random configurations (samples, n): uniform within the joint limits, clipped to ±π."""
    rng = np.random.default_rng(seed)
    lo = np.maximum(np.asarray(model.q_min, float), -np.pi)
    hi = np.minimum(np.asarray(model.q_max, float), np.pi)
    return rng.uniform(lo, hi, size=(samples, model.n))


def _vee(w: FloatArray) -> FloatArray:
    return np.array([w[2, 1] - w[1, 2], w[0, 2] - w[2, 0], w[1, 0] - w[0, 1]]) / 2


def check_derivatives(
    model: Any,
    q: FloatArray | None = None,
    *,
    samples: int = 5,
    seed: int = 0,
    h: float = 1e-6,
    tolerance: float = DEFAULT_TOLERANCE,
) -> DerivativeReport:
    """Compare every analytic derivative of ``model`` with central finite differences.

    Args:
        model: a ``TaskModel`` (task Jacobian only), ``PoseModel`` (geometric Jacobian vs the
            FD of ``pose``) or ``MechanicalModel`` (also ``G``, ``dG``, ``J_a``, ``J_u``,
            ``H_ua``, ``H_uu`` and, when ``mass_matrix``/``bias_forces`` exist, the bias).
        q: one configuration (n,) or several (k, n); default ``samples`` random ones.
        samples, seed: number and seed of the random configurations.
        h: finite-difference step.
        tolerance: accepted relative error (see the module docstring).
    """
    qs = sample_configurations(model, samples, seed) if q is None else np.atleast_2d(q)
    checks: list[DerivativeCheck] = []

    def add(name: str, i: int, analytic: Any, fd: Any) -> None:
        err, scale = _rel(analytic, fd)
        checks.append(DerivativeCheck(name, i, err, scale))

    mechanical = all(hasattr(model, a) for a in ("G", "dG", "potential", "C"))
    for i, qi in enumerate(qs):
        qi = np.asarray(qi, dtype=float)
        if getattr(model, "task_kind", "position") == "pose" and hasattr(model, "pose"):
            J = model.task_jacobian(qi)
            dT = fd_jacobian(model.pose, qi, h)  # (4, 4, n)
            R = model.pose(qi)[:3, :3]
            omega = np.stack([_vee(dT[:3, :3, j] @ R.T) for j in range(model.n)], axis=1)
            add("jacobian_v", i, J[:3], dT[:3, 3, :])
            add("jacobian_w", i, J[3:], omega)
        else:
            add("task_jacobian", i, model.task_jacobian(qi), fd_jacobian(model.fk, qi, h))
        if not mechanical:
            continue
        add("G", i, model.G(qi), fd_jacobian(model.potential, qi, h))
        add("dG", i, model.dG(qi), fd_jacobian(model.G, qi, h))
        add("dG_symmetry", i, model.dG(qi), model.dG(qi).T)
        _check_actuation(model, i, qi, h, add)
        if hasattr(model, "mass_matrix") and hasattr(model, "bias_forces"):
            qd = np.random.default_rng(seed + 1000 + i).uniform(-1, 1, model.n)
            add("bias_forces", i, model.bias_forces(qi, qd), christoffel_bias(model, qi, qd, h))
    return DerivativeReport(model=getattr(model, "name", type(model).__name__),
                            tolerance=tolerance, checks=checks,
                            configurations=[list(map(float, x)) for x in qs])


def _check_actuation(model: Any, i: int, q: FloatArray, h: float, add: Callable) -> None:
    """``J_a``, ``J_u``, ``H_ua``, ``H_uu`` of :func:`actuation.blocks` vs FD in ``(qa, qu)``."""
    b = actuation.blocks(model, q)
    qa, qu = b.qa, b.qu

    def at(qa_: FloatArray, qu_: FloatArray) -> FloatArray:
        return actuation.join(model, qa_, qu_)

    if model.task_kind != "pose":
        add("J_a", i, b.Ja, fd_jacobian(lambda a: model.fk(at(a, qu)), qa, h))
        if qu.size:
            add("J_u", i, b.Ju, fd_jacobian(lambda u: model.fk(at(qa, u)), qu, h))
    if qu.size:
        add("H_ua", i, b.Hua, fd_jacobian(lambda a: actuation.Gu(model, at(a, qu)), qa, h))
        add("H_uu", i, b.Huu, fd_jacobian(lambda u: actuation.Gu(model, at(qa, u)), qu, h))


def christoffel_bias(model: Any, q: FloatArray, qd: FloatArray, h: float = 1e-6) -> FloatArray:
    """``C(q, q̇) q̇ = Ṁ q̇ − ½ ∂(q̇ᵀ M q̇)/∂q`` from finite differences of ``M``."""
    dM = fd_jacobian(model.mass_matrix, q, h)  # (n, n, n): ∂M/∂q_k in the last axis
    m_dot = dM @ qd
    grad = 0.5 * np.einsum("i,ijk,j->k", qd, dM, qd)
    return m_dot @ qd - grad
