"""Quotas shared between ingress replicas: the limiter's shared mode (``cluster/quotas.py``)
and the adapter that carries the use between replicas (``cluster/quota_sync.py``)."""

from __future__ import annotations

import asyncio
import json

import pytest

from cluster.quota_peers import PEER_STALE_S
from cluster.quota_sync import MAX_AGE_S, QuotaSync, apply_batches, decode, encode
from cluster.quotas import QuotaLimiter
from tests.fakes import FakeStatusActor, until
from tests.unit.test_quotas import Clock, Limits


def pair(shared: bool = True) -> tuple[QuotaLimiter, QuotaLimiter, Clock]:
    """Two ingress replicas' limiters (ranks 0 and 1 of 2) on one clock, noting their use."""
    clock = Clock()
    a = QuotaLimiter(clock=clock, share=0.5, rank=0)
    b = QuotaLimiter(clock=clock, share=0.5, rank=1)
    for q in (a, b):
        q.share_with(lambda: None)
        q.set_shared(shared)
    return a, b, clock


def sync(src: QuotaLimiter, dst: QuotaLimiter, origin: str) -> None:
    taken = src.take_usage()
    if taken is not None:
        dst.record_peer(origin, *taken)


def test_shared_streams_count_the_whole_fleet() -> None:
    # The old split gave each of 2 replicas 1 of a 2-stream limit: a key's second stream was
    # refused whenever both landed on one replica.
    a, b, _ = pair()
    two = Limits(max_streams=2)
    first = a.admit("k", two, 0)
    second = a.admit("k", two, 0)
    assert first.ok
    assert second.ok, second.message
    sync(a, b, "A")
    refused = b.admit("k", two, 0)
    assert not refused.ok
    assert refused.reason == "streams"
    assert "limit 2, in flight 2" in refused.message
    assert "per ingress" not in refused.message
    assert first.ticket is not None
    a.settle(first.ticket, 0)  # one ends: the peer hears it and has room again
    sync(a, b, "A")
    assert b.admit("k", two, 0).ok


def test_split_mode_keeps_each_replica_to_its_part() -> None:
    a, b, _ = pair(shared=False)
    two = Limits(max_streams=2)
    assert a.admit("k", two, 0).ok
    refused = a.admit("k", two, 0)
    assert not refused.ok
    assert "limit 2 (1 per ingress), in flight 1" in refused.message
    b.record_peer("A", {"k": (1.0, 0.0)}, {"k": 5})  # ignored: split replicas enforce parts
    assert b.admit("k", two, 0).ok


def test_requests_per_minute_hold_fleet_wide_with_no_early_refusal() -> None:
    a, b, _ = pair()
    rpm = Limits(requests_per_min=10)
    admitted = []
    for i in range(30):  # all on one replica at first, then alternating
        q, peer, name = (a, b, "A") if i < 6 or i % 2 else (b, a, "B")
        admitted.append(q.admit("k", rpm, 0).ok)
        sync(q, peer, name)
    assert admitted[:10] == [True] * 10  # the fleet's whole limit, though 6 came to A first
    assert sum(admitted) == 10
    refused = b.admit("k", rpm, 0)
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    assert "limit 10, used 10" in refused.message


def test_a_request_larger_than_a_replicas_part_passes_when_shared() -> None:
    a, _, _ = pair(shared=False)
    tpm = Limits(tokens_per_min=1000)
    assert a.admit("k", tpm, 800).reason == "tokens_exceed_limit"  # split: 500 per ingress
    a.set_shared(True)
    assert a.admit("k", tpm, 800).ok


def test_peer_refunds_and_spending_reach_the_buckets() -> None:
    a, b, _ = pair()
    tpm = Limits(tokens_per_min=1000)
    t = a.admit("k", tpm, 600).ticket
    assert t is not None
    sync(a, b, "A")
    assert b.admit("k", tpm, 600).reason == "tokens"  # the fleet has 400 left
    a.settle(t, 100)  # 500 unused, refunded on both
    sync(a, b, "A")
    assert b.admit("k", tpm, 600).ok


