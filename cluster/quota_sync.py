"""Ingress replicas share their keys' quota use, so every one enforces the whole limit.

Why: Serve's proxy spreads a key's requests over the N ingress replicas. If each enforced
limit/N, a key with ``max_streams: 2`` would see its second stream refused whenever both
landed on one replica, and a request costing more than tokens_per_min/N would never pass.
Instead each replica's limiter (``cluster/quotas.py``, shared mode) counts the fleet's use:
this module carries every replica's spending and open streams to the others.

Flow (the status actor's shared log, ``replicas/route_log.py``, on its own channel)::

    ingress A                           status actor                    ingress B
    admit/settle ─► take_usage() ─► append_routes(ch, A, batch) ─► log ─┐
                                             routes_since(ch, seq, not B) ◄┘
                                             record_peer(A, spent, streams) ─► B's buckets

Wire: JSON ``{"v": 1, "t": wall seconds, "spent": {key_id: [requests, tokens]},
"streams": {key_id: open}}``; key ids are key names' digests, never secrets. ``streams`` is
the sender's whole map, so a lost batch is healed by the next; a replica with open streams
re-sends it every ``heartbeat_s`` so its peers keep counting them, and stop
(``quota_peers.PEER_STALE_S``) once it is gone. A replica that starts reads the log from its
start, which holds the last 1,024 batches (``route_log.MAX_BATCHES``: seconds of a busy
fleet, so a restarted replica may miss older spending of the current minute); spending
older than a minute is skipped, the buckets would have refilled it.
Concurrency limits are exact: in shared mode a key's ``max_streams`` slot is granted by the
status actor (``acquire``; ``replicas/slot_table.py``), one call per request of such a
key, waited for at most ``slot_timeout_s`` (then this replica's own view decides). Each
batch carries this replica's held slots too (``append_routes``' ``slots``): releases reach
the table that way, and ``flush`` lets the ingress wait for that batch before the client
sees its answer end (``guard.Guard.settle_seen``), so a client's next request is never
refused for the one that just ended.
Health: the limiter is in shared mode while the long poll answers (at least every
``wait_s``) and sends succeed; a failure or a timeout puts it back in split mode (each
replica its part: never over the limit, possibly early refusals) until the next answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from cluster.quotas import QuotaLimiter
from replicas.status_registry import get_status_actor

log = logging.getLogger(__name__)

WIRE_VERSION = 1
MAX_AGE_S = 60.0
QUOTA_CHANNEL = "llmfleet/quota"


def encode(spent: dict[str, tuple[float, float]], streams: dict[str, int], t: float) -> bytes:
    body = {
        "v": WIRE_VERSION,
        "t": t,
        "spent": {k: [v[0], v[1]] for k, v in spent.items()},
        "streams": streams,
    }
    return json.dumps(body, separators=(",", ":")).encode()


def decode(batch: bytes) -> tuple[float, dict[str, tuple[float, float]], dict[str, int]]:
    """(sent at, spent, streams); raises ValueError/TypeError/KeyError on a bad batch."""
    body = json.loads(batch)
    if body.get("v") != WIRE_VERSION:
        raise ValueError(f"unsupported quota batch version: {body.get('v')!r}")
    spent = {str(k): (float(v[0]), float(v[1])) for k, v in body["spent"].items()}
    streams = {str(k): max(0, int(v)) for k, v in body["streams"].items()}
    return float(body["t"]), spent, streams


def apply_batches(
    limiter: QuotaLimiter, batches: list[tuple[str, bytes]], own: str, now_wall: float
) -> int:
    """Hand the peers' batches to ``limiter``; returns how many could not be read."""
    bad = 0
    for origin, batch in batches:
        if origin == own:
            continue
        try:
            sent, spent, streams = decode(batch)
        except (ValueError, TypeError, KeyError, AttributeError, IndexError):
            bad += 1
            continue
        age = max(0.0, now_wall - sent)  # wall clocks of two hosts: skew clamped at 0
        if age > MAX_AGE_S:
            spent = {}  # refilled by now
        limiter.record_peer(origin, spent, streams, age)
    return bad


