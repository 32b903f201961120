"""``router/retry_pacer.py``: the wait before each routing round of a queued request, and
the wakes that cut it short."""

from __future__ import annotations

import asyncio
import threading
import time
from types import SimpleNamespace

from router.retry_pacer import RetryPacer


def test_schedule_is_serves_doubling_capped() -> None:
    p = RetryPacer()
    assert [p.timeout_s(n) for n in range(7)] == [0.0, 0.025, 0.05, 0.1, 0.2, 0.4, 0.5]
    assert p.timeout_s(5000) == 0.5  # no overflow


async def _round_after(p: RetryPacer, ctx: SimpleNamespace) -> float:
    t0 = time.monotonic()
    await p.before_round(ctx)
    return time.monotonic() - t0


async def test_first_round_is_immediate_later_ones_wait_their_timeout() -> None:
    p = RetryPacer(initial_s=0.05)
    ctx = SimpleNamespace()
    assert await _round_after(p, ctx) < 0.01
    assert 0.045 < await _round_after(p, ctx) < 0.2
    assert ctx.llmfleet_round == 2
    assert p.waiting == 0
    assert not p._waiters
    await p.before_round(None)  # no routing context: no pacing


async def test_freed_wakes_one_waiter_oldest_first_and_wake_all_the_rest() -> None:
    p = RetryPacer(initial_s=5.0, max_s=5.0)
    ctxs = [SimpleNamespace(llmfleet_round=1) for _ in range(3)]
    waits = [asyncio.create_task(p.before_round(c)) for c in ctxs]
    await asyncio.sleep(0.01)
    assert p.waiting == 3
    p.freed()
    await asyncio.sleep(0.01)
    assert [w.done() for w in waits] == [True, False, False]
    p.wake_all()
    await asyncio.wait_for(asyncio.gather(*waits), 1.0)
    assert p.wakes == 3
    assert p.waiting == 0


async def test_freed_from_another_thread_reaches_the_loop() -> None:
    p = RetryPacer(initial_s=5.0, max_s=5.0)
    wait = asyncio.create_task(p.before_round(SimpleNamespace(llmfleet_round=3)))
    await asyncio.sleep(0.01)
    t0 = time.monotonic()
    threading.Thread(target=p.freed).start()
    await asyncio.wait_for(wait, 1.0)
    assert time.monotonic() - t0 < 0.5


async def test_a_wake_skips_requests_that_stopped_waiting() -> None:
    p = RetryPacer(initial_s=5.0, max_s=5.0)
    gone = asyncio.create_task(p.before_round(SimpleNamespace(llmfleet_round=1)))
    live = asyncio.create_task(p.before_round(SimpleNamespace(llmfleet_round=1)))
    await asyncio.sleep(0.01)
    gone.cancel()  # the client went away
    await asyncio.sleep(0.01)
    p.freed()
    await asyncio.wait_for(live, 1.0)
    assert p.wakes == 1


async def test_a_completion_nobody_waited_for_lets_the_next_retry_start_at_once() -> None:
    p = RetryPacer(initial_s=5.0, max_s=0.2)
    ctx = SimpleNamespace()
    await p.before_round(ctx)  # round 0: at once
    first = asyncio.create_task(p.before_round(SimpleNamespace(llmfleet_round=1)))
    await asyncio.sleep(0.01)
    p.freed()  # wakes `first`
    await asyncio.wait_for(first, 1.0)
    p.freed()  # nobody waits (between rounds): kept
    assert p.credits == 1
    assert await _round_after(p, ctx) < 0.05  # used at once
    p.freed()
    await asyncio.sleep(0.25)  # older than max_s: dropped
    assert 0.15 < await _round_after(p, ctx) < 0.5
    assert p.credits == 0
