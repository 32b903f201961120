"""What the router knows about each replica beyond the replica's last stats report.

Shared by the live Ray adapter (``router.serve_router``) and the virtual-time cluster
twin (``cluster.twin.fleet``): both feed it the same events and ask it for the
``ReplicaView``s their policy sees. Pure: no Ray, no event loop; time is the ``now`` the
caller passes (monotonic seconds live, virtual seconds in the twin).

State::

    decisions (decision order)           per replica
    req id ─► (replica, blocks, at)      inflight   pending   outstanding     rate
    ┌──────────────────────────┐         ┌───────┬─────────┬──────────────┬───────┐
    │ r7 ─► (a, 12, 104.2)     │ ──────► │ a: 3  │  a: 1   │ a: 812 tok@t │ a: 480│
    │ r8 ─► (b,  0, 104.3)     │         │ b: 0  │  b: 1   │ b: 0         │ b: 0  │
    └──────────────────────────┘         └───────┴─────────┴──────────────┴───────┘
    routes: key ─► (request id, replica)     (key: Ray's internal id, or the request id)

Events (the caller forwards the same ones to the policy's ``observe``)
    ``decided``   the policy chose a replica; the request counts as *pending* there until
                  ``routed`` (or ``withdraw``, or ``PENDING_TTL_S``): Ray awaits the
                  replica's acceptance between the decision and ``on_request_routed``, so
                  a burst would otherwise see the same in-flight counts for all of it.
                  ``room``: the replica had a free slot; such a decision *reserves* it
                  (``reserved``, ``slots``: what ``router.admission`` counts as not queued).
    ``routed``    in flight at the replica; its uncached prompt tokens (prompt minus the
                  blocks the decision matched on that replica) join the replica's
                  outstanding prefill backlog (``router.outstanding``). Returns the cached
                  tokens the decision predicted there (0 when the framework sent the
                  request elsewhere or nothing was decided).
    ``completed`` no longer in flight (a key never routed, e.g. a request the replica
                  rejected, changes nothing).
    ``reported``  the replica's own count of its requests (several callers: the part that
                  is not this router's is the others' load, for ``slots``).
    ``gone``      the replica left; forget its counts and the decisions onto it.
View (``view(replica_id, stats, queue_len, max_ongoing, now)``)
    ``stats`` is the replica's last report as a ``ReplicaStats`` (the Ray adapter decodes
    each wire report once; the twin reads the record directly);
    ``ongoing = max(own in-flight count, queue_len) + pending``, where ``queue_len`` is the
    framework's own count (Ray's queue-length cache; the twin's replica count). The view
    also records the report's prefill rate: a routed request's backlog drains at it.
Stale reports (``fresh_reports=False``, live): reports are polled periodically, so the
    router corrects them with what it knows it sent since:
    - ``single_caller`` and nothing in flight at the replica: waiting, running and
      waiting prefill are 0 whatever the last report said (it predates the idle moment);
    - waiting prefill is ``max(reported, outstanding backlog drained at the reported rate)``.
    With ``fresh_reports=True`` (the twin: stats are read at ``now``, after every routed
    request reached its engine) the report already holds everything and is used as is.
Load shares stay in the policy (``router.load_share``): they are policy knobs, fed by the
same ``Routed`` events.
"""

from __future__ import annotations

import collections
import dataclasses
from dataclasses import dataclass

from contracts.stats import ReplicaStats
from router.outstanding import OutstandingPrefill
from router.types import ReplicaView, RequestView
from router.views import replica_view_from_stats

PENDING_TTL_S = 30.0  # a decision never routed (the request was dropped) stops counting
UNLIMITED = 1_000_000


@dataclass(frozen=True, slots=True)
class PendingDecision:
    replica_id: str
    matched_blocks: int
    at: float
    room: bool = False  # the replica had a free slot when it was chosen


