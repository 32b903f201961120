"""The sustained load-share bound (router.load_share + PrefixAwarePolicy.bounded)."""

from __future__ import annotations

import math

import pytest

from router.config import RouterConfig
from router.load_share import LoadShare
from router.prefix_policy import PrefixAwarePolicy
from router.types import ReplicaGone, ReplicaView, RequestView, Routed


def test_shares_decay_with_the_events_clock() -> None:
    s = LoadShare(window_s=10.0)
    s.add("a", 10.0, now=0.0)
    s.add("b", 10.0, now=10.0)  # a has decayed by e^-1 by now
    shares = s.shares(["a", "b"])
    assert shares["a"] == pytest.approx(math.exp(-1) / (1 + math.exp(-1)))
    assert sum(shares.values()) == pytest.approx(1.0)
    assert s.shares(["x", "y"]) == {"x": 0.0, "y": 0.0}
    s.drop("a")
    assert s.shares(["a", "b"]) == {"a": 0.0, "b": 1.0}
    with pytest.raises(ValueError):
        LoadShare(window_s=0)


def test_over_share_uses_slack_over_an_equal_split() -> None:
    s = LoadShare(window_s=1e9)
    for rid, w in (("a", 30.0), ("b", 20.0), ("c", 25.0), ("d", 25.0)):
        s.add(rid, w, now=0.0)
    ids = ["a", "b", "c", "d"]
    assert s.over_share(ids, slack=0.1) == {"a"}  # 0.30 > 0.275
    assert s.over_share(ids, slack=0.25) == set()  # 0.30 <= 0.3125
    assert s.over_share(["a"], slack=0.0) == set()  # one replica is never over its share


def _req(i: int, output: int = 9) -> RequestView:
    tokens = tuple(range(64))
    return RequestView(str(i), "m", tokens, (1, 2, 3, 4), output)


def test_policy_filters_a_replica_that_keeps_taking_more_than_its_share() -> None:
    cfg = RouterConfig.from_dict({"share_slack": 0.25, "min_load_cap": 2, "load_slack": 100})
    p = PrefixAwarePolicy(config=cfg)
    for k in range(40):  # "a" took 70 % of the recent work
        p.observe(Routed(_req(k), "a" if k % 10 < 7 else "b", float(k)))
    views = [ReplicaView("a", ongoing=3), ReplicaView("b", ongoing=3)]
    assert [r.replica_id for r in p.bounded(views)] == ["b"]
    # below min_load_cap in flight it is never filtered (a few more requests cost little)
    views = [ReplicaView("a", ongoing=1), ReplicaView("b", ongoing=3)]
    assert {r.replica_id for r in p.bounded(views)} == {"a", "b"}
    p.observe(ReplicaGone("a", 41.0))
    assert p.load_share.shares(["a", "b"])["a"] == 0.0


def test_cold_requests_go_where_the_least_work_went_warm_ones_keep_affinity() -> None:
    p = PrefixAwarePolicy(config=RouterConfig.from_dict({"weights": {"spread": 0.0}}))
    views = [ReplicaView("a"), ReplicaView("b"), ReplicaView("c")]
    for k in range(30):  # recent work: a 60 %, b 30 %, c 10 %
        rid = "a" if k % 10 < 6 else ("b" if k % 10 < 9 else "c")
        p.observe(Routed(RequestView(f"w{k}", "m", (), (), 9), rid, 0.0))
    assert p.relative_share(views) == pytest.approx({"a": 1.8, "b": 0.9, "c": 0.3})
    cold = RequestView("cold", "m", tuple(range(64)), (7, 8, 9, 10), 9)
    assert p.choose(cold, views).replica_id == "c"
    # a prompt "a" holds stays on "a": the share scorer only places cold requests
    p.observe(Routed(_req(99), "a", 0.0))
    warm = _req(100)
    decision = p.choose(warm, views)
    assert (decision.replica_id, decision.reason) == ("a", "affinity")
    off = PrefixAwarePolicy(config=RouterConfig.from_dict({"weights": {"share": 0, "spread": 0}}))
    assert off.relative_share(views) == dict.fromkeys("abc", 0.0)  # nothing routed yet
