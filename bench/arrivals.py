"""Arrival processes: send-time offsets (seconds from run start) for N requests.

Algorithms
- poisson(rate): exponential inter-arrival gaps with mean 1/rate (CV = 1).
- gamma(rate, burstiness): gamma gaps with shape k = burstiness and scale 1/(rate*k), so the
  mean gap stays 1/rate while CV = 1/sqrt(k); k = 1 is Poisson, k < 1 is burstier, k > 1
  smoother (vLLM's ``--burstiness`` knob, same meaning).
- constant(rate): evenly spaced gaps of 1/rate.
- trace(timestamps, time_scale): the trace's own timestamps, shifted to start at 0 and
  multiplied by ``time_scale`` (0.5 = replay twice as fast), sorted.
An infinite rate sends everything at offset 0. Randomness comes from an injected
``random.Random`` so runs are reproducible.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence


def _cumulative(gaps: Sequence[float]) -> list[float]:
    out: list[float] = []
    t = 0.0
    for i, gap in enumerate(gaps):
        if i > 0:  # the first request goes out at t = 0
            t += gap
        out.append(t)
    return out


def poisson(n: int, rate: float, rng: random.Random) -> list[float]:
    return gamma(n, rate, 1.0, rng)


def gamma(n: int, rate: float, burstiness: float, rng: random.Random) -> list[float]:
    if rate <= 0 or burstiness <= 0:
        raise ValueError("rate and burstiness must be > 0")
    if math.isinf(rate):
        return [0.0] * n
    scale = 1.0 / (rate * burstiness)
    return _cumulative([rng.gammavariate(burstiness, scale) for _ in range(n)])


def constant(n: int, rate: float) -> list[float]:
    if rate <= 0:
        raise ValueError("rate must be > 0")
    if math.isinf(rate):
        return [0.0] * n
    return [i / rate for i in range(n)]


def trace(timestamps_s: Sequence[float], time_scale: float = 1.0) -> list[float]:
    if time_scale <= 0:
        raise ValueError("time_scale must be > 0")
    if not timestamps_s:
        return []
    t0 = min(timestamps_s)
    return sorted((t - t0) * time_scale for t in timestamps_s)


def offsets(
    n: int,
    rate: float,
    *,
    burstiness: float = 1.0,
    process: str = "gamma",
    rng: random.Random | None = None,
) -> list[float]:
    """Dispatch by name: ``gamma`` (Poisson when burstiness=1), ``poisson``, ``constant``."""
    rng = rng or random.Random(0)
    if process == "constant":
        return constant(n, rate)
    if process == "poisson":
        return poisson(n, rate, rng)
    if process == "gamma":
        return gamma(n, rate, burstiness, rng)
    raise ValueError(f"unknown arrival process {process!r}")
