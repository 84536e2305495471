"""The statics regressor: ``G(q) − Aᵀτ = Y(q, τ) π`` for the planar model families.

At a settled pose the potential forces balance the actuators (seed 000, statics with
``q̇ = q̈ = 0``)::

    K (q − q0) + G_grav(q) = Aᵀ τ.

Every term is linear in a parameter vector ``π`` once the geometry (lengths, attachment points,
centre-of-mass positions along each body) is taken from the drawing, so one pose gives n rows
``Y(q, τ) π = 0`` (n = number of coordinates) and N poses stack to a linear least-squares
problem. The parameters, per family:

``planar_tree`` (rigid rods, revolute joints), for each body ``b``:

* ``stiffness[b]`` = ``k_b`` [N·m/rad] — regressor column ``q_b`` in row ``b``;
* ``k_rest[b]`` = ``k_b q0_b`` [N·m] — the rest offset as a torque, column ``−1`` in row ``b``;
* ``mass_moment[b]`` = ``a_b = Σ_i m_i W_com[i, b]`` [kg·m] — the first mass moment carried by
  body ``b``'s direction (``m_b c_b`` plus the masses of its descendants times their attachment
  distances); ``G_grav = g Sᵀ(a ∘ cos ψ)``, so the column is ``g S[b, :] cos ψ_b``. These ``n``
  combinations are all gravity can reveal: masses and centres of mass are not separable, so the
  calibrated file keeps each ``com`` from the drawing and solves ``m = W_com⁻ᵀ a``.

``planar_pcc`` (constant-curvature segments), for each segment ``s``:

* ``stiffness[s]``, ``k_rest[s]`` as above;
* ``mass[s]`` [kg] — the segment's mass (spread over its mass points as in the model); its
  column is ``g Σ_p (1/P) ∂y_p/∂θ`` over the segment's points, evaluated exactly with probe
  models (``G`` is linear in the masses: ``Φ_s = G(m + e_s) − G(m)`` with springs off).

Both families: ``A[j,c]`` [m or rad] — every structurally non-zero entry of the actuation matrix
``A`` (the first m rows of ``C``): column ``−τ_j`` in row ``c``. Structural zeros (a tendon that
does not cross a joint) stay zero.

The equations are homogeneous (``π`` and ``λπ`` explain the data equally well), so one parameter
is fixed to a known value (:mod:`poise.calibration.identify`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np

from poise.models import model_from_dict
from poise.models.base import FloatArray
from poise.models.planar_tree import edit_bodies

#: Parameter kinds and their units.
UNITS = {"stiffness": "N*m/rad", "k_rest": "N*m", "mass_moment": "kg*m", "mass": "kg"}


class CalibrationError(ValueError):
    """Data or parameters that cannot make a calibration (the message says why)."""


@dataclass(frozen=True)
class Parameter:
    """One entry of the parameter vector ``π``.

    Attributes:
        name: e.g. ``stiffness[link1]``, ``k_rest[seg2]``, ``mass_moment[link2]``,
            ``mass[seg3]``, ``A[0,link1]``.
        kind: ``stiffness``, ``k_rest``, ``mass_moment``, ``mass`` or ``moment_arm``.
        unit: SI unit of the value.
        nominal: the value in the nominal model.
        scale: a typical magnitude, used to equilibrate the regressor's columns (so that its
            condition number compares relative, dimensionless parameter changes).
        coordinate: index of the coordinate (body / segment) the parameter belongs to.
        actuator: actuator index for moment arms, else −1.
    """

    name: str
    kind: str
    unit: str
    nominal: float
    scale: float
    coordinate: int
    actuator: int = -1


class StaticsRegressor:
    """``Y(q, τ)`` and the map from an identified ``π`` back to a model description.

    Build with :func:`statics_regressor`. ``rows(q, τ) @ π = G(q) − Aᵀτ`` for the model's own
    parameters ``π = nominal``: zero at every equilibrium of the nominal robot.
    """

    family: str = ""

    def __init__(self, model: Any, coordinate_names: list[str], gravity_kind: str,
                 gravity_nominal: FloatArray) -> None:
        self.model = model
        self.n = int(model.n)
        self.m = int(model.m)
        self.coordinate_names = coordinate_names
        A = np.asarray(model.C, dtype=float)[: self.m]
        self.A_nominal = A
        k = np.asarray(model.stiffness, dtype=float)
        k_scale = max(float(np.max(np.abs(k))), 1e-3)
        params: list[Parameter] = []
        for i, c in enumerate(coordinate_names):
            params.append(Parameter(f"stiffness[{c}]", "stiffness", UNITS["stiffness"],
                                    float(k[i]), max(abs(float(k[i])), 0.1 * k_scale), i))
        for i, c in enumerate(coordinate_names):
            kr = float(k[i] * model.q_rest[i])
            params.append(Parameter(f"k_rest[{c}]", "k_rest", UNITS["k_rest"], kr,
                                    max(abs(kr), 0.1 * max(abs(float(k[i])), 0.1 * k_scale)), i))
        g_scale = max(float(np.max(np.abs(gravity_nominal))), 1e-9)
        for i, c in enumerate(coordinate_names):
            v = float(gravity_nominal[i])
            params.append(Parameter(f"{gravity_kind}[{c}]", gravity_kind, UNITS[gravity_kind],
                                    v, max(abs(v), 0.1 * g_scale), i))
        self.arm_index: list[tuple[int, int]] = []
        for j in range(self.m):
            for i, c in enumerate(coordinate_names):
                if A[j, i] != 0.0:
                    unit = "m"
                    params.append(Parameter(f"A[{j},{c}]", "moment_arm", unit, float(A[j, i]),
                                            abs(float(A[j, i])), i, j))
                    self.arm_index.append((j, i))
        self.params: tuple[Parameter, ...] = tuple(params)
        self.names = [p.name for p in params]
        self.nominal = np.array([p.nominal for p in params])
        self.scales = np.array([p.scale for p in params])
        self._g0 = 2 * self.n  # first gravity column
        self._a0 = 3 * self.n  # first moment-arm column

    @property
    def p(self) -> int:
        """Number of parameters."""
        return len(self.params)

    def index(self, name: str) -> int:
        """Position of a parameter by name (:class:`CalibrationError` if unknown)."""
        try:
            return self.names.index(name)
        except ValueError:
            raise CalibrationError(f"parameter {name!r}: unknown; the parameters of "
                                   f"{self.model.name} are {', '.join(self.names)}") from None

    # ------------------------------------------------------------------ regressor

    def gravity_columns(self, q: FloatArray) -> FloatArray:
        """(n, n): column ``i`` = ``∂G_grav/∂π_grav,i`` at ``q``."""
        raise NotImplementedError

    def rows(self, q: FloatArray, tau: FloatArray) -> FloatArray:
        """``Y(q, τ)`` (n, p): ``Y π = G(q) − Aᵀτ`` [N·m per row]."""
        q = np.asarray(q, dtype=float)
        tau = np.asarray(tau, dtype=float)
        n = self.n
        Y = np.zeros((n, self.p))
        Y[:, :n] = np.diag(q)
        Y[:, n:2 * n] = -np.eye(n)
        Y[:, self._g0:self._g0 + n] = self.gravity_columns(q)
        for col, (j, i) in enumerate(self.arm_index):
            Y[i, self._a0 + col] = -tau[j]
        return Y

    def stack(self, qs: FloatArray, taus: FloatArray) -> FloatArray:
        """``Y`` of N poses stacked (N·n, p)."""
        return np.vstack([self.rows(q, t) for q, t in zip(qs, taus, strict=True)])

    def A_of(self, pi: FloatArray) -> FloatArray:
        """The actuation matrix ``A`` (m, n) with the moment arms of ``π``."""
        A = np.zeros((self.m, self.n))
        for col, (j, i) in enumerate(self.arm_index):
            A[j, i] = pi[self._a0 + col]
        return A

    # ------------------------------------------------------------------ back to a model

    def describe_with(self, pi: FloatArray, *, note: str = "") -> dict[str, Any]:
        """The nominal model's description (``describe()``) with the parameters ``π``.

        Raises:
            CalibrationError: ``π`` is not physical (a stiffness < 0, a mass ≤ 0) or makes the
                actuation split singular.
        """
        pi = np.asarray(pi, dtype=float)
        n = self.n
        k = pi[:n]
        kr = pi[n:2 * n]
        bad = [self.names[i] for i in range(n) if k[i] < 0]
        if bad:
            raise CalibrationError(f"identified stiffness < 0 for {', '.join(bad)} "
                                   f"({', '.join(f'{k[i]:.4g}' for i in range(n) if k[i] < 0)});"
                                   " the data do not fit the model")
        rest = np.where(np.abs(k) > 1e-12, kr / np.where(np.abs(k) > 1e-12, k, 1.0),
                        self.model.q_rest)
        masses = self.masses_of(pi)
        if np.any(~np.isfinite(masses)) or np.any(masses <= 0):
            raise CalibrationError(
                "identified masses not > 0 ("
                + ", ".join(f"{c}: {mm:.4g} kg" for c, mm in zip(self.coordinate_names, masses,
                                                                  strict=True))
                + "); the data do not fit the model")
        d = copy.deepcopy(self.model.describe())
        self._edit(d, k, rest, masses)
        C = np.array(d["actuation"]["C"], dtype=float)
        A = self.A_of(pi)
        C[: self.m] = A
        if not np.isfinite(np.linalg.cond(C)) or np.linalg.cond(C) > 1e10:
            raise CalibrationError("the identified actuation matrix A makes the split C "
                                   "singular (rows of A dependent on the qu rows)")
        d["actuation"]["C"] = C.tolist()
        if note:
            d["description"] = (d.get("description") or "").rstrip() + "\n" + note
        return d

    def model_with(self, pi: FloatArray) -> Any:
        """The model with the parameters ``π`` (via :meth:`describe_with`)."""
        return model_from_dict(self.describe_with(pi), source="<calibrated>")

    def masses_of(self, pi: FloatArray) -> FloatArray:
        """Body / segment masses [kg] implied by ``π``."""
        raise NotImplementedError

    def mass_map(self) -> FloatArray:
        """(n, n) linear map from the gravity parameters to the masses (for uncertainties)."""
        raise NotImplementedError

    def _edit(self, d: dict[str, Any], k: FloatArray, rest: FloatArray,
              masses: FloatArray) -> None:
        raise NotImplementedError


class TreeRegressor(StaticsRegressor):
    """``planar_tree``: gravity parameters are the first mass moments ``a = W_comᵀ m``."""

    family = "planar_tree"

    def __init__(self, model: Any) -> None:
        names = [b.name for b in model.spec.bodies]
        super().__init__(model, names, "mass_moment", np.asarray(model.a_w, dtype=float))
        self.W_com = np.asarray(model.W_com, dtype=float)

    def gravity_columns(self, q: FloatArray) -> FloatArray:
        psi = self.model.S @ q + self.model.psi0
        # G_grav = g Sᵀ (a ∘ cos ψ): column b = g S[b, :]ᵀ cos ψ_b
        return self.model.gravity * (self.model.S.T * np.cos(psi)[None, :])

    def mass_map(self) -> FloatArray:
        return np.linalg.inv(self.W_com.T)

    def masses_of(self, pi: FloatArray) -> FloatArray:
        a = np.asarray(pi, dtype=float)[self._g0:self._g0 + self.n]
        return np.linalg.solve(self.W_com.T, a)

    def _edit(self, d: dict[str, Any], k: FloatArray, rest: FloatArray,
              masses: FloatArray) -> None:
        edit_bodies(d, masses, stiffness=k, rest=rest)


class PCCRegressor(StaticsRegressor):
    """``planar_pcc``: gravity parameters are the segment masses."""

    family = "planar_pcc"

    def __init__(self, model: Any) -> None:
        n = model.n
        names = [f"seg{i + 1}" for i in range(n)]
        P = int(model.spec.points_per_segment)
        seg_mass = np.asarray(model.masses, dtype=float).reshape(n, P).sum(axis=1)
        super().__init__(model, names, "mass", seg_mass)
        # Probe models: springs off; G is linear in the masses, so
        # Φ_s(q) = G(q; m + e_s) − G(q; m) is the gravity column of segment s, exactly.
        base = copy.deepcopy(model.describe())
        for seg in base["segments"]:
            seg["stiffness"] = 0.0
            seg["rest"] = 0.0
        self._probe0 = model_from_dict(base, source="<probe>")
        self._probes = []
        for s in range(n):
            d = copy.deepcopy(base)
            d["segments"][s]["mass"] = float(d["segments"][s]["mass"]) + 1.0
            self._probes.append(model_from_dict(d, source="<probe>"))

    def gravity_columns(self, q: FloatArray) -> FloatArray:
        g0 = self._probe0.G(q)
        return np.stack([p.G(q) - g0 for p in self._probes], axis=1)

    def mass_map(self) -> FloatArray:
        return np.eye(self.n)

    def masses_of(self, pi: FloatArray) -> FloatArray:
        return np.asarray(pi, dtype=float)[self._g0:self._g0 + self.n].copy()

    def _edit(self, d: dict[str, Any], k: FloatArray, rest: FloatArray,
              masses: FloatArray) -> None:
        for i, seg in enumerate(d["segments"]):
            seg["stiffness"] = float(k[i])
            seg["rest"] = float(rest[i])
            seg["mass"] = float(masses[i])


REGRESSORS = {"planar_tree": TreeRegressor, "planar_pcc": PCCRegressor}


def statics_regressor(model: Any) -> StaticsRegressor:
    """The regressor of a model (families ``planar_tree`` and ``planar_pcc``).

    Raises:
        CalibrationError: the family has no statics regressor, or the model has no actuators.
    """
    family = getattr(model, "family", None)
    cls = REGRESSORS.get(str(family))
    if cls is None:
        raise CalibrationError(
            f"model {getattr(model, 'name', '?')!r}: family {family!r} has no statics "
            f"calibration; supported families: {', '.join(REGRESSORS)}")
    if not getattr(model, "m", 0):
        raise CalibrationError(f"model {model.name!r} has no actuators to calibrate with")
    return cls(model)


def relative_errors(true: FloatArray, value: FloatArray, scale: FloatArray) -> FloatArray:
    """``|value − true| / max(|true|, scale·1e-3)`` elementwise (for tests and reports)."""
    den = np.maximum(np.abs(true), np.abs(scale) * 1e-3)
    return np.abs(np.asarray(value) - np.asarray(true)) / den


__all__ = [
    "REGRESSORS",
    "UNITS",
    "CalibrationError",
    "PCCRegressor",
    "Parameter",
    "StaticsRegressor",
    "TreeRegressor",
    "relative_errors",
    "statics_regressor",
]
