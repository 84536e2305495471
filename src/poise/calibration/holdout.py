"""Held-out poses of a statics identification: which poses validate the fit, and the
sentence that says what the check found (or why there was none)."""

from __future__ import annotations

import math
from collections.abc import Sequence

#: Fewest poses from which any is held out (fewer: all are needed for the fit).
MIN_POSES_HOLDOUT = 4


def holdout_split(count: int, fraction: float) -> tuple[list[int], list[int]]:
    """Every k-th pose (k = round(1/fraction), starting at k // 2) is held out."""
    if fraction <= 0 or count < MIN_POSES_HOLDOUT:
        return list(range(count)), []
    k = max(2, round(1.0 / fraction))
    hold = list(range(k // 2, count, k))
    return [i for i in range(count) if i not in hold], hold


def _holdout_fits(count: int, fraction: float, rows_per_pose: int, n_free: int) -> bool:
    """Whether :func:`identify` holds poses out of ``count``: some are, and the rest still
    give more statics rows than free parameters."""
    fit, hold = holdout_split(count, fraction)
    return bool(hold) and len(fit) * rows_per_pose >= n_free + 1


def poses_for_holdout(fraction: float, rows_per_pose: int, n_free: int) -> int | None:
    """Fewest settled poses with which :func:`identify` holds some out for validation (it needs
    more rows than free parameters in the rest); None when ``fraction`` ≤ 0 (validation off)."""
    if fraction <= 0:
        return None
    count = MIN_POSES_HOLDOUT
    while not _holdout_fits(count, fraction, rows_per_pose, n_free):
        count += 1
    return count



def choose_holdout(count: int, holdout: float | Sequence[int], rows_per_pose: int,
                   n_free: int) -> tuple[list[int], list[int], int | None]:
    """``(fit, held out, needed)`` pose indices: ``holdout`` is a fraction
    (:func:`holdout_split`) or the held-out indices; all poses are fitted when the rest would
    give no more statics rows than free parameters. ``needed``: the fewest poses with which a
    fraction holds some out (:func:`poses_for_holdout`; None for explicit indices)."""
    if isinstance(holdout, (int, float)):
        fit_idx, hold_idx = holdout_split(count, float(holdout))
    else:
        hold_idx = sorted(set(int(i) for i in holdout))
        fit_idx = [i for i in range(count) if i not in hold_idx]
    if len(fit_idx) * rows_per_pose < n_free + 1 and hold_idx:
        fit_idx, hold_idx = list(range(count)), []
    needed = (poses_for_holdout(float(holdout), rows_per_pose, n_free)
              if isinstance(holdout, (int, float)) else None)
    return fit_idx, hold_idx, needed


def validation_sentence(count: int, hold_idx: Sequence[int], holdout_rms: float,
                        holdout: float | Sequence[int], needed: int | None) -> str:
    """The held-out check in one sentence
    (:attr:`~poise.calibration.identify.Identification.validation`)."""
    if hold_idx and math.isfinite(holdout_rms):
        return (f"validated on {len(hold_idx)} held-out pose(s) of {count}: residual RMS "
                f"{holdout_rms:.3g} N·m")
    if hold_idx:
        return (f"no held-out validation: the residual on the {len(hold_idx)} held-out "
                "pose(s) is undefined (non-finite data?)")
    if not isinstance(holdout, (int, float)):
        return "no held-out validation: no poses were held out"
    if needed is None:
        return "no held-out validation: switched off (holdout 0)"
    return (f"no held-out validation: {count} settled pose(s) are too few to hold any out "
            f"(validation needs at least {needed} at holdout {float(holdout):g})")



__all__ = [
    "MIN_POSES_HOLDOUT",
    "choose_holdout",
    "holdout_split",
    "poses_for_holdout",
    "validation_sentence",
]
