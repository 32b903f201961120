"""One request through the fleet: admission, retry before the first byte, migration after.

::

    call replica ─► Accepted ──(admission_timeout_s)──► 429 / 503, before any 200
                 ─► ResponseHead ─► bytes … ─► end
        replica died before the head:  resend (another replica), up to the budget
        replica died mid-stream:       migrate (``migration.py``), up to the budget;
                                       else an in-band error event and ``[DONE]``

- **Admission.** A replica takes a request when it has a free slot (``max_ongoing_requests``);
  until then the request waits at the router, at most ``max_queued`` of them per ingress,
  each at most ``admission_timeout_s`` (then 429, or 503 when no replica is healthy;
  while no replica serves at all, up to ``cold_start_timeout_s``: one is starting; not
  when replicas failed to start since one last did: 503 at the window's end). A
  request that would be queued beyond ``max_queued`` is refused at once: the ledger
  (``router/admission.py``, shared with the router in this process) says how many of the
  calls not yet accepted have no slot to go to; before the router exists (``start_router``
  has Serve create it when the relay is built), every one of them counts. The check and the
  count have no ``await`` between them. Serve's own
  ``max_queued_requests`` is a looser second line (``cluster/app.py``). The client gets its
  status only after a replica accepted, so overload is never a 200 followed by an error.
- **What is retried.** Only a replica's death (Ray reports the actor died or is
  unavailable, or the replica gave its requests up: its engine stalled or its engine core
  died): the request did not finish and another replica can run it; once the budget is
  spent, 503 with ``Retry-After``. An error the engine raised is the request's own failure
  and is not retried (it would fail again).
- **Circuit breaking.** Every failure is charged to its replica (``breaker.py``); a request
  carries ``avoid`` (open breakers + replicas that failed it) for the router adapter.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from cluster.breaker import CircuitBreaker
from cluster.migration import (
    DONE_EVENT,
    ResumePlan,
    Rewriter,
    StreamLog,
    closing_events,
    continuation,
    echo_prefix,
    migratable,
)
from contracts.http import Accepted, APIError, ReplicaFailed, ResponseHead
from router.admission import AdmissionLedger

log = logging.getLogger("llmfleet.relay")
RETRY_AFTER_S = 1
HEALTH_POLL_S = 1.0  # how often a waiting request looks at the fleet's health


def replica_died(err: BaseException) -> bool:
    """The replica is gone or gave the request up (``ReplicaFailed``, e.g. a stalled engine):
    another replica can run it."""
    from ray.exceptions import ActorUnavailableError, RayActorError
    from ray.serve.exceptions import ReplicaUnavailableError

    gone = RayActorError | ActorUnavailableError | ReplicaUnavailableError | ReplicaFailed
    return isinstance(err, gone)


def busy(message: str) -> APIError:
    return APIError(
        429,
        message,
        type="rate_limit_error",
        code="fleet_at_capacity",
        headers={"retry-after": str(RETRY_AFTER_S)},
    )


def unavailable(message: str = "no healthy replica is serving this model") -> APIError:
    return APIError(
        503,
        message,
        type="service_unavailable",
        code="no_healthy_replica",
        headers={"retry-after": str(RETRY_AFTER_S)},
    )


def sse_error(message: str, code: str) -> bytes:
    body = APIError(500, message, type="server_error", code=code).body()
    return f"data: {json.dumps(body)}\n\n".encode() + DONE_EVENT


def start_router(handle: Any) -> Any | None:
    """The streaming handle to the replicas, made now so that Serve creates its request
    router now, not at the first request. Until the router exists the ledger cannot see
    free slots, so load shedding counts every request not yet accepted as queued, and the
    first burst at a new ingress replica was partly refused although it fit. A handle's
    first ``options()`` initializes it with the defaults, as the first call would. With
    ``server.throughput_mode`` the router runs on the current event loop; where there is
    none, Serve raises: None, and the handle stays lazy."""
    with contextlib.suppress(RuntimeError):
        return handle.options(stream=True)
    return None


@dataclass(frozen=True, slots=True)
class RelaySettings:
    admission_timeout_s: float = 10.0
    cold_start_timeout_s: float = 120.0  # the wait while no replica reports at all
    request_timeout_s: float = 600.0
    migrate_attempts: int = 2
    max_queued: int = 64  # requests waiting for a replica slot, at this ingress


@dataclass
class Counters:
    retried: int = 0  # resent before the first byte after a replica died
    migrated: int = 0  # continued on another replica mid-stream
    failed: int = 0  # ended with an error after the budget
    resumed: int = 0  # streams another ingress was relaying when it died (front_door.py)


@dataclass(slots=True)
class Started:
    call: Any
    head: ResponseHead
    replica_id: str
    failed_on: set[str] = field(default_factory=set)
    accepted_at: float = 0.0  # time.monotonic() when the replica took it
    failed: bool = False  # the stream ended with an in-band error


# (continuation body, token ids of the text already streamed, their count) -> payload
Resubmit = Callable[[dict[str, Any], list[int], int], dict[str, Any]]


class Relay:
    def __init__(
        self,
        handle: Any,
        settings: RelaySettings,
        breaker: CircuitBreaker,
        fleet_health: Callable[[], Awaitable[str | None]],
        ledger: AdmissionLedger | None = None,
    ) -> None:
        self.handle = handle
        self._stream = start_router(handle)  # made once, reused by every call
        self.ledger = ledger
        self.s = settings
        self.breaker = breaker
        self.fleet_health = fleet_health  # ingress.fleet_health's verdict
        self.counters = Counters()
        self.waiting = 0  # calls not yet accepted by a replica

    def queued_with_one_more(self) -> int:
        """Requests that would wait for a slot if one more were sent now."""
        known = None if self.ledger is None else self.ledger.queued_with_one_more()
        return self.waiting + 1 if known is None else known

    def full(self) -> bool:
        return self.queued_with_one_more() > self.s.max_queued

    def check_room(self) -> None:
        if self.full():
            raise busy("too many requests are queued for this model; retry later")

    async def start(self, payload: dict[str, Any], failed_on: set[str] | None = None) -> Started:
        """Call replicas until one answers with a head; raises ``APIError`` otherwise."""
        from ray.serve.exceptions import BackPressureError

        failed_on = set() if failed_on is None else failed_on
        budget = self.s.migrate_attempts
        while True:
            self.check_room()
            payload["avoid"] = frozenset(failed_on | self.breaker.avoid())
            view = payload.get("view")
            request_id = getattr(view, "request_id", None)
            if self.ledger is not None and request_id is not None:
                self.ledger.sent(request_id)
            if self._stream is None:
                self._stream = self.handle.options(stream=True)
            call = self._stream.handle.remote(payload)
            rid = ""
            accepted_at = 0.0
            try:
                self.waiting += 1
                try:
                    rid = await self._admit(call)
                    accepted_at = time.monotonic()
                finally:
                    self.waiting -= 1
                    if self.ledger is not None and request_id is not None:
                        self.ledger.done(request_id)
                async with asyncio.timeout(self.s.request_timeout_s):
                    head = await call.__anext__()
            except asyncio.CancelledError:
                # the client went away: cancel the replica's call whether or not Serve does
                # (cancelling twice is harmless), or it runs to its end for nobody
                call.cancel()
                raise
            except APIError:
                call.cancel()
                raise
            except BackPressureError:
                call.cancel()
                raise busy("too many requests are queued for this model; retry later") from None
            except TimeoutError:
                call.cancel()
                raise APIError(504, "request timed out", type="timeout", code="timeout") from None
            except Exception as err:
                call.cancel()
                rid = rid or str(getattr(err, "replica_id", "") or "")  # refused, named
                if rid:
                    self.breaker.failure(rid)
                    failed_on.add(rid)
                if replica_died(err) and budget > 0:
                    budget -= 1
                    self.counters.retried += 1
                    log.warning("replica %s died before answering; resending", rid or "?")
                    continue
                self.counters.failed += 1
                log.warning("request failed on replica %s: %r", rid or "?", err)
                if replica_died(err):  # the budget is spent: no replica could run it now
                    raise unavailable() from None
                raise APIError(
                    500, "generation failed", type="server_error", code="engine_error"
                ) from None
            assert isinstance(head, ResponseHead)
            if head.status >= 500:
                self.breaker.failure(rid)
            return Started(call, head, rid, failed_on, accepted_at)

    async def _admit(self, call: Any) -> str:
        """The replica that accepted ``call``. It may wait ``admission_timeout_s``, counted
        again from the last time no replica reported at all (a fleet scaling up from zero,
        or its only replica being replaced: the wait is a replica's start, not a busy
        fleet), up to ``cold_start_timeout_s`` in all, unless replicas fail to start ("unstartable":
        no start to wait for); then 429, or 503 with none serving."""
        loop = asyncio.get_running_loop()
        first = asyncio.ensure_future(call.__anext__())  # waited on, never cancelled midway
        t0 = empty_at = loop.time()
        health: str | None = None
        was_empty = False
        try:
            while not first.done():
                now = loop.time()
                deadline = max(t0, empty_at) + self.s.admission_timeout_s
                cap = t0 + max(self.s.cold_start_timeout_s, self.s.admission_timeout_s)
                left = min(deadline, cap) - now
                if left <= 0:
                    break
                await asyncio.wait({first}, timeout=min(left, HEALTH_POLL_S))
                if not first.done():
                    health = await self.fleet_health()
                    # a start that keeps failing is no start to wait for
                    empty = health == "empty" or (
                        health != "unstartable" and self._router_sees_none()
                    )
                    if empty or was_empty:
                        # the first poll that sees a replica again restarts the window too:
                        # it came back somewhere since the last poll (found in the suite:
                        # polled at the window's end, a replacement seen there got no time)
                        empty_at = loop.time()
                    health = "empty" if empty else health
                    was_empty = empty
            if first.done():
                item = first.result()  # raises what the call raised (a replica died, ...)
                assert isinstance(item, Accepted)
                return item.replica_id
        finally:
            if not first.done():
                first.cancel()
        # no replica took it: none is serving (replicas report and fail, or none reports
        # within the cold-start bound) or all are busy
        if health == "unstartable":
            raise unavailable(
                "no replica of this model could start; retry later (the operator sees why "
                "in `llmfleet status`)"
            )
        if health in ("failing", "empty"):
            raise unavailable()
        raise busy("the fleet is at capacity; retry later")

    def _router_sees_none(self) -> bool:
        """This process's router has no replica to send to (it learns of a dead one at once;
        the status reports say so only once its last row is stale)."""
        return self.ledger is not None and self.ledger.replicas() == 0

    async def collect(self, started: Started) -> bytes:
        parts: list[bytes] = []
        try:
            async with asyncio.timeout(self.s.request_timeout_s):
                async for chunk in started.call:
                    parts.append(chunk)
        except TimeoutError:
            raise APIError(504, "request timed out", type="timeout", code="timeout") from None
        except Exception as err:  # after the head: the body is whole or failed
            self.breaker.failure(started.replica_id)
            log.warning("request failed on replica %s: %r", started.replica_id, err)
            raise APIError(
                500, "generation failed", type="server_error", code="engine_error"
            ) from None
        finally:
            started.call.cancel()
        self.breaker.success(started.replica_id)
        return b"".join(parts)

    async def stream(
        self,
        started: Started,
        path: str,
        body: dict[str, Any] | None,
        encode: Callable[[str], list[int]],
        resubmit: Resubmit,
        prompt_tokens: int = 0,
        resumed: ResumePlan | None = None,
    ) -> AsyncIterator[bytes]:
        """Relay a streamed answer; on a replica's death, migrate (or end in-band).
        ``resumed``: this continues a stream the client already has part of (its events are
        rewritten to that stream's from the first)."""
        origin = started
        slog = None
        if body is not None and migratable(path, body):
            slog = StreamLog(path, echo=echo_prefix(path, body) or "")
        rewriter: Rewriter | None = None
        if resumed is not None:
            slog = resumed.log
            rewriter = Rewriter(path, slog, len(resumed.more_ids))
        budget = self.s.migrate_attempts
        try:
            async with asyncio.timeout(self.s.request_timeout_s):
                while True:
                    try:
                        async for chunk in started.call:
                            if rewriter is not None:
                                chunk = rewriter.events(chunk)
                            if slog is not None:
                                slog.add(chunk)
                            yield chunk
                        self.breaker.success(started.replica_id)
                        return
                    except Exception as err:
                        started.call.cancel()
                        self.breaker.failure(started.replica_id)
                        started.failed_on.add(started.replica_id)
                        if slog is None or budget <= 0 or not replica_died(err):
                            raise
                        budget -= 1
                    slog.fold()
                    if slog.done:
                        return
                    assert body is not None
                    more_ids = encode(slog.generated)
                    emitted = len(more_ids)
                    cont = None if slog.finished else continuation(path, body, slog, more_ids)
                    if cont is None:  # nothing left to generate: end the stream properly
                        yield closing_events(path, body, slog, prompt_tokens, emitted)
                        return
                    log.warning("replica %s died mid-stream; migrating", started.replica_id)
                    payload = resubmit(cont, more_ids, emitted)
                    started = await self.start(payload, started.failed_on)
                    self.counters.migrated += 1
                    if started.head.status != 200:  # the continuation was refused
                        raise RuntimeError(f"continuation answered {started.head.status}")
                    rewriter = Rewriter(path, slog, emitted)
        except Exception as err:  # mid-stream failure: tell the client in-band, then end
            self.counters.failed += 1
            origin.failed = True
            log.warning("stream failed: %r", err)
            yield sse_error("generation failed mid-stream", "stream_error")
        finally:
            started.call.cancel()
