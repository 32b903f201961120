"""TTFT-queue scaling: size the fleet so waiting prompts reach their first token within the SLO.

Signal: the prefill work waiting in the engines, in seconds — per replica its reported
``queue_delay_s`` (waiting uncached tokens / its measured prefill rate), else
``waiting_prefill_tokens / rate`` with the fleet's median rate. GPU utilisation and ongoing
requests are poor proxies: a replica is "busy" with one decode, and ten short prompts are
not ten long ones; what a new request waits for is the prefill work ahead of it.
Signals and their smoothing live in ``ttft_signals.py``; knobs and state in ``ttft_types.py``;
``explain`` reports them per replica against their targets, with the term that drove a move
(``cause``: queue_delay, arrival_rate, burst_reserve, pending_requests, slo_headroom, bounds).

Rule (budget ``B = headroom * ttft_slo_s``; all work in replica-seconds)
- Up, fast and proportional: ``need`` = the largest of the terms below and, if
  ``need > current``, jump straight to it (bounded by max), not one replica at a time.
  ``need_queue = ceil(max(0, W - n * boot_s) / B)``: replicas that could drain the backlog
  ``W`` within the budget, counting only the work the ``n`` reporting replicas have not
  drained by the time new ones boot (``boot_s``, default 0: a burst the fleet drains
  before a new replica serves is no reason to pay for one). ``need_rate = ceil(arrival /
  up_utilization) + blocked``: arrival = EWMA (``growth_tau_s``) of prefill busy (prefill
  load / rate, summed; load as reported, else from the engines' token counters, see
  ``prefill_load.py``) plus the queue's growth rate, i.e. the prefill capacity the incoming
  stream uses; ``blocked`` = replicas whose own queue exceeds ``blocked_factor * B``,
  which a queue-aware router will not give new work.
- Burst reserve (``burst_hold_s``, off by default), for traffic that comes in bursts of
  seconds, minutes apart, when a replica boots slower than a burst builds:
  ``need_burst = ceil(F / burst_utilization)`` with ``F`` the largest ``fast`` arrival
  rate (EWMA over ``fast_tau_s``) of the last ``burst_hold_s`` that was *transient*. A jump
  is either a level shift (a step: the rate follows it and stays) or a burst (over in
  seconds, likely to come back); the two look the same when they start, so every jump is
  held at first, and a peak is released as soon as the minute-scale rate (EWMA over
  ``level_tau_s``) reaches ``level_shift`` times it: a step then costs a reserve for a
  minute or two and the sustained terms carry it, while bursty traffic keeps capacity for
  its largest recent burst between bursts. It is sized on the peak rate itself: a burst
  lands on a fleet that, between bursts, sees almost no load.
- No compounding: ``current`` counts starting replicas, and after an up-move the backlog
  term is ignored while the new replicas boot (at most ``startup_grace_s``) and for
  ``settle_s`` after they all report — the backlog keeps growing mechanically until they
  serve, and queued requests do not migrate to new replicas anyway. It is also ignored
  while the queue already drains.
- Down, exact: the target is the smallest ``m`` (not below ``need``) for which, spread
  over ``m``, the backlog stays under ``down_queue_fraction * B``, prefill utilisation and
  sustained arrivals under ``down_utilization`` and KV usage under ``down_kv_usage``, and
  no busy replica's observed TTFT P95 exceeds the SLO. The condition must hold for
  ``downscale_stable_s``; then go there in one move (``max_downscale_step`` caps it, 0 = no
  cap), at most once per ``downscale_cooldown_s`` after any move. No up-move within
  ``upscale_cooldown_s`` after a down-move. Up and down thresholds differ (``up_utilization``
  0.9 vs ``down_utilization`` 0.5, B vs 0.5 B): hysteresis.
- Zero: with ``min_replicas == 0`` the last replica goes only when nothing is waiting or
  running; ``pending_requests > 0`` brings one back at once.

Knobs (``TTFTQueueParams``, defaults there) that switch a mechanism off by default, and why
each stays: ``burst_hold_s`` (with ``burst_utilization``, ``fast_tau_s``, ``level_tau_s``,
``level_shift``) and ``boot_s`` are part of the tuned virtual-time setting whose results
docs/results/autoscale-sim.md quotes (and ``boot_s`` of the live one); ``max_downscale_step``
measurably helps the untuned defaults on bursty traffic (same file, Notes) and is the
usual guard against one wrong down-move. Removed as never shown to help: a surge reserve
on the arrival rate's jump, a peak hold of ``need``, and a prompt-size estimate for
requests held at the ingress (docs/results/autoscale-sim.md, "Design notes moved from
code").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from autoscaler.common import clamp, floor_for_pending, parse_params
from autoscaler.explain import STEADY
from autoscaler.prefill_load import prefill_loads
from autoscaler.ttft_signals import (
    Load,
    held_burst,
    measure,
    track_bursts,
    track_growth,
    track_settling,
)
from autoscaler.ttft_types import TTFTQueueParams, TTFTQueueState
from autoscaler.types import Explanation, MetricsSnapshot, ScalingConfig

__all__ = ["TTFTQueueParams", "TTFTQueuePolicy", "TTFTQueueState"]


class TTFTQueuePolicy:
    name = "ttft-queue"

    def initial_state(self) -> TTFTQueueState:
        return TTFTQueueState()

    def decide(
        self, snapshot: MetricsSnapshot, config: ScalingConfig, state: TTFTQueueState
    ) -> tuple[int, TTFTQueueState]:
        p = parse_params(TTFTQueueParams, config.params, self.name)
        budget = p.headroom * config.ttft_slo_s
        fallback = p.prior_prefill_tokens_per_s if state.rate is None else state.rate
        loads, counters = prefill_loads(snapshot, state.counters, p.load_window_s)
        load = measure(snapshot, p, fallback, budget, loads)
        new = replace(state, counters=counters, cause="")
        new = track_settling(snapshot, p, load, track_growth(snapshot, p, load, new))
        new = track_bursts(snapshot.now, p, new)
        current = snapshot.current_replicas
        d = _Inputs(snapshot, config, p, load, budget)
        need, why, cause = _need(d, new)
        if current < config.min_replicas or current > config.max_replicas:
            return _move(max(need, clamp(current, config)), snapshot, new, "bounds", "bounds")
        if need > current:
            new = replace(new, down_since=None)
            last_down = new.last_down_at
            in_cooldown = last_down is not None and snapshot.now - last_down < p.upscale_cooldown_s
            if current > 0 and in_cooldown:
                return current, replace(new, reason=f"hold: up-cooldown (need {need})")
            return _move(need, snapshot, new, why, cause)
        return _maybe_down(_down_target(d, new, held=need), d, new)

    def explain(
        self, snapshot: MetricsSnapshot, config: ScalingConfig, state: TTFTQueueState, desired: int
    ) -> Explanation:
        """Per replica: queued prefill work against the budget, sustained (and, with
        ``burst_hold_s``, held burst) prefill arrivals against their utilisation targets; the
        SLO and KV limits a down-move respects. ``state`` is the one ``decide`` returned."""
        p = parse_params(TTFTQueueParams, config.params, self.name)
        budget = p.headroom * config.ttft_slo_s
        fallback = p.prior_prefill_tokens_per_s if state.rate is None else state.rate
        loads, _ = prefill_loads(snapshot, state.counters, p.load_window_s)
        load = measure(snapshot, p, fallback, budget, loads)
        n = max(1, snapshot.current_replicas)
        signals = {
            "prefill_backlog_s": load.work_s / n,
            "prefill_arrival_ratio": (state.arrival or 0.0) / n,
        }
        targets = {
            "prefill_backlog_s": budget,
            "prefill_arrival_ratio": p.up_utilization,
            "ttft_p95_s": config.ttft_slo_s,
            "kv_usage_ratio": p.down_kv_usage,
        }
        if p.burst_hold_s > 0:
            signals["burst_arrival_ratio"] = held_burst(state, p.level_shift) / n
            targets["burst_arrival_ratio"] = p.burst_utilization
        reason = STEADY if desired == snapshot.current_replicas else (state.cause or "policy")
        return Explanation(signals, targets, reason)


@dataclass(frozen=True, slots=True)
class _Inputs:
    """One decision's fixed inputs (the state is passed alongside: it changes in between)."""

    snapshot: MetricsSnapshot
    config: ScalingConfig
    p: TTFTQueueParams
    load: Load
    budget: float  # headroom x SLO, seconds


