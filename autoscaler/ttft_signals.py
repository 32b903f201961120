"""Signals of the TTFT-queue policy, measured from one snapshot plus the policy state.

All work is in replica-seconds of prefill (uncached tokens / prefill rate), all rates in
replica-equivalents (replica-seconds of prefill arriving per second).

- ``measure``: backlog, prefill utilisation, KV usage, in-flight count, worst observed P95
  of a busy replica, replicas blocked behind more than ``blocked_factor`` budgets.
- ``track_growth``: per decision, the instantaneous arrival rate ``a = prefill_util +
  d(backlog)/dt`` (what the incoming stream asks of the fleet, served or queued), smoothed
  three times: ``arrival`` (EWMA over ``growth_tau_s``, the sustained rate), ``fast`` (over
  ``fast_tau_s``) and ``slow`` (over ``level_tau_s``, about a minute: the level a step
  settles to, which a burst of seconds barely moves); ``growth`` is the EWMA of
  ``d(backlog)/dt`` alone.
- ``track_bursts``: the burst reserve, a sliding-window maximum over ``burst_hold_s`` of
  ``fast`` itself, each entry with the largest ``slow`` seen since. ``held_burst`` keeps
  only transient bursts: after a level shift (a step) ``slow`` climbs to the new level and
  releases the entry, after a burst it stays far below it.
- ``track_settling``: after an up-move, ``settling`` covers boot (fewer replicas report than
  ``current``, at most ``startup_grace_s``) plus ``settle_s`` after all report.

The burst window is a monotonic queue of ``(t, fast, slow_since)`` with decreasing
``fast`` (a few entries, cheap to carry in Serve's policy state):

    t:     10    40    95        an entry is kept only while nothing newer is at least as
    fast:  9.0   6.5   2.0       big; front = max of the window; entries older than hold drop
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from autoscaler.common import ongoing_of, prefill_rate
from autoscaler.ttft_types import TTFTQueueParams, TTFTQueueState
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
    p: TTFTQueueParams,
    fallback_rate: float,
    budget: float,
    loads: Mapping[str, float],
) -> Load:
    rate = prefill_rate(snapshot, fallback_rate)
    work_s = util = kv = ongoing = worst = 0.0
    blocked = 0
    for m in snapshot.replicas:
        own_rate = m.prefill_tokens_per_s if m.prefill_tokens_per_s > 0 else rate
        own_work = m.queue_delay_s if m.queue_delay_s > 0 else m.waiting_prefill_tokens / own_rate
        work_s += own_work
        blocked += own_work > p.blocked_factor * budget
        util += loads.get(m.replica_id, 0.0) / own_rate
        kv += m.kv_usage
        ongoing += ongoing_of(m)
        if ongoing_of(m) > 0:  # an idle replica's P95 describes traffic it no longer has
            worst = max(worst, m.ttft_p95_s)
    return Load(rate, work_s, util, kv, ongoing, worst, len(snapshot.replicas), blocked)


def track_growth(
    snapshot: MetricsSnapshot, p: TTFTQueueParams, load: Load, state: TTFTQueueState
) -> TTFTQueueState:
    growth = state.growth
    arrival = load.prefill_util if state.arrival is None else state.arrival
    fast = arrival if state.fast is None else state.fast
    slow = arrival if state.slow is None else state.slow
    if state.prev_t is not None and snapshot.now > state.prev_t:
        dt = snapshot.now - state.prev_t
        slope = (load.work_s - state.prev_work_s) / dt
        now_rate = max(0.0, load.prefill_util + slope)
        growth += _alpha(dt, p.growth_tau_s) * (slope - growth)
        arrival += _alpha(dt, p.growth_tau_s) * (now_rate - arrival)
        fast += _alpha(dt, p.fast_tau_s) * (now_rate - fast)
        slow += _alpha(dt, p.level_tau_s) * (now_rate - slow)
    return replace(
        state,
        rate=load.rate,
        prev_t=snapshot.now,
        prev_work_s=load.work_s,
        growth=growth,
        arrival=arrival,
        fast=fast,
        slow=slow,
    )


def _alpha(dt: float, tau: float) -> float:
    return 1.0 if tau <= 0 else 1.0 - math.exp(-dt / tau)


def track_bursts(now: float, p: TTFTQueueParams, state: TTFTQueueState) -> TTFTQueueState:
    """Window max of ``fast`` over ``burst_hold_s``; each entry ``(t, fast, s)`` also carries
    ``s``, the largest ``slow`` rate seen since ``t`` (see ``held_burst``)."""
    if p.burst_hold_s <= 0 or state.fast is None or state.slow is None:
        return state
    fast, slow = state.fast, state.slow
    kept = tuple(
        (t, v, max(s, slow)) for t, v, s in state.bursts if now - t <= p.burst_hold_s and v > fast
    )
    return replace(state, bursts=(*kept, (now, fast, slow)))


def held_burst(state: TTFTQueueState, level_shift: float) -> float:
    """The largest held ``fast`` peak that was a transient burst: the minute-scale rate has
    not reached ``level_shift`` times it since. At a level shift it has (the rate followed
    the jump and stayed), and the sustained terms carry the load instead."""
    return max((v for _, v, s in state.bursts if s < level_shift * v), default=0.0)


def track_settling(
    snapshot: MetricsSnapshot, p: TTFTQueueParams, load: Load, state: TTFTQueueState
) -> TTFTQueueState:
    last_up, now = state.last_up_at, snapshot.now
    if last_up is None:
        return replace(state, settling=False)
    booting = load.reporting < snapshot.current_replicas and now - last_up < p.startup_grace_s
    ready_at = None if booting else (now if state.ready_at is None else state.ready_at)
    settling = booting or (ready_at is not None and now - ready_at < p.settle_s)
    return replace(state, ready_at=ready_at, settling=settling)
