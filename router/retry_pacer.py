"""When every replica is full: pace a queued request's routing rounds, and wake it as soon
as a slot frees (asyncio only; the Serve adapter owns one per router).

Serve routes a request in rounds: ask the router for tiers, probe the candidates' queue
lengths over Ray, take the first with room. A round that found none is retried; Serve
sleeps in between (25 ms doubling to 0.5 s) only when the request's
``routing_context.should_backoff`` is set, which its locality and multiplex mixins do and
a custom router must do itself. Without it a queued request re-ran rounds back to back: a
quarter of the ingress's CPU went to queue-length probes, and every replica paid for
answering them. With Serve's sleep instead, a request that has waited a while sleeps up to
0.5 s after a slot frees before it looks again: time to first token it did not need to lose.

So the adapter leaves Serve's flag alone and paces the rounds itself, in ``choose_replicas``:
the first round runs at once; each later round waits for whichever comes first,
- a request of this router completing (``freed``): it wakes the longest-waiting request,
  one per completion, as one slot freed (not every waiter: they would all probe for it).
  A completion that finds no request waiting (they are between rounds, probing) is kept
  as a credit for ``max_s``: the next request to start a retry round starts it at once
  (older credits are dropped: any request waiting then has looked again since). Without
  credits, the last of 8 queued requests waited a whole 0.5-s timeout in 2 of 4 runs;
- the fleet changing (``wake_all``): a new replica has room for all of them (the adapter
  then hands Serve's new replica list to the round, not the one Serve read before it);
- a request of another router (another ingress replica) completing, when the routers share
  routes (``freed_elsewhere``, a few milliseconds later): wakes as many waiters, no credit;
- the request's own timeout, 25 ms doubling to 0.5 s (Serve's schedule): slots freed by
  another ingress's requests when nothing is shared, or a wake that went to a request that
  was then cancelled.
Probes: one round per completion plus the timeouts, never a loop.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
from typing import Any

ROUND_ATTR = "llmfleet_round"  # set on Serve's per-request routing context
MAX_CREDITS = 64  # completions nobody was waiting for, kept for the next retry rounds


def is_retry(context: Any) -> bool:
    """The request behind ``context`` has had a round already (none of it found a slot)."""
    return int(getattr(context, ROUND_ATTR, 0)) > 0


class RetryPacer:
    def __init__(
        self, initial_s: float = 0.025, multiplier: float = 2.0, max_s: float = 0.5
    ) -> None:
        self.initial_s = initial_s
        self.multiplier = multiplier
        self.max_s = max_s
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: int | None = None
        self.wakes = 0  # waiters woken by a completion or a fleet change (tests, metrics)
        self.credits = 0  # completions that found nobody waiting
        self._credit_at = 0.0  # loop time of the newest credit

    def timeout_s(self, round_no: int) -> float:
        """The wait before round ``round_no`` (1 = the first retry)."""
        if round_no <= 0:
            return 0.0
        try:
            return min(self.initial_s * self.multiplier ** (round_no - 1), self.max_s)
        except OverflowError:
            return self.max_s

    async def before_round(self, context: Any) -> None:
        """Called at the start of each round of one request (``context``: its routing
        context, which carries the round count); waits as the module says."""
        if context is None:
            return
        round_no = int(getattr(context, ROUND_ATTR, 0))
        with contextlib.suppress(AttributeError):  # a context that takes no attributes
            setattr(context, ROUND_ATTR, round_no + 1)
        if round_no == 0:
            return
        loop = asyncio.get_running_loop()
        if self.credits > 0 and loop.time() - self._credit_at <= self.max_s:
            self.credits -= 1  # a slot freed while nobody waited: look again now
            return
        self.credits = 0
        self._loop, self._thread = loop, threading.get_ident()
        fut: asyncio.Future[None] = loop.create_future()
        self._waiters.append(fut)
        try:
            await asyncio.wait_for(fut, self.timeout_s(round_no))
        except TimeoutError:
            pass
        finally:
            if not fut.done():
                fut.cancel()
            with contextlib.suppress(ValueError):  # not woken: leave no entry behind
                self._waiters.remove(fut)

    def freed(self) -> None:
        """One slot freed at a replica (a request of this router completed)."""
        self._on_loop(self._wake, 1, True)

    def freed_elsewhere(self, n: int) -> None:
        """``n`` slots freed by other routers' requests (their completions, shared through
        the route log): wake up to ``n`` waiters; nothing is kept for later, as those slots
        are the other routers' to fill as well."""
        self._on_loop(self._wake, n, False)

    def wake_all(self) -> None:
        self._on_loop(self._wake, len(self._waiters), False)

    def _on_loop(self, fn: Any, *args: Any) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        if threading.get_ident() == self._thread:
            fn(*args)
        else:
            loop.call_soon_threadsafe(fn, *args)

    def _wake(self, n: int, keep_credit: bool) -> None:
        while n > 0 and self._waiters:
            fut = self._waiters.popleft()
            if fut.done():  # timed out or cancelled: not waiting any more
                continue
            fut.set_result(None)
            self.wakes += 1
            n -= 1
        if keep_credit and n > 0 and self._loop is not None:
            self.credits = min(self.credits + n, MAX_CREDITS)
            self._credit_at = self._loop.time()

    @property
    def waiting(self) -> int:
        return sum(1 for f in self._waiters if not f.done())
