"""The request router's exported counters, with a fake metric factory (no Ray cluster)."""

from __future__ import annotations

from typing import Any

from contracts.metrics import (
    ROUTER_DECISIONS,
    ROUTER_KV_EVENTS,
    ROUTER_PREDICTED_CACHED_TOKENS,
    ROUTER_PROMPT_TOKENS,
)
from contracts.stats import ReplicaStats
from router.types import KVBlocksStored
from router.views import make_request_view
from tests.fakes import FakeMetrics, FakeReplica, pending_request, serve_router

SYSTEM = list(range(1000, 1256))  # 256 tokens: 16 blocks of 16


def _router(policy: str, **kw: Any) -> tuple[Any, FakeMetrics, list[FakeReplica]]:
    router = serve_router(policy=policy, **kw)
    metrics = FakeMetrics()
    router.use_counters(metrics)
    reps = [FakeReplica(u, ReplicaStats(kv_capacity_tokens=16_000).to_wire()) for u in "abcd"]
    router.update_replicas(reps)
    return router, metrics, reps


async def _route(router: Any, reps: list[FakeReplica], rid: str, tokens: list[int]) -> Any:
    view = make_request_view(rid, tokens)
    chosen = (await router.choose_replicas(reps, pending_request(view, f"i-{rid}")))[0][0]
    router.on_request_routed(pending_request(view, f"i-{rid}"), chosen.replica_id, None)
    return chosen


async def test_shared_prefix_second_request_is_predicted_cached() -> None:
    router, metrics, reps = _router("prefix", config={"load_slack": 4.0}, seed=3)
    first = await _route(router, reps, "r1", [*SYSTEM, 1, 2, 3])
    second = await _route(router, reps, "r2", [*SYSTEM, 7])
    assert second is first
    prompt = metrics[ROUTER_PROMPT_TOKENS]
    assert prompt.values == {(("policy", "prefix"),): 259.0 + 257.0}
    assert metrics[ROUTER_PREDICTED_CACHED_TOKENS].get(policy="prefix") == 256.0
    decisions = metrics[ROUTER_DECISIONS]
    assert decisions.get(policy="prefix", reason="fallback") == 1.0
    assert decisions.get(policy="prefix", reason="affinity") == 1.0
    assert (router.metrics.prompt_tokens, router.metrics.predicted_cached_tokens) == (516, 256)
    assert ROUTER_KV_EVENTS.name not in metrics.made  # approximate mode: no KV events


async def test_request_sent_to_another_tier_predicts_nothing() -> None:
    router, metrics, reps = _router("prefix", config={"load_slack": 4.0}, seed=3)
    first = await _route(router, reps, "r1", SYSTEM)
    view = make_request_view("r2", SYSTEM)
    tiers = await router.choose_replicas(reps, pending_request(view, "i2"))
    assert tiers[0][0] is first
    other = tiers[1][0]  # the chosen replica was full: Serve backs off to the next tier
    router.on_request_routed(pending_request(view, "i2"), other.replica_id, None)
    assert metrics[ROUTER_PROMPT_TOKENS].get(policy="prefix") == 512.0
    assert metrics[ROUTER_PREDICTED_CACHED_TOKENS].values == {}  # never inc(0): Ray refuses it


async def test_policy_without_prediction_counts_prompt_tokens_only() -> None:
    router, metrics, reps = _router("round-robin")
    for i in range(3):
        await _route(router, reps, f"r{i}", SYSTEM)
    assert metrics[ROUTER_PROMPT_TOKENS].get(policy="round-robin") == 3 * 256.0
    assert metrics[ROUTER_PREDICTED_CACHED_TOKENS].values == {}
    assert router.metrics.predicted_cached_tokens == 0
    assert metrics[ROUTER_DECISIONS].get(policy="round-robin", reason="balance") == 3.0


async def test_request_without_view_counts_a_decision_but_no_tokens() -> None:
    router, metrics, reps = _router("prefix")
    tiers = await router.choose_replicas(reps, pending_request(None, "i1"))
    router.on_request_routed(pending_request(None, "i1"), tiers[0][0].replica_id, None)
    assert metrics[ROUTER_DECISIONS].get(policy="prefix", reason="fallback") == 1.0
    assert metrics[ROUTER_PROMPT_TOKENS].values == {}


def test_precise_mode_counts_kv_events_by_kind() -> None:
    router = serve_router(
        policy="prefix-precise", kv_events_endpoint_template="ipc:///tmp/x-{replica_id}"
    )
    metrics = FakeMetrics()
    router.use_counters(metrics)
    router._on_kv_event(KVBlocksStored("a", (1, 2), 0.0))
    assert metrics[ROUTER_KV_EVENTS].get(kind="stored") == 1.0
    assert router.metrics.kv_event_counts == {"stored": 1}
