"""Per-replica load tracker: the numbers the TTFT-queue autoscaler reads.

Algorithm
- Prefill rate: a busy-period estimator. Treat the engine as a FIFO server of prefill work:
  a request's uncached prompt tokens were prefilled between ``start = max(added_at,
  previous first-token time)`` and its own first token. Each first token adds
  ``uncached_tokens`` and ``now - start`` to two exponentially decayed sums; the rate is
  their ratio. Requests whose first tokens land in the same engine step add tokens with
  zero time, so batched prefills are counted correctly. Decay is by busy time (half-life
  ``rate_half_life_s`` of prefill seconds), so an idle replica keeps its last estimate.
  The prior (``prior_prefill_tokens_per_s`` worth ``prior_weight_s`` seconds) gives a cold
  replica an estimate and fades as real samples arrive.
- Queue delay of the newest waiting request: ``waiting_prefill_tokens / rate``. No separate
  decode-interference term: the measured rate already is the *effective* prefill rate with
  the decodes that shared those steps, which is exactly what a waiting request will see.
- TTFT P95: nearest-rank over a sliding window (``ttft_window_s`` seconds, at most
  ``ttft_max_samples`` samples).
- TTFT tail: cumulative counts of first tokens and of those whose TTFT exceeded each edge
  of ``contracts.stats.TTFT_TAIL_EDGES_S`` (``tail()``), so that a reader can take the
  share over its own SLO over any window from two reports, as with a Prometheus histogram.
- Busy fraction: share of the last ``busy_window_s`` seconds covered by busy intervals —
  engine steps reported via ``on_step`` if the engine calls it, else the time with at
  least one request in flight.
- Prefill load: uncached tokens whose prefill completed in the last ``busy_window_s``
  seconds, per second. ``prefill_load / prefill_rate`` is the replica's prefill utilisation.
- Decode rate: output tokens reported via ``on_output_tokens`` in the last
  ``busy_window_s`` seconds, per busy second of that window (0 when it was idle): what the
  engine produces while it works, not diluted by idle time.

``snapshot()`` returns these numbers as a typed ``LoadSnapshot``.

Time comes from the ``now`` arguments (or the injected ``clock`` when omitted).
"""

from __future__ import annotations

import bisect
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from contracts.stats import PRIOR_PREFILL_TOKENS_PER_S, TTFT_TAIL_EDGES_S

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class _Pending:
    added_at: float
    prompt_tokens: int


@dataclass(frozen=True, slots=True)
class LoadSnapshot:
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    queue_delay_s: float
    ttft_p95_s: float
    busy_fraction: float
    prefill_load_tokens_per_s: float
    ongoing: int