def mode_gauge() -> Callable[[bool], None]:
    """A ``report`` for ``QuotaSync``: this ingress replica's
    ``llmfleet_ingress_quota_shared`` (1 shared, 0 split; Serve adds the replica's labels)."""
    from contracts.metrics import INGRESS_QUOTA_SHARED
    from replicas.metrics import ray_metric

    gauge = ray_metric(INGRESS_QUOTA_SHARED)
    return lambda shared: gauge.set(1.0 if shared else 0.0)


class QuotaSync:
    def __init__(
        self,
        limiter: QuotaLimiter,
        channel: str = QUOTA_CHANNEL,
        min_interval_s: float = 0.005,
        heartbeat_s: float = 1.0,
        wait_s: float = 2.0,
        timeout_s: float = 2.0,
        retry_s: float = 1.0,
        slot_timeout_s: float = 1.0,
        report: Callable[[bool], None] | None = None,
    ) -> None:
        """``report`` is told the mode (True: shared) after every round of the receiver,
        answered or failed (the ingress's ``llmfleet_ingress_quota_shared`` gauge)."""
        self.limiter = limiter
        self.channel = channel
        self.min_interval_s = min_interval_s
        self.heartbeat_s = heartbeat_s
        self.wait_s, self.timeout_s, self.retry_s = wait_s, timeout_s, retry_s
        self.slot_timeout_s = slot_timeout_s
        self.report = report
        self.origin = uuid.uuid4().hex[:12]
        self.errors = 0
        self.bad = 0
        self.slot_errors = 0
        self._ver = 0  # orders this replica's words to the slot table
        self._slots_dirty = False  # the table may count a slot this replica does not hold
        self._slot_actor: Any = None
        self._waiters: list[asyncio.Future[None]] = []  # flush() callers, for the next batch
        self._epoch, self._seq = "", 0
        self._send_ok = True
        self._wake: asyncio.Event | None = None
        self._heard: asyncio.Event | None = None  # set by the log's first answer
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task[None]] = []

    async def ready(self, timeout_s: float = 0.5) -> None:
        """Start (once) and wait, at most ``timeout_s``, for the log's first answer or first
        failure: a replica's first requests are then judged against the fleet's use, not in
        split mode (found by hand: 4 concurrent streams on a fresh fleet with a 4-stream
        key, 3 of them on one replica, got a 429 from that replica's part of 2)."""
        self.start()
        assert self._heard is not None
        if not self._heard.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._heard.wait(), timeout_s)

    def start(self) -> None:
        """Launch the sender and the receiver on the running loop (once)."""
        if self._tasks:
            return
        loop = asyncio.get_running_loop()
        self._heard = asyncio.Event()
        self._wake = asyncio.Event()
        self._loop = loop
        self.limiter.share_with(self._poke)
        self._tasks = [loop.create_task(self._send()), loop.create_task(self._receive())]

    def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        self.limiter.set_shared(False)

    def _actor(self) -> Any:
        return get_status_actor()  # None while it is (re)starting

    def _next_ver(self) -> int:
        self._ver += 1
        return self._ver

    async def acquire(self, key_id: str, limit: int) -> tuple[bool, int] | None:
        """Ask the status actor for one of ``key_id``'s ``limit`` slots: (granted, the
        fleet's count), or None when it could not answer in time (the caller then judges on
        its own view). The caller admits or refuses with no await in between, so the slot
        is counted locally (open stream) from the moment the reservation ends."""
        held = self.limiter.reserve(key_id)
        ver = self._next_ver()
        try:
            actor = self._slot_actor = self._slot_actor or self._actor()
            if actor is None:
                raise RuntimeError("no status actor")
            call = actor.acquire_slot.remote(key_id, self.origin, held, limit, ver)
            granted, count = await asyncio.wait_for(call, self.slot_timeout_s)
            return bool(granted), int(count)
        except Exception as err:
            self._slot_actor = None
            self.slot_errors += 1
            if self.slot_errors == 1 or self.slot_errors % 100 == 0:
                log.warning("quota slots: acquire failed (%d so far): %r", self.slot_errors, err)
            return None
        finally:
            self.limiter.unreserve(key_id)
            # a refusal, a failure, or a grant the caller does not use leaves the table
            # counting a slot this replica does not hold: the next batch says what it holds
            self._slots_dirty = True
            self._wake_sender()

    async def flush(self, timeout_s: float = 0.5) -> None:
        """Wait, at most ``timeout_s``, until what this replica has settled so far has
        reached the status actor (the next batch; no extra call): a slot released before
        the client sees its answer end cannot refuse the client's next request. Returns at
        once while sends fail (split mode: no one would hear of it, and the sender waits
        ``retry_s`` between tries)."""
        if not self._tasks or self._loop is not asyncio.get_running_loop():
            return
        if not self._send_ok or not self.limiter.shared:
            return
        done = self._loop.create_future()
        self._waiters.append(done)
        self._wake_sender()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(done), timeout_s)

    def _flushed(self, waiters: list[asyncio.Future[None]]) -> None:
        for done in waiters:
            if not done.done():
                done.set_result(None)

    def _failed(self, what: str, err: BaseException) -> None:
        self.limiter.set_shared(False)
        self.errors += 1
        if self.errors == 1 or self.errors % 100 == 0:
            log.warning("quota sharing: %s failed (%d so far): %r", what, self.errors, err)

    async def _send(self) -> None:
        assert self._wake is not None
        actor = None
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.heartbeat_s)
            self._wake.clear()
            taken = self.limiter.take_usage()
            dirty, self._slots_dirty = self._slots_dirty, False
            waiters, self._waiters = self._waiters, []
            if taken is None:
                streams = self.limiter.open_streams()
                if not streams and self._send_ok and not dirty:
                    self._flushed(waiters)  # the last batch, already answered, had it all
                    continue
                # heartbeat: the peers keep counting our streams (or, after a failed send,
                # a probe: shared mode returns only once a send succeeds again)
                taken = ({}, streams)
            try:
                actor = actor or self._actor()
                if actor is None:
                    raise RuntimeError("no status actor")
                batch = encode(taken[0], taken[1], time.time())
                slots = (self._next_ver(), taken[1])
                call = actor.append_routes.remote(self.channel, self.origin, batch, slots)
                await asyncio.wait_for(call, self.timeout_s)
                self._send_ok = True
                self._flushed(waiters)
            except Exception as err:  # this batch is lost to the peers: split until healed
                actor, self._send_ok = None, False
                self._flushed(waiters)  # (nothing to wait for: no one hears of it soon)
                self._failed("send", err)
                await asyncio.sleep(self.retry_s)
                self._wake.set()  # send the open streams again
            await asyncio.sleep(self.min_interval_s)

    async def _receive(self) -> None:
        actor = None
        while True:
            try:
                actor = actor or self._actor()
                if actor is None:
                    raise RuntimeError("no status actor")
                wait = self.wait_s if self.limiter.shared else 0.0  # split: heal at once
                call = actor.routes_since.remote(
                    self.channel, self._epoch, self._seq, self.origin, wait
                )
                epoch, nxt, batches = await asyncio.wait_for(call, wait + self.timeout_s)
                if epoch != self._epoch and self._epoch:
                    self._wake_sender()  # a new log: tell the peers our open streams again
                self._epoch, self._seq = epoch, nxt
                self.limiter.set_shared(self._send_ok)
                self.bad += apply_batches(self.limiter, batches, self.origin, time.time())
                if self._heard is not None:
                    self._heard.set()
                self._report()
                if not self.limiter.shared:  # sends fail: poll again once they may not
                    await asyncio.sleep(self.retry_s)
            except Exception as err:
                actor = None
                self._failed("receive", err)
                self._report()
                if self._heard is not None:
                    self._heard.set()  # no log to wait for: split mode, no more waiting
                await asyncio.sleep(self.retry_s)

    def _report(self) -> None:
        if self.report is not None:
            try:
                self.report(self.limiter.shared)
            except Exception:  # a metric never stops the sharing
                log.debug("quota mode report failed", exc_info=True)

    def _poke(self) -> None:
        """After an admission or settlement: wake the sender (from any thread)."""
        if self._wake is None or self._wake.is_set():
            return
        try:
            here = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        if here is self._loop:
            self._wake.set()
        elif self._loop is not None:
            self._loop.call_soon_threadsafe(self._wake.set)

    def _wake_sender(self) -> None:
        if self._wake is not None:
            self._wake.set()
