"""Rule-test cases for the operational alerts of ``alerts.py``: KV cache, autoscaler, prefix
cache, scrape and presence. Each alert gets a firing case and at least one where it stays
quiet for the reason its rule gives (a flat queue, no SLO burn, a short mismatch, a ramp
that is not thrashing, a small drop or a small baseline, one healthy replica left).
"""

from __future__ import annotations

from cluster.config import FleetConfig
from cluster.observe.rule_cases import (
    DEPLOYMENT,
    MODEL,
    Case,
    Fires,
    Firing,
    Lookup,
    SLISeries,
    counter,
    gauge,
    series,
)
from cluster.observe.scrape import JOB
from contracts.metrics import (
    AUTOSCALER_CURRENT,
    AUTOSCALER_DESIRED,
    CACHED_TOKENS,
    INGRESS_QUOTA_SHARED,
    KV_USAGE,
    PREFIX_QUERIED_TOKENS,
    REPLICA_HEALTHY,
    WAITING,
)

INSTANCE = "127.0.0.1:8080"
_SCALER = {"deployment_name": DEPLOYMENT, "policy": "ttft-queue"}


def _replicas(desired: list[tuple[float, int]], current: list[tuple[float, int]]) -> tuple:
    return (
        (series(AUTOSCALER_DESIRED, **_SCALER), gauge(desired)),
        (series(AUTOSCALER_CURRENT, **_SCALER), gauge(current)),
    )


def _up(segments: list[tuple[float, int]]) -> tuple[str, str]:
    return (f'up{{job="{JOB}",instance="{INSTANCE}"}}', gauge(segments))


def quiet_series(minutes: int) -> tuple[tuple[str, str], ...]:
    """A healthy, idle fleet: every non-SLI series present and unremarkable."""
    n = minutes + 1
    return (
        (series(REPLICA_HEALTHY, model=MODEL, replica="r1"), gauge([(1, n)])),
        _up([(1, n)]),
        (series(KV_USAGE, model=MODEL, replica="r1"), gauge([(0.1, n)])),
        (series(WAITING, model=MODEL, replica="r1"), gauge([(0, n)])),
        *_replicas([(1, n)], [(1, n)]),
        (series(CACHED_TOKENS, model=MODEL, replica="r1"), counter([(0, minutes)])),
        (series(PREFIX_QUERIED_TOKENS, model=MODEL, replica="r1"), counter([(0, minutes)])),
    )


def kv_cases(get: Lookup) -> list[Case]:
    a = get("LLMFleetKVCacheFull")
    kv = (
        (series(KV_USAGE, model=MODEL, replica="r1"), gauge([(0.99, 16)])),
        (series(KV_USAGE, model=MODEL, replica="r2"), gauge([(0.5, 16)])),
        (series(WAITING, model=MODEL, replica="r2"), gauge([(0, 16)])),
    )
    rising = (series(WAITING, model=MODEL, replica="r1"), counter([(1, 15)]))
    flat = (series(WAITING, model=MODEL, replica="r1"), gauge([(5, 16)]))
    return [
        Case(
            "kv: one replica 99 % full with its queue growing",
            (*kv, rising),
            (Fires(12, a.name, (Firing(a, {"model": MODEL}, 0.99),)),),
        ),
        Case("kv: 99 % full but the queue is flat", (*kv, flat), (Fires(12, a.name, ()),)),
    ]


def autoscaler_cases(cfg: FleetConfig, get: Lookup) -> list[Case]:
    top = cfg.autoscaling.max_replicas
    maxed = get("LLMFleetAutoscalerMaxedOut")
    fast = SLISeries(cfg, "ttft", [(min(1.0, 16 * (1 - cfg.slo.latency_objective)), 25)])
    calm = SLISeries(cfg, "ttft", [(0.0, 25)])
    at_max = _replicas([(top, 26)], [(top, 26)])
    out = [
        Case(
            "autoscaler: at max_replicas while TTFT burns at a page rate",
            (*at_max, *fast.series()),
            (Fires(20, maxed.name, (Firing(maxed, {"deployment_name": DEPLOYMENT}, top),)),),
        ),
        Case(
            "autoscaler: at max_replicas with the SLOs met",
            (*at_max, *calm.series()),
            (Fires(20, maxed.name, ()),),
        ),
    ]
    if top > 1:
        below = _replicas([(top - 1, 26)], [(top - 1, 26)])
        out.append(
            Case(
                "autoscaler: TTFT burns below max_replicas (the policy can still scale)",
                (*below, *fast.series()),
                (Fires(20, maxed.name, ()),),
            )
        )
    stuck = get("LLMFleetAutoscalerNotConverging")
    out += [
        Case(
            "autoscaler: desired 2, running 1 for 15 minutes",
            _replicas([(2, 16)], [(1, 16)]),
            (Fires(12, stuck.name, (Firing(stuck, {"deployment_name": DEPLOYMENT}, 2),)),),
        ),
        Case(
            "autoscaler: desired 1, still running 2 for 15 minutes (a stuck scale-down)",
            _replicas([(1, 16)], [(2, 16)]),
            (Fires(12, stuck.name, (Firing(stuck, {"deployment_name": DEPLOYMENT}, 1),)),),
        ),
        Case(
            "autoscaler: desired 2 for 5 minutes, then reached",
            _replicas([(2, 6), (1, 10)], [(1, 16)]),
            (Fires(12, stuck.name, ()),),
        ),
    ]
    thrash = get("LLMFleetAutoscalerThrashing")
    flapping = [(2.0, 2), (3.0, 2)] * 8
    ramp = [(1.0, 5), (2.0, 5), (3.0, 5), (4.0, 8), (3.0, 1), (2.0, 1), (1.0, 7)]
    out += [
        Case(
            "autoscaler: desired flips 2 <-> 3 every 2 minutes",
            _replicas(flapping, [(2, 32)]),
            (Fires(30, thrash.name, (Firing(thrash, {"deployment_name": DEPLOYMENT}, 0),)),),
        ),
        Case(
            "autoscaler: a stepwise ramp up and back down is a single direction change",
            _replicas(ramp, [(1, 32)]),
            (Fires(30, thrash.name, ()),),
        ),
    ]
    return out


