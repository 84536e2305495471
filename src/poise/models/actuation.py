"""Quantities in actuation coordinates ``(qa, qu) = c(q) = C q`` (seed 000, notation).

With a linear split, forces transform with the inverse transpose and Jacobians with the
inverse: ``G_c = C⁻ᵀ G``, ``H_c = C⁻ᵀ (∂G/∂q) C⁻¹``, ``J_c = J C⁻¹``. Their blocks are

* ``G_u = G_c[m:]`` — the potential force nothing balances; held configurations have ``G_u = 0``;
* ``H_ua = H_c[m:, :m]``, ``H_uu = H_c[m:, m:]`` — derivatives of ``G_u`` w.r.t. ``qa``, ``qu``;
* ``J_a = J_c[:, :m]``, ``J_u = J_c[:, m:]`` — task Jacobians w.r.t. ``qa``, ``qu``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from poise.models.base import FloatArray, MechanicalModel


def split(model: MechanicalModel, q: FloatArray) -> tuple[FloatArray, FloatArray]:
    """``c(q) = (qa, qu)``."""
    qc = model.C @ q
    return qc[: model.m], qc[model.m :]


def join(model: MechanicalModel, qa: FloatArray, qu: FloatArray) -> FloatArray:
    """``c⁻¹(qa, qu) = q``."""
    return _c_inv(model) @ np.concatenate([qa, qu])


def _c_inv(model: MechanicalModel) -> FloatArray:
    c_inv = getattr(model, "C_inv", None)
    return c_inv if c_inv is not None else np.linalg.inv(model.C)


def Gu(model: MechanicalModel, q: FloatArray) -> FloatArray:
    """``G_u(q)``: the part of ``G`` along ``qu`` (n − m,) [generalised force]."""
    return (_c_inv(model).T @ model.G(q))[model.m :]


def Ga(model: MechanicalModel, q: FloatArray) -> FloatArray:
    """``G_a(q)``: the part of ``G`` along ``qa`` (m,), what the actuators must supply to hold."""
    return (_c_inv(model).T @ model.G(q))[: model.m]


@dataclass(frozen=True)
class ActuationBlocks:
    """Everything Algorithms 1 and 2 need at one configuration, in actuation coordinates."""

    qa: FloatArray
    qu: FloatArray
    x: FloatArray
    Ga: FloatArray
    Gu: FloatArray
    Ja: FloatArray
    Ju: FloatArray
    Hua: FloatArray
    Huu: FloatArray
    Haa: FloatArray


def blocks(model: MechanicalModel, q: FloatArray) -> ActuationBlocks:
    """Evaluate ``f = h(q)``, ``G_a``, ``G_u``, ``J_a``, ``J_u``, ``H_ua``, ``H_uu``, ``H_aa``.

    Uses the model's fused ``statics_terms(q) -> (h, ∂h/∂q, G, ∂G/∂q)`` when it has one.
    """
    m = model.m
    c_inv = _c_inv(model)
    qc = model.C @ q
    fused = getattr(model, "statics_terms", None)
    if fused is not None:
        x, jac, g, dg = fused(q)
    else:
        x, jac, g, dg = model.fk(q), model.task_jacobian(q), model.G(q), model.dG(q)
    g_c = c_inv.T @ g
    h_c = c_inv.T @ dg @ c_inv
    j_c = jac @ c_inv
    return ActuationBlocks(
        qa=qc[:m], qu=qc[m:], x=x, Ga=g_c[:m], Gu=g_c[m:],
        Ja=j_c[:, :m], Ju=j_c[:, m:], Hua=h_c[m:, :m], Huu=h_c[m:, m:], Haa=h_c[:m, :m],
    )
