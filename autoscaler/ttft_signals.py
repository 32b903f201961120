"""Signals of the TTFT-queue policy, measured from one snapshot plus the policy state.

All work is in replica-seconds of prefill (uncached tokens / prefill rate), all rates in
replica-equivalents (replica-seconds of prefill arriving per second).

- ``measure``: backlog, prefill utilisation, KV usage, in-flight count, worst observed P95
  of a busy replica, replicas blocked: queued beyond the budget plus one mean prefill
  (a single long prompt waiting is not a blocked replica).
- ``track_growth``: per decision, the instantaneous arrival rate ``a = prefill_util +
  d(backlog)/dt`` (what the incoming stream asks of the fleet, served or queued), smoothed
  into ``arrival`` (EWMA over ``Derived.growth_tau_s``, the sustained rate), and the work
  ``a * dt`` added to the arrival bins the burst reserve is measured on (``ttft_measure``);
  ``growth`` is the EWMA of ``d(backlog)/dt`` alone.
- ``track_settling``: after an up-move, ``settling`` covers boot (fewer replicas report than
  ``current``, at most ``startup_grace_s``) plus ``SETTLE_S`` after all report.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from autoscaler.common import ongoing_of, prefill_rate
from autoscaler.ttft_measure import record_arrivals, requirements, reserve
from autoscaler.ttft_types import BLOCKED_FACTOR, PROMPT_N, SETTLE_S, Derived, TTFTQueueState
from autoscaler.types import MetricsSnapshot


@dataclass(frozen=True, slots=True)
class Load:
    rate: float  # tokens/s per replica
    work_s: float  # waiting prefill work, replica-seconds
    prefill_util: float  # replica-equivalents of prefill busy time
    kv: float  # replica-equivalents of KV usage
    ongoing: float
    worst_p95_s: float
    reporting: int  # replicas that sent metrics
    blocked: int  # replicas whose own queue exceeds the budget: no room for new arrivals


def measure(
    snapshot: MetricsSnapshot,
    fallback_rate: float,
    budget: float,
    loads: Mapping[str, float],
    prompt_s: float = 0.0,
) -> Load:
    rate = prefill_rate(snapshot, fallback_rate)
    work_s = util = kv = ongoing = worst = 0.0
    blocked = 0
    for m in snapshot.replicas:
        own_rate = m.prefill_tokens_per_s if m.prefill_tokens_per_s > 0 else rate
        own_work = m.queue_delay_s if m.queue_delay_s > 0 else m.waiting_prefill_tokens / own_rate
        work_s += own_work
        blocked += own_work > BLOCKED_FACTOR * budget + prompt_s
        util += loads.get(m.replica_id, 0.0) / own_rate
        kv += m.kv_usage
        ongoing += ongoing_of(m)
        if ongoing_of(m) > 0:  # an idle replica's P95 describes traffic it no longer has
            worst = max(worst, m.ttft_p95_s)
    return Load(rate, work_s, util, kv, ongoing, worst, len(snapshot.replicas), blocked)


Counts = tuple[float, float, float]  # a replica's (prompt tokens, requests) arrived, last seen
IDLE_ARRIVAL = 1e-3  # replica-equivalents: a decayed arrival rate below this is none
FORGET_S = 600.0  # a replica missing from the reports this long is forgotten


def arrived_work(
    snapshot: MetricsSnapshot, old: Mapping[str, Counts], first: bool, rate: float
) -> tuple[float | None, float, dict[str, Counts]]:
    """Uncached prefill work (replica-seconds) and requests that reached the engines since
    the last decision, from their cumulative ``arrived_prompt_tokens`` / ``arrived_requests``
    (tokens times the replica's cache-miss ratio so far); work is None when no replica
    reports the counters. A replica seen for the first time counts from zero (it is new),
    except on the first decision (the baseline). A replica missing from one report keeps
    its baseline (``FORGET_S``), and a counter that reads lower than its baseline (a report
    decoded as neutral) counts nothing and keeps it: Serve never reuses a replica id, so a
    lower reading is a bad report, not a restart, and counting from zero after it would add
    everything the replica ever received as one burst."""
    t = snapshot.now
    seen: dict[str, Counts] = {r: c for r, c in old.items() if t - c[2] <= FORGET_S}
    work, requests, reported = 0.0, 0.0, False
    for m in snapshot.replicas:
        now = (m.arrived_prompt_tokens, m.arrived_requests, t)
        before = old.get(m.replica_id, now if first else (0.0, 0.0, t))
        if now[0] < before[0] or now[1] < before[1]:  # a bad report: keep the baseline
            seen[m.replica_id] = (before[0], before[1], t)
            continue
        seen[m.replica_id] = now
        reported = reported or now[0] > 0
        miss = 1.0 - m.prefix_hits / m.prefix_queries if m.prefix_queries > 0 else 1.0
        own_rate = m.prefill_tokens_per_s if m.prefill_tokens_per_s > 0 else rate
        work += (now[0] - before[0]) * min(1.0, max(0.0, miss)) / own_rate
        requests += now[1] - before[1]
    return (work if reported else None), requests, seen


def track_growth(
    snapshot: MetricsSnapshot, d: Derived, load: Load, state: TTFTQueueState
) -> TTFTQueueState:
    growth = state.growth
    arrival = load.prefill_util if state.arrival is None else state.arrival
    bins, reqs, level = state.bins, state.reqs, state.reserve
    wake_reqs, wake_level = state.wake_reqs, state.wake_reserve
    start, open_work = state.bin_start, state.bin_work
    first = state.prev_t is None
    arrived, requests, seen = arrived_work(snapshot, state.arrived, first, load.rate)
    prompt_s, prompt_n = state.prompt_s, state.prompt_n
    if arrived is not None and requests > 0:  # mean prefill of one request, over ~PROMPT_N
        mean = arrived / requests
        # the plain mean while fewer than ~PROMPT_N requests were counted, then the EWMA
        w = max(1.0 - math.exp(-requests / PROMPT_N), requests / (prompt_n + requests))
        prompt_s = mean if prompt_s is None else prompt_s + w * (mean - prompt_s)
        prompt_n = min(prompt_n + requests, PROMPT_N)
    if state.prev_t is not None and snapshot.now > state.prev_t:
        dt = snapshot.now - state.prev_t
        slope = (load.work_s - state.prev_work_s) / dt
        # arrivals as the engines count them, else what they served plus what queued up
        now_rate = max(0.0, load.prefill_util + slope) if arrived is None else arrived / dt
        growth += _alpha(dt, d.growth_tau_s) * (slope - growth)
        arrival += _alpha(dt, d.growth_tau_s) * (now_rate - arrival)
        if now_rate == 0.0 and arrival < IDLE_ARRIVAL:
            arrival = 0.0  # the EWMA never reaches 0 by itself; an idle fleet can go to zero
        start, open_work, bins, closed = record_arrivals(
            state.prev_t, snapshot.now, now_rate * dt, start, open_work, bins
        )
        if closed:
            old = reqs
            reqs = requirements(bins, len(closed), old, d.boot_s, d.budget)
            level = reserve(bins, reqs, d.risk)
            if d.wake_s < d.boot_s:  # a wake was measured: bursts over one wake, too
                base = wake_reqs or old  # history from before: its boot windows (an upper bound)
                wake_reqs = requirements(bins, len(closed), base, d.wake_s, d.budget)
                wake_level = reserve(bins, wake_reqs, d.risk)
            else:
                wake_reqs, wake_level = (), level
    return replace(
        state,
        rate=load.rate,
        arrived=seen,
        prompt_s=prompt_s,
        prompt_n=prompt_n,
        prev_t=snapshot.now,
        prev_work_s=load.work_s,
        growth=growth,
        arrival=arrival,
        bin_start=start,
        bin_work=open_work,
        bins=bins,
        reqs=reqs,
        reserve=level,
        wake_reqs=wake_reqs,
        wake_reserve=wake_level,
    )


def _alpha(dt: float, tau: float) -> float:
    return 1.0 if tau <= 0 else 1.0 - math.exp(-dt / tau)


def track_settling(
    snapshot: MetricsSnapshot, d: Derived, load: Load, state: TTFTQueueState
) -> TTFTQueueState:
    last_up, now = state.last_up_at, snapshot.now
    if last_up is None:
        return replace(state, settling=False)
    booting = load.reporting < snapshot.current_replicas and now - last_up < d.startup_grace_s
    ready_at = None if booting else (now if state.ready_at is None else state.ready_at)
    settling = booting or (ready_at is not None and now - ready_at < SETTLE_S)
    return replace(state, ready_at=ready_at, settling=settling)
