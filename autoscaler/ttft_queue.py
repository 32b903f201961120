"""TTFT-queue scaling: size the fleet so waiting prompts reach their first token within the SLO.

Signal: the prefill work waiting in the engines, in seconds — per replica its reported
``queue_delay_s`` (waiting uncached tokens / its measured prefill rate), else
``waiting_prefill_tokens / rate`` with the fleet's median rate. GPU utilisation and ongoing
requests are poor proxies: a replica is "busy" with one decode, and ten short prompts are
not ten long ones; what a new request waits for is the prefill work ahead of it.
Signals and their smoothing live in ``ttft_signals.py``.

Rule (budget ``B = headroom * ttft_slo_s``; all work in replica-seconds)
- Up, fast and proportional: ``need`` = the largest of the terms below and, if
  ``need > current``, jump straight to it (bounded by max), not one replica at a time.
  ``need_queue = ceil(total waiting prefill seconds / B)``: replicas that could drain the
  backlog within the budget. ``need_rate = ceil(arrival / up_utilization) + blocked``:
  arrival = EWMA (``growth_tau_s``) of prefill busy (prefill load / rate, summed; load as
  reported, else from the engines' token counters, see ``prefill_load.py``) plus the
  queue's growth rate, i.e. the prefill capacity the incoming stream uses; ``blocked`` =
  replicas whose own queue exceeds B, which a queue-aware router will not give new work.
- Predictive surge reserve (``surge_hold_s``, off by default): a burst that arrives faster
  than a replica boots is over before reactive capacity serves. So the policy keeps, on top
  of the sustained rate, capacity for the largest recent *jump* of the arrival rate above
  its own trend: ``need_reserve = ceil(arrival / up_utilization + S / surge_utilization)``
  with ``S = max over the last surge_hold_s of (fast − arrival)``, ``fast`` the arrival rate
  smoothed over only ``surge_tau_s``. On a jump this reacts within seconds (``fast`` moves
  before ``arrival``) — the leading edge of a burst is extrapolated, not waited out — and
  it is measured in prefill *work*, so 300 short prompts are not 300 long ones. The reserve
  fades once no jump of that size was seen for ``surge_hold_s``; the sustained part
  follows the load down at once.
- Burst reserve (``burst_hold_s``, off by default), for traffic that comes in bursts of
  seconds, minutes apart: ``need_burst = ceil(F / burst_utilization)`` with ``F`` the
  largest ``fast`` arrival rate of the last ``burst_hold_s`` that was *transient*. A jump
  is either a level shift (a step: the rate follows it and stays) or a burst (over in
  seconds, likely to come back); the two look the same when they start, so every jump is
  held at first, and a peak is released as soon as the minute-scale rate (EWMA over
  ``level_tau_s``) reaches ``level_shift`` times it: a step then costs a reserve for a
  minute or two and the sustained terms carry it (and follow it back down), while bursty
  traffic keeps capacity for its largest recent burst between bursts. It is sized on the
  peak rate itself, not its jump above the trend: a burst lands on a fleet that, between
  bursts, sees almost no load.
- Boot-aware backlog (``boot_s``, default 0): replicas that start after the current fleet has
  drained a burst only cost money, so the backlog term counts only the work left after
  ``boot_s`` of draining by the reporting replicas: ``ceil(max(0, W − n·boot_s) / B)``.
- No compounding: ``current`` counts starting replicas, and after an up-move the backlog
  term is ignored while the new replicas boot and for ``settle_s`` after they all report —
  the backlog keeps growing mechanically until they serve, and queued requests do not
  migrate to new replicas anyway. It is also ignored while the queue already drains.
- Down, exact: the target is the smallest ``m`` (not below ``need`` or any hold) for which,
  spread over ``m``, the backlog stays under ``down_queue_fraction * B``, prefill utilisation
  and sustained arrivals under ``down_utilization`` and KV usage under ``down_kv_usage``,
  and no busy replica's observed TTFT P95 (a sliding window) exceeds the SLO. The condition
  must hold for ``downscale_stable_s``; then go there in one move (``max_downscale_step``
  caps it, 0 = no cap), at most once per ``downscale_cooldown_s`` after any move. No
  up-move within ``upscale_cooldown_s`` after a down-move.
- Peak hold (``peak_hold_s``, off by default): never go below the largest ``need`` of the
  last ``peak_hold_s`` seconds (a blunter alternative to the surge reserve).
- Hysteresis: up at backlog > B per replica or utilisation > ``up_utilization``; down only
  below 0.5 B and ``down_utilization`` after removal.
- Zero: with ``min_replicas == 0`` the last replica goes only when nothing is waiting,
  running or held; ``pending_requests > 0`` brings one back at once (plus their work, if
  ``pending_request_tokens`` estimates a held request's prompt).

Knobs in ``ScalingConfig.params`` (defaults in ``TTFTQueueParams``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from autoscaler.common import clamp, floor_for_pending
from autoscaler.prefill_load import prefill_loads
from autoscaler.ttft_signals import (
    K,
    Load,
    held_burst,
    held_peak,
    held_surge,
    measure,
    track_bursts,
    track_growth,
    track_peak,
    track_settling,
    track_surge,
)
from autoscaler.types import MetricsSnapshot, ScalingConfig, State


@dataclass(frozen=True, slots=True)
class TTFTQueueParams:
    prior_prefill_tokens_per_s: float = 1000.0  # until a replica reports a measured rate
    down_queue_fraction: float = 0.5
    down_utilization: float = 0.5
    down_kv_usage: float = 0.75
    max_downscale_step: int = 0  # replicas removed per down-move at most (0 = no cap)
    pending_request_tokens: float = 0.0  # assumed uncached prompt of a request held at ingress
    up_utilization: float = 0.9  # arrival-rate term: keep prefill utilisation under this
    growth_tau_s: float = 3.0  # smoothing of the sustained arrival rate and queue growth
    startup_grace_s: float = 120.0  # how long a scale-up counts as booting
    settle_s: float = 10.0  # after boot, let the smoothed signals catch up
    load_window_s: float = 5.0  # window for prefill load from cumulative counters
    blocked_factor: float = 1.0  # a replica queued beyond this many budgets takes no new work
    peak_hold_s: float = 0.0  # never scale below the largest need seen this long ago (0 = off)
    boot_s: float = 0.0  # expected replica startup time (see "Boot-aware backlog")
    surge_hold_s: float = 0.0  # keep capacity for the largest recent arrival jump (0 = off)
    surge_tau_s: float = 2.0  # smoothing of the fast arrival rate the surge is measured on
    surge_utilization: float = 0.5  # prefill utilisation the surge reserve is sized at
    burst_hold_s: float = 0.0  # keep capacity for the largest recent transient burst (0 = off)
    burst_utilization: float = 0.4  # prefill utilisation the burst reserve is sized at
    level_shift: float = 0.6  # a peak the minute-scale rate reaches this fraction of is a step
    level_tau_s: float = 60.0  # smoothing of the minute-scale (level) arrival rate

    @classmethod
    def from_config(cls, config: ScalingConfig) -> TTFTQueueParams:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in config.params.items() if k in known})


class TTFTQueuePolicy:
    name = "ttft-queue"

    def decide(
        self, snapshot: MetricsSnapshot, config: ScalingConfig, state: State
    ) -> tuple[int, State]:
        p = TTFTQueueParams.from_config(config)
        budget = config.headroom * config.ttft_slo_s
        fallback = float(state.get(K + "rate", p.prior_prefill_tokens_per_s))
        loads, new = prefill_loads(snapshot, state, K + "counters", p.load_window_s)
        load = measure(snapshot, p, fallback, budget, loads)
        new = track_settling(snapshot, p, load, track_growth(snapshot, p, load, new))
        new = track_bursts(snapshot.now, p, track_surge(snapshot.now, p, new))
        current = snapshot.current_replicas
        d = _Inputs(snapshot, config, p, load, budget)
        need, why = _need(d, new)
        new = track_peak(snapshot.now, need, p.peak_hold_s, new)
        if current < config.min_replicas or current > config.max_replicas:
            return _move(max(need, clamp(current, config)), snapshot, new, "bounds")
        if need > current:
            new[K + "down_since"] = None
            last_down = new.get(K + "last_down_at")
            if current > 0 and last_down is not None:
                if snapshot.now - last_down < config.upscale_cooldown_s:
                    return current, {**new, K + "reason": f"hold: up-cooldown (need {need})"}
            return _move(need, snapshot, new, why)
        target = _down_target(d, new, held=max(need, held_peak(new)))
        return _maybe_down(target, snapshot, config, new)


@dataclass(frozen=True, slots=True)
class _Inputs:
    """One decision's fixed inputs (the state is passed alongside: it changes in between)."""

    snapshot: MetricsSnapshot
    config: ScalingConfig
    p: TTFTQueueParams
    load: Load
    budget: float  # headroom x SLO, seconds


