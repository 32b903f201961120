"""Each scorer plugin scores a whole candidate list at once: one value in [0, 1] per replica,
in order, moving the right way; the policy's sum follows the config's weights."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import fields

import pytest

from router.config import RouterConfig, Weights
from router.pipeline import weighted_sum
from router.scorers import (
    SCORERS,
    KVUsageScorer,
    PrefixScorer,
    QueueScorer,
    ScoringContext,
    ShareScorer,
    SpreadScorer,
    TTFTScorer,
    queue_depth,
    queue_depths,
    weighted_scorers,
)
from router.types import ReplicaView, RequestView

CFG = RouterConfig()


def _req(prompt_tokens: int = 64) -> RequestView:
    return RequestView("r", "m", tuple(range(prompt_tokens)), tuple(range(prompt_tokens // 16)), 8)


def _ctx(matches: dict[str, int] | None = None, cfg: RouterConfig = CFG, **kw) -> ScoringContext:
    return ScoringContext(matches or {}, 16, cfg, **kw)


def _ids(*names: str) -> list[ReplicaView]:
    return [ReplicaView(n) for n in names]


def test_prefix_scorer_is_matched_fraction_in_replica_order() -> None:
    ctx = _ctx({"a": 4, "b": 1, "over": 9})  # "over": more than the request has (clamped)
    got = PrefixScorer().score(ctx, _req(64), _ids("c", "b", "a", "over"))
    assert got == [0.0, 0.25, 1.0, 1.0]
    assert PrefixScorer().score(ctx, _req(8), _ids("a", "b")) == [0.0, 0.0]  # no full block


def test_queue_scorer_decreases_with_depth_and_uses_larger_of_router_and_engine() -> None:
    views = [
        ReplicaView("idle"),
        ReplicaView("router4", ongoing=4),
        ReplicaView("engine4", ongoing=1, waiting=3, running=1),
        ReplicaView("deep", ongoing=12),
    ]
    assert queue_depths(views) == [queue_depth(v) for v in views] == [0, 4, 4, 12]
    got = QueueScorer().score(_ctx(), _req(), views)
    assert got == pytest.approx([1.0, 0.5, 0.5, 0.25])  # queue_ref 4: 4 / (4 + q)


def test_kv_scorer_prefers_free_cache_and_clamps() -> None:
    views = [ReplicaView("a", kv_usage=u) for u in (0.25, 1.7, -0.1, 1.0, 0.0)]
    assert KVUsageScorer().score(_ctx(), _req(), views) == [0.75, 0.0, 1.0, 0.0, 1.0]


def test_ttft_scorer_predicts_queue_plus_uncached_tokens_over_rate() -> None:
    # 640-token prompt; "hit" holds 30 blocks (480 tokens), "all" more blocks than the prompt
    ctx = _ctx({"hit": 30, "all": 50})
    views = [
        ReplicaView("hit", waiting_prefill_tokens=840, prefill_tokens_per_s=500.0),  # 2 s
        ReplicaView("cold", prefill_tokens_per_s=640.0),  # 1 s = ttft_ref_s: 0.5
        ReplicaView("unmeasured"),  # config default 500 tok/s: 1.28 s
        ReplicaView("all", waiting_prefill_tokens=-5, prefill_tokens_per_s=100.0),  # 0 s
    ]
    got = TTFTScorer().score(ctx, _req(640), views)
    assert got == pytest.approx([1 / 3, 0.5, 1 / 2.28, 1.0])
    # a fleet rate replaces every replica's own (measurement noise must not decide)
    fleet = TTFTScorer().score(
        _ctx({"hit": 30}, fleet_prefill_tokens_per_s=320.0), _req(640), views
    )
    assert fleet == pytest.approx([1 / (1 + 1000 / 320), 1 / 3, 1 / 3, 1 / 3])


def test_spread_scorer_prefers_less_cached_content() -> None:
    ctx = _ctx(cache_fill={"a": 0.25, "b": 1.4, "c": -0.2})
    assert SpreadScorer().score(ctx, _req(), _ids("a", "b", "c", "unknown")) == [
        0.75,
        0.0,
        1.0,
        1.0,
    ]
    assert SpreadScorer().score(_ctx(), _req(), _ids("a", "b")) == [1.0, 1.0]  # no index


def test_share_scorer_prefers_replicas_that_took_less_recent_work() -> None:
    ctx = _ctx(relative_share={"a": 2.5, "b": 1.0, "c": 0.0, "e": -1.0})
    got = ShareScorer().score(ctx, _req(), _ids("a", "b", "c", "d", "e"))
    assert got == [0.0, 0.5, 1.0, 1.0, 1.0]  # 0 at twice a fair share; unknown = took nothing
    assert ShareScorer().score(_ctx(), _req(), _ids("a", "b")) == [1.0, 1.0]  # warm: flat


def _random_views(rng: random.Random, n: int) -> list[ReplicaView]:
    return [
        ReplicaView(
            f"r{i}",
            ongoing=rng.randint(0, 9),
            waiting=rng.randint(0, 5),
            running=rng.randint(0, 5),
            waiting_prefill_tokens=rng.randint(-10, 5000),
            kv_usage=rng.uniform(-0.2, 1.2),
            prefill_tokens_per_s=rng.choice([0.0, 800.0, 5000.0]),
        )
        for i in range(n)
    ]


@pytest.mark.parametrize("name", sorted(SCORERS))
def test_every_scorer_gives_one_value_in_unit_interval_per_replica(name: str) -> None:
    rng = random.Random(2)
    views = _random_views(rng, 20)
    ctx = _ctx(
        {f"r{i}": rng.randint(0, 60) for i in range(20)},
        cache_fill={f"r{i}": rng.uniform(-0.2, 1.2) for i in range(15)},
        relative_share={f"r{i}": rng.random() * 3 for i in range(15)},
    )
    got = SCORERS[name].score(ctx, _req(640), views)
    assert len(got) == len(views)
    assert all(0.0 <= v <= 1.0 for v in got)
    assert len(set(got)) > 1  # these views differ in what every scorer reads


def test_registry_has_one_scorer_per_weight_and_zero_weights_drop_out() -> None:
    assert sorted(f.name for f in fields(Weights)) == sorted(SCORERS)
    assert [(s.name, w) for s, w in weighted_scorers(Weights())] == [
        ("prefix", 1.0),
        ("queue", 0.5),
        ("kv", 0.2),
        ("ttft", 2.0),
        ("spread", 0.5),
        ("share", 1.0),
    ]
    some = RouterConfig.from_dict({"weights": {"queue": 0, "spread": 0, "share": 0}}).weights
    assert [s.name for s, _ in weighted_scorers(some)] == ["prefix", "kv", "ttft"]


def test_weighted_sum_uses_config_weights() -> None:
    weights = {"prefix": 2.0, "queue": 0.0, "kv": 1.0, "ttft": 0.0, "spread": 0.0, "share": 0.0}
    cfg = RouterConfig.from_dict({"weights": weights})
    views = [ReplicaView("a", kv_usage=0.5), ReplicaView("b", ongoing=9)]
    scores = weighted_sum(weighted_scorers(cfg.weights), _ctx({"a": 2}, cfg), _req(64), views)
    assert scores == {"a": pytest.approx(2 * 0.5 + 0.5), "b": pytest.approx(1.0)}
    assert weighted_sum((), _ctx(), _req(), views) == {"a": 0.0, "b": 0.0}


class _Even:
    """A scorer written once, outside the registry: it plugs into the same sum."""

    name = "even"

    def score(
        self, _ctx: ScoringContext, _request: RequestView, replicas: Sequence[ReplicaView], /
    ) -> list[float]:
        return [1.0 if int(r.replica_id[1:]) % 2 == 0 else 0.0 for r in replicas]


def test_weighted_sum_is_the_weighted_total_of_each_plugin() -> None:
    rng = random.Random(5)
    views = _random_views(rng, 12)
    ctx = _ctx(
        {f"r{i}": rng.randint(0, 40) for i in range(12)},
        fleet_prefill_tokens_per_s=3000.0,
        cache_fill={f"r{i}": rng.random() for i in range(12)},
    )
    plugins = (*weighted_scorers(CFG.weights), (_Even(), 0.7))
    got = weighted_sum(plugins, ctx, _req(640), views)
    per = [(s.score(ctx, _req(640), views), w) for s, w in plugins]
    want = {v.replica_id: sum(w * vals[i] for vals, w in per) for i, v in enumerate(views)}
    assert list(got) == [v.replica_id for v in views]
    assert got == pytest.approx(want)
    assert got["r0"] - 0.7 == pytest.approx(weighted_sum(plugins[:-1], ctx, _req(640), views)["r0"])


def test_config_rejects_unknown_keys_and_bad_values() -> None:
    with pytest.raises(ValueError, match="unknown router config keys"):
        RouterConfig.from_dict({"load_slak": 0.1})
    with pytest.raises(ValueError, match="unknown weights keys"):
        RouterConfig.from_dict({"weights": {"cache": 1.0}})
    with pytest.raises(ValueError, match="must be"):
        RouterConfig.from_dict({"queue_ref": 0})
    assert RouterConfig.from_dict({"load_slack": 1}).load_slack == 1.0
