"""TTFT-queue scaling: size the fleet so waiting prompts reach their first token within the SLO.

Signal: the prefill work waiting in the engines, in seconds — per replica its reported
``queue_delay_s`` (waiting uncached tokens / its measured prefill rate), else
``waiting_prefill_tokens / rate`` with the fleet's median rate. GPU utilisation and ongoing
requests are poor proxies: a replica is "busy" with one decode, and ten short prompts are
not ten long ones; what a new request waits for is the prefill work ahead of it.

Rule (budget ``B = headroom * ttft_slo_s``; all work in replica-seconds)
- Up, fast and proportional: ``need = max(need_queue, need_rate)`` and, if ``need > current``,
  jump straight to it (bounded by max), not one replica at a time.
  ``need_queue = ceil(total waiting prefill seconds / B)``: replicas that could drain the
  backlog within the budget. ``need_rate = ceil(arrivals / up_utilization) + blocked``:
  arrivals = EWMA (``growth_tau_s``) of prefill busy (prefill load / rate, summed; load as
  reported, else from the engines' token counters, see ``prefill_load.py``) plus
  the queue's growth rate, i.e. the prefill capacity the incoming stream uses; ``blocked``
  = replicas whose own queue exceeds B, which a queue-aware router will not give new work.
- Boot-aware backlog (``boot_s``, default 0): replicas that start after the current fleet has
  drained a burst only cost money, so the backlog term counts only the work left after
  ``boot_s`` of draining by the reporting replicas: ``ceil(max(0, W − n·boot_s) / B)``.
- No compounding: ``current`` counts starting replicas, and after an up-move the backlog
  term is ignored while the new replicas boot (fewer replicas report than ``current``, at
  most ``startup_grace_s``) and for ``settle_s`` after they all report — the backlog keeps
  growing mechanically until they serve, and queued requests do not migrate to new
  replicas anyway. It is also ignored while the queue already drains (growth < 0).
- Down, slow: ``m < current`` replicas are enough when, spread over ``m``, the backlog stays
  under ``down_queue_fraction * B``, prefill utilisation under ``down_utilization`` and KV
  usage under ``down_kv_usage``, and no busy replica's observed TTFT P95 exceeds the SLO (an
  idle replica's P95 window holds samples of a past burst forever, so it cannot veto). The
  condition must hold for ``downscale_stable_s``; then remove at most
  ``max_downscale_step`` replicas, at most once per ``downscale_cooldown_s`` after any move.
  No up-move within ``upscale_cooldown_s`` after a down-move.
- Peak hold (``peak_hold_s``, off by default): never go below the largest ``need`` of the
  last ``peak_hold_s`` seconds. Bursty traffic (the Azure code trace: hundreds of requests
  within seconds, minutes apart) outruns any boot time; holding the recent burst capacity
  is what catches the next burst.
- Hysteresis: up at backlog > B per replica or utilisation > 0.9; down only below 0.5 B and
  0.5 utilisation after removal.
- Zero: with ``min_replicas == 0`` the last replica goes only when nothing is waiting,
  running or held; ``pending_requests > 0`` brings one back at once (plus their work, if
  ``pending_request_tokens`` estimates a held request's prompt).

Knobs in ``ScalingConfig.params`` (defaults in ``TTFTQueueParams``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from autoscaler.common import clamp, floor_for_pending, ongoing_of, prefill_rate
from autoscaler.prefill_load import prefill_loads
from autoscaler.types import MetricsSnapshot, ScalingConfig, State

_K = "ttft."  # state key prefix


@dataclass(frozen=True, slots=True)
class TTFTQueueParams:
    prior_prefill_tokens_per_s: float = 1000.0  # until a replica reports a measured rate
    down_queue_fraction: float = 0.5
    down_utilization: float = 0.5
    down_kv_usage: float = 0.75
    max_downscale_step: int = 1
    pending_request_tokens: float = 0.0  # assumed uncached prompt of a request held at ingress
    up_utilization: float = 0.9  # arrival-rate term: keep prefill utilisation under this
    growth_tau_s: float = 3.0  # smoothing of the queue-growth estimate
    startup_grace_s: float = 120.0  # how long a scale-up counts as booting
    settle_s: float = 10.0  # after boot, let the smoothed signals catch up
    load_window_s: float = 5.0  # window for prefill load from cumulative counters
    blocked_factor: float = 1.0  # a replica queued beyond this many budgets takes no new work
    peak_hold_s: float = 0.0  # never scale below the largest need seen this long ago (0 = off)
    boot_s: float = 0.0  # expected replica startup time (see "Boot-aware backlog")

    @classmethod
    def from_config(cls, config: ScalingConfig) -> TTFTQueueParams:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in config.params.items() if k in known})


@dataclass(frozen=True, slots=True)
class _Load:
    rate: float  # tokens/s per replica
    work_s: float  # waiting prefill work, replica-seconds
    prefill_util: float  # replica-equivalents of prefill busy time
    kv: float  # replica-equivalents of KV usage
    ongoing: float
    worst_p95_s: float
    reporting: int  # replicas that sent metrics
    blocked: int  # replicas whose own queue exceeds the budget: no room for new arrivals


class TTFTQueuePolicy:
    name = "ttft-queue"

    def decide(
        self, snapshot: MetricsSnapshot, config: ScalingConfig, state: State
    ) -> tuple[int, State]:
        p = TTFTQueueParams.from_config(config)
        budget = config.headroom * config.ttft_slo_s
        fallback = float(state.get(_K + "rate", p.prior_prefill_tokens_per_s))
        loads, new = prefill_loads(snapshot, state, _K + "counters", p.load_window_s)
        load = _measure(snapshot, p, fallback, budget, loads)
        new = _track_settling(snapshot, p, load, _track_growth(snapshot, p, load, new))
        current = snapshot.current_replicas
        need, why = _need(snapshot, config, p, load, new, budget)
        new = _track_peak(snapshot.now, need, p.peak_hold_s, new)
        if current < config.min_replicas or current > config.max_replicas:
            return _move(max(need, clamp(current, config)), snapshot, new, "bounds")
        if need > current:
            new[_K + "down_since"] = None
            last_down = new.get(_K + "last_down_at")
            if current > 0 and last_down is not None:
                if snapshot.now - last_down < config.upscale_cooldown_s:
                    return current, {**new, _K + "reason": f"hold: up-cooldown (need {need})"}
            return _move(need, snapshot, new, why)
        held = max((int(e[1]) for e in new.get(_K + "peaks", [])), default=0)
        target = _down_target(snapshot, config, p, load, budget, held)
        return _maybe_down(target, snapshot, config, new)


def _track_growth(
    snapshot: MetricsSnapshot, p: TTFTQueueParams, load: _Load, state: State
) -> State:
    """EWMAs of prefill arrivals (busy + d(queued work)/dt) and of the queue growth alone,
    both in replica-equivalents. Smoothing the sum keeps it steady while capacity ramps."""
    new: State = {**state, _K + "rate": load.rate, _K + "work_s": load.work_s}
    prev_t, prev_w = state.get(_K + "prev_t"), state.get(_K + "prev_work_s")
    growth = float(state.get(_K + "growth", 0.0))
    arrival = float(state.get(_K + "arrival", load.prefill_util))
    if prev_t is not None and prev_w is not None and snapshot.now > prev_t:
        dt = snapshot.now - float(prev_t)
        alpha = 1.0 - math.exp(-dt / p.growth_tau_s)
        slope = (load.work_s - float(prev_w)) / dt
        growth += alpha * (slope - growth)
        arrival += alpha * (max(0.0, load.prefill_util + slope) - arrival)
    return new | {
        _K + "prev_t": snapshot.now,
        _K + "prev_work_s": load.work_s,
        _K + "growth": growth,
        _K + "arrival": arrival,
    }


def _track_settling(
    snapshot: MetricsSnapshot, p: TTFTQueueParams, load: _Load, state: State
) -> State:
    """After an up-move the backlog keeps growing until the new replicas serve and the
    smoothed signals catch up: ``settling`` covers boot (up to ``startup_grace_s``) plus
    ``settle_s`` after every replica reports."""
    last_up, now = state.get(_K + "last_up_at"), snapshot.now
    if last_up is None:
        return {**state, _K + "settling": False}
    booting = load.reporting < snapshot.current_replicas and now - last_up < p.startup_grace_s
    ready_at = None if booting else state.get(_K + "ready_at", now)
    ready_at = now if ready_at is None and not booting else ready_at
    settling = booting or (ready_at is not None and now - ready_at < p.settle_s)
    return {**state, _K + "ready_at": ready_at, _K + "settling": settling}


def _need(
    snapshot: MetricsSnapshot,
    config: ScalingConfig,
    p: TTFTQueueParams,
    load: _Load,
    state: State,
    budget: float,
) -> tuple[int, str]:
    """Replicas needed: max of the backlog term and the arrival-rate term."""
    arrival = float(state[_K + "arrival"])
    need_rate = math.ceil(arrival / p.up_utilization - 1e-9) + load.blocked
    late = max(0.0, load.work_s - load.reporting * p.boot_s)  # still queued when new ones serve
    need_queue = math.ceil(late / budget - 1e-9)
    if state.get(_K + "settling") or float(state[_K + "growth"]) < 0.0:
        need_queue = 0  # after an up-move, or while the queue already drains: trust the rate
    need = floor_for_pending(clamp(max(need_queue, need_rate), config), snapshot)
    why = f"up: {load.work_s:.2f}s prefill queued (budget {budget:.2f}s), arrivals {arrival:.2f} replicas"
    return need, why


def _measure(
    snapshot: MetricsSnapshot,
    p: TTFTQueueParams,
    fallback_rate: float,
    budget: float,
    loads: dict[str, float],
) -> _Load:
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
        if ongoing_of(m) > 0:  # an idle replica's P95 is stale: its window never ages out
            worst = max(worst, m.ttft_p95_s)
    return _Load(rate, work_s, util, kv, ongoing, worst, len(snapshot.replicas), blocked)


def _fits(m: int, load: _Load, p: TTFTQueueParams, budget: float, pending: float) -> bool:
    if m == 0:  # scale to zero only when nothing at all is in flight or held
        return load.work_s == 0 and load.ongoing == 0 and pending == 0 and load.reporting > 0
    return (
        load.work_s / m <= p.down_queue_fraction * budget
        and load.prefill_util / m <= p.down_utilization
        and load.kv / m <= p.down_kv_usage
    )


def _track_peak(now: float, need: int, hold_s: float, state: State) -> State:
    """Sliding-window maximum of ``need`` over ``hold_s`` as a monotonic queue of
    ``[t, need]`` with decreasing needs (a few entries, cheap to carry in Serve's state)."""
    if hold_s <= 0:
        return state
    peaks = [e for e in state.get(_K + "peaks", []) if now - e[0] <= hold_s and e[1] > need]
    return {**state, _K + "peaks": [*peaks, [now, need]]}


def _down_target(
    snapshot: MetricsSnapshot,
    config: ScalingConfig,
    p: TTFTQueueParams,
    load: _Load,
    budget: float,
    held: int = 0,
) -> int:
    current = snapshot.current_replicas
    if load.worst_p95_s > config.ttft_slo_s:
        return current
    floor = max(config.min_replicas, current - max(1, p.max_downscale_step), held)
    target = current
    for m in range(current - 1, floor - 1, -1):
        if not _fits(m, load, p, budget, snapshot.pending_requests):
            break
        target = m
    return target


def _maybe_down(
    target: int, snapshot: MetricsSnapshot, config: ScalingConfig, state: State
) -> tuple[int, State]:
    current, now = snapshot.current_replicas, snapshot.now
    if target >= current:
        return current, {**state, _K + "down_since": None, _K + "reason": "steady"}
    since = state.get(_K + "down_since")
    if since is None:
        since = now
    state = {**state, _K + "down_since": since}
    last = state.get(_K + "last_scale_at")
    if now - since < config.downscale_stable_s:
        return current, {**state, _K + "reason": f"hold: down to {target} not yet stable"}
    if last is not None and now - last < config.downscale_cooldown_s:
        return current, {**state, _K + "reason": "hold: down-cooldown"}
    return _move(target, snapshot, state, "down: fewer replicas still meet the SLO with headroom")


def _move(desired: int, snapshot: MetricsSnapshot, state: State, reason: str) -> tuple[int, State]:
    new = {**state, _K + "reason": reason}
    if desired != snapshot.current_replicas:
        new[_K + "last_scale_at"] = snapshot.now
    if desired > snapshot.current_replicas:
        new |= {_K + "last_up_at": snapshot.now, _K + "ready_at": None, _K + "settling": True}
    elif desired < snapshot.current_replicas:
        new[_K + "last_down_at"] = snapshot.now
    return desired, new
