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
  and P99 — a lower bound on each request's prefill time, so an upper bound on its wait;
- ``over``: the share of first tokens over each TTFT tail edge (0.25 ... 8 s) in the window,
  from the engines' own counters (``ReplicaStats.first_tokens``, ``ttft_over_*``) as the
  policy reads them: what a rule steered by the tail would see at that fleet size.

Then, for each two consecutive sizes given, per edge: the first tokens (and seconds, at the
window's rate of first tokens) a rule counting that edge needs to tell the two fleets
apart at two standard errors (``tell_apart``): whether counting a lower edge, with many
more events than the SLO's 1 %, would learn a fleet's shortfall sooner.
"""

from __future__ import annotations

import argparse
import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from autoscaler.ttft_queue import TTFTQueuePolicy, TTFTQueueState
from autoscaler.ttft_signals import measure
from autoscaler.ttft_tail import TailCounts
from autoscaler.types import MetricsSnapshot, ScalingConfig
from bench.types import RequestRecord
from contracts.stats import TTFT_TAIL_EDGES_S, ttft_tail
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
        self.tail: list[tuple[float, TailCounts]] = []  # (t, the fleet's cumulative counts)

    def decide(
        self, snapshot: MetricsSnapshot, config: ScalingConfig, state: TTFTQueueState
    ) -> tuple[int, TTFTQueueState]:
        _, new = super().decide(snapshot, config, state)
        load = measure(snapshot, new.rate or 1.0, 1.0, {}, 0.0)
        n = max(1, len(snapshot.replicas))
        self.log.append((snapshot.now, new.arrival or 0.0, load.work_s / n))
        total = TailCounts()
        for m in snapshot.replicas:  # a fixed fleet: no replica restarts, counts only grow
            total = total.plus(TailCounts(m.first_tokens, ttft_tail(m)))
        self.tail.append((snapshot.now, total))
        return snapshot.current_replicas, new


def tell_apart(p: float, q: float, z: float = 2.0) -> float:
    """First tokens needed to tell a share ``p`` from ``q`` at ``z`` binomial standard
    errors (of the shares' mean); inf if they are equal."""
    if p == q:
        return math.inf
    mean = (p + q) / 2.0
    return z * z * mean * (1.0 - mean) / (p - q) ** 2


def tail_shares(log: Sequence[tuple[float, TailCounts]], start: float, end: float) -> list[float]:
    """The share of first tokens over each tail edge between the first and the last record
    in ``[start, end)`` (empty if fewer than two, or no first token between them)."""
    inside = [c for t, c in log if start <= t < end]
    grown = inside[-1].minus(inside[0]) if len(inside) >= 2 else TailCounts()
    n = grown.first_tokens
    return [o / n for o in grown.over] if n > 0 else []


def one(trace: str, router: str, size: int) -> dict[str, Any]:
    from experiments.autoscaling import hindsight

    _, step = hindsight.drawn(trace)
    observer = Observer()
    run, row = hindsight.simulate(observer, size, size, 0, trace, max_replicas=size, router=router)
    start, end = (
        (step.step_up_s + HIGH_PHASE_SETTLE_S, step.step_down_s) if step else (0.0, run.end_s)
    )
    inside = [x for x in observer.log if start <= x[0] < end]
    counted = [c.first_tokens for t, c in observer.tail if start <= t < end]
    arrival = statistics.fmean(x[1] for x in inside)
    backlog = statistics.fmean(x[2] for x in inside)
    util = arrival / size
    w = waits(run.records, start, end)
    return {
        "trace": trace, "router": router, "replicas": size, "attainment": row["attainment"],
        "window": (start, end), "arrival": arrival, "util": util, "backlog_s": backlog,
        "k_s": backlog * (1 - util) / util if 0 < util < 1 else None,
        "waits": None if w is None else asdict(w),
        "first_tokens_per_s": (counted[-1] - counted[0]) / (end - start) if counted else 0.0,
        "over": dict(zip(TTFT_TAIL_EDGES_S, tail_shares(observer.tail, start, end), strict=False)),
    }  # fmt: skip


def line(r: dict[str, Any]) -> str:
    w = r["waits"] or {}
    k = "n/a" if r["k_s"] is None else f"{r['k_s']:.2f}"
    return (
        f"{r['trace']} {r['router']} {r['replicas']:3d}: {100 * r['attainment']:.2f} %  "
        f"arrival {r['arrival']:.2f} util {r['util']:.2f} backlog {r['backlog_s']:.2f} s k {k} s  "
        f"TTFT P50 {w.get('ttft_p50_s', 0):.2f} P99 {w.get('ttft_p99_s', 0):.2f} s  "
        f"wait mean {w.get('wait_mean_s', 0):.3f} P99 {w.get('wait_p99_s', 0):.2f} s  over "
        + " ".join(f"{e:g}s {100 * v:.2f}%" for e, v in r["over"].items())
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", default="step")
    ap.add_argument("--router", choices=POLICY_NAMES, default="least-loaded")
    ap.add_argument("--sizes", required=True, help="fleet sizes, comma-separated")
    args = ap.parse_args(argv)
    rows = []
    for size in (int(x) for x in args.sizes.split(",")):
        rows.append(one(args.trace, args.router, size))
        print(line(rows[-1]), flush=True)
    for a, b in itertools.pairwise(rows):
        rate = max(1e-9, b["first_tokens_per_s"])
        need = {e: tell_apart(a["over"].get(e, 0.0), b["over"].get(e, 0.0)) for e in b["over"]}
        cells = (f"{e:g}s {n:.0f} ({n / rate:.0f} s)" for e, n in need.items() if n < math.inf)
        print(f"  to tell {a['replicas']} from {b['replicas']} at 2 SE: " + ", ".join(cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