def _need(d: _Inputs, state: TTFTQueueState) -> tuple[int, str, str]:
    """Replicas needed: max of the backlog, arrival-rate and burst-reserve terms; with why
    (text) and the driving term's key."""
    p, load, budget = d.p, d.load, d.budget
    arrival = state.arrival or 0.0
    need_rate = math.ceil(arrival / p.up_utilization - 1e-9) + load.blocked
    late = max(0.0, load.work_s - load.reporting * p.boot_s)  # still queued when new ones serve
    need_queue = math.ceil(late / budget - 1e-9)
    if state.settling or state.growth < 0.0:
        need_queue = 0  # after an up-move, or while the queue already drains: trust the rate
    burst = held_burst(state, p.level_shift) if p.burst_hold_s > 0 else 0.0
    need_burst = math.ceil(burst / p.burst_utilization - 1e-9) if burst > 0 else 0
    terms = (
        ("queue_delay", need_queue),
        ("arrival_rate", need_rate),
        ("burst_reserve", need_burst),
    )
    cause, top = max(terms, key=lambda t: t[1])
    need = floor_for_pending(clamp(top, d.config), d.snapshot)
    if need > max(top, d.config.min_replicas):
        cause = "pending_requests"
    why = (
        f"up: {load.work_s:.2f}s prefill queued (budget {budget:.2f}s), arrivals "
        f"{arrival:.2f} replicas, burst {burst:.2f} -> {need_burst}"
    )
    return need, why, cause


