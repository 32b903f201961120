"""TTFT-queue scaling: size the fleet so waiting prompts reach their first token within the SLO.

Signal: the prefill work waiting in the engines, in seconds — per replica its reported
``queue_delay_s`` (waiting uncached tokens / its measured prefill rate), else
``waiting_prefill_tokens / rate`` with the fleet's median rate. GPU utilisation and ongoing
requests are poor proxies: a replica is "busy" with one decode, and ten short prompts are
not ten long ones; what a new request waits for is the prefill work ahead of it.
Signals and their smoothing live in ``ttft_signals.py``; knobs and state in ``ttft_types.py``;
``explain`` reports them per replica against their targets, with the term that drove a move
(``cause``: queue_delay, arrival_rate, burst_reserve, pending_requests, slo_headroom, bounds).

Self-tuning: the knobs are the SLO (``ScalingConfig.ttft_slo_s``), the target attainment
(the risk), min/max replicas and cool-downs (``TTFTQueueParams``). What the rule needs
beyond them is measured (``ttft_measure``, ``derive``): the replicas' boot time (from this
policy's own up-moves to the replicas reporting), the prefill rate (the engines' own), the
mean prefill time of one request (from the engines' arrival counters) and the arrival
process's burstiness over the last hour. The constants in ``ttft_types`` are parts of the
rule, not settings (hysteresis ratios, smoothing), and the same on every workload.

Rule (budget ``B = SLO - 2 x mean prefill``, at least 0.25 x SLO; all work in replica-seconds)
- Up, fast and proportional: ``need`` = the largest of the terms below and, if
  ``need > current``, jump straight to it (bounded by max), not one replica at a time.
  ``need_queue = ceil(max(0, W - n * boot) / B)``: replicas that could drain the backlog
  ``W`` within the budget, counting only the work the ``n`` reporting replicas have not
  drained by the time new ones boot (measured boot; 0 before one is measured).
  ``need_rate = ceil(arrival / rho_up) + blocked``: arrival = EWMA (over half a boot,
  3-15 s) of the prefill work reaching the engines per second; ``rho_up = B / (B + s)``
  (``s`` the mean prefill: the M/G/1 wait at that utilisation is about ``B``), at most
  0.9; ``blocked`` = replicas whose own queue exceeds ``B``, which a queue-aware router
  will not give new work.
- Burst reserve: a replica started now serves only one boot later, so the fleet that is
  running must absorb what arrives meanwhile. ``need_burst`` = the smallest fleet that
  would have absorbed, without a boot, all but ``1 - target_attainment`` of the last
  hour's work (``ttft_measure.reserve``): it is sized by measurement, and falls once
  bursts leave the hour. With a warm pool (``MetricsSnapshot.warm_replicas`` replicas
  asleep, woken in seconds; vLLM's sleep mode) an up-move wakes sleepers first, and the
  awake fleet needs only the reserve over one measured *wake*, and the reserve over one
  boot less the sleepers: ``max(reserve_wake, reserve_boot - warm)``.
- No compounding: ``current`` counts starting replicas, and after an up-move the backlog
  term is ignored while the new replicas boot (at most 3 boots, 60 s at least) and for
  ``SETTLE_S`` after they all report. It is also ignored while the queue already drains.
- Down, exact: the target is the smallest ``m`` (not below ``need``, so not below the
  reserve) for which, spread over ``m``, the backlog stays under ``0.5 B``, prefill
  utilisation and sustained arrivals under ``rho_down = 0.55 rho_up``, KV usage under
  0.75, and no busy replica's observed TTFT P95 exceeds the SLO. The condition must hold
  for ``downscale_stable_s``; then go there in one move, at most once per
  ``downscale_cooldown_s`` after any move. No up-move within ``upscale_cooldown_s`` after a
  down-move.
- Zero: with ``min_replicas == 0`` the last replica goes only when nothing is waiting or
  running; ``pending_requests > 0`` brings one back at once.

What it cannot do: a burst larger than anything in the last hour lands on the fleet the
hour justified; a reactive policy cannot serve it from replicas that boot after it
(``experiments/autoscaling/reach.py`` measures that bound on a trace).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from autoscaler.common import clamp, floor_for_pending, parse_params
from autoscaler.explain import STEADY
from autoscaler.prefill_load import prefill_loads
from autoscaler.ttft_measure import PRIOR_BOOT_S, boot_estimate, track_boot
from autoscaler.ttft_signals import Load, measure, track_growth, track_settling
from autoscaler.ttft_tail import track_tail
from autoscaler.ttft_types import (
    DOWN_KV_USAGE,
    DOWN_QUEUE_FRACTION,
    DOWN_RATIO,
    HEADROOM,
    LOAD_WINDOW_S,
    MAX_TAU_S,
    MAX_UTILIZATION,
    MIN_BUDGET,
    MIN_GRACE_S,
    MIN_TAU_S,
    OWN_PREFILLS,
    Derived,
    TTFTQueueParams,
    TTFTQueueState,
)
from autoscaler.types import Explanation, MetricsSnapshot, ScalingConfig
from contracts.stats import PRIOR_PREFILL_TOKENS_PER_S

__all__ = ["TTFTQueueParams", "TTFTQueuePolicy", "TTFTQueueState", "derive"]


def derive(p: TTFTQueueParams, state: TTFTQueueState, slo_s: float, warm: int = 0) -> Derived:
    """This decision's values from the knobs and what has been measured so far.

    Queueing budget ``B = SLO - OWN_PREFILLS x s`` (``s`` the mean prefill of one request;
    ``HEADROOM x SLO`` before it is measured). Utilisation target from the M/G/1 wait
    ``W ~ s x rho / (1 - rho)`` (exponential-like service times) kept under ``B``:
    ``rho = B / (B + s)``, at most ``MAX_UTILIZATION``; going down ``DOWN_RATIO`` of it.
    With ``warm`` sleeping replicas the next up-move wakes them: its delay is the measured
    wake (the boot until a wake is measured)."""
    measured = boot_estimate(state.boot_samples)
    boot = PRIOR_BOOT_S if measured is None else measured
    measured_wake = boot_estimate(state.wake_samples)
    wake = boot if measured_wake is None else min(boot, measured_wake)
    next_up = measured_wake if warm > 0 and measured_wake is not None else measured
    s = state.prompt_s
    if s is None:
        budget, up = HEADROOM * slo_s, MAX_UTILIZATION
    else:
        budget = max(MIN_BUDGET * slo_s, slo_s - OWN_PREFILLS * s)
        up = min(MAX_UTILIZATION, budget / (budget + s)) if s > 0 else MAX_UTILIZATION
    return Derived(
        boot_s=boot,
        wake_s=wake,
        drain_credit_s=next_up or 0.0,
        growth_tau_s=min(MAX_TAU_S, max(MIN_TAU_S, (wake if warm > 0 else boot) / 2.0)),
        startup_grace_s=max(MIN_GRACE_S, 3.0 * boot),
        risk=max(0.0, 1.0 - p.target_attainment),
        budget=budget,
        up_utilization=up,
        down_utilization=DOWN_RATIO * up,
    )


class TTFTQueuePolicy:
    name = "ttft-queue"

    def initial_state(self) -> TTFTQueueState:
        return TTFTQueueState()

    def decide(
        self, snapshot: MetricsSnapshot, config: ScalingConfig, state: TTFTQueueState
    ) -> tuple[int, TTFTQueueState]:
        p = parse_params(TTFTQueueParams, config.params, self.name)
        fallback = PRIOR_PREFILL_TOKENS_PER_S if state.rate is None else state.rate
        loads, counters = prefill_loads(snapshot, state.counters, LOAD_WINDOW_S)
        pending, samples = track_boot(snapshot, state.boot_pending, state.boot_samples)
        waking, wakes = track_boot(snapshot, state.wake_pending, state.wake_samples)
        new = replace(
            state, counters=counters, cause="", boot_pending=pending, boot_samples=samples,
            wake_pending=waking, wake_samples=wakes, tail=track_tail(snapshot, state.tail),
        )  # fmt: skip
        dv = derive(p, new, config.ttft_slo_s, snapshot.warm_replicas)
        load = measure(snapshot, fallback, dv.budget, loads, new.prompt_s or 0.0)
        new = track_settling(snapshot, dv, load, track_growth(snapshot, dv, load, new))
        current = snapshot.current_replicas
        d = _Inputs(snapshot, config, p, dv, load, dv.budget)
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
        dv = derive(p, state, config.ttft_slo_s, snapshot.warm_replicas)
        budget = dv.budget
        fallback = PRIOR_PREFILL_TOKENS_PER_S if state.rate is None else state.rate
        loads, _ = prefill_loads(snapshot, state.counters, LOAD_WINDOW_S)
        load = measure(snapshot, fallback, budget, loads, state.prompt_s or 0.0)
        n = max(1, snapshot.current_replicas)
        signals = {
            "prefill_backlog_s": load.work_s / n,
            "prefill_arrival_ratio": (state.arrival or 0.0) / n,
            "burst_reserve_replicas": float(burst_need(state, snapshot.warm_replicas)),
            "boot_s": dv.boot_s,
            "wake_s": dv.wake_s,
            "warm_replicas": float(snapshot.warm_replicas),
            "ttft_over_slo_ratio": state.tail.counts(snapshot.now).share_over(config.ttft_slo_s)
            or 0.0,
        }
        targets = {
            "prefill_backlog_s": budget,
            "prefill_arrival_ratio": dv.up_utilization,
            "ttft_p95_s": config.ttft_slo_s,
            "kv_usage_ratio": DOWN_KV_USAGE,
            "burst_reserve_replicas": float(snapshot.current_replicas),
            "ttft_over_slo_ratio": dv.risk,
        }
        reason = STEADY if desired == snapshot.current_replicas else (state.cause or "policy")
        return Explanation(signals, targets, reason)


@dataclass(frozen=True, slots=True)
class _Inputs:
    """One decision's fixed inputs (the state is passed alongside: it changes in between)."""

    snapshot: MetricsSnapshot
    config: ScalingConfig
    p: TTFTQueueParams
    dv: Derived
    load: Load
    budget: float  # queueing share of the SLO, seconds


