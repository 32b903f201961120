"""Concurrency slots granted fleet-wide (``replicas/slot_table.py`` through the status
actor): ``QuotaSync.acquire`` / ``flush`` and ``Guard.admit`` / ``settle_seen`` over two
ingress replicas sharing an in-process status actor."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from cluster.guard import Guard
from cluster.keys import ApiKey, KeyLimits
from cluster.quota_sync import QuotaSync, decode
from contracts.http import APIError
from tests.fakes import FakeStatusActor, until


def guards(actor: FakeStatusActor) -> tuple[list[Guard], list[QuotaSync]]:
    """Two ingress replicas' doors (ranks 0 and 1 of 2) sharing through ``actor``."""
    gs = [Guard(None, share=0.5, rank=r) for r in (0, 1)]
    syncs = [QuotaSync(g.quotas, "ch", wait_s=0.05, retry_s=0.05) for g in gs]
    for s in syncs:
        s._actor = lambda: actor  # type: ignore[method-assign]
    return gs, syncs


KEY = ApiKey("team", False, KeyLimits(max_streams=4), "kid")


async def test_a_burst_of_streams_over_two_replicas_gets_exactly_the_limit() -> None:
    """Before the slot table each replica judged on its own view: 40 concurrent streams on a
    4-stream key over 2 ingresses got 8 (each filled the limit before hearing of the
    other). Every slot is now granted in one place."""
    actor = FakeStatusActor()
    gs, syncs = guards(actor)

    refusals: list[APIError] = []

    async def one(i: int) -> Any:
        try:
            return await gs[i % 2].admit(KEY, 0, syncs[i % 2])
        except APIError as err:
            refusals.append(err)
            return None

    try:
        for s in syncs:
            await s.ready()
        passes = await asyncio.gather(*(one(i) for i in range(40)))
        held = [p for p in passes if p is not None]
        assert len(held) == 4
        assert {(e.status, e.message.split(",")[0]) for e in refusals} == {
            (429, "Rate limit reached for concurrent requests: limit 4")
        }
        # asks in flight counted as held until each replica's next batch says what it holds
        await until(lambda: actor.slots.count("kid", time.monotonic()) == 4, "the reports")
        # a stream ends: its slot reaches the table with the next batch, then is granted
        end = held[0]
        gs[0 if end.ticket in gs[0].quotas._open.values() else 1].settle(end, 0)
        await until(lambda: actor.slots.count("kid", time.monotonic()) == 3, "the release")
        assert (await one(1)) is not None
        assert await one(0) is None
    finally:
        for s in syncs:
            s.stop()


async def test_a_refused_or_unused_slot_is_given_back() -> None:
    actor = FakeStatusActor()
    gs, syncs = guards(actor)
    tight = ApiKey("t", False, KeyLimits(requests_per_min=1, max_streams=2), "tid")
    try:
        await syncs[0].ready()
        first = await gs[0].admit(tight, 0, syncs[0])
        gs[0].settle(first, 0)
        # granted a slot, then refused by requests per minute: the table must not keep it
        with pytest.raises(APIError, match="requests per min") as refused:
            await gs[0].admit(tight, 0, syncs[0])
        assert refused.value.status == 429
        await until(lambda: actor.slots.count("tid", time.monotonic()) == 0, "the give-back")
    finally:
        for s in syncs:
            s.stop()


async def test_without_an_answer_from_the_table_the_replicas_view_decides() -> None:
    actor = FakeStatusActor()
    gs, syncs = guards(actor)
    try:
        await syncs[0].ready()
        assert gs[0].quotas.shared
        actor.slots_down = True  # the log still answers: shared mode, on this replica's view
        passes = [await gs[0].admit(KEY, 0, syncs[0]) for _ in range(4)]
        assert syncs[0].slot_errors >= 1
        assert all(p.ticket is not None for p in passes)
        with pytest.raises(APIError, match="concurrent requests: limit 4, in flight 4"):
            await gs[0].admit(KEY, 0, syncs[0])
    finally:
        for s in syncs:
            s.stop()


