"""Robot models: configuration ``q``, actuation split ``(qa, qu) = C q``, task ``h(q)``,
potential forces ``G(q)``, mass properties and limits (seed 000 notation).

Load a built-in model by name or a user model file by path::

    from poise.models import load_model
    arm = load_model("double_pendulum")          # or load_model("my_robot.toml", gravity=0.0)
    x, J = arm.fk(q), arm.task_jacobian(q)

Families (one class each, chosen by the file's ``family`` key): ``planar_tree``
(:class:`~poise.models.planar_tree.PlanarTree`), ``planar_pcc``
(:class:`~poise.models.planar_pcc.PlanarPCC`), ``dh_chain`` (``poise.models.dh.DHChain``).
The file schema and the family protocol are in ``docs/models.md``.
"""

from poise.models.base import FloatArray, MechanicalModel, PoseModel, TaskModel
from poise.models.derivatives import (
    DerivativeReport,
    FiniteDifferenceDerivatives,
    check_derivatives,
    fd_jacobian,
)
from poise.models.registry import (
    FAMILIES,
    ModelError,
    list_models,
    load_model,
    model_aliases,
    model_from_dict,
    model_summaries,
)

__all__ = [
    "FAMILIES",
    "DerivativeReport",
    "FiniteDifferenceDerivatives",
    "FloatArray",
    "MechanicalModel",
    "ModelError",
    "PoseModel",
    "TaskModel",
    "check_derivatives",
    "fd_jacobian",
    "list_models",
    "load_model",
    "model_aliases",
    "model_from_dict",
    "model_summaries",
]
