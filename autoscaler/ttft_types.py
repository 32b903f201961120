"""The TTFT-queue policy's knobs and state, as values (the algorithm: ``ttft_queue.py``).

``TTFTQueueParams`` is the only route by which a knob reaches the policy: it is parsed from
``ScalingConfig.params`` (``common.parse_params``; an unknown key is an error naming these
fields). ``TTFTQueueState`` is what one decision hands to the next; ``decide`` never
mutates it. Sliding-window maxima are monotonic queues of tuples (see ``ttft_signals``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from autoscaler.prefill_load import CounterBaseline
from contracts.stats import PRIOR_PREFILL_TOKENS_PER_S


@dataclass(frozen=True, slots=True)
class TTFTQueueParams:
    # budget and hysteresis
    headroom: float = 0.7  # budget B = headroom x ttft_slo_s of queued prefill per replica
    up_utilization: float = 0.9  # arrival-rate term: keep prefill utilisation under this
    down_queue_fraction: float = 0.5  # down only if the backlog per replica stays < this x B
    down_utilization: float = 0.5  # ... prefill utilisation and arrivals per replica < this
    down_kv_usage: float = 0.75  # ... and KV usage per replica < this
    blocked_factor: float = 1.0  # a replica queued beyond this many budgets takes no new work
    # timing
    upscale_cooldown_s: float = 5.0  # no up-move this soon after a down-move
    downscale_cooldown_s: float = 30.0  # no down-move this soon after any move
    downscale_stable_s: float = 20.0  # down conditions must hold this long
    max_downscale_step: int = 0  # replicas removed per down-move at most (0 = no cap)
    startup_grace_s: float = 120.0  # how long a scale-up counts as booting
    settle_s: float = 10.0  # after boot, let the smoothed signals catch up
    boot_s: float = 0.0  # expected replica startup: backlog it drains meanwhile is not counted
    # signals
    prior_prefill_tokens_per_s: float = PRIOR_PREFILL_TOKENS_PER_S  # until one is measured
    load_window_s: float = 5.0  # window for prefill load from cumulative counters
    growth_tau_s: float = 3.0  # smoothing of the sustained arrival rate and queue growth
    # burst reserve (off unless burst_hold_s > 0)
    burst_hold_s: float = 0.0  # keep capacity for the largest recent transient burst
    burst_utilization: float = 0.4  # prefill utilisation the burst reserve is sized at
    fast_tau_s: float = 2.0  # smoothing of the fast arrival rate bursts are measured on
    level_tau_s: float = 60.0  # smoothing of the minute-scale (level) arrival rate
    level_shift: float = 0.6  # a peak the level rate reaches this fraction of is a step


Burst = tuple[float, float, float]  # (t, fast rate at t, largest level rate seen since t)


@dataclass(frozen=True, slots=True)
class TTFTQueueState:
    # signals (ttft_signals)
    rate: float | None = None  # fleet prefill rate last measured, tokens/s per replica
    counters: Mapping[str, CounterBaseline] = field(default_factory=dict)  # prefill_load
    prev_t: float | None = None  # time and backlog of the previous decision
    prev_work_s: float = 0.0
    growth: float = 0.0  # EWMA of d(backlog)/dt, replica-seconds per second
    arrival: float | None = None  # sustained arrival rate (growth_tau_s), replicas
    fast: float | None = None  # fast arrival rate (fast_tau_s)
    slow: float | None = None  # level arrival rate (level_tau_s)
    bursts: tuple[Burst, ...] = ()  # window maxima of ``fast`` over burst_hold_s
    settling: bool = False  # an up-move is booting or settling: ignore the backlog term
    ready_at: float | None = None  # when every replica of the last up-move reported
    # moves (ttft_queue)
    last_up_at: float | None = None
    last_down_at: float | None = None
    last_scale_at: float | None = None
    down_since: float | None = None  # since when a smaller fleet has fit
    reason: str = ""  # why the last decision was taken (logs, tests)
    cause: str = ""  # stable key of the last move's driver (metrics), "" when it did not move