def _fits(m: int, d: _Inputs, arrival: float) -> bool:
    load, p = d.load, d.p
    if m == 0:  # scale to zero only when nothing at all is in flight or held
        pending = d.snapshot.pending_requests
        return load.work_s == 0 and load.ongoing == 0 and pending == 0 and load.reporting > 0
    return (
        load.work_s / m <= p.down_queue_fraction * d.budget
        and max(load.prefill_util, arrival) / m <= p.down_utilization
        and load.kv / m <= p.down_kv_usage
    )


def _down_target(d: _Inputs, state: TTFTQueueState, held: int = 0) -> int:
    """The smallest fleet (not below ``held``) that still meets the SLO with headroom."""
    current = d.snapshot.current_replicas
    if d.load.worst_p95_s > d.config.ttft_slo_s:
        return current
    step = d.p.max_downscale_step if d.p.max_downscale_step > 0 else current
    floor = max(d.config.min_replicas, current - step, held)
    arrival = state.arrival or 0.0
    target = current
    for m in range(current - 1, floor - 1, -1):
        if not _fits(m, d, arrival):
            break
        target = m
    return target


def _maybe_down(target: int, d: _Inputs, state: TTFTQueueState) -> tuple[int, TTFTQueueState]:
    current, now = d.snapshot.current_replicas, d.snapshot.now
    if target >= current:
        return current, replace(state, down_since=None, reason="steady")
    since = now if state.down_since is None else state.down_since
    state = replace(state, down_since=since)
    last = state.last_scale_at
    if now - since < d.p.downscale_stable_s:
        return current, replace(state, reason=f"hold: down to {target} not yet stable")
    if last is not None and now - last < d.p.downscale_cooldown_s:
        return current, replace(state, reason="hold: down-cooldown")
    why = "down: fewer replicas still meet the SLO with headroom"
    return _move(target, d.snapshot, state, why, "slo_headroom")


def _move(
    desired: int, snapshot: MetricsSnapshot, state: TTFTQueueState, reason: str, cause: str
) -> tuple[int, TTFTQueueState]:
    now, current = snapshot.now, snapshot.current_replicas
    state = replace(state, reason=reason)
    if desired != current:
        state = replace(state, last_scale_at=now, cause=cause)
    if desired > current:
        state = replace(state, last_up_at=now, ready_at=None, settling=True)
    elif desired < current:
        state = replace(state, last_down_at=now)
    return desired, state