class FleetBook:
    def __init__(
        self,
        *,
        block_size: int = 16,
        single_caller: bool = True,
        fresh_reports: bool = False,
        pending_ttl_s: float = PENDING_TTL_S,
    ) -> None:
        self.block_size = block_size
        self.single_caller = single_caller
        self.fresh_reports = fresh_reports
        self.pending_ttl_s = pending_ttl_s
        self.inflight: collections.Counter[str] = collections.Counter()
        self.pending: collections.Counter[str] = collections.Counter()
        # pending decisions made onto a replica with a free slot, per replica
        self.reserved_at: collections.Counter[str] = collections.Counter()
        self.others: dict[str, int] = {}  # other callers' requests at a replica, as reported
        self.decisions: dict[str, PendingDecision] = {}  # insertion order = decision order
        self.routes: dict[str, tuple[str, str]] = {}  # key -> (request id, replica)
        self.outstanding = OutstandingPrefill()
        self.rates: dict[str, float] = {}  # replica -> last reported prefill tokens/s

    # ---- views ----------------------------------------------------------------------
    def view(
        self,
        replica_id: str,
        stats: ReplicaStats,
        *,
        queue_len: int = 0,
        max_ongoing: int = UNLIMITED,
        now: float,
    ) -> ReplicaView:
        held = max(self.inflight[replica_id], queue_len)
        view = replica_view_from_stats(
            replica_id,
            stats,
            ongoing=held + self.pending[replica_id],
            max_ongoing=max_ongoing,
            default_block_size=self.block_size,
        )
        self.rates[replica_id] = view.prefill_tokens_per_s
        if self.fresh_reports:
            return view
        return self._correct_stale(view, held, now)

    def _correct_stale(self, view: ReplicaView, held: int, now: float) -> ReplicaView:
        idle = self.single_caller and held == 0
        if idle and (view.waiting or view.running or view.waiting_prefill_tokens):
            view = dataclasses.replace(view, waiting=0, running=0, waiting_prefill_tokens=0)
        own = self.outstanding.get(view.replica_id, view.prefill_tokens_per_s, now)
        if own > view.waiting_prefill_tokens:
            view = dataclasses.replace(view, waiting_prefill_tokens=own)
        return view

    # ---- events ---------------------------------------------------------------------
    def decided(
        self,
        request_id: str,
        replica_id: str,
        matched_blocks: int,
        now: float,
        room: bool = False,
    ) -> None:
        self.expire(now)
        self.withdraw(request_id)  # Ray may ask again for the same request
        self.decisions[request_id] = PendingDecision(replica_id, matched_blocks, now, room)
        self.pending[replica_id] += 1
        if room:
            self.reserved_at[replica_id] += 1

    @property
    def reserved(self) -> int:
        return sum(self.reserved_at.values())

    def reported(self, replica_id: str, ongoing: int) -> None:
        """The replica said it holds ``ongoing`` requests (a probe, or its answer to a
        send). What this router cannot account for is other callers' load; a single caller
        has none."""
        if self.single_caller:
            return
        own = self.inflight[replica_id] + self.reserved_at.get(replica_id, 0)
        self.others[replica_id] = max(0, ongoing - own)

    def slots(self, replica_id: str, max_ongoing: int) -> tuple[int, int]:
        """(free slots, reserved requests) at ``replica_id``. Taken: this router's requests
        in flight, other callers' (as last reported) and those decided onto a free slot.
        Reservations count only up to the slots left beside the others: one that outlived
        its request (a replica rejected it, and Serve has not given it another round yet)
        cannot hold a slot the replica does not have. Serve's own queue-length cache is not
        used: it adds every send, so a burst of sends that the replica will mostly reject
        read as a full replica (11 on a 4-slot one)."""
        taken = self.inflight[replica_id] + self.others.get(replica_id, 0)
        reserved = min(self.reserved_at.get(replica_id, 0), max(0, max_ongoing - taken))
        return max(0, max_ongoing - taken - reserved), reserved

    def withdraw(self, request_id: str) -> PendingDecision | None:
        """Drop a pending decision (routed, re-decided, or never sent); return it."""
        entry = self.decisions.pop(request_id, None)
        if entry is None:
            return None
        if entry.room:
            left = self.reserved_at[entry.replica_id] - 1
            if left > 0:
                self.reserved_at[entry.replica_id] = left
            else:
                self.reserved_at.pop(entry.replica_id, None)
        if self.pending[entry.replica_id] > 1:
            self.pending[entry.replica_id] -= 1
        else:
            self.pending.pop(entry.replica_id, None)
        return entry

    def expire(self, now: float) -> None:
        while self.decisions:
            request_id, entry = next(iter(self.decisions.items()))
            if now - entry.at <= self.pending_ttl_s:
                break
            self.withdraw(request_id)

    def routed(self, key: str, request: RequestView | None, replica_id: str, now: float) -> int:
        self.inflight[replica_id] += 1
        self.routes[key] = (request.request_id if request else key, replica_id)
        if request is None:
            return 0
        entry = self.withdraw(request.request_id)
        matched = entry is not None and entry.replica_id == replica_id
        cached = entry.matched_blocks * self.block_size if entry and matched else 0
        cached = min(cached, request.prompt_tokens)
        rate = self.rates.get(replica_id, 0.0)
        self.outstanding.add(replica_id, request.prompt_tokens - cached, rate, now)
        return cached

    def completed(self, key: str) -> tuple[str, str] | None:
        """The request is done; returns its (request id, replica) for the policy's event.
        None when ``key`` was never routed: Serve reports a request the replica *rejected*
        (it was full) as completed too, and that one held no slot."""
        entry = self.routes.pop(key, None)
        if entry is None:
            return None
        request_id, rid = entry
        if self.inflight[rid] > 0:
            self.inflight[rid] -= 1
        return request_id, rid

    def gone(self, replica_id: str) -> None:
        for request_id in [k for k, d in self.decisions.items() if d.replica_id == replica_id]:
            self.withdraw(request_id)
        self.outstanding.forget(replica_id)
        self.inflight.pop(replica_id, None)
        self.others.pop(replica_id, None)
        self.rates.pop(replica_id, None)
