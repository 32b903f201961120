"""The dashboards of why, from inside the fleet (engines, router, autoscaler):

- **saturation** — how full the replicas are: waiting and running requests, waiting prefill
  tokens, the engines' queue-delay estimate, KV-cache usage (max/avg/min across replicas)
  and preemptions.
- **router** — whether cache-aware routing works: the prefix hit rate the router predicted
  against the one engines report, decisions by reason, each replica's share of traffic and
  the imbalance (busiest replica ÷ average).
- **autoscaler** — what the scaling policy saw and did: desired against actual replicas,
  each signal against its target, decisions (also drawn as annotations on every panel).
"""

from __future__ import annotations

from cluster.observe import promql as pq
from cluster.observe.panels import Annotation, Board, Q, timeseries
from contracts import metrics as M

_SCALER = ("deployment_name", "policy")


def saturation() -> Board:
    def per_replica(metric: M.Metric, agg: str = "sum") -> list[Q]:
        return [Q(pq.gauge(metric, agg), "{{replica}}")]

    queues = [
        timeseries(
            "Waiting requests by replica", M.WAITING.description, "short", per_replica(M.WAITING)
        ),
        timeseries(
            "Running requests by replica", M.RUNNING.description, "short", per_replica(M.RUNNING)
        ),
    ]
    prefill = [
        timeseries(
            "Waiting prefill tokens by replica",
            M.WAITING_PREFILL_TOKENS.description,
            "short",
            per_replica(M.WAITING_PREFILL_TOKENS),
        ),
        timeseries(
            "Queue delay by replica",
            M.QUEUE_DELAY.description,
            "s",
            per_replica(M.QUEUE_DELAY, "max"),
        ),
    ]
    kv = [
        timeseries(
            "KV usage across replicas",
            "KV-cache blocks in use: the fullest replica, the average and the emptiest.",
            "percentunit",
            [Q(pq.across_replicas(M.KV_USAGE, agg), agg) for agg in ("max", "avg", "min")],
        ),
        timeseries(
            "Preemptions/s by replica",
            M.PREEMPTIONS.description,
            "reqps",
            [Q(pq.sum_rate(M.PREEMPTIONS, by=("replica",)), "{{replica}}")],
        ),
    ]
    return Board(
        "llmfleet-saturation",
        "llmfleet / Saturation",
        "How full the replicas are.",
        [("Engine queues", queues), ("Prefill backlog", prefill), ("KV cache", kv)],
    )


def router() -> Board:
    predicted = pq.ratio(
        pq.sum_rate(M.ROUTER_PREDICTED_CACHED_TOKENS), pq.sum_rate(M.ROUTER_PROMPT_TOKENS)
    )
    actual = pq.ratio(pq.sum_rate(M.CACHED_TOKENS), pq.sum_rate(M.PREFIX_QUERIED_TOKENS))
    per_replica = pq.sum_rate(M.ENGINE_REQUESTS, by=("replica",))
    total = pq.sum_rate(M.ENGINE_REQUESTS)
    cache = [
        timeseries(
            "Prefix hit rate: predicted vs actual",
            "Predicted: prompt tokens the router expected the chosen replica to have cached ÷ routed prompt tokens. Actual: prompt tokens engines found cached ÷ tokens looked up. A gap means the router's prefix index has drifted from the engines' caches.",
            "percentunit",
            [Q(predicted, "predicted (router)"), Q(actual, "actual (engines)")],
        ),
        timeseries(
            "Routing decisions by reason",
            M.ROUTER_DECISIONS.description,
            "reqps",
            [Q(pq.sum_rate(M.ROUTER_DECISIONS, by=("policy", "reason")), "{{policy}} {{reason}}")],
            stack=True,
        ),
    ]
    balance = [
        timeseries(
            "Share of traffic by replica",
            "Each replica's share of the requests engines finished.",
            "percentunit",
            [Q(f"{per_replica} / on() group_left() ({total} > 0)", "{{replica}}")],
            stack=True,
        ),
        timeseries(
            "Imbalance (max / avg)",
            "Requests/s of the busiest replica ÷ the average replica: 1 is perfectly even.",
            "short",
            [Q(f"max({per_replica}) / (avg({per_replica}) > 0)", "max / avg")],
        ),
    ]
    events = [
        timeseries(
            "KV events applied/s",
            M.ROUTER_KV_EVENTS.description,
            "short",
            [Q(pq.sum_rate(M.ROUTER_KV_EVENTS, by=("kind",)), "{{kind}}")],
            w=24,
        ),
    ]
    return Board(
        "llmfleet-router",
        "llmfleet / Router",
        "Whether cache-aware routing works.",
        [("Prefix cache", cache), ("Load balance", balance), ("KV events", events)],
    )


def autoscaler() -> Board:
    def latest(metric: M.Metric, *by: str) -> str:
        return f"max by ({', '.join((*_SCALER, *by))}) ({pq.sel(metric)})"

    healthy = (
        f"sum by (deployment) ({pq.gauge(M.REPLICA_HEALTHY, 'max', ('deployment', 'replica'))})"
    )
    replicas = [
        timeseries(
            "Desired vs actual replicas",
            "Replicas the policy asks for, replicas running when it decided, and healthy replicas now. Scaling decisions are annotations.",
            "short",
            [
                Q(latest(M.AUTOSCALER_DESIRED), "{{deployment_name}} desired"),
                Q(latest(M.AUTOSCALER_CURRENT), "{{deployment_name}} current"),
                Q(healthy, "{{deployment}} healthy"),
            ],
            w=24,
        ),
    ]
    signal, target = latest(M.AUTOSCALER_SIGNAL, "signal"), latest(M.AUTOSCALER_TARGET, "signal")
    signals = [
        timeseries(
            "Signal ÷ target",
            "Each policy input divided by the value the policy holds it to: above 1 asks for more replicas.",
            "short",
            [Q(f"{signal} / ({target} > 0)", "{{signal}}")],
            lines=[(None, "green"), (1.0, "red")],
        ),
        timeseries(
            "Signals and targets",
            "The policy's inputs and their targets, in each signal's own unit (see the names).",
            "short",
            [Q(signal, "{{signal}}"), Q(target, "{{signal}} target")],
        ),
    ]
    decisions = [
        timeseries(
            "Scaling decisions",
            M.AUTOSCALER_DECISIONS.description,
            "short",
            [Q(_decisions(), "{{direction}} {{reason}}")],
            w=24,
        ),
    ]
    note = Annotation(
        "Scaling decisions",
        _decision_events(),
        "scale {{direction}}",
        ("deployment_name", "direction", "reason"),
    )
    return Board(
        "llmfleet-autoscaler",
        "llmfleet / Autoscaler",
        "What the scaling policy saw and did.",
        [("Replicas", replicas), ("Signals", signals), ("Decisions", decisions)],
        [note],
    )


def _decision_events() -> str:
    """Windows with a decision: the counter rose, or a (direction, reason) series appeared
    (Ray exports a counter only after its first increment, which ``increase`` cannot see)."""
    m = pq.sel(M.AUTOSCALER_DECISIONS)
    by = "sum by (deployment_name, direction, reason)"
    return f"{_decisions()} > 0 or {by} ({m} unless {m} offset {pq.RATE})"


def _decisions() -> str:
    m = pq.sel(M.AUTOSCALER_DECISIONS)
    return f"sum by (deployment_name, direction, reason) (increase({m}[{pq.RATE}]))"
