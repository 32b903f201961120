"""The bound on what a policy that reacts to what it has seen can reach on a trace.

The requirement of each 1-s bin is computed from the trace itself (every request's prompt
at the replica's nominal prefill rate; ``autoscaler.ttft_measure.requirements`` with the
replica boot time and the queueing budget the policy derives from the mean prefill). A bin
is *unprecedented* when it needs more replicas than any earlier bin did: a policy that
sizes its fleet on the requirements it has seen holds at most ``ceil(prior max)`` there,
and replicas started when the bin arrives serve only one boot later. So the requests
arriving within one boot of each unprecedented bin are served by at most that fleet; the
requests a fixed fleet of that size misses in those windows are lost to such a policy
whatever it does elsewhere. ``reach`` reports the largest attainment left (an estimate:
the fixed fleet stands in for a fleet that may also have been larger at that moment for
another reason, or already scaling).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from autoscaler.ttft_measure import BIN_S, requirements
from bench.types import RequestRecord, RequestSpec


@dataclass(frozen=True, slots=True)
class Event:
    t: float  # bin start, seconds
    need: float  # replicas the bin requires
    seen: float  # the largest requirement before it


@dataclass(frozen=True, slots=True)
class Reach:
    attainment: float  # at most this, for a policy sized on what it has seen
    lost: int  # requests lost in the unprecedented windows
    events: tuple[Event, ...]
    budget_s: float
    prompt_s: float


def requirement_bins(
    specs: Sequence[RequestSpec], rate: float, boot_s: float, budget_s: float
) -> tuple[float, ...]:
    end = max((float(s.arrival_s or 0.0) for s in specs), default=0.0)
    bins = [0.0] * (int(end / BIN_S) + 1)
    for s in specs:
        bins[int(float(s.arrival_s or 0.0) / BIN_S)] += len(s.prompt_token_ids) / rate
    return requirements(tuple(bins), len(bins), (), boot_s, budget_s)


def budget(specs: Sequence[RequestSpec], rate: float, slo_s: float) -> tuple[float, float]:
    """The queueing budget the policy derives from the workload's mean prefill, and that mean
    (seconds, at ``rate`` prompt tokens/s)."""
    from autoscaler.ttft_queue import derive
    from autoscaler.ttft_types import TTFTQueueParams, TTFTQueueState

    prompt_s = sum(len(s.prompt_token_ids) for s in specs) / rate / max(1, len(specs))
    return derive(TTFTQueueParams(), TTFTQueueState(prompt_s=prompt_s), slo_s).budget, prompt_s


def unprecedented(reqs: Sequence[float]) -> list[Event]:
    out, seen = [], 0.0
    for k, need in enumerate(reqs):
        if math.ceil(need - 1e-9) > max(1, math.ceil(seen - 1e-9)):
            out.append(Event(k * BIN_S, need, seen))
        seen = max(seen, need)
    return out


def reach(
    specs: Sequence[RequestSpec],
    rate: float,
    boot_s: float,
    slo_s: float,
    run_static: Callable[[int], list[RequestRecord]],
) -> Reach:
    """``run_static(n)``: the workload's records on a fixed fleet of ``n`` replicas."""
    budget_s, prompt_s = budget(specs, rate, slo_s)
    events = unprecedented(requirement_bins(specs, rate, boot_s, budget_s))
    lost: set[int] = set()
    by_fleet: dict[int, list[RequestRecord]] = {}
    for e in events:
        n = max(1, math.ceil(e.seen - 1e-9))
        if n not in by_fleet:
            by_fleet[n] = run_static(n)
        for r in by_fleet[n]:
            late = r.error is not None or r.ttft_s is None or r.ttft_s > slo_s
            if late and e.t - boot_s <= r.send_s <= e.t + BIN_S + boot_s:
                lost.add(r.index)
    total = max(1, len(specs))
    return Reach(1.0 - len(lost) / total, len(lost), tuple(events), budget_s, prompt_s)


def reach_line(r: Reach, boot_s: float, delay: str = "boot") -> str:
    worst = max(r.events, key=lambda e: e.need - e.seen, default=None)
    where = (
        f"the largest jump at {worst.t:.0f} s needs {worst.need:.1f} replicas after at most "
        f"{worst.seen:.1f} before it"
        if worst
        else "no bin needs more than the ones before it"
    )
    return (
        f"reach: a policy sized on the requirements it has seen reaches at most "
        f"{100 * r.attainment:.2f} % ({r.lost} requests lost within one {boot_s:.3g}-s {delay} of "
        f"{len(r.events)} unprecedented bins; {where}; budget {r.budget_s:.2f} s, mean "
        f"prefill {r.prompt_s:.2f} s)"
    )