async def test_a_released_slot_reaches_the_table_before_the_answer_ends() -> None:
    """Found by hand: on a busy fleet, 1 of 400 requests sent one after another on a
    1-stream key got a 429 (the next request reached the table before the release of the
    one whose answer had ended). ``settle_seen`` waits for the batch that carries it."""
    actor = FakeStatusActor()
    gs, syncs = guards(actor)
    one = ApiKey("one", False, KeyLimits(max_streams=1), "oid")
    try:
        for s in syncs:
            await s.ready()
        for i in range(6):  # one after another, over both replicas
            g, s = gs[i % 2], syncs[i % 2]
            grant = await g.admit(one, 0, s)
            assert grant.ticket is not None
            assert grant.ticket.slot
            await g.settle_seen(grant, 0, s)
            assert actor.slots.count("oid", time.monotonic()) == 0  # no wait for the sender
        # without the wait, the table still counts the slot right after a plain settle
        grant = await gs[0].admit(one, 0, syncs[0])
        gs[0].settle(grant, 0)
        assert actor.slots.count("oid", time.monotonic()) == 1  # (another replica's ask now: 429)
    finally:
        for s in syncs:
            s.stop()


async def test_a_tokens_refund_is_sent_before_the_answer_ends() -> None:
    actor = FakeStatusActor()
    gs, syncs = guards(actor)
    tpm = ApiKey("tpm", False, KeyLimits(tokens_per_min=1000), "tpmid")
    try:
        await syncs[0].ready()
        grant = await gs[0].admit(tpm, 800, syncs[0])  # prompt + max_tokens
        await asyncio.sleep(0.02)  # the admission's batch is sent
        sent = actor.log.next_seq("ch")
        await gs[0].settle_seen(grant, 50, syncs[0])  # 750 unused: refunded
        batches = actor.log.since("ch", actor.log.epoch, sent)[2]
        assert [decode(b)[1] for _, b in batches] == [{"tpmid": (0.0, -750.0)}]
    finally:
        for s in syncs:
            s.stop()


async def test_a_spent_key_asks_the_table_for_nothing() -> None:
    actor = FakeStatusActor()
    gs, syncs = guards(actor)
    spent = ApiKey("s", False, KeyLimits(requests_per_min=1, max_streams=5), "sid")
    asked: list[str] = []
    acquire = syncs[0].acquire

    async def counting(key_id: str, limit: int) -> tuple[bool, int] | None:
        asked.append(key_id)
        return await acquire(key_id, limit)

    syncs[0].acquire = counting  # type: ignore[method-assign]
    try:
        await syncs[0].ready()
        gs[0].settle(await gs[0].admit(spent, 0, syncs[0]), 0)
        for _ in range(5):
            with pytest.raises(APIError, match="requests per min"):
                await gs[0].admit(spent, 0, syncs[0])
        assert asked == ["sid"]  # only the first, which the buckets let through
    finally:
        for s in syncs:
            s.stop()


async def test_settling_does_not_wait_while_the_sharing_is_down() -> None:
    actor = FakeStatusActor()
    gs = [Guard(None, share=0.5, rank=0)]
    syncs = [QuotaSync(gs[0].quotas, "ch", wait_s=0.05, retry_s=0.3)]  # between tries: 0.3 s
    syncs[0]._actor = lambda: actor  # type: ignore[method-assign]
    tpm = ApiKey("tpm", False, KeyLimits(tokens_per_min=10_000), "tid2")
    try:
        await syncs[0].ready()
        actor.down = True
        await until(lambda: not gs[0].quotas.shared, "split mode")
        loop = asyncio.get_running_loop()
        for _ in range(3):
            grant = await gs[0].admit(tpm, 100, syncs[0])
            t0 = loop.time()
            await gs[0].settle_seen(grant, 10, syncs[0])
            assert loop.time() - t0 < 0.1  # not until the sender's next try
    finally:
        for s in syncs:
            s.stop()
