"""What fixed fleets meet: the signals a queueing target could size on, at each fleet size.

  python -m experiments.autoscaling.fixed_fleets --trace step --router prefix --sizes 4,5,6

For each size, one run of the trace on that many replicas (no autoscaling, no pool; as
``compare`` runs its ``static`` rows), with ours' policy alongside only to read its signals
(its decisions are ignored). Printed per size: attainment over the run, then over the window
(the step's high phase, 20 s after the step to its end; the whole run on other traces):

- ``arrival``: ours' sustained arrival rate of prefill work, replica-equivalents (mean);
- ``util``: that over the fleet; ``backlog``: queued prefill per replica, seconds (mean);
- ``k``: ``backlog x (1 - util) / util``, Pollaczek-Khinchine's mean residual if each
  replica were its own M/G/1 queue (it would not change with the fleet size);
- TTFT P50/P99 and the *wait* requests had: TTFT less the prompt's prefill at the fastest
  prefill rate any request of the run saw (prompts over ``MIN_RATE_PROMPT`` tokens), mean
  and P99 — a lower bound on each request's prefill time, so an upper bound on its wait.
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from autoscaler.ttft_queue import TTFTQueuePolicy, TTFTQueueState
from autoscaler.ttft_signals import measure
from autoscaler.types import MetricsSnapshot, ScalingConfig
from bench.types import RequestRecord
from router.registry import POLICY_NAMES

MIN_RATE_PROMPT = 500  # tokens: shorter prompts' TTFT is mostly fixed overhead, not rate
HIGH_PHASE_SETTLE_S = 20.0  # the window starts this long after the step


@dataclass(frozen=True, slots=True)
class Waits:
    ttft_p50_s: float
    ttft_p99_s: float
    wait_mean_s: float
    wait_p99_s: float
    rate_tokens_per_s: float


def quantile(values: Sequence[float], q: float) -> float:
    """Nearest rank (the same rule as ``replicas.load_stats``)."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))]


def waits(records: Sequence[RequestRecord], start: float, end: float) -> Waits | None:
    """TTFTs and waits of the served requests sent in ``[start, end)``; None if none."""
    served = [r for r in records if r.ttft_s is not None and r.error is None]
    rates = [
        r.prompt_tokens / r.ttft_s for r in served if r.ttft_s and r.prompt_tokens > MIN_RATE_PROMPT
    ]
    inside = [r for r in served if start <= r.send_s < end]
    if not inside or not rates:
        return None
    rate = max(rates)
    ttft = [r.ttft_s or 0.0 for r in inside]
    wait = [max(0.0, (r.ttft_s or 0.0) - r.prompt_tokens / rate) for r in inside]
    return Waits(
        ttft_p50_s=quantile(ttft, 0.5),
        ttft_p99_s=quantile(ttft, 0.99),
        wait_mean_s=statistics.fmean(wait),
        wait_p99_s=quantile(wait, 0.99),
        rate_tokens_per_s=rate,
    )


class Observer(TTFTQueuePolicy):
    """Ours' signals beside a fixed fleet: records them, returns the fleet unchanged."""

    def __init__(self) -> None:
        self.log: list[tuple[float, float, float]] = []  # (t, arrival, backlog per replica)

    def decide(
        self, snapshot: MetricsSnapshot, config: ScalingConfig, state: TTFTQueueState
    ) -> tuple[int, TTFTQueueState]:
        _, new = super().decide(snapshot, config, state)
        load = measure(snapshot, new.rate or 1.0, 1.0, {}, 0.0)
        n = max(1, len(snapshot.replicas))
        self.log.append((snapshot.now, new.arrival or 0.0, load.work_s / n))
        return snapshot.current_replicas, new


def one(trace: str, router: str, size: int) -> dict[str, Any]:
    from experiments.autoscaling import hindsight

    _, step = hindsight.drawn(trace)
    observer = Observer()
    run, row = hindsight.simulate(observer, size, size, 0, trace, max_replicas=size, router=router)
    start, end = (
        (step.step_up_s + HIGH_PHASE_SETTLE_S, step.step_down_s) if step else (0.0, run.end_s)
    )
    inside = [x for x in observer.log if start <= x[0] < end]
    arrival = statistics.fmean(x[1] for x in inside)
    backlog = statistics.fmean(x[2] for x in inside)
    util = arrival / size
    w = waits(run.records, start, end)
    return {
        "trace": trace, "router": router, "replicas": size, "attainment": row["attainment"],
        "window": (start, end), "arrival": arrival, "util": util, "backlog_s": backlog,
        "k_s": backlog * (1 - util) / util if 0 < util < 1 else None,
        "waits": None if w is None else asdict(w),
    }  # fmt: skip


def line(r: dict[str, Any]) -> str:
    w = r["waits"] or {}
    k = "n/a" if r["k_s"] is None else f"{r['k_s']:.2f}"
    return (
        f"{r['trace']} {r['router']} {r['replicas']:3d}: {100 * r['attainment']:.2f} %  "
        f"arrival {r['arrival']:.2f} util {r['util']:.2f} backlog {r['backlog_s']:.2f} s k {k} s  "
        f"TTFT P50 {w.get('ttft_p50_s', 0):.2f} P99 {w.get('ttft_p99_s', 0):.2f} s  "
        f"wait mean {w.get('wait_mean_s', 0):.3f} P99 {w.get('wait_p99_s', 0):.2f} s"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", default="step")
    ap.add_argument("--router", choices=POLICY_NAMES, default="least-loaded")
    ap.add_argument("--sizes", required=True, help="fleet sizes, comma-separated")
    args = ap.parse_args(argv)
    for size in (int(x) for x in args.sizes.split(",")):
        print(line(one(args.trace, args.router, size)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
