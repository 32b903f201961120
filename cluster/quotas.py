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
    ``share`` (default 1.0) scales every limit: each of N ingress replicas enforces limit/N
    (``share = 1/N``), at least 1 per bucket. Concurrent streams are whole: the ingress of
    ``rank`` r (0..N-1, Serve's replica rank) gets limit // N, plus one if r < limit % N,
    so the parts add up to the limit (3 streams over 2 ingresses: 2 + 1, not 1 + 1); a
    limit below N gives every ingress 1. ``clock`` (default ``time.monotonic``) is injected
    for tests and simulations.
Fleet-wide tolerance
    Serve's proxy spreads requests over the N ingress replicas and each admits at most
    limit/N per minute, so the fleet total never exceeds the limit (except for limits below
    N, where the floor of 1 per replica allows up to N). The cost is early refusal: a key
    whose traffic lands unevenly is refused on a busier replica while another still holds
    room, by up to the imbalance of the spread; and a single request costing more than
    tokens_per_min × share is refused everywhere (``tokens_exceed_limit``).
Memory
    A key's state is forgotten once it has been idle for more than ``IDLE_FORGET_S`` with
    both buckets full and nothing in flight (a fresh state is identical); a sweep over all
    keys runs at most every ``SWEEP_EVERY_S`` of clock time, inside ``admit``.
Contract
    - ``admit`` is synchronous, O(1) amortized, and never blocks.
    - Every ok ``Admission`` carries a ``Ticket`` that the caller settles exactly once when
      the request ends (done, failed or cancelled); an unsettled ticket holds its stream slot.
    - Headers are OpenAI's ``x-ratelimit-*`` for the limits the key has: the limit is the
      key's configured one, remaining/reset come from this limiter's (share-scaled) bucket.
      A refusal adds ``retry-after``, except ``tokens_exceed_limit``, which no wait can fix.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

IDLE_FORGET_S = 120.0
SWEEP_EVERY_S = 60.0
STREAMS_RETRY_S = 1.0
_EPS = 1e-9


class LimitsLike(Protocol):
    @property
    def requests_per_min(self) -> int | None: ...
    @property
    def tokens_per_min(self) -> int | None: ...
    @property
    def max_streams(self) -> int | None: ...


@dataclass(frozen=True, slots=True)
class Ticket:
    id: int
    key_id: str
    tokens: int  # charged to the tokens bucket at admission (0 when the key has no TPM)


@dataclass(frozen=True, slots=True)
class Admission:
    ok: bool
    ticket: Ticket | None
    retry_after_s: float  # 0 when ok
    reason: str  # "requests" | "tokens" | "streams" | "tokens_exceed_limit" | ""
    message: str
    headers: dict[str, str]


class TokenBucket:
    __slots__ = ("capacity", "level", "rate", "stamp")

    def __init__(self, capacity: float, now: float) -> None:
        self.capacity = capacity
        self.rate = capacity / 60.0
        self.level = capacity
        self.stamp = now

    def resize(self, capacity: float) -> None:
        if capacity != self.capacity:
            self.capacity, self.rate = capacity, capacity / 60.0
            self.level = min(self.level, capacity)

    def refill(self, now: float) -> None:
        if now > self.stamp:
            self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
            self.stamp = now

    def wait_s(self, cost: float) -> float:
        return max(0.0, (cost - self.level) / self.rate)

    def reset_s(self) -> float:
        return (self.capacity - self.level) / self.rate

    def fits(self, cost: float) -> bool:
        return self.level + _EPS >= cost

    def full(self) -> bool:
        return self.level + _EPS >= self.capacity


@dataclass(slots=True)
class _KeyState:
    requests: TokenBucket | None = None
    tokens: TokenBucket | None = None
    in_flight: int = 0
    last_seen: float = 0.0

    def idle(self) -> bool:
        full = all(b is None or b.full() for b in (self.requests, self.tokens))
        return full and self.in_flight == 0


@dataclass(frozen=True, slots=True)
class _Refusal:
    reason: str
    wait_s: float
    message: str


def format_duration(seconds: float) -> str:
    """Go ``time.Duration`` style at millisecond resolution, rounded up: 120ms, 1s, 1m30.5s."""
    ms = max(0, math.ceil(seconds * 1000.0 - 1e-6))
    if ms == 0:
        return "0s"
    if ms < 1000:
        return f"{ms}ms"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs, frac = divmod(rest, 1000)
    text = f"{secs}.{frac:03d}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{hours}h{minutes}m{text}"
    return f"{minutes}m{text}" if minutes else text


def retry_after_header(seconds: float) -> str:
    return str(max(1, math.ceil(seconds - 1e-6)))


def _fmt(value: float) -> str:
    return f"{value:g}"


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

    def __len__(self) -> int:
        return len(self._keys)

    def in_flight(self, key_id: str) -> int:
        state = self._keys.get(key_id)
        return state.in_flight if state else 0

    def admit(self, key_id: str, limits: LimitsLike, tokens: int) -> Admission:
        now = self._clock()
        self._maybe_sweep(now)
        state = self._state(key_id, limits, now)
        cost = max(0, int(tokens)) if state.tokens is not None else 0
        refusal = self._check(state, limits, cost)
        if refusal is None:
            if state.requests is not None:
                state.requests.level -= 1
            if state.tokens is not None:
                state.tokens.level -= cost
            state.in_flight += 1
            ticket = Ticket(id=next(self._ids), key_id=key_id, tokens=cost)
            self._open[ticket.id] = ticket
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
            state.tokens.refill(now)
            state.tokens.level = min(state.tokens.capacity, state.tokens.level + refund)

    # ---- internals ------------------------------------------------------------------
    def _scaled(self, limit: int) -> float:
        return max(1.0, limit * self._share)

    def _state(self, key_id: str, limits: LimitsLike, now: float) -> _KeyState:
        state = self._keys.get(key_id)
        if state is None:
            state = self._keys[key_id] = _KeyState()
        state.last_seen = now
        state.requests = self._bucket(state.requests, limits.requests_per_min, now)
        state.tokens = self._bucket(state.tokens, limits.tokens_per_min, now)
        return state

    def _bucket(
        self, bucket: TokenBucket | None, limit: int | None, now: float
    ) -> TokenBucket | None:
        if limit is None:
            return None
        capacity = self._scaled(limit)
        if bucket is None:
            return TokenBucket(capacity, now)
        bucket.resize(capacity)
        bucket.refill(now)
        return bucket

    def _check(self, state: _KeyState, limits: LimitsLike, cost: int) -> _Refusal | None:
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
        streams = self._check_streams(state, limits.max_streams)
        if streams is not None:
            refusals.append(streams)
        return max(refusals, key=lambda r: r.wait_s, default=None)

    def _check_streams(self, state: _KeyState, limit: int | None) -> _Refusal | None:
        if limit is None:
            return None
        cap = self.stream_cap(limit)
        if state.in_flight < cap:
            return None
        per = "" if self._share == 1.0 else f" ({cap} per ingress)"
        message = (
            f"Rate limit reached for concurrent requests: limit {limit}{per}, "
            f"in flight {state.in_flight}. Retry after {format_duration(STREAMS_RETRY_S)}."
        )
        return _Refusal("streams", STREAMS_RETRY_S, message)

    def stream_cap(self, limit: int) -> int:
        """This ingress's part of a key's concurrent-stream limit."""
        n = self._parts
        if limit < n:
            return 1
        return limit // n + (1 if self._rank < limit % n else 0)

    def _per_ingress(self, bucket: TokenBucket) -> str:
        return "" if self._share == 1.0 else f" ({_fmt(bucket.capacity)} per ingress)"

    def _headers(self, state: _KeyState, limits: LimitsLike) -> dict[str, str]:
        headers: dict[str, str] = {}
        for name, limit, bucket in (
            ("requests", limits.requests_per_min, state.requests),
            ("tokens", limits.tokens_per_min, state.tokens),
        ):
            if limit is None or bucket is None:
                continue
            headers[f"x-ratelimit-limit-{name}"] = str(limit)
            headers[f"x-ratelimit-remaining-{name}"] = str(max(0, math.floor(bucket.level + _EPS)))
            headers[f"x-ratelimit-reset-{name}"] = format_duration(bucket.reset_s())
        return headers

    def _maybe_sweep(self, now: float) -> None:
        if now - self._last_sweep < SWEEP_EVERY_S:
            return
        self._last_sweep = now
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
