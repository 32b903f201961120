"""The null engine: no model, only a clock, for measuring the serving layer alone.

Every running request emits one token per step; one asyncio task ticks at a fixed period
(``step_s``), and steps chain on their deadlines so the period does not drift while the
engine is busy. A new request waits ``prefill_s`` (a fixed prefill delay, 0 by default)
and then joins the next step. At most ``max_num_seqs`` requests run; the rest wait in
arrival order (continuous batching: a finished request's slot is refilled on the next step).
Tokens are ids from a fixed cycle with fixed text (`` x``), so output costs nothing to
produce; what a client sees is the serving layer's cost and latency on top of the period.

``stats()`` is measured where it can be (waiting, running, ongoing, steps, decode rate,
busy fraction) and neutral where there is nothing to measure (no KV cache: ``kv_usage`` 0,
no prefix cache: hits 0) or where it does not count (no TTFT: ``ttft_p95_s`` and the TTFT
tail counters 0).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from contracts.stats import ReplicaStats
from replicas.engine import (
    FINISH_ABORT,
    FINISH_LENGTH,
    Delta,
    GenerateRequest,
    LoopEngine,
    take_merged,
)

TOKEN_ID = 1000
TOKEN_TEXT = " x"
RATE_WINDOW_S = 5.0


@dataclass(slots=True)
class _Req:
    gen: GenerateRequest
    queue: asyncio.Queue[Delta]
    ready_at: float  # monotonic time its prefill delay ends
    emitted: int = 0
    done: bool = False


@dataclass(slots=True)
class _Window:
    """Tokens and busy time over the last few seconds (for the decode-rate stats)."""

    events: deque[tuple[float, int, float]] = field(default_factory=deque)

    def add(self, now: float, tokens: int, busy_s: float) -> None:
        self.events.append((now, tokens, busy_s))
        while self.events and self.events[0][0] < now - RATE_WINDOW_S:
            self.events.popleft()

    def rates(self, now: float) -> tuple[float, float]:
        recent = [e for e in self.events if e[0] >= now - RATE_WINDOW_S]
        tokens = sum(e[1] for e in recent)
        busy = sum(e[2] for e in recent)
        return (tokens / busy if busy > 0 else 0.0), min(1.0, busy / RATE_WINDOW_S)


class NullEngine(LoopEngine):
    _loop_name = "null-engine-loop"

    def __init__(
        self,
        *,
        step_s: float = 0.007,
        prefill_s: float = 0.0,
        max_num_seqs: int = 256,
        max_model_len: int = 8192,
        block_size: int = 16,
    ) -> None:
        if step_s <= 0 or prefill_s < 0 or max_num_seqs < 1:
            raise ValueError("need step_s > 0, prefill_s >= 0 and max_num_seqs >= 1")
        super().__init__()
        self.step_s, self.prefill_s, self.max_num_seqs = step_s, prefill_s, max_num_seqs
        self.max_model_len, self.block_size = max_model_len, block_size
        self._waiting: deque[_Req] = deque()
        self._running: list[_Req] = []
        self._by_id: dict[str, _Req] = {}
        self._wake = asyncio.Event()
        self._steps = 0
        self._arrived_tokens = 0
        self._arrived_requests = 0
        self._window = _Window()

    def _live_ids(self) -> list[str]:
        return list(self._by_id)

    def stats(self) -> ReplicaStats:
        decode_rate, busy = self._window.rates(time.monotonic())
        waiting = len(self._waiting)
        return ReplicaStats(
            waiting=float(waiting),
            running=float(len(self._running)),
            waiting_prefill_tokens=float(sum(len(r.gen.prompt_token_ids) for r in self._waiting)),
            block_size=self.block_size,
            decode_tokens_per_s=decode_rate,
            queue_delay_s=(waiting // self.max_num_seqs + 1) * self.prefill_s if waiting else 0.0,
            busy_fraction=busy,
            ongoing=float(len(self._by_id)),
            steps=float(self._steps),
            arrived_prompt_tokens=float(self._arrived_tokens),
            arrived_requests=float(self._arrived_requests),
        )

    async def abort(self, request_id: str) -> None:
        req = self._by_id.pop(request_id, None)
        if req is None or req.done:
            return
        req.done = True
        req.queue.put_nowait(self._delta(req, 0, 0.0, FINISH_ABORT))

    async def generate(self, request: GenerateRequest) -> AsyncIterator[Delta]:
        if self._task is None:
            await self.start()
        if request.request_id in self._by_id:
            raise ValueError(f"duplicate request id {request.request_id}")
        if len(request.prompt_token_ids) + request.max_tokens > self.max_model_len:
            raise ValueError("prompt + max_tokens exceed max_model_len")
        req = _Req(request, asyncio.Queue(), time.monotonic() + self.prefill_s)
        self._by_id[request.request_id] = req
        self._arrived_tokens += len(request.prompt_token_ids)
        self._arrived_requests += 1
        self._waiting.append(req)
        self._wake.set()
        try:
            while True:
                delta = take_merged(req.queue, await req.queue.get())
                yield delta
                if delta.finish_reason is not None:
                    return
        finally:
            if not req.done:
                await self.abort(request.request_id)
            self._by_id.pop(request.request_id, None)

    def _delta(self, req: _Req, n: int, now: float, finish: str | None) -> Delta:
        g = req.gen
        return Delta(
            request_id=g.request_id,
            token_ids=[TOKEN_ID + (req.emitted % 100)] if n else [],
            text=TOKEN_TEXT if n else "",
            token_times=[now] if n else [],
            finish_reason=finish,
            prompt_tokens=len(g.prompt_token_ids),
            completion_tokens=req.emitted,
        )

    def _admit(self, now: float) -> None:
        self._running = [r for r in self._running if not r.done]
        while self._waiting and len(self._running) < self.max_num_seqs:
            head = self._waiting[0]
            if head.done:
                self._waiting.popleft()
                continue
            if head.ready_at > now:
                break
            self._running.append(self._waiting.popleft())

    async def _loop(self) -> None:
        deadline = time.monotonic()
        while True:
            await self._maybe_hang()
            now = time.monotonic()
            self._admit(now)
            if not self._running:
                live = [r for r in self._waiting if not r.done]
                self._waiting = deque(live)
                self._wake.clear()
                if not live:
                    await self._wake.wait()
                else:  # prefill delays still running
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), max(0.0, live[0].ready_at - now))
                deadline = time.monotonic()
                continue
            deadline = max(deadline, now - self.step_s) + self.step_s
            await asyncio.sleep(max(0.0, deadline - time.monotonic()))
            end = time.time()
            emitted = 0
            for req in self._running:
                if req.done:
                    continue
                req.emitted += 1
                emitted += 1
                finish = FINISH_LENGTH if req.emitted >= req.gen.max_tokens else None
                if finish is not None:
                    req.done = True
                    self._by_id.pop(req.gen.request_id, None)
                req.queue.put_nowait(self._delta(req, 1, end, finish))
            self._steps += 1
            self._window.add(time.monotonic(), emitted, self.step_s)
