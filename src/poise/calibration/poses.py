"""Settled poses (the calibration data) and the excitation sets that produce them.

A :class:`Pose` is one settled measurement: the actuator reference that was commanded, the
measured configuration ``q``, actuator positions ``qa`` and efforts ``τ`` (averaged over a short
window once the robot had settled), and how it got there.

Excitation (:func:`excitation`): a grid or random set of actuator references inside the safe
limits (the model's ``qa_min``/``qa_max`` shrunk by a margin), ordered as a path — serpentine for
a grid — and then the same path **reversed**, so every pose is reached once while loading and
once while unloading (hysteresis and friction show up as a loading/unloading difference).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from poise.ik.statics import solve_statics
from poise.models.actuation import Ga, split
from poise.models.base import FloatArray

Direction = Literal["loading", "unloading"]


@dataclass(frozen=True)
class Pose:
    """One settled pose.

    Attributes:
        qa_ref: commanded actuator references (m,) [actuator units].
        q: measured configuration (n,), window mean [rad].
        qa: measured actuator positions (m,), window mean.
        tau: measured actuator efforts (m,), window mean [N or N·m].
        direction: ``loading`` (first pass) or ``unloading`` (the reversed pass).
        settled: the settle test passed (``False``: the timeout expired first).
        settle_time: time from the command to the settle decision [s].
        q_std: standard deviation of ``q`` over the averaging window (noise estimate).
        tau_std: standard deviation of ``τ`` over the averaging window.
        samples: number of samples averaged.
    """

    qa_ref: FloatArray
    q: FloatArray
    qa: FloatArray
    tau: FloatArray
    direction: Direction = "loading"
    settled: bool = True
    settle_time: float = 0.0
    q_std: FloatArray = field(default_factory=lambda: np.zeros(0))
    tau_std: FloatArray = field(default_factory=lambda: np.zeros(0))
    samples: int = 1

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        d = asdict(self)
        return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in d.items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Pose:
        arr = {k: np.asarray(d[k], dtype=float) for k in ("qa_ref", "q", "qa", "tau")}
        return cls(**arr, direction=d.get("direction", "loading"),
                   settled=bool(d.get("settled", True)),
                   settle_time=float(d.get("settle_time", 0.0)),
                   q_std=np.asarray(d.get("q_std", []), dtype=float),
                   tau_std=np.asarray(d.get("tau_std", []), dtype=float),
                   samples=int(d.get("samples", 1)))


# ----------------------------------------------------------------------------- excitation


def safe_range(model: Any, margin: float = 0.05) -> tuple[FloatArray, FloatArray]:
    """The actuator range the excitation may use: the limits shrunk by ``margin`` of their width.

    Raises:
        ValueError: an actuator has no finite limits (the safe range must be stated).
    """
    lo = np.asarray(model.qa_min, dtype=float)
    hi = np.asarray(model.qa_max, dtype=float)
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
        raise ValueError(f"model {model.name!r}: actuator limits qa_min/qa_max must be finite "
                         "to design an excitation (state the safe range in the model file)")
    w = hi - lo
    return lo + margin * w, hi - margin * w


def excitation(
    model: Any,
    *,
    kind: Literal["grid", "random"] = "grid",
    levels: int | tuple[int, ...] = 5,
    count: int = 20,
    margin: float = 0.05,
    seed: int = 0,
    frozen: tuple[int, ...] = (),
    lo: FloatArray | None = None,
    hi: FloatArray | None = None,
) -> list[tuple[FloatArray, Direction]]:
    """Actuator references to visit, in order, each tagged ``loading`` or ``unloading``.

    Args:
        model: the robot (its ``qa_min``/``qa_max`` are the limits).
        kind: ``grid`` (``levels`` per actuator, serpentine order) or ``random`` (``count``
            uniform points, ordered by a greedy nearest-neighbour path from the lower corner).
        levels: grid levels per actuator (one int for all, or one per actuator).
        count: number of random poses.
        margin: fraction of each actuator's range kept free at both ends.
        seed: random seed (``random``).
        frozen: actuators held at the middle of their range (a deliberately poor excitation,
            for tests and demonstrations).
        lo, hi: override the safe range.

    Returns:
        The path, then the same path reversed (each pose once ``loading``, once
        ``unloading``; the turning point once).
    """
    slo, shi = safe_range(model, margin)
    lo = slo if lo is None else np.asarray(lo, dtype=float)
    hi = shi if hi is None else np.asarray(hi, dtype=float)
    m = int(model.m)
    if kind == "grid":
        lv = (levels,) * m if isinstance(levels, int) else tuple(levels)
        if len(lv) != m or min(lv) < 1:
            raise ValueError(f"levels: need {m} positive integers, got {levels!r}")
        axes = [np.linspace(lo[j], hi[j], lv[j]) if lv[j] > 1 else np.array([0.5 * (lo[j] + hi[j])])
                for j in range(m)]
        path = [np.array(p) for p in _serpentine(axes)]
    elif kind == "random":
        rng = np.random.default_rng(seed)
        pts = lo + (hi - lo) * rng.random((count, m))
        path = _greedy_path(pts, lo)
    else:
        raise ValueError(f"kind: {kind!r} is not 'grid' or 'random'")
    mid = 0.5 * (lo + hi)
    for j in frozen:
        for p in path:
            p[j] = mid[j]
    if frozen:  # drop consecutive duplicates created by freezing
        dedup = [path[0]]
        for p in path[1:]:
            if not np.allclose(p, dedup[-1]):
                dedup.append(p)
        path = dedup
    forward = [(p.copy(), "loading") for p in path]
    # the turning point is not repeated: the unloading pass starts at the next pose back
    back = [(p.copy(), "unloading") for p in reversed(path[:-1])]
    return forward + back  # type: ignore[return-value]


def _serpentine(axes: list[FloatArray]) -> list[tuple[float, ...]]:
    """Boustrophedon order over a grid: the last axis runs fastest and reverses each row."""
    if len(axes) == 1:
        return [(float(v),) for v in axes[0]]
    out: list[tuple[float, ...]] = []
    inner = _serpentine(axes[1:])
    for k, v in enumerate(axes[0]):
        seq = inner if k % 2 == 0 else inner[::-1]
        out.extend((float(v), *s) for s in seq)
    return out


def _greedy_path(pts: FloatArray, start: FloatArray) -> list[FloatArray]:
    left = list(range(len(pts)))
    cur = start
    out = []
    while left:
        k = min(left, key=lambda i: float(np.linalg.norm(pts[i] - cur)))
        left.remove(k)
        out.append(pts[k].copy())
        cur = pts[k]
    return out


# ----------------------------------------------------------------------------- synthetic data


def synthetic_poses(
    model: Any,
    refs: list[tuple[FloatArray, Direction]] | list[FloatArray],
    *,
    q_noise: float = 0.0,
    tau_noise: float = 0.0,
    qa_noise: float = 0.0,
    samples: int = 1,
    seed: int = 0,
    q_start: FloatArray | None = None,
) -> list[Pose]:
    """Ideal quasi-static measurements of ``model`` at the references ``refs``.

    Follows the references as the robot would (each statics solve warm-started from the previous
    pose, stable branch), takes ``τ = G_a(q)`` (the effort that holds the pose; at an
    equilibrium ``G = Aᵀ G_a``) and adds Gaussian noise of the given standard deviations to
    ``samples`` readings, which are averaged like the device routine does.
    """
    rng = np.random.default_rng(seed)
    q = np.zeros(model.n) if q_start is None else np.asarray(q_start, dtype=float)
    _, qu = split(model, q)
    out: list[Pose] = []
    for item in refs:
        qa_ref, direction = item if isinstance(item, tuple) else (item, "loading")
        qa_ref = np.asarray(qa_ref, dtype=float)
        sol = solve_statics(model, qa_ref, qu, tol=1e-12, max_iter=200)
        qu = sol.qu
        tau = Ga(model, sol.q)
        qs = sol.q + q_noise * rng.standard_normal((samples, model.n))
        qas = qa_ref + qa_noise * rng.standard_normal((samples, model.m))
        ts = tau + tau_noise * rng.standard_normal((samples, model.m))
        out.append(Pose(qa_ref=qa_ref, q=qs.mean(axis=0), qa=qas.mean(axis=0),
                        tau=ts.mean(axis=0), direction=direction, settled=sol.converged,
                        q_std=qs.std(axis=0), tau_std=ts.std(axis=0), samples=samples))
    return out


__all__ = ["Direction", "Pose", "excitation", "safe_range", "synthetic_poses"]
