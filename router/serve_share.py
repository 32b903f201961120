"""Ray adapter: routers on different ingress replicas share their routes through the status
actor (``router/route_share.py`` says what and why; ``replicas/route_log.py`` the log).

How it runs: ``start()`` (from the router's first ``choose_replicas``, on the router's event
loop) launches two tasks on that loop; neither is awaited by routing.
- sender: woken by ``record()`` (``on_request_routed``) or ``record_freed()``
  (``on_request_completed``), sends the buffered routes and freed slots with
  ``append_routes`` and then waits ``min_interval_s`` before the next send, so a burst
  travels as a few batches (at most 1 / ``min_interval_s`` sends a second);
- receiver: a long poll, ``routes_since(channel, epoch, seq, origin, wait_s)``, which the
  actor answers as soon as another router appends (or after ``wait_s`` with nothing); the
  routes go to ``apply`` (the router hands them to its policy as ``PeerRouted``), the
  slots freed to ``on_freed`` (the router wakes as many of its queued requests).
A route reaches the other routers within a few milliseconds of ``on_request_routed``.
Best effort: no status actor, a slow one (``timeout_s``) or an old one without the methods
(a detached actor from an earlier version) only stop the sharing for ``retry_s``; a
restarted actor has a new epoch and the receiver reads its log from the start. Routes
recorded meanwhile stay buffered (bounded by ``RouteShare.max_routes``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from router.route_share import RouteShare, SharedRoute

log = logging.getLogger(__name__)


class PeerShare:
    def __init__(
        self,
        store: str,
        channel: str,
        apply: Callable[[list[SharedRoute]], None],
        namespace: str = "llmfleet",
        on_freed: Callable[[int], None] | None = None,
        min_interval_s: float = 0.01,
        wait_s: float = 2.0,
        timeout_s: float = 2.0,
        retry_s: float = 1.0,
    ) -> None:
        self.store = store
        self.channel = channel
        self.apply = apply
        self.on_freed = on_freed
        self.namespace = namespace
        self.min_interval_s = min_interval_s
        self.wait_s = wait_s
        self.timeout_s = timeout_s
        self.retry_s = retry_s
        self.share = RouteShare()
        self.errors = 0
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def started(self) -> bool:
        return bool(self._tasks)

    def start(self) -> None:
        """Launch the sender and the receiver on the running loop (once)."""
        if self._tasks:
            return
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._tasks = [
            self._loop.create_task(self._send()),
            self._loop.create_task(self._receive()),
        ]
        if self.share.pending():
            self._wake.set()

    def stop(self) -> None:
        for task in self._tasks:
            task.cancel()

    def record(self, replica_id: str, block_hashes: tuple[int, ...]) -> None:
        self.share.record(replica_id, block_hashes)
        self._poke()

    def record_freed(self) -> None:
        self.share.record_freed()
        self._poke()

    def _poke(self) -> None:
        if self._wake is not None and not self._wake.is_set() and self._loop is not None:
            if self._loop is _running_loop():
                self._wake.set()
            else:  # a Serve hook on another thread: hand the wake-up to the router's loop
                self._loop.call_soon_threadsafe(self._wake.set)

    def _actor(self) -> Any:
        import ray

        try:
            return ray.get_actor(self.store, namespace=self.namespace)
        except ValueError:
            return None

    def _failed(self, what: str, err: BaseException) -> None:
        self.errors += 1
        if self.errors == 1 or self.errors % 100 == 0:
            log.warning("route sharing: %s failed (%d so far): %r", what, self.errors, err)

    async def _send(self) -> None:
        assert self._wake is not None
        actor = None
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch = self.share.take()
            if batch is None:
                continue
            try:
                actor = actor or self._actor()
                if actor is not None:
                    call = actor.append_routes.remote(self.channel, self.share.origin, batch)
                    await asyncio.wait_for(call, self.timeout_s)
            except Exception as err:  # sharing is best effort: lose this batch, back off
                actor = None
                self._failed("send", err)
                await asyncio.sleep(self.retry_s)
            await asyncio.sleep(self.min_interval_s)

    async def _receive(self) -> None:
        actor = None
        s = self.share
        while True:
            try:
                actor = actor or self._actor()
                if actor is None:
                    await asyncio.sleep(self.retry_s)
                    continue
                call = actor.routes_since.remote(
                    self.channel, s.epoch, s.seq, s.origin, self.wait_s
                )
                epoch, nxt, batches = await asyncio.wait_for(call, self.wait_s + self.timeout_s)
                routes = s.accept(epoch, nxt, batches)
                if routes:
                    self.apply(routes)
                freed = s.take_peer_freed()
                if freed and self.on_freed is not None:
                    self.on_freed(freed)
            except Exception as err:
                actor = None
                self._failed("receive", err)
                await asyncio.sleep(self.retry_s)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    with contextlib.suppress(RuntimeError):
        return asyncio.get_running_loop()
    return None
