"""The Robotics Toolbox for Python (Corke & Haviland, MIT) as the comparison in
``poise bench ik``: its C++ Levenberg–Marquardt solver ``ETS.ik_LM`` on the same targets.

Optional: ``pip install 'poise[bench]'`` (``roboticstoolbox-python``); without it the
benchmark prints why the comparison was skipped (:func:`unavailable_reason`).

Set-up, so that both solvers face exactly the same problem:

* the chain: an ``ETS`` built from the model's own modified DH table (:func:`ets_of`):
  per joint ``Rx(α_{i-1}) tx(a_{i-1}) Rz(θ_offset) Rz(q_i) tz(d_i)`` with the joint limits,
  then the flange; its forward kinematics agrees with :meth:`DHChain.pose` to ~1e-15;
* the tolerance: ``ik_LM`` stops when ``E = ½ eᵀ e < tol_E`` with ``e = [p_d − p; ϑ u]``
  (its ``_angle_axis``: ``‖ϑ u‖ = ϑ``), so ``tol_E = ½ tol²`` is exactly poise's
  ``√(‖p_d − p‖² + ϑ²) < tol``. (Its default ``tol = 1e-6`` on ``E`` means a task error up
  to 1.4e-3: on the Panda targets only ~1 % of those solutions meet 1e-6.)
* the budget: the same first configuration as poise (``q0``), ``slimit = restarts + 1``
  searches (each later one from a random configuration within the limits), its default
  ``ilimit = 30`` steps per search, its default method (Chan: ``W_n = λ E``, ``λ = 1``), and
  ``joint_limits=True`` (a solution outside the limits is rejected and the search goes on);
* the same independent success check as every poise method
  (:func:`poise.benchmarks.ik_panda.solved`), and the time of the whole Python call.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

#: ``ik_LM`` keyword arguments (the Toolbox's defaults, spelled out).
ILIMIT = 30
METHOD = "chan"
LAMBDA = 1.0


def unavailable_reason(model: Any) -> str | None:
    """Why the comparison cannot run here (None when it can)."""
    from poise.models.dh import DHChain

    if not isinstance(model, DHChain):
        return f"not run: model {getattr(model, 'name', model)!r} is not a dh_chain"
    try:
        import roboticstoolbox  # noqa: F401
    except ImportError as exc:
        return (f"not run: the Robotics Toolbox for Python is not installed ({exc}); "
                "pip install 'poise[bench]'")
    return None


def ets_of(model: Any) -> Any:
    """The ``roboticstoolbox.ETS`` of a :class:`~poise.models.dh.DHChain` (modified DH)."""
    from roboticstoolbox import ET, ETS

    elements = []
    for a, d, alpha, offset, lo, hi in zip(model.a, model.d, model.alpha, model.theta_offset,
                                           model.q_min, model.q_max, strict=True):
        if alpha != 0.0:
            elements.append(ET.Rx(float(alpha)))
        if a != 0.0:
            elements.append(ET.tx(float(a)))
        if offset != 0.0:
            elements.append(ET.Rz(float(offset)))
        elements.append(ET.Rz(qlim=[float(lo), float(hi)]))
        if d != 0.0:
            elements.append(ET.tz(float(d)))
    fa, fd, falpha, ftheta = model.flange
    for value, make in ((falpha, ET.Rx), (fa, ET.tx), (ftheta, ET.Rz), (fd, ET.tz)):
        if value != 0.0:
            elements.append(make(float(value)))
    return ETS(elements)


def run(model: Any, poses: np.ndarray, starts: np.ndarray | None, *, tol: float,
        restarts: int, progress: Callable[[int], Any] | None = None) -> dict[str, Any]:
    """Solve every pose with ``ik_LM`` (module docstring); a row of the benchmark report."""
    import roboticstoolbox

    from poise.benchmarks.ik_panda import solve_each, statistics

    ets = ets_of(model)
    q_home = np.asarray(model.q_home, dtype=float)
    tol_e = 0.5 * tol * tol
    options = {"ilimit": ILIMIT, "slimit": restarts + 1, "tol": tol_e, "method": METHOD,
               "k": LAMBDA, "joint_limits": True}
    ets.ik_LM(poses[0], q0=q_home, **options)  # first call outside the timing

    def call(i: int, T: np.ndarray, q0: Any) -> Callable[[], Any]:
        return lambda: ets.ik_LM(T, q0=q0, **options)

    def read(sol: Any) -> tuple[bool, int, int, np.ndarray]:
        return bool(sol.success), sol.iterations, sol.searches - 1, np.asarray(sol.q)

    row = statistics("rtb", options, *solve_each(model, poses, starts, q_home, call, read, tol,
                                                  progress))
    row["solver"] = (f"roboticstoolbox-python {roboticstoolbox.__version__} ETS.ik_LM (C++), "
                     f"tol_E = ½ tol² = {tol_e:.3g}, ilimit {ILIMIT}, slimit {restarts + 1}, "
                     f"method {METHOD!r}")
    row["fk_agreement"] = _fk_agreement(model, ets)
    return row


def _fk_agreement(model: Any, ets: Any) -> float:
    """Largest difference between the Toolbox's and poise's end-effector transforms at a few
    random configurations (a wrong chain would make the comparison meaningless)."""
    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(10):
        q = rng.uniform(model.q_min, model.q_max)
        worst = max(worst, float(np.abs(np.asarray(ets.eval(q)) - model.pose(q)).max()))
    if not math.isfinite(worst) or worst > 1e-9:
        raise RuntimeError(f"the Toolbox's chain differs from {model.name}'s by {worst:.3g}")
    return worst