def _need(d: _Inputs, state: State) -> tuple[int, str]:
    """Replicas needed: max of the backlog, arrival-rate, surge- and burst-reserve terms."""
    snapshot, config, p, load, budget = d.snapshot, d.config, d.p, d.load, d.budget
    arrival = float(state[K + "arrival"])
    need_rate = math.ceil(arrival / p.up_utilization - 1e-9) + load.blocked
    late = max(0.0, load.work_s - load.reporting * p.boot_s)  # still queued when new ones serve
    need_queue = math.ceil(late / budget - 1e-9)
    if state.get(K + "settling") or float(state[K + "growth"]) < 0.0:
        need_queue = 0  # after an up-move, or while the queue already drains: trust the rate
    surge = held_surge(state)
    need_reserve = 0
    if p.surge_hold_s > 0:
        reserve = arrival / p.up_utilization + surge / p.surge_utilization
        need_reserve = math.ceil(reserve - 1e-9)
    burst = held_burst(state, p.level_shift) if p.burst_hold_s > 0 else 0.0
    need_burst = math.ceil(burst / p.burst_utilization - 1e-9) if burst > 0 else 0
    need = max(need_queue, need_rate, need_reserve, need_burst)
    need = floor_for_pending(clamp(need, config), snapshot)
    why = (
        f"up: {load.work_s:.2f}s prefill queued (budget {budget:.2f}s), arrivals "
        f"{arrival:.2f} replicas, surge reserve {surge:.2f} -> {need_reserve}, "
        f"burst {burst:.2f} -> {need_burst}"
    )
    return need, why