def test_spending_before_the_key_was_known_counts_then_refills() -> None:
    a, b, clock = pair()
    rpm = Limits(requests_per_min=60)
    for _ in range(60):
        assert a.admit("k", rpm, 0).ok
    sync(a, b, "A")  # b has never seen "k": it owes 60 requests
    assert b.admit("k", rpm, 0).reason == "requests"
    clock.now += 2.0  # 2 requests refilled since then
    assert b.admit("k", rpm, 0).ok
    assert b.admit("k", rpm, 0).ok
    assert not b.admit("k", rpm, 0).ok


def test_a_silent_peers_streams_stop_counting() -> None:
    a, b, clock = pair()
    one = Limits(max_streams=1)
    assert a.admit("k", one, 0).ok
    sync(a, b, "A")
    assert not b.admit("k", one, 0).ok
    clock.now += PEER_STALE_S + 0.1  # A died holding it: no heartbeat
    assert b.admit("k", one, 0).ok


def test_buckets_overspent_by_peers_stay_bounded() -> None:
    a, _, _ = pair()
    rpm = Limits(requests_per_min=10)
    assert a.admit("k", rpm, 0).ok
    a.record_peer("B", {"k": (1000.0, 0.0)}, {})
    refused = a.admit("k", rpm, 0)
    # the level stops at -capacity (-10): 11 requests to refill before one fits
    assert refused.retry_after_s == pytest.approx(60.0 * 11 / 10, rel=0.01)


def test_wire_round_trip_and_bad_or_old_batches() -> None:
    batch = encode({"k": (1.0, 25.0)}, {"k": 2}, 5000.0)
    assert decode(batch) == (5000.0, {"k": (1.0, 25.0)}, {"k": 2})
    _, b, clock = pair()
    old = encode({"k": (50.0, 0.0)}, {"k": 1}, 5000.0 - MAX_AGE_S - 1)
    bad = [b"{", json.dumps({"v": 9}).encode(), b'{"v":1,"t":0,"spent":{"k":1},"streams":{}}']
    own = encode({"k": (50.0, 0.0)}, {}, 5000.0)
    assert apply_batches(b, [("x", x) for x in bad] + [("A", old), ("B", own)], "B", 5000.0) == 3
    rpm = Limits(requests_per_min=10, max_streams=1)
    assert b.fleet_streams("k") == 0  # neither the old batch's stream...
    assert b.admit("k", rpm, 0).ok  # ...nor its spending, nor our own batch's
    recent = encode({}, {"k": 1}, 5000.0 - PEER_STALE_S + 1)
    apply_batches(b, [("C", recent)], "B", 5000.0)
    assert b.fleet_streams("k") == 2  # a recent batch's streams count...
    clock.now += 1.5
    assert b.fleet_streams("k") == 1  # ...until it is PEER_STALE_S old


async def test_sync_carries_use_between_replicas_and_falls_back_to_split() -> None:
    actor = FakeStatusActor()
    a, b = QuotaLimiter(share=0.5, rank=0), QuotaLimiter(share=0.5, rank=1)
    syncs = [QuotaSync(q, "ch", wait_s=0.05, retry_s=0.05) for q in (a, b)]
    for s in syncs:
        s._actor = lambda: actor  # type: ignore[method-assign]
        s.start()

    try:
        await until(lambda: a.shared and b.shared)
        two = Limits(max_streams=2)
        assert a.admit("k", two, 0).ok
        assert a.admit("k", two, 0).ok
        await until(lambda: b.fleet_streams("k") == 2)
        assert not b.admit("k", two, 0).ok
        actor.down = True  # the log is gone: both fall back to their parts
        await until(lambda: not a.shared and not b.shared)
        assert b.admit("k", two, 0).ok  # rank 1's part of 2 is 1
        actor.down = False
        await until(lambda: a.shared and b.shared)
        await until(lambda: a.fleet_streams("k") == 3)  # b re-sent its open streams
    finally:
        for s in syncs:
            s.stop()


