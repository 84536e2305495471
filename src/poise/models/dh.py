"""Serial revolute chains described by modified Denavit–Hartenberg parameters (Craig).

Joint ``i`` (1-based) carries the row ``(a_{i-1}, d_i, α_{i-1}, θ_offset_i)`` of the table, and
its frame follows from the previous one by

    ^{i-1}T_i = RotX(α_{i-1}) · TransX(a_{i-1}) · RotZ(θ_i) · TransZ(d_i),   θ_i = q_i + θ_offset_i

      = ⎡ cθ       −sθ       0      a     ⎤
        ⎢ sθ cα    cθ cα    −sα    −sα d  ⎥
        ⎢ sθ sα    cθ sα     cα     cα d  ⎥
        ⎣ 0         0        0      1     ⎦

A constant ``flange`` row (same form, θ fixed) maps the last joint frame to the end effector.
The task is the end-effector pose; :meth:`DHChain.task_jacobian` is the geometric Jacobian in
the base frame, column ``i`` = ``[z_i × (p_e − p_i); z_i]`` with ``z_i``, ``p_i`` the axis and
origin of joint ``i``.

Speed: forward kinematics and the Jacobian are the inner loop of every IK solve, and numpy's
per-call overhead (~1 µs) would dominate 4 × 4 products. They are therefore written as plain
float arithmetic on the columns of the running rotation (one ``math.cos``/``math.sin`` pair
per joint, ~60 flops per joint), and a single ``np.array`` call builds each output.

Model file (``family = "dh_chain"``), lengths in m, angles in rad::

    family = "dh_chain"
    name = "panda"
    convention = "modified"          # the only convention supported (Craig)
    [[joints]]                       # one table per joint, base to tip
    a = 0.0                          # a_{i-1} [m]
    d = 0.333                        # d_i [m]
    alpha = 0.0                      # α_{i-1} [rad]
    theta_offset = 0.0               # optional [rad]
    q_min = -2.8973                  # joint limits [rad]
    q_max = 2.8973
    [flange]                         # optional fixed last row: a, d, alpha, theta
    d = 0.107
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from poise.models.base import FloatArray
from poise.models.registry import Fields, ModelError
from poise.models.spec import Key, common_keys, limit_keys

#: One ``[[joints]]`` table: a row of the modified DH table.
JOINT_KEYS: dict[str, Key] = {
    "a": Key("number", "a_{i-1}: distance along the previous x axis [m]", default=0.0),
    "d": Key("number", "d_i: offset along this joint's z axis [m]", default=0.0),
    "alpha": Key("number", "α_{i-1}: twist about the previous x axis [rad]", default=0.0),
    "theta_offset": Key("number", "added to q_i: θ_i = q_i + theta_offset [rad]", default=0.0),
    **limit_keys("rad"),
    "q_home": Key("number", "home configuration [rad], within the limits (every joint or "
                  "none; default: mid-range)"),
}
#: ``[flange]``: the fixed last row (same form, θ constant).
FLANGE_KEYS: dict[str, Key] = {
    "a": Key("number", "[m]", default=0.0),
    "d": Key("number", "[m]", default=0.0),
    "alpha": Key("number", "[rad]", default=0.0),
    "theta": Key("number", "[rad]", default=0.0),
}
#: A ``dh_chain`` model file.
KEYS: dict[str, Key] = {
    **common_keys("dh_chain", name_default="the file stem"),
    "source": Key("string", "where the parameters come from (free text, e.g. a URL)",
                  default=""),
    "convention": Key("string", "DH convention (only Craig's modified one)", default="modified",
                      choices=("modified",)),
    "joints": Key("tables", "one table per revolute joint, base to tip", required=True,
                  table=JOINT_KEYS),
    "flange": Key("table", "fixed transform from the last joint frame to the end effector "
                  "(default: identity)", table=FLANGE_KEYS),
}
_FLANGE_KEYS = tuple(FLANGE_KEYS)


@dataclass(frozen=True, eq=False)
class DHChain:
    """A serial revolute chain in modified DH parameters with a pose task (``PoseModel``).

    Attributes:
        name: model name.
        a: ``a_{i-1}`` per joint (n,) [m].
        d: ``d_i`` per joint (n,) [m].
        alpha: ``α_{i-1}`` per joint (n,) [rad].
        theta_offset: added to ``q_i`` to give ``θ_i`` (n,) [rad].
        q_min, q_max: joint limits (n,) [rad].
        flange: fixed last row ``(a, d, alpha, theta)`` [m, m, rad, rad].
        q_home: a neutral configuration (n,) [rad] (default: the middle of the limits).
        description, source, aliases: free text kept for :meth:`describe`.
    """

    family: ClassVar[str] = "dh_chain"  # the model file's family (not a field)
    name: str
    a: FloatArray
    d: FloatArray
    alpha: FloatArray
    theta_offset: FloatArray
    q_min: FloatArray
    q_max: FloatArray
    flange: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
    q_home: FloatArray | None = None
    description: str = ""
    source: str = ""
    aliases: tuple[str, ...] = ()
    n: int = field(init=False)
    task_dim: int = field(init=False, default=6)
    task_kind: str = field(init=False, default="pose")
    reach: float = field(init=False)
    """Upper bound on the distance from the base origin to the end effector [m]."""
    _rows: tuple[tuple[float, float, float, float, float], ...] = field(init=False, repr=False)
    _flange_T: tuple[float, ...] = field(init=False, repr=False)
    _compiled: Any = field(init=False, repr=False)

    def __post_init__(self) -> None:
        arrays = {}
        for key in ("a", "d", "alpha", "theta_offset", "q_min", "q_max"):
            arrays[key] = np.array(getattr(self, key), dtype=float).reshape(-1)
            object.__setattr__(self, key, arrays[key])
        n = arrays["a"].size
        if n == 0 or any(v.size != n for v in arrays.values()):
            raise ModelError(f"{self.name}: a, d, alpha, theta_offset, q_min, q_max must all "
                             f"have one entry per joint (got sizes "
                             f"{ {k: v.size for k, v in arrays.items()} })")
        object.__setattr__(self, "n", n)
        home = self.q_home
        if home is None:
            bounded = np.isfinite(self.q_min) & np.isfinite(self.q_max)
            home = 0.5 * (np.where(bounded, self.q_min, 0.0) + np.where(bounded, self.q_max, 0.0))
        object.__setattr__(self, "q_home", np.array(home, dtype=float).reshape(n))
        rows = tuple((math.cos(al), math.sin(al), float(a), float(d), float(off))
                     for a, d, al, off in zip(self.a, self.d, self.alpha, self.theta_offset,
                                              strict=True))
        object.__setattr__(self, "_rows", rows)
        fa, fd, falpha, ftheta = (float(v) for v in self.flange)
        object.__setattr__(self, "flange", (fa, fd, falpha, ftheta))
        object.__setattr__(self, "_flange_T", tuple(_dh_matrix(fa, fd, falpha, ftheta).ravel()))
        object.__setattr__(self, "_compiled", _compile_chain(self.alpha, rows, self.flange))
        reach = sum(math.hypot(a, d) for _, _, a, d, _ in rows) + math.hypot(fa, fd)
        object.__setattr__(self, "reach", reach)

    # ------------------------------------------------------------------ kinematics

    def pose_jacobian_rows(self, q: Any) -> tuple[list[float], list[list[float]]]:
        """Pose and Jacobian as plain floats (the IK solvers' fast path, no arrays).

        Returns ``(r, rows)``: ``r`` = rotation row-major (9 floats) then position (3 floats)
        of the end effector; ``rows`` = the 6 rows of the geometric Jacobian, n floats each.
        ``q`` is a sequence of n floats (not checked). Runs the straight-line code generated
        for this chain by :func:`_compile_chain` (same arithmetic as
        :meth:`pose_jacobian_rows_reference`, with zero terms and unit factors folded away).
        """
        return self._compiled(q)

    def pose_jacobian_rows_reference(self, q: Any) -> tuple[list[float], list[list[float]]]:
        """The loop form of :meth:`pose_jacobian_rows` (reference for tests).

        The running rotation is kept as its three columns ``x, y, z`` (9 floats) and the
        running origin as ``p``; each joint applies RotX(α)·TransX(a)·RotZ(θ)·TransZ(d).
        """
        cos, sin = math.cos, math.sin
        x0, x1, x2 = 1.0, 0.0, 0.0
        y0, y1, y2 = 0.0, 1.0, 0.0
        z0, z1, z2 = 0.0, 0.0, 1.0
        p0 = p1 = p2 = 0.0
        axes = []
        for (ca, sa, a, d, off), qi in zip(self._rows, q, strict=True):
            # TransX(a) along the current x; then RotX(α) mixes y and z
            p0 += a * x0
            p1 += a * x1
            p2 += a * x2
            y0, z0 = ca * y0 + sa * z0, ca * z0 - sa * y0
            y1, z1 = ca * y1 + sa * z1, ca * z1 - sa * y1
            y2, z2 = ca * y2 + sa * z2, ca * z2 - sa * y2
            # RotZ(θ) mixes x and y; then TransZ(d) along z (the joint axis)
            th = qi + off
            c, s = cos(th), sin(th)
            x0, y0 = c * x0 + s * y0, c * y0 - s * x0
            x1, y1 = c * x1 + s * y1, c * y1 - s * x1
            x2, y2 = c * x2 + s * y2, c * y2 - s * x2
            p0 += d * z0
            p1 += d * z1
            p2 += d * z2
            axes.append((z0, z1, z2, p0, p1, p2))
        # flange: T ← T · F
        f = self._flange_T
        r = [x0 * f[0] + y0 * f[4] + z0 * f[8], x0 * f[1] + y0 * f[5] + z0 * f[9],
             x0 * f[2] + y0 * f[6] + z0 * f[10],
             x1 * f[0] + y1 * f[4] + z1 * f[8], x1 * f[1] + y1 * f[5] + z1 * f[9],
             x1 * f[2] + y1 * f[6] + z1 * f[10],
             x2 * f[0] + y2 * f[4] + z2 * f[8], x2 * f[1] + y2 * f[5] + z2 * f[9],
             x2 * f[2] + y2 * f[6] + z2 * f[10],
             p0 + x0 * f[3] + y0 * f[7] + z0 * f[11],
             p1 + x1 * f[3] + y1 * f[7] + z1 * f[11],
             p2 + x2 * f[3] + y2 * f[7] + z2 * f[11]]
        e0, e1, e2 = r[9], r[10], r[11]
        jv0, jv1, jv2, jw0, jw1, jw2 = [], [], [], [], [], []
        for a0, a1, a2, o0, o1, o2 in axes:
            d0, d1, d2 = e0 - o0, e1 - o1, e2 - o2
            jv0.append(a1 * d2 - a2 * d1)
            jv1.append(a2 * d0 - a0 * d2)
            jv2.append(a0 * d1 - a1 * d0)
            jw0.append(a0)
            jw1.append(a1)
            jw2.append(a2)
        return r, [jv0, jv1, jv2, jw0, jw1, jw2]

    def pose(self, q: FloatArray) -> FloatArray:
        """End-effector homogeneous transform (4, 4) in the base frame."""
        r = self._compiled(_floats(q, self.n))[0]
        return np.array([[r[0], r[1], r[2], r[9]], [r[3], r[4], r[5], r[10]],
                         [r[6], r[7], r[8], r[11]], [0.0, 0.0, 0.0, 1.0]])

    def fk(self, q: FloatArray) -> FloatArray:
        """End-effector position (3,) [m]."""
        return np.array(self._compiled(_floats(q, self.n))[0][9:12])

    def task_jacobian(self, q: FloatArray) -> FloatArray:
        """Geometric Jacobian (6, n) ``[v; ω]`` of the end effector in the base frame."""
        return np.array(self._compiled(_floats(q, self.n))[1])

    def pose_jacobian(self, q: FloatArray) -> tuple[FloatArray, FloatArray]:
        """``(pose(q), task_jacobian(q))`` from one pass along the chain."""
        r, jac = self._compiled(_floats(q, self.n))
        return (np.array([[r[0], r[1], r[2], r[9]], [r[3], r[4], r[5], r[10]],
                          [r[6], r[7], r[8], r[11]], [0.0, 0.0, 0.0, 1.0]]), np.array(jac))

    def frames(self, q: FloatArray) -> FloatArray:
        """Homogeneous transforms of the base, every joint frame and the flange (n + 2, 4, 4)."""
        qf = _floats(q, self.n)
        out = [np.eye(4)]
        for (ca, sa, a, d, off), qi in zip(self._rows, qf, strict=True):
            out.append(out[-1] @ _dh_matrix(a, d, math.atan2(sa, ca), qi + off))
        out.append(out[-1] @ np.array(self._flange_T).reshape(4, 4))
        return np.array(out)


    # ------------------------------------------------------------------ description

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str) -> DHChain:
        """Build from a model-file table (see the module docstring); raises ``ModelError``."""
        f = Fields(data, source, keys=KEYS)
        f.check_keys()
        f.get("convention")
        joints = f.get("joints")
        cols: dict[str, list[float]] = {k: [] for k in JOINT_KEYS}
        homes = []
        for jf in joints:
            jf.check_keys()
            for key in ("a", "d", "alpha", "theta_offset"):
                cols[key].append(jf.get(key))
            lo, hi = jf.get("q_min"), jf.get("q_max")
            if not lo <= hi:
                raise jf.error("q_max", hi, f"must be >= q_min = {lo}")
            cols["q_min"].append(lo)
            cols["q_max"].append(hi)
            if jf.has("q_home"):
                home = jf.get("q_home")
                if not lo <= home <= hi:
                    raise jf.error("q_home", home, f"must lie within [{lo}, {hi}]")
                homes.append(home)
        if homes and len(homes) != len(joints):
            raise f.error("joints", "...", "q_home must be given for every joint or for none")
        flange = (0.0, 0.0, 0.0, 0.0)
        if f.has("flange"):
            ff = f.get("flange")
            ff.check_keys()
            flange = tuple(ff.get(k) for k in FLANGE_KEYS)  # type: ignore[assignment]
        default_name = source.rsplit("/", 1)[-1].removesuffix(".toml")
        return cls(
            name=f.get("name", default_name),
            a=np.array(cols["a"]), d=np.array(cols["d"]), alpha=np.array(cols["alpha"]),
            theta_offset=np.array(cols["theta_offset"]),
            q_min=np.array(cols["q_min"]), q_max=np.array(cols["q_max"]),
            flange=flange, q_home=np.array(homes) if homes else None,
            description=f.get("description"), source=f.get("source"),
            aliases=tuple(f.get("aliases")),
        )

    def describe(self) -> dict[str, Any]:
        """JSON-ready description in the model-file schema (reloads with :meth:`from_dict`)."""
        def lim(v: float) -> float | None:
            return None if math.isinf(v) else float(v)

        joints = []
        assert self.q_home is not None
        for i in range(self.n):
            row: dict[str, Any] = {
                "a": float(self.a[i]), "d": float(self.d[i]), "alpha": float(self.alpha[i]),
                "theta_offset": float(self.theta_offset[i]), "q_home": float(self.q_home[i]),
            }
            if lim(self.q_min[i]) is not None:
                row["q_min"] = float(self.q_min[i])
            if lim(self.q_max[i]) is not None:
                row["q_max"] = float(self.q_max[i])
            joints.append(row)
        out: dict[str, Any] = {"family": "dh_chain", "name": self.name,
                               "convention": "modified"}
        if self.description:
            out["description"] = self.description
        if self.source:
            out["source"] = self.source
        if self.aliases:
            out["aliases"] = list(self.aliases)
        out["joints"] = joints
        out["flange"] = dict(zip(_FLANGE_KEYS, self.flange, strict=True))
        return out


def _dh_matrix(a: float, d: float, alpha: float, theta: float) -> FloatArray:
    """``RotX(α) · TransX(a) · RotZ(θ) · TransZ(d)`` (4, 4), Craig's modified DH."""
    ca, sa, ct, st = math.cos(alpha), math.sin(alpha), math.cos(theta), math.sin(theta)
    return np.array([[ct, -st, 0.0, a],
                     [st * ca, ct * ca, -sa, -sa * d],
                     [st * sa, ct * sa, ca, ca * d],
                     [0.0, 0.0, 0.0, 1.0]])


def _floats(q: Any, n: int) -> list[float]:
    """``q`` as a list of n Python floats (fast path for arrays of the right size)."""
    if isinstance(q, np.ndarray) and q.shape == (n,):
        return q.tolist()
    arr = np.asarray(q, dtype=float).reshape(-1)
    if arr.size != n:
        raise ValueError(f"q: expected {n} values, got {arr.size}")
    return arr.tolist()


def _num(v: float) -> str:
    return repr(float(v))


def _compile_chain(alpha: FloatArray, rows: tuple[tuple[float, float, float, float, float], ...],
                   flange: tuple[float, float, float, float]) -> Any:
    """Generate straight-line Python for pose + Jacobian of this chain (constants folded).

    The generated function performs exactly the column updates of
    :meth:`DHChain.pose_jacobian_rows_reference`, unrolled per joint: no loop, no tuple
    packing, ``a = 0`` / ``d = 0`` translations dropped, and ``α ∈ {0, ±π/2, π}`` rotations
    reduced to swaps and sign changes. Only numbers from the model enter the source.
    """
    src = ["def chain(q):",
           "    x0, x1, x2, y0, y1, y2, z0, z1, z2 = 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0",
           "    p0 = p1 = p2 = 0.0"]
    half = math.pi / 2
    for i, ((ca, sa, a, d, off), al) in enumerate(zip(rows, alpha, strict=True)):
        if a != 0.0:
            src.append(f"    p0 += {_num(a)} * x0; p1 += {_num(a)} * x1; p2 += {_num(a)} * x2")
        for k in range(3):
            if al == 0.0:
                break
            if abs(al - half) < 1e-12:
                src.append(f"    y{k}, z{k} = z{k}, -y{k}")
            elif abs(al + half) < 1e-12:
                src.append(f"    y{k}, z{k} = -z{k}, y{k}")
            elif abs(abs(al) - math.pi) < 1e-12:
                src.append(f"    y{k}, z{k} = -y{k}, -z{k}")
            else:
                src.append(f"    y{k}, z{k} = {_num(ca)} * y{k} + {_num(sa)} * z{k}, "
                           f"{_num(ca)} * z{k} - {_num(sa)} * y{k}")
        th = f"q[{i}]" if off == 0.0 else f"q[{i}] + {_num(off)}"
        src.append(f"    th = {th}; c = cos(th); s = sin(th)")
        for k in range(3):
            src.append(f"    x{k}, y{k} = c * x{k} + s * y{k}, c * y{k} - s * x{k}")
        if d != 0.0:
            src.append(f"    p0 += {_num(d)} * z0; p1 += {_num(d)} * z1; p2 += {_num(d)} * z2")
        src.append(f"    a{i}0, a{i}1, a{i}2, o{i}0, o{i}1, o{i}2 = z0, z1, z2, p0, p1, p2")
    fa, fd, falpha, ftheta = flange
    if falpha == 0.0 and ftheta == 0.0:
        for k in range(3):
            terms = [f"p{k}"] + ([f"{_num(fa)} * x{k}"] if fa else []) + (
                [f"{_num(fd)} * z{k}"] if fd else [])
            src.append(f"    e{k} = {' + '.join(terms)}")
        rot = ["x0", "y0", "z0", "x1", "y1", "z1", "x2", "y2", "z2"]
    else:
        f = _dh_matrix(fa, fd, falpha, ftheta)
        rot = []
        for k in range(3):
            for j in range(3):
                src.append(f"    r{k}{j} = x{k} * {_num(f[0, j])} + y{k} * {_num(f[1, j])} "
                           f"+ z{k} * {_num(f[2, j])}")
                rot.append(f"r{k}{j}")
            src.append(f"    e{k} = p{k} + x{k} * {_num(f[0, 3])} + y{k} * {_num(f[1, 3])} "
                       f"+ z{k} * {_num(f[2, 3])}")
    n = len(rows)
    jv = [[], [], []]
    for i in range(n):
        d0, d1, d2 = f"(e0 - o{i}0)", f"(e1 - o{i}1)", f"(e2 - o{i}2)"
        jv[0].append(f"a{i}1 * {d2} - a{i}2 * {d1}")
        jv[1].append(f"a{i}2 * {d0} - a{i}0 * {d2}")
        jv[2].append(f"a{i}0 * {d1} - a{i}1 * {d0}")
    jw = [[f"a{i}{k}" for i in range(n)] for k in range(3)]
    rows_src = ", ".join("[" + ", ".join(r) + "]" for r in jv + jw)
    src.append(f"    return [{', '.join(rot)}, e0, e1, e2], [{rows_src}]")
    namespace: dict[str, Any] = {"cos": math.cos, "sin": math.sin}
    exec(compile("\n".join(src), "<dh_chain>", "exec"), namespace)
    return namespace["chain"]