def _need(d: _Inputs, state: TTFTQueueState) -> tuple[int, str, str]:
    """Replicas needed: max of the backlog, arrival-rate and burst-reserve terms; with why
    (text) and the driving term's key."""
    load, budget = d.load, d.budget
    arrival = state.arrival or 0.0
    need_rate = math.ceil(arrival / d.dv.up_utilization - 1e-9) + load.blocked
    late = max(0.0, load.work_s - load.reporting * d.dv.drain_credit_s)  # queued when new serve
    need_queue = math.ceil(late / budget - 1e-9)
    if state.settling or state.growth < 0.0:
        need_queue = 0  # after an up-move, or while the queue already drains: trust the rate
    need_burst = burst_need(state, d.snapshot.warm_replicas)
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
        f"{arrival:.2f} replicas, burst reserve {need_burst} (boot {d.dv.boot_s:.0f}s, "
        f"{d.snapshot.warm_replicas} asleep)"
    )
    return need, why, cause


def burst_need(state: TTFTQueueState, warm: int) -> int:
    """Awake replicas the burst reserve calls for: enough for the bursts within one wake,
    and, with the ``warm`` sleepers, for those within one boot (no pool: the latter)."""
    return max(state.wake_reserve, state.reserve - warm)


def _fits(m: int, d: _Inputs, arrival: float) -> bool:
    load = d.load
    if m == 0:  # scale to zero only when nothing at all is in flight or held
        pending = d.snapshot.pending_requests
        return load.work_s == 0 and load.ongoing == 0 and pending == 0 and load.reporting > 0
    return (
        load.work_s / m <= DOWN_QUEUE_FRACTION * d.budget
        and max(load.prefill_util, arrival) / m <= d.dv.down_utilization
        and load.kv / m <= DOWN_KV_USAGE
    )


def _down_target(d: _Inputs, state: TTFTQueueState, held: int = 0) -> int:
    """The smallest fleet (not below ``held``) that still meets the SLO with headroom."""
    current = d.snapshot.current_replicas
    if d.load.worst_p95_s > d.config.ttft_slo_s:
        return current
    floor = max(d.config.min_replicas, held)
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
    if desired > current:  # time it until ``desired`` replicas report (ttft_measure)
        pending = (now, desired)
        state = replace(state, last_up_at=now, ready_at=None, settling=True)
        if desired - current <= snapshot.warm_replicas:  # all woken from the warm pool
            state = replace(state, wake_pending=pending, boot_pending=None)
        else:
            state = replace(state, boot_pending=pending, wake_pending=None)
    elif desired < current:
        state = replace(state, last_down_at=now, boot_pending=None, wake_pending=None)
    return desired, state