def test_keys_without_limits_are_not_shared() -> None:
    a, _, _ = pair()
    t = a.admit("free", Limits(), 100).ticket
    assert t is not None
    a.settle(t, 10)
    assert a.take_usage() is None
    t = a.admit("capped", Limits(max_streams=5), 100).ticket
    assert a.take_usage() == ({"capped": (0.0, 0.0)}, {"capped": 1})


async def test_a_replicas_first_request_waits_for_the_fleets_use() -> None:
    """Without ``ready`` a fresh replica judged its first requests in split mode: 3 of 4
    streams of a 4-stream key on one replica got a 429 from its part of 2."""
    actor = FakeStatusActor()
    a, b = QuotaLimiter(share=0.5, rank=0), QuotaLimiter(share=0.5, rank=1)
    syncs = [QuotaSync(q, "ch", wait_s=0.05, retry_s=0.05) for q in (a, b)]
    for s in syncs:
        s._actor = lambda: actor  # type: ignore[method-assign]
    try:
        await syncs[0].ready()
        assert a.shared
        four = Limits(max_streams=4)
        assert all(a.admit("k", four, 0).ok for _ in range(3))
        await asyncio.sleep(0.02)  # a's sender runs
        await syncs[1].ready()
        assert b.shared
        assert b.fleet_streams("k") == 3  # the log held a's use: read before b's first
        assert b.admit("k", four, 0).ok
        assert not b.admit("k", four, 0).ok
    finally:
        for s in syncs:
            s.stop()


async def test_ready_does_not_wait_when_there_is_no_log() -> None:
    q = QuotaLimiter(share=0.5)
    sync = QuotaSync(q, "ch", retry_s=0.05)
    sync._actor = lambda: None  # type: ignore[method-assign]
    try:
        t0 = asyncio.get_running_loop().time()
        await sync.ready(timeout_s=5.0)
        assert asyncio.get_running_loop().time() - t0 < 1.0
        assert not q.shared
        assert q.stream_cap(4) == 2  # split: its part
    finally:
        sync.stop()


async def test_an_idle_replica_returns_to_shared_mode_after_an_outage() -> None:
    actor = FakeStatusActor()
    q = QuotaLimiter(share=0.5)
    sync = QuotaSync(q, "ch", wait_s=0.05, retry_s=0.05, heartbeat_s=0.05)
    sync._actor = lambda: actor  # type: ignore[method-assign]
    try:
        await sync.ready()
        t = q.admit("k", Limits(requests_per_min=10), 0).ticket  # a send: then idle
        assert t is not None
        q.settle(t, 0)
        actor.down = True
        for _ in range(100):
            if not q.shared:
                break
            await asyncio.sleep(0.01)
        assert not q.shared
        actor.down = False  # no request, no open stream: the sender's probe heals it
        for _ in range(200):
            if q.shared:
                break
            await asyncio.sleep(0.01)
        assert q.shared
    finally:
        sync.stop()


async def test_the_mode_is_reported_every_round() -> None:
    # the ingress's llmfleet_ingress_quota_shared gauge (alert LLMFleetQuotaSharingDown)
    actor = FakeStatusActor()
    modes: list[bool] = []
    sync = QuotaSync(QuotaLimiter(share=0.5), "ch", wait_s=0.02, retry_s=0.02, report=modes.append)
    sync._actor = lambda: actor  # type: ignore[method-assign]
    try:
        await sync.ready()
        await until(lambda: modes and modes[-1], "shared")
        actor.down = True
        await until(lambda: not modes[-1], "split")
        actor.down = False
        await until(lambda: modes[-1], "shared again")
    finally:
        sync.stop()
