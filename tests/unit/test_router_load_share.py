"""The sustained load-share bound (router.load_share + PrefixAwarePolicy.bounded)."""

from __future__ import annotations

import math

import pytest

from router.config import RouterConfig
from router.load_share import LoadShare, PrefixHeat
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
    with pytest.raises(ValueError, match=r"window_s must be > 0"):
        LoadShare(window_s=0)


def test_scaled_values_match_direct_decay_over_a_long_run() -> None:
    """Shares and totals equal a direct per-replica exponential decay, also after hours of
    events (the scaled values are rebased instead of overflowing)."""
    import random

    rng = random.Random(5)
    window = 30.0
    s = LoadShare(window_s=window)
    direct: dict[str, tuple[float, float]] = {}  # replica -> (value, at)
    now = 0.0
    ids = [f"r{i}" for i in range(6)]
    for _ in range(20_000):  # ~11 h of events, 2 s apart on average (rebased ~25 times)
        now += rng.expovariate(0.5)
        rid = rng.choice(ids[:5])  # r5 never routed
        v, at = direct.get(rid, (0.0, now))
        direct[rid] = (v * math.exp(-(now - at) / window) + 9.0, now)
        s.add(rid, 9.0, now)

    def decayed(rid: str, t: float) -> float:
        v, at = direct.get(rid, (0.0, t))
        return v * math.exp(-(t - at) / window)

    total = sum(decayed(r, now) for r in ids)
    assert s.total(ids) == pytest.approx(total, rel=1e-9)
    for rid, share in s.shares(ids).items():
        assert share == pytest.approx(decayed(rid, now) / total, rel=1e-9, abs=1e-12)
    later = now + 45.0
    assert s.total(ids, later) == pytest.approx(sum(decayed(r, later) for r in ids), rel=1e-9)
    assert math.isfinite(max(s.shares(ids).values()))


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


def test_prefix_heat_decays_and_keeps_the_most_recent_prefixes() -> None:
    h = PrefixHeat(window_s=10.0, max_keys=2)
    h.add(1, 10.0, now=0.0)
    assert h.value(1, now=10.0) == pytest.approx(10.0 * math.exp(-1))
    h.add(2, 1.0, now=1.0)
    h.add(1, 1.0, now=2.0)  # 1 is now the most recent
    h.add(3, 1.0, now=3.0)  # over max_keys: 2 (least recent) goes
    assert len(h) == 2
    assert h.value(2, now=3.0) == 0.0
    assert h.value(1, now=3.0) > 1.0
    with pytest.raises(ValueError, match=r"max_keys >= 1"):
        PrefixHeat(max_keys=0)


def _prefixed(i: int, first: int) -> RequestView:
    return RequestView(str(i), "m", tuple(range(64)), (first, 2, 3, 4), 9)


def test_busy_sole_holder_of_a_rare_prefix_is_kept_a_hot_prefix_is_shed() -> None:
    """The burst guard skips a busy replica, but for a rare prefix only it holds, moving
    the request costs a whole prefill elsewhere: it stays eligible (the scorers decide). A
    hot prefix (>= 1/n of recent work) is still shed, so it gets replicated; so is every
    request from a replica over its sustained share (the hot-spot guard)."""
    # hot prefix 7 -> "a" (a fifth to "b"), rare prefix 8 -> "a" once
    events = [Routed(_prefixed(k, 7), "a" if k % 5 else "b", float(k + 1)) for k in range(30)]
    events.append(Routed(_prefixed(99, 8), "a", 31.0))
    no_share_guard = {"min_load_cap": 2, "load_slack": 0.0, "share_slack": 100.0}
    p = PrefixAwarePolicy(config=RouterConfig.from_dict(no_share_guard))
    for ev in events:
        p.observe(ev)
    views = [ReplicaView("a", ongoing=6), ReplicaView("b", ongoing=1), ReplicaView("c")]
    rare, hot = _prefixed(100, 8), _prefixed(101, 7)

    def kept(policy: PrefixAwarePolicy, req: RequestView) -> set[str]:
        return {r.replica_id for r in policy.bounded(views, req, policy.matches(req, views))}

    assert "a" in kept(p, rare)
    assert "a" not in kept(p, hot)
    assert "a" not in {r.replica_id for r in p.bounded(views)}  # no request: guards as before
    # "a" over its sustained share (default share_slack 0.25): the hot-spot guard still holds
    shared = PrefixAwarePolicy(config=RouterConfig.from_dict({"min_load_cap": 2}))
    for ev in events:
        shared.observe(ev)
    assert "a" not in kept(shared, rare)
    # another replica under the guards holding at least half of the prefix: shed as before
    p.observe(Routed(_prefixed(102, 8), "c", 32.0))
    assert "a" not in kept(p, rare)
