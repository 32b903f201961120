"""Signals of the TTFT-queue policy, measured from one snapshot plus the policy state.

All work is in replica-seconds of prefill (uncached tokens / prefill rate), all rates in
replica-equivalents (replica-seconds of prefill arriving per second).

- ``measure``: backlog, prefill utilisation, KV usage, in-flight count, worst observed P95
  of a busy replica, replicas blocked behind more than ``blocked_factor`` budgets.
- ``track_growth``: per decision, the instantaneous arrival rate ``a = prefill_util +
  d(backlog)/dt`` (what the incoming stream asks of the fleet, served or queued), smoothed
  three times: ``arrival`` (EWMA over ``growth_tau_s``, the sustained rate), ``fast`` (over
  ``surge_tau_s``) and ``slow`` (over ``level_tau_s``, about a minute: the level a step
  settles to, which a burst of seconds barely moves); ``growth`` is the EWMA of
  ``d(backlog)/dt`` alone.
- ``track_surge``: the surge reserve, a sliding-window maximum over ``surge_hold_s`` of
  ``fast - arrival`` — how far the stream recently jumped above its own trend. A burst that
  arrives faster than a replica boots cannot be caught by reacting to it; capacity for the
  largest recent jump is what catches the next one, while the sustained part of the load is
  followed up and down as it moves.
- ``track_bursts``: the burst reserve, a sliding-window maximum over ``burst_hold_s`` of
  ``fast`` itself, each entry with the largest ``slow`` seen since. ``held_burst`` keeps
  only transient bursts: after a level shift (a step) ``slow`` climbs to the new level and
  releases the entry, after a burst it stays far below it.
- ``track_settling``: after an up-move, ``settling`` covers boot (fewer replicas report than
  ``current``, at most ``startup_grace_s``) plus ``settle_s`` after all report.
- ``track_peak``: sliding-window maximum of a replica count over ``hold_s``.

Sliding-window maxima are monotonic queues ``[[t, value], ...]`` with decreasing values
(a few entries, cheap to carry in Serve's policy state; burst entries add a third field):

    t:     10    40    95        value kept only while nothing newer is at least as big
    value: 9.0   6.5   2.0       front = max of the window; entries older than hold drop
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from autoscaler.common import ongoing_of, prefill_rate
from autoscaler.types import MetricsSnapshot, State

K = "ttft."  # state key prefix


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
    p: Any,
    fallback_rate: float,
    budget: float,
    loads: dict[str, float],
) -> Load:
    rate = prefill_rate(snapshot, fallback_rate)
    work_s = snapshot.pending_requests * p.pending_request_tokens / rate
    util = kv = ongoing = worst = 0.0
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


def track_growth(snapshot: MetricsSnapshot, p: Any, load: Load, state: State) -> State:
    new: State = {**state, K + "rate": load.rate, K + "work_s": load.work_s}
    prev_t, prev_w = state.get(K + "prev_t"), state.get(K + "prev_work_s")
    growth = float(state.get(K + "growth", 0.0))
    arrival = float(state.get(K + "arrival", load.prefill_util))
    fast = float(state.get(K + "fast", arrival))
    slow = float(state.get(K + "slow", arrival))
    if prev_t is not None and prev_w is not None and snapshot.now > prev_t:
        dt = snapshot.now - float(prev_t)
        slope = (load.work_s - float(prev_w)) / dt
        now_rate = max(0.0, load.prefill_util + slope)
        growth += _alpha(dt, p.growth_tau_s) * (slope - growth)
        arrival += _alpha(dt, p.growth_tau_s) * (now_rate - arrival)
        fast += _alpha(dt, p.surge_tau_s) * (now_rate - fast)
        slow += _alpha(dt, p.level_tau_s) * (now_rate - slow)
    return new | {
        K + "prev_t": snapshot.now,
        K + "prev_work_s": load.work_s,
        K + "growth": growth,
        K + "arrival": arrival,
        K + "fast": fast,
        K + "slow": slow,
    }


def _alpha(dt: float, tau: float) -> float:
    return 1.0 if tau <= 0 else 1.0 - math.exp(-dt / tau)


def track_surge(now: float, p: Any, state: State) -> State:
    if p.surge_hold_s <= 0:
        return state
    surge = max(0.0, float(state[K + "fast"]) - float(state[K + "arrival"]))
    return {
        **state,
        K + "surges": window_max(state.get(K + "surges", []), now, surge, p.surge_hold_s),
    }


def track_bursts(now: float, p: Any, state: State) -> State:
    """Window max of ``fast`` over ``burst_hold_s``; each entry ``[t, fast, s]`` also carries
    ``s``, the largest ``slow`` rate seen since ``t`` (see ``held_burst``)."""
    if p.burst_hold_s <= 0:
        return state
    fast, slow = float(state[K + "fast"]), float(state[K + "slow"])
    kept = [
        [t, v, max(s, slow)]
        for t, v, s in state.get(K + "bursts", [])
        if now - t <= p.burst_hold_s and v > fast
    ]
    return {**state, K + "bursts": [*kept, [now, fast, slow]]}


def held_burst(state: State, level_shift: float) -> float:
    """The largest held ``fast`` peak that was a transient burst: the minute-scale rate has
    not reached ``level_shift`` times it since. At a level shift it has (the rate followed
    the jump and stayed), and the sustained terms carry the load instead."""
    bursts = state.get(K + "bursts", [])
    return max((float(v) for _, v, s in bursts if s < level_shift * v), default=0.0)


def held_surge(state: State) -> float:
    return max((float(e[1]) for e in state.get(K + "surges", [])), default=0.0)


def track_settling(snapshot: MetricsSnapshot, p: Any, load: Load, state: State) -> State:
    last_up, now = state.get(K + "last_up_at"), snapshot.now
    if last_up is None:
        return {**state, K + "settling": False}
    booting = load.reporting < snapshot.current_replicas and now - last_up < p.startup_grace_s
    ready_at = None if booting else state.get(K + "ready_at", now)
    ready_at = now if ready_at is None and not booting else ready_at
    settling = booting or (ready_at is not None and now - ready_at < p.settle_s)
    return {**state, K + "ready_at": ready_at, K + "settling": settling}


def track_peak(now: float, need: int, hold_s: float, state: State) -> State:
    if hold_s <= 0:
        return state
    return {**state, K + "peaks": window_max(state.get(K + "peaks", []), now, need, hold_s)}


def held_peak(state: State) -> int:
    return max((int(e[1]) for e in state.get(K + "peaks", [])), default=0)


def window_max(
    queue: list[list[float]], now: float, value: float, hold_s: float
) -> list[list[float]]:
    """Push ``[now, value]`` onto a monotonic max-queue, dropping entries older than
    ``hold_s`` and entries no bigger than ``value`` (they can never be the maximum again)."""
    kept = [e for e in queue if now - e[0] <= hold_s and e[1] > value]
    return [*kept, [now, value]]
