"""poise.ik: inverse-kinematics solvers, one result type (:class:`IKResult`)."""

from poise.ik.analytic import two_link_ik, two_link_solutions
from poise.ik.clik import METHODS, solve
from poise.ik.damping import ErrorDamping, FixedDamping, SingularityDamping
from poise.ik.orientation import (
    matrix_from_quat,
    orientation_error,
    quat_from_matrix,
    quaternion_error,
)
from poise.ik.result import IKResult, InvalidInputError, Status, as_vector
from poise.ik.secondary import (
    JointLimitAvoidance,
    Manipulability,
    Posture,
    nullspace_projector,
    nullspace_step,
)
from poise.ik.targets import Target, parse_target

__all__ = [
    "METHODS",
    "ErrorDamping",
    "FixedDamping",
    "IKResult",
    "InvalidInputError",
    "JointLimitAvoidance",
    "Manipulability",
    "Posture",
    "SingularityDamping",
    "Status",
    "Target",
    "as_vector",
    "matrix_from_quat",
    "nullspace_projector",
    "nullspace_step",
    "orientation_error",
    "parse_target",
    "quat_from_matrix",
    "quaternion_error",
    "solve",
    "two_link_ik",
    "two_link_solutions",
]
