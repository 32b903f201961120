"""Each scorer maps into [0, 1] and moves the right way; the weighted sum follows config."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from router.config import RouterConfig
from router.scorers import (
    ALL_SCORERS,
    KVUsageScorer,
    PrefixScorer,
    QueueScorer,
    ScoringContext,
    ShareScorer,
    TTFTScorer,
    predicted_ttft_s,
    weighted_scores,
)
from router.types import ReplicaView, RequestView

CFG = RouterConfig()


def _ctx(prompt_tokens: int = 64, matches: dict[str, int] | None = None, cfg: RouterConfig = CFG):
    req = RequestView("r", "m", tuple(range(prompt_tokens)), tuple(range(prompt_tokens // 16)), 8)
    return ScoringContext(req, matches or {}, 16, cfg)


def test_prefix_scorer_is_matched_fraction() -> None:
    ctx = _ctx(64, {"a": 4, "b": 1})
    s = PrefixScorer()
    assert s.score(ctx, ReplicaView("a")) == 1.0
    assert s.score(ctx, ReplicaView("b")) == 0.25
    assert s.score(ctx, ReplicaView("c")) == 0.0
    assert s.score(_ctx(8), ReplicaView("a")) == 0.0  # no full block: nothing to match


def test_queue_scorer_decreases_with_depth_and_uses_larger_of_router_and_engine() -> None:
    s = QueueScorer()
    ctx = _ctx()
    assert s.score(ctx, ReplicaView("a")) == 1.0
    assert s.score(ctx, ReplicaView("a", ongoing=4)) == pytest.approx(0.5)
    assert s.score(ctx, ReplicaView("a", ongoing=1, waiting=3, running=1)) == pytest.approx(0.5)
    assert s.score(ctx, ReplicaView("a", ongoing=8)) < s.score(ctx, ReplicaView("a", ongoing=2))


def test_kv_scorer_prefers_free_cache_and_clamps() -> None:
    s = KVUsageScorer()
    ctx = _ctx()
    assert s.score(ctx, ReplicaView("a", kv_usage=0.25)) == 0.75
    assert s.score(ctx, ReplicaView("a", kv_usage=1.7)) == 0.0
    assert s.score(ctx, ReplicaView("a", kv_usage=-0.1)) == 1.0


def test_ttft_prediction_counts_queue_and_uncached_tokens_over_rate() -> None:
    ctx = _ctx(640, {"hit": 30})  # 640 tokens, 480 cached on "hit"
    busy = ReplicaView("hit", waiting_prefill_tokens=840, prefill_tokens_per_s=500.0)
    assert predicted_ttft_s(ctx, busy) == pytest.approx((840 + 160) / 500.0)
    idle_cold = ReplicaView("cold", prefill_tokens_per_s=640.0)
    assert predicted_ttft_s(ctx, idle_cold) == pytest.approx(1.0)
    unknown = ReplicaView("cold")  # no measured rate: config default (1000 tok/s)
    assert predicted_ttft_s(ctx, unknown) == pytest.approx(0.64)
    s = TTFTScorer()
    assert s.score(ctx, idle_cold) == pytest.approx(0.5)  # t == ttft_ref_s
    assert 0.0 < s.score(ctx, busy) < s.score(ctx, idle_cold) <= 1.0


def test_weighted_sum_uses_config_weights() -> None:
    weights = {"prefix": 2.0, "queue": 0.0, "kv": 1.0, "ttft": 0.0, "spread": 0.0, "share": 0.0}
    cfg = RouterConfig.from_dict({"weights": weights})
    ctx = _ctx(64, {"a": 2}, cfg)
    scores = weighted_scores(ctx, [ReplicaView("a", kv_usage=0.5), ReplicaView("b", ongoing=9)])
    assert scores == {"a": pytest.approx(2 * 0.5 + 0.5), "b": pytest.approx(1.0)}


def test_config_rejects_unknown_keys_and_bad_values() -> None:
    with pytest.raises(ValueError, match="unknown router config keys"):
        RouterConfig.from_dict({"load_slak": 0.1})
    with pytest.raises(ValueError, match="unknown weights keys"):
        RouterConfig.from_dict({"weights": {"cache": 1.0}})
    with pytest.raises(ValueError):
        RouterConfig.from_dict({"queue_ref": 0})
    assert RouterConfig.from_dict({"load_slack": 1}).load_slack == 1.0


@pytest.mark.parametrize(
    ("weights", "with_fill", "with_share", "prompt"),
    [
        ({}, True, True, 640),
        ({}, False, False, 640),
        ({}, True, False, 8),  # no full block: the prefix term is 0
        ({"prefix": 0, "kv": 0, "spread": 2.0}, True, True, 640),
        ({"queue": 0, "ttft": 0, "share": 0}, False, True, 640),
    ],
)
def test_fused_hot_path_equals_generic_scorer_sum(
    weights: dict[str, float], with_fill: bool, with_share: bool, prompt: int
) -> None:
    rng = random.Random(2)
    views = [
        ReplicaView(
            f"r{i}",
            ongoing=rng.randint(0, 9),
            waiting=rng.randint(0, 5),
            running=rng.randint(0, 5),
            waiting_prefill_tokens=rng.randint(-10, 5000),
            kv_usage=rng.uniform(-0.2, 1.2),
            prefill_tokens_per_s=rng.choice([0.0, 800.0, 5000.0]),
        )
        for i in range(20)
    ]
    cfg = RouterConfig.from_dict({"weights": weights})
    ctx = _ctx(prompt, {f"r{i}": rng.randint(0, 60) for i in range(20)}, cfg)
    if with_fill:  # some replicas missing from the map, some fills out of [0, 1]
        ctx = replace(ctx, cache_fill={f"r{i}": rng.uniform(-0.2, 1.2) for i in range(15)})
    if with_share:
        ctx = replace(ctx, relative_share={f"r{i}": rng.random() * 3 for i in range(15)})
    fused = weighted_scores(ctx, views)
    generic = weighted_scores(ctx, views, scorers=tuple(list(ALL_SCORERS)))
    assert fused.keys() == generic.keys()
    assert all(fused[k] == pytest.approx(generic[k]) for k in fused)


def test_share_scorer_prefers_replicas_that_took_less_recent_work() -> None:
    req = RequestView("r", "m", tuple(range(64)), (1, 2, 3, 4), 8)
    ctx = ScoringContext(req, {}, 16, CFG, relative_share={"a": 2.5, "b": 1.0, "c": 0.0})
    s = ShareScorer()
    got = [s.score(ctx, ReplicaView(r)) for r in ("a", "b", "c", "d")]
    assert got == [0.0, 0.5, 1.0, 1.0]  # 0 at twice a fair share; unknown = took nothing
    assert s.score(_ctx(64), ReplicaView("a")) == 1.0  # no shares given (warm request): flat
