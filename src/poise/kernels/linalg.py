"""Small dense linear algebra for the compiled kernels (matrices of a few rows).

At n ≤ 10 the cost of a LAPACK call is its set-up, not its arithmetic, so these are plain
loops: LU with partial pivoting (the pivot order of LAPACK ``getrf``: the first largest
``|a_ij|`` in the column), Cholesky, and the products the kernels need. A solve reports a
singular matrix (an exact zero pivot, the case ``numpy.linalg.solve`` raises
``LinAlgError`` for) through its ``ok`` flag instead of raising, so the callers can take the
same fallbacks as the numpy reference.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit


@njit(cache=True)
def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` for 2-D ``a`` (r, k) and ``b`` (k, c)."""
    r, k = a.shape
    c = b.shape[1]
    out = np.zeros((r, c))
    for i in range(r):
        for p in range(k):
            aip = a[i, p]
            for j in range(c):
                out[i, j] += aip * b[p, j]
    return out


@njit(cache=True)
def matvec(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``a @ x`` for 2-D ``a`` (r, k) and 1-D ``x`` (k,)."""
    r, k = a.shape
    out = np.zeros(r)
    for i in range(r):
        acc = 0.0
        for p in range(k):
            acc += a[i, p] * x[p]
        out[i] = acc
    return out


@njit(cache=True)
def rmatvec(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``aᵀ @ x`` for 2-D ``a`` (r, k) and 1-D ``x`` (r,)."""
    r, k = a.shape
    out = np.zeros(k)
    for i in range(r):
        xi = x[i]
        for j in range(k):
            out[j] += a[i, j] * xi
    return out


@njit(cache=True)
def norm(x: np.ndarray) -> float:
    """Euclidean norm ``‖x‖₂`` of a vector."""
    acc = 0.0
    for v in x:
        acc += v * v
    return math.sqrt(acc)


@njit(cache=True)
def lu_factor(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
    """LU factorisation with partial pivoting: ``(LU, row permutation, ok)``.

    ``ok`` is false when a pivot is exactly zero (a singular matrix, where LAPACK ``getrf``
    reports ``info > 0``); the factors are then unusable.
    """
    n = a.shape[0]
    lu = a.copy()
    perm = np.arange(n)
    ok = True
    for j in range(n):
        p = j
        big = abs(lu[j, j])
        for i in range(j + 1, n):
            if abs(lu[i, j]) > big:
                big = abs(lu[i, j])
                p = i
        if p != j:
            for c in range(n):
                lu[j, c], lu[p, c] = lu[p, c], lu[j, c]
            perm[j], perm[p] = perm[p], perm[j]
        piv = lu[j, j]
        if piv == 0.0:
            ok = False
            continue
        for i in range(j + 1, n):
            f = lu[i, j] / piv
            lu[i, j] = f
            if f != 0.0:
                for c in range(j + 1, n):
                    lu[i, c] -= f * lu[j, c]
    return lu, perm, ok


@njit(cache=True)
def lu_solve_mat(lu: np.ndarray, perm: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``A⁻¹ B`` from :func:`lu_factor` of ``A``; ``B`` is 2-D (n, c)."""
    n = lu.shape[0]
    c = b.shape[1]
    x = np.empty((n, c))
    for i in range(n):
        for j in range(c):
            x[i, j] = b[perm[i], j]
    for i in range(n):
        for p in range(i):
            f = lu[i, p]
            for j in range(c):
                x[i, j] -= f * x[p, j]
    for i in range(n - 1, -1, -1):
        for p in range(i + 1, n):
            f = lu[i, p]
            for j in range(c):
                x[i, j] -= f * x[p, j]
        d = lu[i, i]
        for j in range(c):
            x[i, j] /= d
    return x


@njit(cache=True)
def lu_solve_vec(lu: np.ndarray, perm: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``A⁻¹ b`` from :func:`lu_factor` of ``A``; ``b`` is 1-D (n,)."""
    n = lu.shape[0]
    x = np.empty(n)
    for i in range(n):
        x[i] = b[perm[i]]
    for i in range(n):
        for p in range(i):
            x[i] -= lu[i, p] * x[p]
    for i in range(n - 1, -1, -1):
        for p in range(i + 1, n):
            x[i] -= lu[i, p] * x[p]
        x[i] /= lu[i, i]
    return x


@njit(cache=True)
def solve_mat(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, bool]:
    """``(a⁻¹ B, ok)`` for a square ``a`` and 2-D ``B``; ``ok`` false if ``a`` is singular."""
    lu, perm, ok = lu_factor(a)
    if not ok:
        return np.zeros(b.shape), False
    return lu_solve_mat(lu, perm, b), True


@njit(cache=True)
def solve_vec(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, bool]:
    """``(a⁻¹ b, ok)`` for a square ``a`` and 1-D ``b``; ``ok`` false if ``a`` is singular."""
    lu, perm, ok = lu_factor(a)
    if not ok:
        return np.zeros(b.shape), False
    return lu_solve_vec(lu, perm, b), True


@njit(cache=True)
def inv(a: np.ndarray) -> tuple[np.ndarray, bool]:
    """``(a⁻¹, ok)``; ``ok`` false if ``a`` is singular."""
    return solve_mat(a, np.eye(a.shape[0]))


@njit(cache=True)
def cholesky(a: np.ndarray) -> tuple[np.ndarray, bool]:
    """Lower Cholesky factor of the symmetric matrix ``a`` (its lower triangle is read).

    ``ok`` is false when a pivot is not > 0 (``a`` not positive definite, or NaN), where
    LAPACK ``potrf`` reports ``info > 0``.
    """
    n = a.shape[0]
    low = np.zeros((n, n))
    for j in range(n):
        d = a[j, j]
        for p in range(j):
            d -= low[j, p] * low[j, p]
        if not d > 0.0:
            return low, False
        d = math.sqrt(d)
        low[j, j] = d
        for i in range(j + 1, n):
            s = a[i, j]
            for p in range(j):
                s -= low[i, p] * low[j, p]
            low[i, j] = s / d
    return low, True


@njit(cache=True)
def is_positive_definite(a: np.ndarray) -> bool:
    """``½ (a + aᵀ) ≻ 0`` (a 0 × 0 matrix counts as positive definite)."""
    if a.shape[0] == 0:
        return True
    _, ok = cholesky(0.5 * (a + a.T))
    return ok


@njit(cache=True)
def cho_solve(low: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``A⁻¹ b`` from the lower Cholesky factor of ``A``."""
    n = low.shape[0]
    y = np.empty(n)
    for i in range(n):
        s = b[i]
        for p in range(i):
            s -= low[i, p] * y[p]
        y[i] = s / low[i, i]
    x = np.empty(n)
    for i in range(n - 1, -1, -1):
        s = y[i]
        for p in range(i + 1, n):
            s -= low[p, i] * x[p]
        x[i] = s / low[i, i]
    return x


@njit(cache=True)
def damped_pinv(a: np.ndarray, damping: float) -> tuple[np.ndarray, bool]:
    """``(a⁺_λ, ok)``: the damped right pseudo-inverse of :func:`poise.ik.held.damped_pinv`.

    ``aᵀ (a aᵀ + λ² I)⁻¹`` for wide or square ``a``, ``(aᵀ a + λ² I)⁻¹ aᵀ`` for tall ``a``,
    and the SVD pseudo-inverse :func:`pinv` when ``λ = 0``. ``ok`` is false if
    the matrix to invert is singular (the reference raises ``LinAlgError`` there).
    """
    rows, cols = a.shape
    if damping == 0.0:
        return pinv(a), True
    lam2 = damping * damping
    at = np.ascontiguousarray(a.T)  # C order: one compiled matmul for every product
    if rows <= cols:
        gram = matmul(a, at)
        for i in range(rows):
            gram[i, i] += lam2
        g_inv, ok = inv(gram)
        return matmul(at, g_inv), ok
    gram = matmul(at, a)
    for i in range(cols):
        gram[i, i] += lam2
    g_inv, ok = inv(gram)
    return matmul(g_inv, at), ok


#: Singular values below ``PINV_RCOND · σ_max`` count as zero (numpy's default ``rcond``).
PINV_RCOND = 1e-15
_JACOBI_SWEEPS = 60


@njit(cache=True)
def _jacobi_columns(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
    """One-sided Jacobi on ``b = a`` (tall or square) or ``b = aᵀ`` (wide): ``(U, V, wide)``
    with ``b V = U`` and the columns of ``U`` mutually orthogonal, ``σ_i = ‖U_i‖``.

    Columns are rotated pairwise until orthogonal to working precision: at a few rows this is
    cheap and accurate to a few ulps relative to ``σ_max`` (Demmel–Veselić), and far quicker
    to compile than Numba's ``gesdd`` binding.
    """
    rows, cols = a.shape
    wide = rows < cols
    b = a.T.copy() if wide else a.copy()
    p, q = b.shape
    v = np.eye(q)
    eps = 2.220446049250313e-16
    for _ in range(_JACOBI_SWEEPS):
        rotated = False
        for i in range(q - 1):
            for j in range(i + 1, q):
                alpha = 0.0
                beta = 0.0
                gamma = 0.0
                for r in range(p):
                    alpha += b[r, i] * b[r, i]
                    beta += b[r, j] * b[r, j]
                    gamma += b[r, i] * b[r, j]
                if gamma == 0.0 or abs(gamma) <= eps * math.sqrt(alpha * beta):
                    continue
                rotated = True
                zeta = (beta - alpha) / (2.0 * gamma)
                t = (1.0 if zeta >= 0.0 else -1.0) / (abs(zeta) + math.sqrt(1.0 + zeta * zeta))
                c = 1.0 / math.sqrt(1.0 + t * t)
                s = c * t
                for r in range(p):
                    bi = b[r, i]
                    b[r, i] = c * bi - s * b[r, j]
                    b[r, j] = s * bi + c * b[r, j]
                for r in range(q):
                    vi = v[r, i]
                    v[r, i] = c * vi - s * v[r, j]
                    v[r, j] = s * vi + c * v[r, j]
        if not rotated:
            break
    return b, v, wide


@njit(cache=True)
def pinv(a: np.ndarray) -> np.ndarray:
    """Moore–Penrose pseudo-inverse ``a⁺ = V Σ⁺ Uᵀ`` by one-sided Jacobi SVD.

    ``numpy.linalg.pinv`` semantics (singular values ``≤ 1e-15 σ_max`` dropped) without
    LAPACK (see :func:`_jacobi_columns`).
    """
    b, v, wide = _jacobi_columns(a)
    p, q = b.shape
    sigma = np.empty(q)
    for i in range(q):
        sigma[i] = norm(b[:, i])
    smax = sigma.max() if q > 0 else 0.0
    out = np.zeros((q, p))  # b⁺ = Σ_i v_i u_iᵀ / σ_i, u_i = b_i / σ_i
    for i in range(q):
        if sigma[i] > PINV_RCOND * smax:
            w = 1.0 / (sigma[i] * sigma[i])
            for r in range(q):
                vr = v[r, i] * w
                for c2 in range(p):
                    out[r, c2] += vr * b[c2, i]
    return out.T.copy() if wide else out


@njit(cache=True)
def smallest_singular(a: np.ndarray) -> float:
    """``σ_min(a)``, the smallest of its ``min(rows, cols)`` singular values (NaN if empty)."""
    if a.size == 0:
        return math.nan
    b, _, _ = _jacobi_columns(a)
    smallest = math.inf
    for i in range(b.shape[1]):
        smallest = min(smallest, norm(b[:, i]))
    return smallest


@njit(cache=True)
def eigh(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvalues (ascending) and eigenvectors (columns) of the symmetric matrix ``a``
    (``numpy.linalg.eigh``), by cyclic Jacobi rotations.

    Each rotation zeroes one off-diagonal pair; sweeps stop when every off-diagonal entry is
    below ``ε √|a_pp a_qq|`` (or zero). Eigenvalues come out accurate to a few ulps of ``‖a‖``;
    eigenvectors are determined up to sign (and, for repeated eigenvalues, up to a rotation
    within their eigenspace), so callers use only sign- and basis-independent combinations
    such as ``V f(Λ) Vᵀ``.
    """
    n = a.shape[0]
    w = a.copy()
    v = np.eye(n)
    eps = 2.220446049250313e-16
    for _ in range(_JACOBI_SWEEPS):
        rotated = False
        for p in range(n - 1):
            for q in range(p + 1, n):
                apq = w[p, q]
                if apq == 0.0 or abs(apq) <= eps * math.sqrt(abs(w[p, p] * w[q, q])):
                    continue
                rotated = True
                theta = (w[q, q] - w[p, p]) / (2.0 * apq)
                t = (1.0 if theta >= 0.0 else -1.0) / (abs(theta) + math.sqrt(theta * theta + 1.0))
                c = 1.0 / math.sqrt(t * t + 1.0)
                s = t * c
                for r in range(n):  # columns p, q of w
                    wrp = w[r, p]
                    wrq = w[r, q]
                    w[r, p] = c * wrp - s * wrq
                    w[r, q] = s * wrp + c * wrq
                for r in range(n):  # rows p, q
                    wpr = w[p, r]
                    wqr = w[q, r]
                    w[p, r] = c * wpr - s * wqr
                    w[q, r] = s * wpr + c * wqr
                w[p, q] = 0.0
                w[q, p] = 0.0
                for r in range(n):
                    vrp = v[r, p]
                    vrq = v[r, q]
                    v[r, p] = c * vrp - s * vrq
                    v[r, q] = s * vrp + c * vrq
        if not rotated:
            break
    vals = np.empty(n)
    for i in range(n):
        vals[i] = w[i, i]
    order = np.argsort(vals)
    out_vals = np.empty(n)
    out_vecs = np.empty((n, n))
    for j in range(n):
        out_vals[j] = vals[order[j]]
        for r in range(n):
            out_vecs[r, j] = v[r, order[j]]
    return out_vals, out_vecs
