"""The TTFT-queue policy's knobs and state, as values (the algorithm: ``ttft_queue.py``).

``TTFTQueueParams`` is the only route by which a knob reaches the policy: it is parsed from
``ScalingConfig.params`` (``common.parse_params``; an unknown key is an error naming these
fields). ``TTFTQueueState`` is what one decision hands to the next; ``decide`` never
mutates it. ``Derived`` holds one decision's values computed from measurements.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from autoscaler.prefill_load import CounterBaseline
from autoscaler.ttft_tail import TailWindow


@dataclass(frozen=True, slots=True)
class TTFTQueueParams:
    """The knobs left: what the service promises, and how often the fleet may change.
    Everything else is measured (boot time, prefill rate, burstiness; ``ttft_measure``) or
    a fixed part of the rule (the constants below)."""

    target_attainment: float = 0.99  # sizes the burst reserve: 1 - this is the risk taken
    upscale_cooldown_s: float = 5.0  # no up-move this soon after a down-move
    downscale_cooldown_s: float = 30.0  # no down-move this soon after any move
    downscale_stable_s: float = 20.0  # down conditions must hold this long


# Fixed parts of the rule (not knobs: each is a property of the rule, not of a workload)
HEADROOM = 0.7  # queueing budget B = HEADROOM x SLO until a request's prefill is measured
OWN_PREFILLS = 2.0  # then B = SLO - this x the mean prefill (a prompt twice the mean fits)
MIN_BUDGET = 0.25  # ... but at least this x SLO
MAX_UTILIZATION = 0.9  # arrival-rate term: prefill utilisation going up at most this
DOWN_RATIO = 0.55  # going down: under this x the up target (hysteresis)
PROMPT_N = 200.0  # the mean prefill per request: the plain mean of the first this many
# requests, then an average over about this many (an EWMA started from one decision's few
# requests kept most of their weight for minutes: heavy-tailed prompts made it 2x the mean)
DOWN_QUEUE_FRACTION = 0.5  # down only if the backlog per replica stays under this x B
DOWN_KV_USAGE = 0.75  # ... and KV usage per replica under this
BLOCKED_FACTOR = 1.0  # a replica queued beyond this many budgets (+ 1 prefill) is blocked
SETTLE_S = 10.0  # after a boot, let the look-back averages catch up
LOAD_WINDOW_S = 5.0  # window for prefill load from cumulative counters
MIN_GRACE_S = 60.0  # a scale-up counts as booting for max(this, 3 x measured boot)
MIN_TAU_S, MAX_TAU_S = 3.0, 15.0  # sustained arrival rate: EWMA over boot / 2, clamped


@dataclass(frozen=True, slots=True)
class Derived:
    """One decision's values derived from what was measured (boot time) and the knobs."""

    boot_s: float  # measured boot, else ``ttft_measure.PRIOR_BOOT_S`` (reserve windows)
    wake_s: float  # measured wake of a sleeping replica (warm pool), else ``boot_s``
    drain_credit_s: float  # measured delay of the next up-move (wake or boot), else 0
    growth_tau_s: float  # smoothing of the sustained arrival rate
    startup_grace_s: float  # how long a scale-up counts as booting
    risk: float  # 1 - target attainment
    budget: float  # queueing share of the SLO, seconds
    up_utilization: float  # prefill utilisation the arrival-rate term keeps under
    down_utilization: float  # ... and a smaller fleet must stay under


@dataclass(frozen=True, slots=True)
class TTFTQueueState:
    # signals (ttft_signals)
    rate: float | None = None  # fleet prefill rate last measured, tokens/s per replica
    counters: Mapping[str, CounterBaseline] = field(default_factory=dict)  # prefill_load
    prev_t: float | None = None  # time and backlog of the previous decision
    prev_work_s: float = 0.0
    growth: float = 0.0  # EWMA of d(backlog)/dt, replica-seconds per second
    arrival: float | None = None  # sustained prefill arrival rate, replicas
    # measured (ttft_measure)
    arrived: Mapping[str, tuple[float, float, float]] = field(default_factory=dict)  # ttft_signals
    prompt_s: float | None = None  # mean uncached prefill time of one request, seconds
    prompt_n: float = 0.0  # requests counted into ``prompt_s`` so far, up to ``PROMPT_N``
    boot_samples: tuple[float, ...] = ()  # latest replica boot times, seconds
    boot_pending: tuple[float, int] | None = None  # (time of an up-move, its target)
    wake_samples: tuple[float, ...] = ()  # latest wake times of sleeping replicas, seconds
    wake_pending: tuple[float, int] | None = None  # an up-move the warm pool covered
    bin_start: float | None = None  # the open arrival bin
    bin_work: float = 0.0
    bins: tuple[float, ...] = ()  # prefill work arrived per closed bin, replica-seconds
    reqs: tuple[float, ...] = ()  # each closed bin's requirement, replicas
    reserve: int = 0  # replicas the recent burstiness calls for at the target attainment
    wake_reqs: tuple[float, ...] = ()  # requirements over one wake (warm pool), else ()
    wake_reserve: int = 0  # awake replicas the bursts within one wake call for
    settling: bool = False  # an up-move is booting or settling: ignore the backlog term
    tail: TailWindow = field(default_factory=TailWindow)  # first tokens over the SLO (explain)
    ready_at: float | None = None  # when every replica of the last up-move reported
    # moves (ttft_queue)
    last_up_at: float | None = None
    last_down_at: float | None = None
    last_scale_at: float | None = None
    down_since: float | None = None  # since when a smaller fleet has fit
    reason: str = ""  # why the last decision was taken (logs, tests)
    cause: str = ""  # stable key of the last move's driver (metrics), "" when it did not move