class _WindowSum:
    """Integer counts stamped with times; the total of the last ``window_s`` seconds, kept
    as a running sum (``add`` runs per engine output, so no re-summing on read)."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._items: deque[tuple[float, int]] = deque()
        self._total = 0

    def add(self, t: float, n: int) -> None:
        self._items.append((t, n))
        self._total += n

    def total(self, now: float) -> int:
        lo = now - self.window_s
        while self._items and self._items[0][0] < lo:
            self._total -= self._items.popleft()[1]
        return self._total


class LoadTracker:
    def __init__(
        self,
        *,
        prior_prefill_tokens_per_s: float = PRIOR_PREFILL_TOKENS_PER_S,
        prior_weight_s: float = 1.0,
        rate_half_life_s: float = 10.0,
        ttft_window_s: float = 60.0,
        ttft_max_samples: int = 256,
        busy_window_s: float = 10.0,
        clock: Clock = time.monotonic,
    ) -> None:
        if min(prior_prefill_tokens_per_s, prior_weight_s, rate_half_life_s) <= 0:
            raise ValueError("prior rate, prior weight and half-life must be positive")
        self._clock = clock
        self._half_life_s = rate_half_life_s
        self._tokens_sum = prior_prefill_tokens_per_s * prior_weight_s
        self._time_sum = prior_weight_s
        self._ttft_window_s = ttft_window_s
        self._ttfts: deque[tuple[float, float]] = deque(maxlen=ttft_max_samples)
        self._busy_window_s = busy_window_s
        self._busy: deque[list[float]] = deque()  # merged [start, end] intervals
        self._prefilled = _WindowSum(busy_window_s)  # uncached tokens at their first token
        self._decoded = _WindowSum(busy_window_s)  # output tokens
        self._pending: dict[str, _Pending] = {}  # added, no first token yet
        self._in_flight: set[str] = set()
        self._in_flight_since: float | None = None
        self._uses_steps = False
        self.arrived_tokens = 0  # cumulative prompt tokens of requests added
        self.arrived_requests = 0  # cumulative requests added
        self.first_tokens = 0  # cumulative first tokens
        self._over = [0] * len(TTFT_TAIL_EDGES_S)  # ... whose TTFT exceeded each edge
        self._last_first_token_at = -math.inf

    def _now(self, now: float | None) -> float:
        return self._clock() if now is None else now

    # ---- engine events -------------------------------------------------------------

    def on_request_added(
        self, request_id: str, prompt_tokens: int, now: float | None = None
    ) -> None:
        t = self._now(now)
        self.arrived_tokens += int(prompt_tokens)
        self.arrived_requests += 1
        self._pending[request_id] = _Pending(t, int(prompt_tokens))
        if not self._in_flight:
            self._in_flight_since = t
        self._in_flight.add(request_id)

    def on_first_token(
        self, request_id: str, cached_tokens: int = 0, now: float | None = None
    ) -> None:
        t = self._now(now)
        pending = self._pending.pop(request_id, None)
        if pending is None:
            return
        ttft = t - pending.added_at
        self._ttfts.append((t, ttft))
        self.first_tokens += 1
        for i in range(bisect.bisect_left(TTFT_TAIL_EDGES_S, ttft)):  # edges below the TTFT
            self._over[i] += 1
        uncached = max(1, pending.prompt_tokens - int(cached_tokens))
        start = max(pending.added_at, self._last_first_token_at)
        self._last_first_token_at = t
        self._add_rate_sample(uncached, max(0.0, t - start))
        self._prefilled.add(t, uncached)

    def on_output_tokens(self, count: int, now: float | None = None) -> None:
        if count > 0:
            self._decoded.add(self._now(now), int(count))

    def on_finished(self, request_id: str, now: float | None = None) -> None:
        t = self._now(now)
        self._pending.pop(request_id, None)
        if request_id not in self._in_flight:
            return
        self._in_flight.discard(request_id)
        if not self._in_flight and self._in_flight_since is not None:
            if not self._uses_steps:
                self._add_busy(self._in_flight_since, t)
            self._in_flight_since = None

    def on_step(self, busy_seconds: float, now: float | None = None) -> None:
        """Optional: the engine stepped for ``busy_seconds`` ending at ``now``."""
        t = self._now(now)
        if not self._uses_steps:
            self._uses_steps = True
            self._busy.clear()
        self._add_busy(t - busy_seconds, t)

    # ---- derived numbers -----------------------------------------------------------

    @property
    def prefill_tokens_per_s(self) -> float:
        return self._tokens_sum / self._time_sum

    def tail(self) -> tuple[int, tuple[int, ...]]:
        """Cumulative first tokens, and those over each edge of ``TTFT_TAIL_EDGES_S``."""
        return self.first_tokens, tuple(self._over)

    @property
    def ongoing(self) -> int:
        return len(self._in_flight)

    def snapshot(self, waiting_prefill_tokens: float, now: float | None = None) -> LoadSnapshot:
        t = self._now(now)
        rate = self.prefill_tokens_per_s
        busy = self.busy_fraction(t)
        return LoadSnapshot(
            prefill_tokens_per_s=rate,
            decode_tokens_per_s=self._decode_rate(t, busy),
            queue_delay_s=max(0.0, waiting_prefill_tokens) / rate,
            ttft_p95_s=self.ttft_p95(t),
            busy_fraction=busy,
            prefill_load_tokens_per_s=self.prefill_load(t),
            ongoing=len(self._in_flight),
        )

    def ttft_p95(self, now: float | None = None) -> float:
        t = self._now(now)
        while self._ttfts and self._ttfts[0][0] < t - self._ttft_window_s:
            self._ttfts.popleft()
        if not self._ttfts:
            return 0.0
        values = sorted(v for _, v in self._ttfts)
        return values[max(0, math.ceil(0.95 * len(values)) - 1)]

    def busy_fraction(self, now: float | None = None) -> float:
        t = self._now(now)
        lo = t - self._busy_window_s
        while self._busy and self._busy[0][1] < lo:
            self._busy.popleft()
        covered = sum(min(end, t) - max(start, lo) for start, end in self._busy if end > lo)
        if self._in_flight_since is not None and not self._uses_steps:
            covered += t - max(self._in_flight_since, lo)
        return min(1.0, max(0.0, covered / self._busy_window_s))

    def prefill_load(self, now: float | None = None) -> float:
        t = self._now(now)
        return self._prefilled.total(t) / self._busy_window_s

    def decode_rate(self, now: float | None = None) -> float:
        t = self._now(now)
        return self._decode_rate(t, self.busy_fraction(t))

    def _decode_rate(self, t: float, busy_fraction: float) -> float:
        busy_s = busy_fraction * self._busy_window_s
        return self._decoded.total(t) / busy_s if busy_s > 0 else 0.0

    # ---- internals -----------------------------------------------------------------

    def _add_rate_sample(self, tokens: int, seconds: float) -> None:
        decay = 0.5 ** (seconds / self._half_life_s)
        self._tokens_sum = self._tokens_sum * decay + tokens
        self._time_sum = self._time_sum * decay + seconds

    def _add_busy(self, start: float, end: float) -> None:
        if end <= start:
            return
        if self._busy and start <= self._busy[-1][1] + 1e-9:
            self._busy[-1][1] = max(self._busy[-1][1], end)
        else:
            self._busy.append([start, end])
