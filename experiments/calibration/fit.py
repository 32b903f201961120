"""Least-squares fit of the CPU cost-model constants to measured step times.

Model (``cost.py``, tp = 1, efficiencies fixed at 1 so the peaks are *effective* rates):

    step = overhead + per_seq * seqs + max(flops / peak_flops, bytes / mem_bandwidth)

A sample is one measured duration and the engine steps it spans (a decode step, or the
chunked steps of a cold prefill whose TTFT was measured). The ``max`` makes the problem
piecewise linear, so we alternate: assign every step to its binding regime (compute or
memory), solve the weighted non-negative linear least squares for
``(overhead, per_seq, 1/peak_flops, 1/mem_bandwidth)``, reassign, repeat until the
assignment is stable. Several starting assignments are tried; the lowest residual wins.
Residuals are relative (weight 1/measured) because the goals are percentage errors.
A regime no step falls into leaves its rate undetermined: it is set so that it never binds
on the samples (reported in ``FitResult.unbound``), which is the honest reading of the data.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from replicas.sim.cost import BatchShape, step_features
from replicas.sim.profiles import ModelProfile

KEYS = ("step_overhead_s", "per_seq_overhead_s", "peak_flops", "mem_bandwidth")
MAX_ITERS = 30


@dataclass(frozen=True, slots=True)
class Sample:
    shapes: tuple[BatchShape, ...]  # engine steps the measured duration spans
    seconds: float
    label: str = ""


@dataclass(frozen=True, slots=True)
class FitResult:
    constants: dict[str, float]  # CPU_FIT keys (compute_eff = bw_eff = 1)
    rel_rmse: float  # root mean square of (predicted - measured) / measured
    max_rel_err: float
    n_samples: int
    unbound: tuple[str, ...] = ()  # rates the data did not constrain


def _nnls(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Exact non-negative least squares for a handful of columns: best feasible subset."""
    n = x.shape[1]
    best, best_err = np.zeros(n), float(np.sum(y * y))
    for k in range(1, n + 1):
        for cols in itertools.combinations(range(n), k):
            sub = x[:, cols]
            if np.linalg.matrix_rank(sub) < k:
                continue
            coef, *_ = np.linalg.lstsq(sub, y, rcond=None)
            if np.any(coef < 0):
                continue
            err = float(np.sum((sub @ coef - y) ** 2))
            if err < best_err - 1e-15:
                best, best_err = np.zeros(n), err
                best[list(cols)] = coef
    return best


def _design(feats: list[np.ndarray], regimes: list[np.ndarray]) -> np.ndarray:
    """Rows: [steps, sum seqs, sum flops of compute steps, sum bytes of memory steps]."""
    rows = []
    for f, compute in zip(feats, regimes, strict=True):
        rows.append([len(f), f[:, 2].sum(), f[compute, 0].sum(), f[~compute, 1].sum()])
    return np.asarray(rows, dtype=float)


def _solve(
    feats: list[np.ndarray], y: np.ndarray, w: np.ndarray, regimes: list[np.ndarray]
) -> tuple[np.ndarray, list[np.ndarray]]:
    for _ in range(MAX_ITERS):
        x = _design(feats, regimes)
        coef = _nnls(x * w[:, None], y * w)
        new = [coef[2] * f[:, 0] > coef[3] * f[:, 1] for f in feats]
        if all(np.array_equal(a, b) for a, b in zip(new, regimes, strict=True)):
            break
        regimes = new
    return coef, regimes


def _predict(coef: np.ndarray, feats: list[np.ndarray]) -> np.ndarray:
    return np.asarray(
        [
            np.sum(coef[0] + coef[1] * f[:, 2] + np.maximum(coef[2] * f[:, 0], coef[3] * f[:, 1]))
            for f in feats
        ]
    )


def fit_cpu_profile(samples: Sequence[Sample], model: ModelProfile) -> FitResult:
    if len(samples) < 4:
        raise ValueError("need at least 4 samples to fit 4 constants")
    feats = [np.asarray([step_features(model, s) for s in smp.shapes]) for smp in samples]
    y = np.asarray([s.seconds for s in samples])
    w = 1.0 / y
    starts = [[np.zeros(len(f), bool) for f in feats], [np.ones(len(f), bool) for f in feats]]
    for ratio in (1.0, 3.0, 10.0, 30.0):  # compute if flops/bytes exceeds the ratio
        starts.append([f[:, 0] > ratio * f[:, 1] for f in feats])
    best: tuple[float, np.ndarray] | None = None
    for regimes in starts:
        coef, _ = _solve(feats, y, w, regimes)
        err = float(np.sqrt(np.mean(((_predict(coef, feats) - y) * w) ** 2)))
        if best is None or err < best[0] - 1e-12:
            best = (err, coef)
    assert best is not None
    return _result(best[1], feats, y, len(samples))


def _result(coef: np.ndarray, feats: list[np.ndarray], y: np.ndarray, n: int) -> FitResult:
    coef = coef.copy()
    unbound: list[str] = []
    # An unconstrained rate is set 10x beyond the point where it would bind on any sample.
    if coef[2] <= 0 < coef[3]:
        unbound.append("peak_flops")
        coef[2] = 0.1 * min(float(coef[3] * (f[:, 1] / f[:, 0]).min()) for f in feats)
    elif coef[3] <= 0 < coef[2]:
        unbound.append("mem_bandwidth")
        coef[3] = 0.1 * min(float(coef[2] * (f[:, 0] / f[:, 1]).min()) for f in feats)
    rel = (_predict(coef, feats) - y) / y
    constants = {
        "peak_flops": float(1.0 / coef[2]) if coef[2] > 0 else 1e18,
        "mem_bandwidth": float(1.0 / coef[3]) if coef[3] > 0 else 1e18,
        "compute_eff": 1.0,
        "bw_eff": 1.0,
        "step_overhead_s": float(coef[0]),
        "per_seq_overhead_s": float(coef[1]),
    }
    return FitResult(
        constants,
        float(np.sqrt(np.mean(rel**2))),
        float(np.max(np.abs(rel))),
        n,
        tuple(unbound),
    )
