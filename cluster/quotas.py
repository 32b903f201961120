"""Per-API-key quotas for the OpenAI ingress: token buckets plus an in-flight counter.

Algorithm
    Each key gets, lazily, two token buckets and a counter::

        requests  [#########.....]  capacity = requests_per_min, cost 1 per request
        tokens    [######........]  capacity = tokens_per_min, cost = prompt + max output
        streams   in_flight < max_streams   (every admitted, unsettled request)

    A bucket refills continuously at capacity/60 per second up to its capacity, so a full
    minute's allowance may arrive as one burst. ``admit`` checks every limit first and takes
    from every bucket only when all pass: a refused request consumes nothing.
    "Tokens" is what OpenAI counts at admission: the prompt's tokens plus the requested
    maximum output tokens (the caller passes their sum). ``settle`` gives back the output
    tokens not generated (charged − used, never filling a bucket above its capacity) and
    releases the in-flight slot; settling a ticket twice does nothing.
Knobs
    ``share`` (default 1.0) scales every limit in split mode: each of N replicas enforces limit/N
    (``share = 1/N``), at least 1 per bucket. Concurrent streams are whole: the ingress of
    ``rank`` r (0..N-1, Serve's replica rank) gets limit // N, plus one if r < limit % N,
    so the parts add up to the limit (3 streams over 2 ingresses: 2 + 1, not 1 + 1); a
    limit below N gives every ingress 1. ``clock`` (default ``time.monotonic``) is injected
    for tests and simulations.
Fleet-wide: shared mode (the default with N > 1 ingress replicas) and the split fallback
    Serve's proxy spreads a key's requests over the N ingress replicas. In **shared** mode
    (``set_shared(True)``, switched by ``cluster/quota_sync.py`` while the peers' usage
    reaches this limiter) every replica enforces the whole limit against the fleet's use:
    its own admissions and settlements, plus the peers' (``record_peer``: their buckets'
    debits and refunds, and their open streams, ``quota_peers.py``). The buckets
    (``token_bucket.py``) may go below zero (down to -capacity) when peers spent
    concurrently. Tolerance of the buckets: the fleet can exceed a per-minute limit only
    by what other replicas admitted within one sync delay (milliseconds when idle; a
    concurrent burst stretches it, as each replica's loop is busy admitting: 60 at once on
    a 20-a-minute key got up to 28), and overspending is owed (the level below zero), so
    the next minute is short by as much. Concurrency is exact: the caller asks the status
    actor for the slot (``wants_slot``, ``reserve``; ``quota_sync.QuotaSync.acquire``) and
    passes its answer to ``admit``; only when it cannot answer in time does this replica's
    view (its own streams plus the peers' last maps) decide, with the bucket tolerance.
    In **split** mode (no sync yet, or it failed) each replica enforces its part of every
    limit (Knobs), peers' use ignored: the fleet never exceeds a limit of N or more; the
    cost is early refusal when a key's traffic lands unevenly, and a request costing more
    than tokens_per_min × share is refused (``tokens_exceed_limit``).
Memory
    A key's state is forgotten after ``IDLE_FORGET_S`` idle with both buckets full and
    nothing in flight (a fresh state is identical); swept at most every ``SWEEP_EVERY_S``.
Contract
    - ``admit`` is synchronous, O(1) amortized, and never blocks.
    - Every ok ``Admission`` carries a ``Ticket`` that the caller settles exactly once when
      the request ends (done, failed or cancelled); an unsettled ticket holds its stream slot.
    - Headers are OpenAI's ``x-ratelimit-*`` for the limits the key has: the limit is the
      key's configured one, remaining/reset come from this limiter's bucket (the fleet's
      view in shared mode, this replica's part in split mode).
      A refusal adds ``retry-after``, except ``tokens_exceed_limit``, which no wait can fix.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from cluster.quota_peers import PeerStreams
from cluster.quota_types import Admission, LimitsLike, Ticket
from cluster.ratelimit_headers import fmt_number as _fmt
from cluster.ratelimit_headers import format_duration, ratelimit_headers, retry_after_header
from cluster.token_bucket import EPS as _EPS
from cluster.token_bucket import TokenBucket

IDLE_FORGET_S = 120.0
SWEEP_EVERY_S = 60.0
STREAMS_RETRY_S = 1.0


@dataclass(slots=True)
class _KeyState:
    requests: TokenBucket | None = None
    tokens: TokenBucket | None = None
    in_flight: int = 0
    last_seen: float = 0.0
    # peers' spending (requests, tokens) before this replica knew the key's limits, as of
    # ``owed_at``: a bucket made later starts that much below full (refilled since then)
    owed: list[float] = field(default_factory=lambda: [0.0, 0.0])
    owed_at: float = 0.0

    def idle(self) -> bool:
        full = all(b is None or b.full() for b in (self.requests, self.tokens))
        return full and self.in_flight == 0


@dataclass(frozen=True, slots=True)
class _Refusal:
    reason: str
    wait_s: float
    message: str


class QuotaLimiter:
    def __init__(
        self, clock: Callable[[], float] = time.monotonic, share: float = 1.0, rank: int = 0
    ) -> None:
        if not 0.0 < share <= 1.0:
            raise ValueError(f"share must be in (0, 1], got {share}")
        self._clock = clock
        self._share = share
        self._parts = max(1, round(1.0 / share))  # N ingress replicas
        self._rank = rank % self._parts
        self._keys: dict[str, _KeyState] = {}
        self._open: dict[int, Ticket] = {}
        self._ids = itertools.count(1)
        self._last_sweep = clock()
        self._shared = False
        self._peers = PeerStreams()
        self._reserving: dict[str, int] = {}  # slots asked of the status actor, not answered
        self._spent: dict[str, list[float]] = {}  # (requests, tokens) since take_usage
        self._on_use: Callable[[], None] | None = None  # set by share_with

    @property
    def shared(self) -> bool:
        return self._shared

    def share_with(self, on_use: Callable[[], None]) -> None:
        """Start noting this replica's use for ``take_usage``; ``on_use`` is called (cheap,
        synchronous) after each admission or settlement."""
        self._on_use = on_use

    def set_shared(self, on: bool) -> None:
        """Shared mode (whole limits, the peers' use counted) or split mode (this replica's
        part). The buckets keep what they spent (``TokenBucket.resize``)."""
        if on != self._shared:
            self._shared = on
            now = self._clock()
            for state in self._keys.values():
                for bucket in (state.requests, state.tokens):
                    if bucket is not None:
                        bucket.refill(now)
                        bucket.resize(self._capacity(bucket.limit))

    def take_usage(self) -> tuple[dict[str, tuple[float, float]], dict[str, int]] | None:
        """What this replica spent since the last call, per key (requests, tokens; a refund
        is negative tokens), and its open streams per key; None when nothing was spent."""
        if not self._spent:
            return None
        spent = {k: (v[0], v[1]) for k, v in self._spent.items()}
        self._spent.clear()
        return spent, self.open_streams()

    def open_streams(self) -> dict[str, int]:
        """Slots this replica holds per key: open streams plus slots being asked for."""
        held = {k: s.in_flight for k, s in self._keys.items() if s.in_flight > 0}
        for key_id, n in self._reserving.items():
            held[key_id] = held.get(key_id, 0) + n
        return held

    def wants_slot(self, limits: LimitsLike) -> bool:
        """Shared mode and a concurrency limit: the slot is granted fleet-wide
        (``quota_sync.QuotaSync.acquire``), then passed to ``admit``."""
        return self._shared and limits.max_streams is not None

    def buckets_refuse(self, key_id: str, limits: LimitsLike, tokens: int) -> bool:
        """The per-minute limits alone would refuse this request now: no slot need be asked
        for (a client hammering a spent key costs the status actor nothing)."""
        now = self._clock()
        state = self._state(key_id, limits, now)
        cost = max(0, int(tokens)) if state.tokens is not None else 0
        return self._check(key_id, state, limits, cost, (True, 0)) is not None

    def reserve(self, key_id: str) -> int:
        """A slot is being asked for: returns what this replica holds of the key before it
        (open streams plus other slots being asked for); ``unreserve`` when answered."""
        held = self.in_flight(key_id) + self._reserving.get(key_id, 0)
        self._reserving[key_id] = self._reserving.get(key_id, 0) + 1
        return held

    def unreserve(self, key_id: str) -> None:
        n = self._reserving.get(key_id, 0) - 1
        if n > 0:
            self._reserving[key_id] = n
        else:
            self._reserving.pop(key_id, None)

    def record_peer(
        self,
        origin: str,
        spent: dict[str, tuple[float, float]],
        streams: dict[str, int] | None,
        age_s: float = 0.0,
    ) -> None:
        """A peer's use (``take_usage`` of another replica): debits or refunds this
        replica's buckets and replaces that peer's open-stream counts, as of ``age_s`` ago
        (a replica that starts reads old batches: a gone peer's streams must not count
        again). Ignored in split mode, where each replica enforces only its own part."""
        if not self._shared:
            return
        now = self._clock()
        for key_id, amounts in spent.items():
            state = self._keys.get(key_id)
            if state is None:
                state = self._keys[key_id] = _KeyState(last_seen=now)
            for i, bucket in enumerate((state.requests, state.tokens)):
                if bucket is None:
                    state.owed[i] += amounts[i]
                    state.owed_at = now
                else:
                    bucket.spend(amounts[i], now)
        if streams is not None:
            self._peers.replace(origin, streams, now, age_s)

    def fleet_streams(self, key_id: str) -> int:
        """Open streams of a key: this replica's, plus (shared mode) its peers'."""
        return self._streams(key_id, self._clock())

    def _streams(self, key_id: str, now: float) -> int:
        state = self._keys.get(key_id)
        n = state.in_flight if state else 0
        return n + self._peers.count(key_id, now) if self._shared else n

    def _split(self) -> bool:
        """Split mode with several replicas: limits are this replica's part."""
        return not self._shared and self._share != 1.0

    def _note(self, key_id: str, requests: float, tokens: float) -> None:
        if self._on_use is None:
            return
        row = self._spent.setdefault(key_id, [0.0, 0.0])
        row[0] += requests
        row[1] += tokens
        self._on_use()

    def __len__(self) -> int:
        return len(self._keys)

    def in_flight(self, key_id: str) -> int:
        state = self._keys.get(key_id)
        return state.in_flight if state else 0

    def admit(
        self, key_id: str, limits: LimitsLike, tokens: int, slot: tuple[bool, int] | None = None
    ) -> Admission:
        """``slot``: the fleet-wide answer for a concurrency slot (granted, the fleet's
        count), which replaces this replica's view of the key's streams."""
        now = self._clock()
        self._maybe_sweep(now)
        state = self._state(key_id, limits, now)
        cost = max(0, int(tokens)) if state.tokens is not None else 0
        refusal = self._check(key_id, state, limits, cost, slot)
        if refusal is None:
            if state.requests is not None:
                state.requests.level -= 1
            if state.tokens is not None:
                state.tokens.level -= cost
            state.in_flight += 1
            limited = state.requests or state.tokens or limits.max_streams is not None
            granted = slot is not None and slot[0]
            ticket = Ticket(next(self._ids), key_id, cost, bool(limited), granted)
            self._open[ticket.id] = ticket
            if limited:  # a key without limits costs the peers nothing to know about
                self._note(key_id, 1 if state.requests is not None else 0, cost)
            return Admission(True, ticket, 0.0, "", "", self._headers(state, limits))
        headers = self._headers(state, limits)
        if refusal.reason != "tokens_exceed_limit":
            headers["retry-after"] = retry_after_header(refusal.wait_s)
        return Admission(False, None, refusal.wait_s, refusal.reason, refusal.message, headers)

    def settle(self, ticket: Ticket, used_tokens: int) -> None:
        if self._open.pop(ticket.id, None) is None:
            return
        state = self._keys.get(ticket.key_id)
        if state is None:
            return
        now = self._clock()
        state.in_flight = max(0, state.in_flight - 1)
        state.last_seen = now
        refund = ticket.tokens - max(0, int(used_tokens))
        if state.tokens is not None and refund > 0:
            state.tokens.spend(-refund, now)
        else:
            refund = 0
        if ticket.limited:
            self._note(ticket.key_id, 0, -refund)  # the stream's end reaches the peers too

    # ---- internals ------------------------------------------------------------------
    def _capacity(self, limit: int) -> float:
        return float(limit) if self._shared else max(1.0, limit * self._share)

    def _state(self, key_id: str, limits: LimitsLike, now: float) -> _KeyState:
        state = self._keys.get(key_id)
        if state is None:
            state = self._keys[key_id] = _KeyState()
        state.last_seen = now
        state.requests = self._bucket(state, 0, limits.requests_per_min, now)
        state.tokens = self._bucket(state, 1, limits.tokens_per_min, now)
        return state

    def _bucket(
        self, state: _KeyState, i: int, limit: int | None, now: float
    ) -> TokenBucket | None:
        bucket = (state.requests, state.tokens)[i]
        if limit is None:
            return None
        capacity = self._capacity(limit)
        if bucket is None:
            bucket = TokenBucket(capacity, now, limit)
            if state.owed[i]:  # peers spent before this replica knew the key's limits
                bucket.spend(state.owed[i] - (now - state.owed_at) * bucket.rate, now)
                state.owed[i] = 0.0
            return bucket
        bucket.limit = limit
        bucket.resize(capacity)
        bucket.refill(now)
        return bucket

    def _check(
        self,
        key_id: str,
        state: _KeyState,
        limits: LimitsLike,
        cost: int,
        slot: tuple[bool, int] | None,
    ) -> _Refusal | None:
        tpm, tb = limits.tokens_per_min, state.tokens
        if tpm is not None and tb is not None and cost > tb.capacity + _EPS:
            message = (
                f"Request too large for tokens per min: limit {tpm}{self._per_ingress(tb)}, "
                f"requested {cost}. The request alone exceeds tokens_per_min; "
                "reduce the prompt or max_tokens."
            )
            return _Refusal("tokens_exceed_limit", 0.0, message)
        refusals: list[_Refusal] = []
        for reason, limit, bucket, need in (
            ("requests", limits.requests_per_min, state.requests, 1),
            ("tokens", tpm, tb, cost),
        ):
            if limit is None or bucket is None or bucket.fits(need):
                continue
            wait = bucket.wait_s(need)
            used = _fmt(bucket.capacity - math.floor(bucket.level + _EPS))
            asked = f", requested {need}" if reason == "tokens" else ""
            message = (
                f"Rate limit reached for {reason} per min: limit {limit}"
                f"{self._per_ingress(bucket)}, used {used}{asked}. "
                f"Retry after {format_duration(wait)}."
            )
            refusals.append(_Refusal(reason, wait, message))
        streams = self._check_streams(key_id, limits.max_streams, slot)
        if streams is not None:
            refusals.append(streams)
        return max(refusals, key=lambda r: r.wait_s, default=None)

    def _check_streams(
        self, key_id: str, limit: int | None, slot: tuple[bool, int] | None
    ) -> _Refusal | None:
        if limit is None or (slot is not None and slot[0]):
            return None
        cap = self.stream_cap(limit)
        n = slot[1] if slot is not None else self._streams(key_id, self._clock())
        if slot is None and n < cap:
            return None
        per = f" ({cap} per ingress)" if self._split() else ""
        message = (
            f"Rate limit reached for concurrent requests: limit {limit}{per}, "
            f"in flight {n}. Retry after {format_duration(STREAMS_RETRY_S)}."
        )
        return _Refusal("streams", STREAMS_RETRY_S, message)

    def stream_cap(self, limit: int) -> int:
        """This ingress's part of a key's concurrent-stream limit (all of it when shared)."""
        if self._shared:
            return limit
        n = self._parts
        if limit < n:
            return 1
        return limit // n + (1 if self._rank < limit % n else 0)

    def _per_ingress(self, bucket: TokenBucket) -> str:
        return f" ({_fmt(bucket.capacity)} per ingress)" if self._split() else ""

    def _headers(self, state: _KeyState, limits: LimitsLike) -> dict[str, str]:
        return ratelimit_headers(
            (limits.requests_per_min, state.requests), (limits.tokens_per_min, state.tokens)
        )

    def _maybe_sweep(self, now: float) -> None:
        if now - self._last_sweep < SWEEP_EVERY_S:
            return
        self._last_sweep = now
        self._peers.forget_silent(now)
        stale: list[str] = []
        for key_id, state in self._keys.items():
            if now - state.last_seen > IDLE_FORGET_S:
                for bucket in (state.requests, state.tokens):
                    if bucket is not None:
                        bucket.refill(now)
                if state.idle():
                    stale.append(key_id)
        for key_id in stale:
            del self._keys[key_id]
