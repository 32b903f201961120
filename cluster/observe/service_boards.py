"""The dashboards of what clients get, measured at the edge (the ingress) against ``slo``:

- **overview** — is the fleet meeting its SLOs right now, and how much error budget is left:
  goodput, TTFT and TPOT attainment, budget left over 30 days, burn rates, replicas up.
- **latency** — where the time goes: P50/P95/P99 and heatmaps of TTFT, TPOT, ITL and E2E,
  and TTFT split into router queue (edge), engine queue and prefill (engine).
- **throughput** — what the fleet delivers and what it costs: requests/s, tokens/s, good
  tokens/s, $ per 1M output tokens from the ``replica_hour_usd`` variable × replicas up.
- **models** — one table row per served model: requests/s, goodput, P95 TTFT and TPOT, tok/s.
"""

from __future__ import annotations

from cluster.config import SLOConfig
from cluster.observe import promql as pq
from cluster.observe.panels import Board, Column, Panel, Q, heatmap, stat, table, timeseries
from contracts import metrics as M

PERCENTILES = (0.5, 0.95, 0.99)


def _objective_steps(objective: float) -> list[tuple[float | None, str]]:
    return [(None, "red"), (objective, "green")]


def percentiles(metric: M.Metric) -> list[Q]:
    return [Q(pq.quantile(metric, q), f"P{q * 100:g}") for q in PERCENTILES]


def overview(slo: SLOConfig) -> Board:
    ttft = Q(pq.attainment(M.TTFT, "ttft_slo"), "TTFT ≤ $ttft_slo s")
    tpot = Q(pq.attainment(M.TPOT, "tpot_slo"), "TPOT ≤ $tpot_slo s")
    good = Q(pq.goodput(), "goodput")
    budget = [
        Q(pq.budget_left(bad, obj), name) for name, bad, obj in pq.bad_shares(slo, pq.BUDGET_WINDOW)
    ]
    now = [
        stat(
            "Goodput",
            "Share of requests answered within both limits (outcome good) among all that count against the SLO (invalid excluded).",
            "percentunit",
            [good],
            steps=_objective_steps(slo.goodput_objective),
        ),
        stat(
            "TTFT attainment",
            "Share of streamed requests whose time to first token was ≤ $ttft_slo s (bucket ratio at the edge).",
            "percentunit",
            [ttft],
            steps=_objective_steps(slo.latency_objective),
        ),
        stat(
            "TPOT attainment",
            "Share of streamed requests whose time per output token was ≤ $tpot_slo s (bucket ratio at the edge).",
            "percentunit",
            [tpot],
            steps=_objective_steps(slo.latency_objective),
        ),
        stat(
            "Replicas up",
            "Model replicas whose engine reports healthy (llmfleet_replica_healthy = 1).",
            "short",
            [Q(pq.replicas_up(), "up")],
        ),
        stat(
            f"Error budget left ({pq.BUDGET_WINDOW})",
            f"1 − (share of requests that missed the objective over {pq.BUDGET_WINDOW}) / (1 − objective). Objectives: goodput {slo.goodput_objective}, latency {slo.latency_objective}, availability {slo.availability_objective}. Fixed window: an objective is defined over its period.",
            "percentunit",
            budget,
            w=24,
            steps=[(None, "red"), (0.0, "orange"), (0.5, "green")],
            instant=True,
        ),
        timeseries(
            "Goodput and attainment",
            f"Goodput and TTFT/TPOT attainment over time; the dashed line is the goodput objective ({slo.goodput_objective}).",
            "percentunit",
            [good, ttft, tpot],
            lines=_objective_steps(slo.goodput_objective),
        ),
        timeseries(
            "Requests by outcome",
            "Requests/s at the edge by outcome (good, slow_ttft, slow_tpot, error, rejected, invalid).",
            "reqps",
            [Q(pq.sum_rate(M.REQUESTS, by=("outcome",)), "{{outcome}}")],
            stack=True,
        ),
    ]
    burn = [
        _burn_panel(slo, window, limit)
        for window, limit in zip(pq.BURN_WINDOWS, (14.4, 6.0), strict=True)
    ]
    return Board(
        "llmfleet-overview",
        "llmfleet / Overview",
        "Is the fleet meeting its SLOs now, and how much error budget is left.",
        [("Service level", now), ("Error budget burn", burn)],
    )


def _burn_panel(slo: SLOConfig, window: str, limit: float) -> Panel:
    queries = [Q(pq.burn_rate(bad, obj), name) for name, bad, obj in pq.bad_shares(slo, window)]
    return timeseries(
        f"Burn rate ({window})",
        f"Share of requests missing each objective over a fixed {window} window, divided by the share the objective allows: 1 spends the budget exactly over the SLO period; the dashed line ({limit:g}) is the usual page threshold for a {window} window.",
        "short",
        queries,
        lines=[(None, "green"), (limit, "red")],
    )


def latency() -> Board:
    rows = [
        _latency_row("TTFT", M.TTFT),
        ("TTFT split", _ttft_split()),
        _latency_row("TPOT", M.TPOT),
        _latency_row("ITL", M.ITL),
        _latency_row("E2E", M.E2E),
    ]
    return Board(
        "llmfleet-latency",
        "llmfleet / Latency",
        "Where the time goes: TTFT, TPOT, ITL, E2E and the parts of TTFT.",
        rows,
    )