def _fits(
    m: int, load: Load, arrival: float, p: TTFTQueueParams, budget: float, pending: float
) -> bool:
    if m == 0:  # scale to zero only when nothing at all is in flight or held
        return load.work_s == 0 and load.ongoing == 0 and pending == 0 and load.reporting > 0
    return (
        load.work_s / m <= p.down_queue_fraction * budget
        and max(load.prefill_util, arrival) / m <= p.down_utilization
        and load.kv / m <= p.down_kv_usage
    )


def _down_target(d: _Inputs, state: State, held: int = 0) -> int:
    """The smallest fleet (not below ``held``) that still meets the SLO with headroom."""
    snapshot, config, p, load, budget = d.snapshot, d.config, d.p, d.load, d.budget
    current = snapshot.current_replicas
    if load.worst_p95_s > config.ttft_slo_s:
        return current
    step = p.max_downscale_step if p.max_downscale_step > 0 else current
    floor = max(config.min_replicas, current - step, held)
    arrival = float(state.get(K + "arrival", 0.0))
    target = current
    for m in range(current - 1, floor - 1, -1):
        if not _fits(m, load, arrival, p, budget, snapshot.pending_requests):
            break
        target = m
    return target


def _maybe_down(
    target: int, snapshot: MetricsSnapshot, config: ScalingConfig, state: State
) -> tuple[int, State]:
    current, now = snapshot.current_replicas, snapshot.now
    if target >= current:
        return current, {**state, K + "down_since": None, K + "reason": "steady"}
    since = state.get(K + "down_since")
    if since is None:
        since = now
    state = {**state, K + "down_since": since}
    last = state.get(K + "last_scale_at")
    if now - since < config.downscale_stable_s:
        return current, {**state, K + "reason": f"hold: down to {target} not yet stable"}
    if last is not None and now - last < config.downscale_cooldown_s:
        return current, {**state, K + "reason": "hold: down-cooldown"}
    return _move(target, snapshot, state, "down: fewer replicas still meet the SLO with headroom")


def _move(desired: int, snapshot: MetricsSnapshot, state: State, reason: str) -> tuple[int, State]:
    new = {**state, K + "reason": reason}
    if desired != snapshot.current_replicas:
        new[K + "last_scale_at"] = snapshot.now
    if desired > snapshot.current_replicas:
        new |= {K + "last_up_at": snapshot.now, K + "ready_at": None, K + "settling": True}
    elif desired < snapshot.current_replicas:
        new[K + "last_down_at"] = snapshot.now
    return desired, new
