"""Router comparison: per-policy rows, ratios against baselines, goal checks, markdown table.

Pure functions over ``bench.report.summarize`` results and ``RequestRecord`` lists, so the
same code scores live runs and virtual-time simulations.
- Hit rate: prompt tokens served from the prefix cache / prompt tokens, summed over
  successful requests (``tokens.cached / tokens.input``; the server's ``usage`` numbers).
- Load imbalance: max / mean over replicas of the time-averaged number of requests in
  flight. A replica's time-averaged in-flight count is (sum of its requests' E2E) / run
  time, so the ratio is max(busy_s) / mean(busy_s) with idle replicas counted as 0. An
  instantaneous max/mean is meaningless when the cluster holds fewer requests than replicas
  (64 replicas, ~15 in flight: even a perfect spread reads ≥ 4), the time average is not.
  Live runs sample each replica's reported waiting + running once a second instead
  (``imbalance_from_samples``), since streamed responses carry no replica header.
- Warm-up (live runs): every workload starts on a fresh fleet, so its first seconds are the
  cold start of every prefix (the first request of each group waits for a full prefill and
  so do the ones that arrive while it runs, whatever the router does). Rows describe the
  steady state, requests sent after ``warmup_s`` (``after_warmup``); ``ttft_p95_whole_ms``
  keeps the P95 over the whole run, cold start included, next to it.
- Reach (live runs): ``idle_arrival_bound`` — at most this share of requests can arrive at
  an idle replica, whatever the router: each one keeps its replica busy until its own last
  token (E2E − TTFT at least) and busy periods on one replica do not overlap, so their
  decodes fit in replicas × run time (shortest first). The rest wait for a running engine
  step; with the fastest TTFT (``ttft_min_ms``) it bounds what any placement can reach.
- Goals (issue 5): P95 TTFT of ``prefix`` ≤ 0.5× ``ray-prefix`` and ≤ 0.3× the power-of-two
  baseline on shared-prefix workloads; hit rate within 5 points of ``oracle``; imbalance
  ≤ 1.3.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from bench.types import RequestRecord

OURS = "prefix"
P2C_NAMES = ("ray-p2c", "p2c")  # Ray's default router live; our p2c in the simulator
RAY_PREFIX = "ray-prefix"
ORACLE = "oracle"
GOAL_VS_RAY_PREFIX = 0.5
GOAL_VS_P2C = 0.3
GOAL_HIT_POINTS = 0.05
GOAL_IMBALANCE = 1.3


@dataclass(frozen=True, slots=True)
class PolicyRow:
    policy: str
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    ttft_p99_ms: float | None
    e2e_p50_ms: float | None
    e2e_p95_ms: float | None
    e2e_p99_ms: float | None
    hit_rate: float
    req_s: float
    output_tok_s: float
    goodput_req_s: float
    slo_attainment: float | None
    imbalance: float | None
    completed: int
    failed: int
    ttft_p95_whole_ms: float | None = None  # whole run, warm-up included (live runs)
    # Live runs repeated over several seeds: (seed, steady-state P95 TTFT) per run, and this
    # row is the run with the median P95 (the lower median for an even count).
    runs: tuple[tuple[int, float | None], ...] | None = None
    ttft_min_ms: float | None = None  # fastest TTFT of the run (live runs)
    idle_arrival_max: float | None = None  # idle_arrival_bound of the run (live runs)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def with_imbalance(self, value: float | None) -> PolicyRow:
        return replace(self, imbalance=value) if value is not None else self


@dataclass(frozen=True, slots=True)
class Goal:
    name: str
    value: float | None
    target: float
    met: bool | None  # None: not measurable in this scenario (a policy is missing)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def after_warmup(records: Sequence[RequestRecord], warmup_s: float) -> list[RequestRecord]:
    """Requests scheduled at or after ``warmup_s`` into the run (the steady state)."""
    return [r for r in records if r.intended_send_s >= warmup_s]


def replica_busy_s(records: Sequence[RequestRecord]) -> dict[str, float]:
    busy: dict[str, float] = {}
    for r in records:
        if r.error is None and r.replica and r.e2e_s is not None:
            busy[r.replica] = busy.get(r.replica, 0.0) + r.e2e_s
    return busy


def imbalance(records: Sequence[RequestRecord], num_replicas: int) -> float | None:
    """max / mean of per-replica time-averaged in-flight requests (idle replicas count)."""
    busy = replica_busy_s(records)
    n = max(num_replicas, len(busy))
    total = sum(busy.values())
    if n == 0 or total <= 0:
        return None
    return max(busy.values()) / (total / n)


def idle_arrival_bound(records: Sequence[RequestRecord], num_replicas: int) -> float | None:
    """Largest share of successful requests that can have arrived at an idle replica."""
    ok = [r for r in records if r.error is None and r.ttft_s is not None and r.e2e_s is not None]
    if not ok or num_replicas < 1:
        return None
    start = min(r.send_s for r in ok)
    end = max(r.send_s + (r.e2e_s or 0.0) for r in ok)
    budget, used, fit = num_replicas * (end - start), 0.0, 0
    for d in sorted(max(0.0, (r.e2e_s or 0.0) - (r.ttft_s or 0.0)) for r in ok):
        if used + d > budget:
            break
        used, fit = used + d, fit + 1
    return fit / len(ok)


def reach_notes(rows: Sequence[PolicyRow]) -> list[str]:
    """For live runs: how fast any router could be (see ``idle_arrival_bound``)."""
    ours = _by_name(rows).get(OURS)
    if ours is None or ours.idle_arrival_max is None or ours.ttft_min_ms is None:
        return []
    share = ours.idle_arrival_max
    return [
        f"- reach ({OURS} run): fastest TTFT {ours.ttft_min_ms:,.0f} ms; at most"
        f" {share * 100:.0f} % of requests can arrive at an idle replica (busy-period bound),"
        f" so at least {(1 - share) * 100:.0f} % wait for a running engine step whatever the"
        " router"
    ]


def imbalance_from_samples(
    samples: Sequence[Mapping[str, float]], num_replicas: int
) -> float | None:
    """Same ratio from periodic per-replica in-flight samples (live runs): each replica's
    mean over the samples, max / mean over replicas (replicas never seen count as 0)."""
    totals: dict[str, float] = {}
    for sample in samples:
        for rid, inflight in sample.items():
            totals[rid] = totals.get(rid, 0.0) + inflight
    n = max(num_replicas, len(totals))
    total = sum(totals.values())
    if n == 0 or total <= 0:
        return None
    return max(totals.values()) / (total / n)


def hit_rate(result: Mapping[str, Any]) -> float:
    tokens = result.get("tokens") or {}
    prompt = tokens.get("input") or 0
    return (tokens.get("cached") or 0) / prompt if prompt else 0.0


def policy_row(
    policy: str, result: Mapping[str, Any], records: Sequence[RequestRecord], num_replicas: int
) -> PolicyRow:
    ttft, e2e = result["ttft_ms"], result["e2e_ms"]
    good, reqs = result["goodput"], result["requests"]
    return PolicyRow(
        policy=policy,
        ttft_p50_ms=ttft["p50"],
        ttft_p95_ms=ttft["p95"],
        ttft_p99_ms=ttft["p99"],
        e2e_p50_ms=e2e["p50"],
        e2e_p95_ms=e2e["p95"],
        e2e_p99_ms=e2e["p99"],
        hit_rate=hit_rate(result),
        req_s=result["throughput"]["req_s"],
        output_tok_s=result["throughput"]["output_tok_s"],
        goodput_req_s=good["req_s"],
        slo_attainment=good["attainment"],
        imbalance=imbalance(records, num_replicas),
        completed=reqs["completed"],
        failed=reqs["failed"],
    )


def median_run(rows: Sequence[PolicyRow], seeds: Sequence[int]) -> PolicyRow:
    """One policy's rows from runs with ``seeds`` (same order): the run with the median
    steady-state P95 TTFT, carrying every run's P95 in ``runs``."""
    if len(rows) != len(seeds) or not rows:
        raise ValueError("one row per seed")
    if len(rows) == 1:
        return rows[0]
    order = sorted(range(len(rows)), key=lambda i: rows[i].ttft_p95_ms or float("inf"))
    mid = rows[order[(len(rows) - 1) // 2]]
    runs = tuple((int(s), r.ttft_p95_ms) for s, r in zip(seeds, rows, strict=True))
    return replace(mid, runs=runs)


def _by_name(rows: Sequence[PolicyRow]) -> dict[str, PolicyRow]:
    return {r.policy: r for r in rows}


def p95_ratio(rows: Sequence[PolicyRow], ours: str, baseline: str) -> float | None:
    """P95 TTFT of ``ours`` / P95 TTFT of ``baseline`` (None when either is missing)."""
    named = _by_name(rows)
    a, b = named.get(ours), named.get(baseline)
    if a is None or b is None or a.ttft_p95_ms is None or not b.ttft_p95_ms:
        return None
    return a.ttft_p95_ms / b.ttft_p95_ms


def _ratio_goal(rows: Sequence[PolicyRow], baselines: Sequence[str], target: float) -> Goal | None:
    named = _by_name(rows)
    base = next((b for b in baselines if b in named), None)
    if base is None or OURS not in named:
        return None
    value = p95_ratio(rows, OURS, base)
    return Goal(
        f"p95_ttft_{OURS}_over_{base}", value, target, None if value is None else value <= target
    )


def goals(rows: Sequence[PolicyRow], shared_prefix: bool) -> list[Goal]:
    """The issue's goals that this scenario can measure, for every ``prefix*`` policy row."""
    out: list[Goal] = []
    if shared_prefix:
        for g in (
            _ratio_goal(rows, (RAY_PREFIX,), GOAL_VS_RAY_PREFIX),
            _ratio_goal(rows, P2C_NAMES, GOAL_VS_P2C),
        ):
            if g is not None:
                out.append(g)
    named = _by_name(rows)
    for row in rows:
        if not row.policy.startswith(OURS):
            continue
        if ORACLE in named:
            gap = named[ORACLE].hit_rate - row.hit_rate
            out.append(
                Goal(
                    f"hit_gap_{row.policy}_vs_oracle", gap, GOAL_HIT_POINTS, gap <= GOAL_HIT_POINTS
                )
            )
        if row.imbalance is not None:
            out.append(
                Goal(
                    f"imbalance_{row.policy}",
                    row.imbalance,
                    GOAL_IMBALANCE,
                    row.imbalance <= GOAL_IMBALANCE,
                )
            )
    return out


def _ms(v: float | None) -> str:
    return "–" if v is None else f"{v:,.0f}"


def _num(v: float | None, fmt: str) -> str:
    return "–" if v is None else format(v, fmt)


HEADER = (
    "| policy | TTFT p50 / p95 / p99 (ms) | E2E p50 / p95 / p99 (ms) | hit rate | req/s "
    "| out tok/s | goodput req/s (attain.) | imbalance | ok / failed |"
)
WHOLE_HEADER = " TTFT p95 whole run (ms) |"


def table_row(r: PolicyRow) -> str:
    return (
        f"| {r.policy} | {_ms(r.ttft_p50_ms)} / {_ms(r.ttft_p95_ms)} / {_ms(r.ttft_p99_ms)} "
        f"| {_ms(r.e2e_p50_ms)} / {_ms(r.e2e_p95_ms)} / {_ms(r.e2e_p99_ms)} "
        f"| {r.hit_rate * 100:.1f} % | {r.req_s:.2f} | {r.output_tok_s:,.0f} "
        f"| {r.goodput_req_s:.2f} ({_num(r.slo_attainment, '.0%')}) "
        f"| {_num(r.imbalance, '.2f')} | {r.completed} / {r.failed} |"
    )


def whole_run_notes(rows: Sequence[PolicyRow]) -> list[str]:
    """P95 ratios over the whole run (cold start included), shown beside the goals."""
    named = _by_name(rows)
    ours = named.get(OURS)
    if ours is None or ours.ttft_p95_whole_ms is None:
        return []
    out = []
    for base in (RAY_PREFIX, *P2C_NAMES):
        b = named.get(base)
        if b is not None and b.ttft_p95_whole_ms:
            ratio = ours.ttft_p95_whole_ms / b.ttft_p95_whole_ms
            out.append(f"- whole run (cold start included): p95 {OURS} / {base} = {ratio:.3f}")
    return out


def repeat_notes(rows: Sequence[PolicyRow]) -> list[str]:
    """Per-seed P95s of repeated runs and the paired ratios (same seed = same requests and
    arrival times) of ours against each baseline."""
    named = _by_name(rows)
    out = []
    for r in rows:
        if r.runs:
            p95s = " / ".join(f"{_ms(v)} (seed {s})" for s, v in r.runs)
            out.append(f"- {r.policy}: p95 per run {p95s}; row = median run")
    ours = named.get(OURS)
    if ours is None or not ours.runs:
        return out
    mine = dict(ours.runs)
    for base in (RAY_PREFIX, *P2C_NAMES):
        b = named.get(base)
        pairs = (
            [(s, m / v) for s, v in (b.runs or ()) if v and (m := mine.get(s)) is not None and m]
            if b
            else []
        )
        if pairs:
            ratios = sorted(x for _, x in pairs)
            med = (
                ratios[(len(ratios) - 1) // 2]
                if len(ratios) % 2
                else (ratios[len(ratios) // 2 - 1] + ratios[len(ratios) // 2]) / 2
            )
            each = ", ".join(f"{x:.3f}" for _, x in pairs)
            out.append(f"- paired p95 {OURS} / {base} per seed: {each}; median {med:.3f}")
    return out


def reported_ratio_notes(rows: Sequence[PolicyRow]) -> list[str]:
    """P95 ratios on workloads the P95 goals do not cover (the issue sets them for the
    shared-prefix workloads; the Mooncake replays are reported beside them)."""
    out = []
    for base in (RAY_PREFIX, *P2C_NAMES):
        value = p95_ratio(rows, OURS, base)
        if value is not None:
            out.append(f"- p95 {OURS} / {base} = {value:.3f} (reported, not a goal here)")
    return out


def markdown_table(
    title: str, rows: Sequence[PolicyRow], goal_list: Sequence[Goal], notes: Sequence[str] = ()
) -> str:
    whole = any(r.ttft_p95_whole_ms is not None for r in rows)
    header, cols = (HEADER + WHOLE_HEADER, 10) if whole else (HEADER, 9)
    lines = [f"### {title}", "", header, "|" + " --- |" * cols]
    lines += [table_row(r) + (f" {_ms(r.ttft_p95_whole_ms)} |" if whole else "") for r in rows]
    if goal_list:
        lines.append("")
        for g in goal_list:
            mark = "n/a" if g.met is None else ("met" if g.met else "MISSED")
            lines.append(f"- {g.name}: {_num(g.value, '.3f')} (target ≤ {g.target}) — {mark}")
    lines += notes
    lines += reach_notes(rows)
    lines += whole_run_notes(rows)
    lines += repeat_notes(rows)
    return "\n".join(lines)


def scenario_result(
    name: str,
    description: str,
    setup: Mapping[str, Any],
    rows: Sequence[PolicyRow],
    shared_prefix: bool,
) -> dict[str, Any]:
    goal_list = goals(rows, shared_prefix)
    notes = [] if shared_prefix else reported_ratio_notes(rows)
    return {
        "scenario": name,
        "description": description,
        "setup": dict(setup),
        "policies": [r.as_dict() for r in rows],
        "goals": [g.as_dict() for g in goal_list],
        "markdown": markdown_table(f"{name}: {description}", rows, goal_list, notes),
    }