def _latency_row(name: str, metric: M.Metric) -> tuple[str, list[Panel]]:
    about = metric.description
    return name, [
        timeseries(f"{name} percentiles", f"P50/P95/P99. {about}", "s", percentiles(metric)),
        heatmap(f"{name} heatmap", f"Observations/s per latency bucket. {about}", metric),
    ]


def _ttft_split() -> list[Panel]:
    parts = (
        ("router queue", M.ROUTER_QUEUE),
        ("engine queue", M.ENGINE_QUEUE),
        ("prefill", M.ENGINE_PREFILL),
    )
    return [
        timeseries(
            "TTFT split, mean",
            "Mean time in each TTFT component: router queue (edge: waiting for a replica slot), engine queue (waiting in the engine) and prefill (first scheduling to first token). Means add up; the rest of TTFT is relay overhead.",
            "s",
            [Q(pq.mean(m), n) for n, m in parts],
            stack=True,
        ),
        timeseries(
            "TTFT split, P95",
            "P95 of each TTFT component against P95 TTFT (percentiles do not add up).",
            "s",
            [Q(pq.quantile(m, 0.95), n) for n, m in parts] + [Q(pq.quantile(M.TTFT, 0.95), "TTFT")],
        ),
    ]


def throughput() -> Board:
    out_tok = pq.sum_rate(M.REQUEST_OUTPUT_TOKENS)
    good_tok = pq.sum_rate(M.REQUEST_OUTPUT_TOKENS, 'outcome="good"')
    usd_per_s = f"$replica_hour_usd * {pq.replicas_up()} / 3600"
    requests = [
        timeseries(
            "Requests/s by outcome",
            "Requests/s at the edge by outcome.",
            "reqps",
            [Q(pq.sum_rate(M.REQUESTS, by=("outcome",)), "{{outcome}}")],
            stack=True,
        ),
        timeseries(
            "Requests/s by model",
            "Requests/s at the edge by served model (all outcomes).",
            "reqps",
            [Q(pq.sum_rate(M.REQUESTS, by=("model",)), "{{model}}")],
        ),
    ]
    tokens = [
        timeseries(
            "Tokens/s",
            "Prompt and output tokens/s of answered requests at the edge; good = output tokens of requests within both limits.",
            "short",
            [
                Q(pq.sum_rate(M.REQUEST_PROMPT_TOKENS), "prompt"),
                Q(out_tok, "output"),
                Q(good_tok, "good output"),
            ],
        ),
        timeseries(
            "Engine output tokens/s by replica",
            "Output tokens/s each replica's engine finished.",
            "short",
            [Q(pq.sum_rate(M.OUTPUT_TOKENS, by=("replica",)), "{{replica}}")],
        ),
    ]
    cost = [
        timeseries(
            "$ per 1M output tokens",
            "$replica_hour_usd × replicas up ÷ output tokens/s, per 1M tokens; good = per 1M good output tokens. Empty without traffic.",
            "currencyUSD",
            [
                Q(f"{usd_per_s} * 1e6 / ({out_tok} > 0)", "all output"),
                Q(f"{usd_per_s} * 1e6 / ({good_tok} > 0)", "good output"),
            ],
        ),
        timeseries(
            "Replicas up",
            "Healthy model replicas (the cost panel's multiplier).",
            "short",
            [Q(pq.replicas_up(), "up")],
        ),
    ]
    return Board(
        "llmfleet-throughput",
        "llmfleet / Throughput",
        "What the fleet delivers and what it costs.",
        [("Requests", requests), ("Tokens", tokens), ("Cost", cost)],
    )


def models() -> Board:
    by = ("model",)
    columns = [
        Column("Requests/s", "reqps", pq.sum_rate(M.REQUESTS, by=by)),
        Column("Goodput", "percentunit", pq.goodput(by=by)),
        Column("P95 TTFT", "s", pq.quantile(M.TTFT, 0.95, by=by)),
        Column("P95 TPOT", "s", pq.quantile(M.TPOT, 0.95, by=by)),
        Column("Output tok/s", "short", pq.sum_rate(M.REQUEST_OUTPUT_TOKENS, by=by)),
    ]
    trends = [
        timeseries(
            "Goodput by model",
            "Goodput per served model.",
            "percentunit",
            [Q(pq.goodput(by=by), "{{model}}")],
        ),
        timeseries(
            "P95 TTFT by model",
            "P95 time to first token per served model.",
            "s",
            [Q(pq.quantile(M.TTFT, 0.95, by=by), "{{model}}")],
        ),
    ]
    table_ = table(
        "Per model",
        "One row per served model over the rate interval: requests/s (all outcomes), goodput, P95 TTFT, P95 TPOT and output tokens/s, at the edge.",
        "model",
        columns,
    )
    return Board(
        "llmfleet-models",
        "llmfleet / Models",
        "One row per served model.",
        [("Per model", [table_]), ("Trends", trends)],
    )
