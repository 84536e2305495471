"""The timing loop of the benchmarks: µs per call, robust to a shared machine."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def per_call_us(fn: Callable[[], object], min_time: float = 0.2) -> float:
    """Median over 5 repeats of the mean µs per call, each repeat at least ``min_time`` / 5 s.

    The number of calls per repeat doubles until one repeat lasts ``min_time / 5`` [s], so a
    1 µs call and a 1 ms call are both timed over enough calls for ``perf_counter``.
    """
    number = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        if time.perf_counter() - t0 > min_time / 5:
            break
        number *= 2
    samples = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - t0) / number * 1e6)
    return statistics.median(samples)


__all__ = ["per_call_us"]
