"""What the TTFT-queue policy measures instead of being told: replica boot time and the
arrival process's burstiness, and the headroom they call for. Pure; state in ``TTFTQueueState``.

Boot time (``track_boot``): an up-move to ``n`` replicas at ``t`` starts a measurement that
ends when ``n`` replicas report (the replicas Serve has started and that serve traffic);
the sample is the time in between. A later up-move before that replaces it (its replicas
are the last to come), a down-move cancels it (starting replicas are cancelled first), and
one that waits longer than ``BOOT_GIVE_UP_S`` is dropped. The estimate is the median of the
last ``BOOT_SAMPLES`` samples; until one exists, ``PRIOR_BOOT_S``.

Burstiness (``record_arrivals``): the prefill work that arrives (replica-seconds; what the
engines prefilled plus the growth of their backlog, per decision) is added up in bins of
``BIN_S``. When a bin closes, its *requirement* is computed: the fewest replicas that,
from an idle start, would have given every window ending with this bin and no longer than
one boot its first tokens in time,

    R_k = max over L = 1 .. ceil(boot / BIN_S) of  W(k-L+1 .. k) / (L * BIN_S + budget)

(``W`` the work of the bins, ``budget`` the queueing share of the TTFT SLO): work that
arrives within one boot has only the fleet already running; longer surges are what the
sustained terms of the policy follow. ``HISTORY_S`` of closed bins are kept.

Headroom (``reserve``): the smallest fleet ``n`` such that the bins whose requirement
exceeded ``n`` hold at most ``risk`` of the work of the history — with ``risk = 1 -
target_attainment``, a fleet of ``n`` would have served all but that share of the recent
work without waiting for a boot. The policy keeps at least ``n`` replicas. It is a
quantile of the history weighted by work, not a peak: one isolated spike carrying less than
``risk`` of the work does not buy capacity for the next hour, a burst pattern
that carries more does.
"""

from __future__ import annotations

import math
from statistics import median

from autoscaler.types import MetricsSnapshot

BIN_S = 1.0  # arrival bins, seconds
HISTORY_S = 3600.0  # how far back burstiness is measured (bursts recur over an hour)
PRIOR_BOOT_S = 30.0  # boot time assumed for the reserve's windows until one is measured
BOOT_SAMPLES = 5  # the estimate is the median of this many latest samples
BOOT_GIVE_UP_S = 900.0  # a boot not seen complete after this long is not measured


def boot_estimate(samples: tuple[float, ...]) -> float | None:
    """The measured boot time (median of the latest samples), None before the first."""
    return median(samples) if samples else None


def track_boot(
    snapshot: MetricsSnapshot,
    pending: tuple[float, int] | None,
    samples: tuple[float, ...],
) -> tuple[tuple[float, int] | None, tuple[float, ...]]:
    """Close the pending measurement ``(t_up, target)`` once ``target`` replicas report."""
    if pending is None:
        return None, samples
    t_up, target = pending
    if len(snapshot.replicas) >= target:
        sample = max(0.0, snapshot.now - t_up)
        return None, (*samples, sample)[-BOOT_SAMPLES:]
    if snapshot.now - t_up > BOOT_GIVE_UP_S:
        return None, samples
    return pending, samples


def record_arrivals(
    t0: float,
    t1: float,
    work: float,
    open_start: float | None,
    open_work: float,
    bins: tuple[float, ...],
) -> tuple[float, float, tuple[float, ...], list[float]]:
    """Add ``work`` (replica-seconds) arrived over ``[t0, t1)`` to the bins, spread evenly
    over time. Returns (open bin's start, its work, closed bins, the bins closed now)."""
    start = math.floor(t0 / BIN_S) * BIN_S if open_start is None else open_start
    closed: list[float] = []
    span = t1 - t0
    t = t0
    while t1 >= start + BIN_S:
        end = start + BIN_S
        share = work * (end - t) / span if span > 0 else 0.0
        closed.append(open_work + max(0.0, share))
        open_work, start, t = 0.0, end, end
    tail = work * (t1 - t) / span if span > 0 else work
    keep = int(HISTORY_S / BIN_S)
    return start, open_work + max(0.0, tail), (*bins, *closed)[-keep:], closed


def requirements(
    bins: tuple[float, ...], new: int, old_reqs: tuple[float, ...], boot_s: float, budget: float
) -> tuple[float, ...]:
    """Requirements of the ``new`` newest bins appended to ``old_reqs`` (kept aligned with
    ``bins``: one per bin)."""
    longest = max(1, math.ceil(boot_s / BIN_S - 1e-9))
    out = list(old_reqs)
    n = len(bins)
    for k in range(n - min(new, n), n):
        work, need = 0.0, 0.0
        for length in range(1, min(longest, k + 1) + 1):
            work += bins[k - length + 1]
            need = max(need, work / (length * BIN_S + budget))
        out.append(need)
    return tuple(out[-n:]) if n else ()


def reserve(bins: tuple[float, ...], reqs: tuple[float, ...], risk: float) -> int:
    """Smallest ``n`` with at most ``risk`` of the history's work in bins requiring more."""
    total = sum(bins)
    if total <= 0 or risk >= 1.0:  # target attainment 0: no reserve at all
        return 0
    # ``missed`` sums the same bins in another order: a rounding difference is not a miss
    allowed = risk * total * (1.0 + 1e-9)
    missed = 0.0
    for need, work in sorted(zip(reqs, bins, strict=True), reverse=True):
        if missed + work > allowed:
            return math.ceil(need - 1e-9)
        missed += work
    return 0
