"""Baseline policies behave as named; registry builds every name and refuses Ray's."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from router.registry import POLICY_NAMES, RAY_NATIVE_ROUTERS, make_policy
from router.types import ReplicaGone, ReplicaView, Routed, RoutingPolicy
from tests.fakes import request

SYSTEM = list(range(1000, 1256))


def _route(policy: RoutingPolicy, req, views, now: float = 0.0) -> str:
    d = policy.choose(req, views)
    policy.observe(Routed(req, d.replica_id, now))
    return d.replica_id


def test_round_robin_cycles_in_id_order_and_skips_unavailable() -> None:
    p = make_policy("round-robin")
    views = [ReplicaView("a"), ReplicaView("b", healthy=False), ReplicaView("c")]
    assert [_route(p, request(str(k), SYSTEM), views) for k in range(4)] == ["a", "c", "a", "c"]


def test_least_loaded_picks_minimum_queue() -> None:
    p = make_policy("least-loaded")
    views = [
        ReplicaView("a", ongoing=3),
        ReplicaView("b", waiting=1, running=1),
        ReplicaView("c", ongoing=5),
    ]
    assert p.choose(request("1", SYSTEM), views).replica_id == "b"


def test_p2c_never_picks_the_most_loaded_of_three() -> None:
    p = make_policy("p2c", seed=4)
    views = [ReplicaView("a", ongoing=0), ReplicaView("b", ongoing=5), ReplicaView("c", ongoing=9)]
    picks = Counter(p.choose(request(str(k), SYSTEM), views).replica_id for k in range(300))
    assert picks["c"] == 0
    assert picks["a"] > picks["b"] > 0


def test_consistent_hash_is_sticky_per_prefix_and_session_and_bounded() -> None:
    p = make_policy("consistent-hash")
    views = [ReplicaView(f"r{i}") for i in range(8)]
    homes = {_route(p, request(str(k), SYSTEM + [k] * 20), views) for k in range(20)}
    assert len(homes) == 1  # same first 4 blocks -> same replica
    sessions = {
        p.choose(request(str(k), [k] * 70, session="s1"), views).replica_id for k in range(10)
    }
    assert len(sessions) == 1
    spread = {p.choose(request(str(k), [k] * 70), views).replica_id for k in range(200)}
    assert len(spread) == 8
    home = homes.pop()
    loaded = [ReplicaView(v.replica_id, ongoing=10 if v.replica_id == home else 1) for v in views]
    d = p.choose(request("x", SYSTEM), loaded)
    assert d.replica_id != home
    assert d.reason == "balance"


def test_sglang_tree_affinity_smallest_tree_and_imbalance_rules() -> None:
    p = make_policy("sglang-tree", config={"sglang_balance_abs_threshold": 4})
    views = [ReplicaView("a"), ReplicaView("b")]
    first = p.choose(request("1", SYSTEM), views)
    assert first.reason == "fallback"
    p.observe(Routed(request("1", SYSTEM), first.replica_id, 0.0))
    d = p.choose(request("2", SYSTEM + [7] * 16), views)
    assert (d.replica_id, d.reason) == (first.replica_id, "affinity")  # 16/17 > 0.5
    other = "b" if first.replica_id == "a" else "a"
    cold = p.choose(request("3", list(range(9000, 9256))), views)
    assert (cold.replica_id, cold.reason) == (other, "fallback")  # smallest tree
    skew = [ReplicaView(first.replica_id, ongoing=10), ReplicaView(other, ongoing=1)]
    d = p.choose(request("4", SYSTEM), skew)
    assert (d.replica_id, d.reason) == (other, "balance")  # 10 - 1 > 4
    p.observe(ReplicaGone(first.replica_id, 1.0))
    assert p.choose(request("5", SYSTEM), views).reason == "fallback"


def test_oracle_uses_exact_cache_lookup() -> None:
    truth = {"a": 0, "b": 16}
    p = make_policy("oracle", cache_lookup=lambda rid, hashes: min(truth[rid], len(hashes)))
    d = p.choose(request("1", SYSTEM), [ReplicaView("a"), ReplicaView("b")])
    assert (d.replica_id, d.reason, d.matched_blocks) == ("b", "affinity", 16)
    with pytest.raises(ValueError, match="cache_lookup"):
        make_policy("oracle")


def test_registry_builds_every_name_and_refuses_ray_native() -> None:
    views = [ReplicaView("a"), ReplicaView("b")]
    for name in POLICY_NAMES:
        kw = {"cache_lookup": lambda _rid, _h: 0} if name == "oracle" else {}
        p = make_policy(name, seed=1, block_size=16, clock=lambda: 0.0, config={}, **kw)
        assert isinstance(p, RoutingPolicy)
        assert p.name == name
        assert _route(p, request("1", SYSTEM), views) in {"a", "b"}
    for name in RAY_NATIVE_ROUTERS:
        with pytest.raises(ValueError, match="Ray Serve's own router"):
            make_policy(name)
    with pytest.raises(ValueError, match="unknown routing policy"):
        make_policy("nope")
    with pytest.raises(TypeError):
        make_policy("prefix", cache_lookup=lambda _r, _h: 0)
    assert RAY_NATIVE_ROUTERS["ray-prefix"].endswith("PrefixCacheAffinityRouter")


def test_same_seed_same_decisions() -> None:
    rng = random.Random(0)
    reqs = [request(str(k), [rng.randrange(100) for _ in range(64)]) for k in range(50)]
    views = [ReplicaView(f"r{i}") for i in range(4)]
    for name in ("prefix", "p2c", "sglang-tree"):
        a, b = make_policy(name, seed=9), make_policy(name, seed=9)
        assert [_route(a, r, views) for r in reqs] == [_route(b, r, views) for r in reqs]