def prefix_cases(get: Lookup) -> list[Case]:
    a = get("LLMFleetPrefixHitRateCollapse")
    queried = (series(PREFIX_QUERIED_TOKENS, model=MODEL, replica="r1"), counter([(1000, 90)]))

    def cached(before: int, after: int) -> tuple[str, str]:
        values = counter([(before, 70), (after, 20)])
        return (series(CACHED_TOKENS, model=MODEL, replica="r1"), values)

    return [
        Case(
            "prefix: hit rate 80 % -> 10 %",
            (queried, cached(800, 100)),
            (Fires(85, a.name, (Firing(a, {"model": MODEL}, 0.1),)),),
        ),
        Case(
            "prefix: 80 % -> 50 % is no collapse",
            (queried, cached(800, 500)),
            (Fires(85, a.name, ()),),
        ),
        Case(
            "prefix: a 15 % baseline is too small",
            (queried, cached(150, 10)),
            (Fires(85, a.name, ()),),
        ),
    ]


def health_cases(get: Lookup, names: set[str]) -> list[Case]:
    down = get("LLMFleetScrapeDown")
    none = get("LLMFleetNoHealthyReplica")

    def healthy(r1: float, r2: float) -> tuple[tuple[str, str], ...]:
        return tuple(
            (series(REPLICA_HEALTHY, model=MODEL, replica=r), gauge([(v, 11)]))
            for r, v in (("r1", r1), ("r2", r2))
        )

    scrape = Firing(down, {"job": JOB, "instance": INSTANCE}, 0)
    out = [
        Case(
            "health: the metrics port stops answering after 5 minutes",
            (_up([(1, 6), (0, 10)]),),
            (Fires(4, down.name, ()), Fires(10, down.name, (scrape,))),
        ),
        Case(
            "health: both replicas unhealthy",
            healthy(0, 0),
            (Fires(5, none.name, (Firing(none, {"model": MODEL}, 0),)),),
        ),
        Case("health: one of two replicas healthy", healthy(1, 0), (Fires(5, none.name, ()),)),
    ]
    absent = [
        n for n in ("LLMFleetReplicaMetricsAbsent", "LLMFleetEdgeMetricsAbsent") if n in names
    ]
    out.append(
        Case(
            "health: the port answers but no llmfleet series exist",
            (_up([(1, 16)]),),
            tuple(Fires(12, n, (Firing(get(n), {}, 1),)) for n in absent),
        )
    )
    return out


def quota_cases(get: Lookup) -> list[Case]:
    a = get("LLMFleetQuotaSharingDown")
    labels = {"deployment": "OpenAIIngress", "replica": "i1"}

    def shared(segments: list[tuple[float, int]]) -> tuple[tuple[str, str], ...]:
        other = (series(INGRESS_QUOTA_SHARED, deployment="OpenAIIngress", replica="i2"), "1+0x15")
        return ((series(INGRESS_QUOTA_SHARED, **labels), gauge(segments)), other)

    return [
        Case(
            "quota: an ingress replica splits its quotas from minute 2 on",
            shared([(1, 2), (0, 14)]),
            (Fires(5, a.name, ()), Fires(8, a.name, (Firing(a, labels, 0),))),
        ),
        Case(
            "quota: a 3-minute split heals",
            shared([(1, 2), (0, 3), (1, 11)]),
            (Fires(5, a.name, ()), Fires(10, a.name, ())),
        ),
    ]


def all_cases(cfg: FleetConfig, get: Lookup, names: set[str]) -> list[Case]:
    return [
        *kv_cases(get),
        *autoscaler_cases(cfg, get),
        *prefix_cases(get),
        *health_cases(get, names),
        *quota_cases(get),
    ]
