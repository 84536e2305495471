"""Where feedback may integrate: the task directions whose answer the stated uncertainty
cannot reverse.

In feedback the IK integrates the measured task error through the model's held Jacobian
``J = Ja − Ju Huu⁻¹ Hua`` (seed 000; :mod:`poise.motion.stability`): along a left singular
vector ``u_i`` of ``J = Σ σ_i u_i v_iᵀ`` the update moves the actuators by ``v_i / σ_i`` per
unit of error (damped: ``σ_i / (σ_i² + λ²)``), and a plant whose held Jacobian is ``J*``
answers with ``u_iᵀ J* v_i``. The loop gain along ``u_i`` is ``Γ g_i`` with

    g_i = u_iᵀ J* v_i / σ_i

(1 on the exact model; ``J*`` of the plants of the stated uncertainty linearised at the
model's configuration, as the gain bound's variants are). Near a fold of the held map
(``σ_min → 0``: the soft arm's S-bend whose tip points along the arm) ``u_iᵀ J* v_i`` is a
difference of nearly equal terms, and a plant whose springs are a few per cent off can answer
with the *opposite sign*: ``g_i < 0``, an integrator of negative gain, unstable at every Γ,
and fast, since ``1/σ_i`` is large. ``soft_arm_stiff`` at ``qa = (0.026, −0.010)``
(``σ_min/σ_max < 1 %``): ``g = −10.3`` with the springs at 0.8 × the model's, 9.7 at 1.2 ×;
even on the model the weak direction's gain 1/σ leaves a gain bound of 0.05 /s. On the
``real`` plant, target 17 of ``poise bench control`` (a fold of this kind) rang for 2.5 s,
up to 59 mm, until the ring watch backed the gain off.

So feedback integrates only along the directions on which every plant of the stated
uncertainty (:data:`~poise.api.rules.GAIN_UNCERTAINTY`: springs ``1 ± δ`` × the model's, the
variants of the robust gain bound) answers with the model's sign: the error is projected,
``e ← Π e`` with ``Π = Σ_{agreed} u_i u_iᵀ`` (:func:`agreed_projection`). A static error
along a disputed direction is left to sampled re-targeting (:mod:`poise.motion.retarget`),
whose trust region and measured (secant) Jacobian are made for a Jacobian that may be wrong.
Where every direction agrees (everywhere but close to a fold, and always on a robot without
springs or without passive coordinates) there is no projection and nothing changes. Where one
is dropped, the gain bound is that of the projected loop (:class:`~poise.motion.stability.
LoopLinearisation`): about 2 /s at the configuration above, against 0.05 /s unprojected.
"""

from __future__ import annotations

import numpy as np

from poise.ik.held_common import held_jacobian
from poise.models.actuation import blocks
from poise.models.base import FloatArray, MechanicalModel
from poise.motion.springs import SpringScale


def direction_gains(model: MechanicalModel, q: FloatArray, uncertainty: float
                    ) -> tuple[FloatArray, FloatArray]:
    """``(U, g)``: the left singular vectors ``U`` (task_dim, r) of the model's held Jacobian
    at ``q`` (its nonzero singular values, ``r`` of them) and the smallest loop gain
    ``g_i = u_iᵀ J_v v_i / σ_i`` over the plants ``J_v`` with springs ``1 ± uncertainty`` ×
    the model's (r,) (see the module docstring) that could rest at ``q`` at all (a plant that
    would fall there, as the dancer with its pointe 20 % softer, is none the arm can be: the
    robust gain bound does not count it either); ``g`` is all ones without such plants (no
    uncertainty, no springs or no passive coordinates)."""
    b = blocks(model, np.asarray(q, dtype=float))
    J = held_jacobian(b)
    U, s, Vt = np.linalg.svd(J, full_matrices=False)
    keep = s > 0.0
    U, s, Vt = U[:, keep], s[keep], Vt[keep]
    g = np.ones(s.size)
    stiffness = np.asarray(getattr(model, "stiffness", np.zeros(0)), dtype=float)
    if not (uncertainty > 0.0 and np.any(stiffness)):
        return U, g
    for scale in (-uncertainty, uncertainty):
        springs = SpringScale.fixed(model, scale)
        if springs.enabled and springs.holds_stably(b):
            Jv = springs.jacobian_at(b)
            g = np.minimum(g, np.einsum("ki,kj,ji->i", U, Jv, Vt.T) / s)
    return U, g


def agreed_projection(model: MechanicalModel, q: FloatArray, uncertainty: float
                      ) -> FloatArray | None:
    """``Π = Σ u_i u_iᵀ`` (task_dim, task_dim) over the directions on which every plant of
    the stated uncertainty answers with the model's sign (``g_i > 0``,
    :func:`direction_gains`), the feedback error's projection at ``q``; None where every
    direction agrees (no projection)."""
    U, g = direction_gains(model, q, uncertainty)
    agreed = g > 0.0
    if agreed.all():  # (a direction of σ = 0, at a fold itself, no update moves anyway)
        return None
    Ua = U[:, agreed]
    return np.ascontiguousarray(Ua @ Ua.T)


__all__ = ["agreed_projection", "direction_gains"]
