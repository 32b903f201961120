"""The Engine protocol every replica engine implements (vLLM and simulated).

Contract
- ``start()`` loads the model / builds the engine; ``shutdown()`` releases it.
- ``generate(request)`` is an async iterator of ``Delta``s: new token ids, their text, the
  wall-clock time each token was produced, and on the last delta a finish reason
  (``"stop"``, ``"length"`` or ``"abort"``) and the engine's own usage counts. Deltas produced
  while the consumer was busy come out merged into one (``take_merged``), as vLLM's do.
- ``abort(request_id)`` frees the request's slot and KV blocks; the iterator then ends.
  Cancelling the consumer of ``generate`` must have the same effect (engines abort in a
  ``finally``).
- ``stats()`` is cheap and synchronous: it is polled for routing and autoscaling. It returns
  a complete ``contracts.stats.ReplicaStats`` (the record and its wire form are defined
  there); every field is measured or deliberately neutral, and the engine's module header
  says which. ``waiting_prefill_tokens`` counts *uncached* tokens: a request's whole prompt
  until the scheduler has looked it up in the prefix cache, then prompt − cache hit
  (− the chunks already prefilled, where the engine can see them).
- ``check_health()`` raises if the engine cannot serve.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from contracts.stats import ReplicaStats

FINISH_STOP = "stop"
FINISH_LENGTH = "length"
FINISH_ABORT = "abort"


@dataclass(frozen=True, slots=True)
class GenerateRequest:
    request_id: str
    prompt_token_ids: list[int]
    max_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False
    arrival_time: float = 0.0  # time.time() when the ingress received the request


@dataclass(slots=True)
class Delta:
    request_id: str
    token_ids: list[int]
    text: str
    token_times: list[float]  # time.time() per token in token_ids
    finish_reason: str | None = None
    prompt_tokens: int = 0  # set on every delta: the engine's own prompt length
    completion_tokens: int = 0  # cumulative output tokens so far
    cached_tokens: int = 0  # prompt tokens served from the prefix cache (when known)
    queue_s: float | None = None  # engine arrival to first scheduling, once scheduled


def take_merged(queue: asyncio.Queue[Delta], first: Delta) -> Delta:
    """vLLM's ``DELTA`` semantics: outputs that arrived while the consumer was away come out
    as one (tokens, text and times concatenated; counts and finish from the newest), so a
    consumer that falls behind catches up in one step instead of one per token."""
    d = first
    while d.finish_reason is None and not queue.empty():
        nxt = queue.get_nowait()
        d = Delta(
            request_id=d.request_id,
            token_ids=d.token_ids + nxt.token_ids,
            text=d.text + nxt.text,
            token_times=d.token_times + nxt.token_times,
            finish_reason=nxt.finish_reason,
            prompt_tokens=nxt.prompt_tokens,
            completion_tokens=nxt.completion_tokens,
            cached_tokens=nxt.cached_tokens,
        )
    return d


@dataclass(frozen=True, slots=True)
class RequestDone:
    """One finished request, for the replica's per-request metrics."""

    ttft_s: float | None  # None: no token was produced
    e2e_s: float
    prompt_tokens: int
    output_tokens: int
    finish_reason: str
    queue_s: float | None = None  # engine arrival to first scheduling (when the engine says)


class LoopEngine:
    """Lifecycle shared by engines that one asyncio task drives (simulated, null): ``start``
    creates the task running ``_loop``, ``shutdown`` cancels it and aborts every request
    still live, ``check_health`` fails once shut down or once the loop died."""

    _loop_name = "engine-loop"

    def __init__(self) -> None:
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._hang = False
        self._died: str | None = None

    def hang(self) -> None:
        """Fault injection (tests, chaos benchmarks): the loop stops stepping, as a stuck
        engine core would, while the process and its event loop stay alive."""
        self._hang = True

    async def _maybe_hang(self) -> None:
        if self._hang:
            await asyncio.Event().wait()  # never set: only shutdown's cancel ends it

    async def _loop(self) -> None:
        raise NotImplementedError

    def _live_ids(self) -> list[str]:
        raise NotImplementedError

    async def abort(self, request_id: str) -> None:
        raise NotImplementedError

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name=self._loop_name)

    async def shutdown(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for rid in self._live_ids():
            await self.abort(rid)

    async def ping(self) -> None:
        """Answers while the loop can step; a hung one (``hang``) never answers, as a stuck
        engine core does not answer vLLM's utility calls."""
        await self._maybe_hang()

    def die(self) -> None:
        """Fault injection: the loop ends, as an engine core process that exits would; the
        replica's process stays up."""
        self._died = "the engine core died (injected)"
        if self._task is not None:
            self._task.cancel()

    def dead(self) -> str | None:
        if self._closed or self._task is None or not self._task.done():
            return None
        if self._died is not None:
            return self._died
        exc = self._task.exception() if not self._task.cancelled() else None
        return f"engine loop died: {exc!r}"

    async def check_health(self) -> None:
        if self._closed:
            raise RuntimeError("engine shut down")
        why = self.dead()
        if why is not None:
            raise RuntimeError(why)


@runtime_checkable
class Engine(Protocol):
    block_size: int
    max_model_len: int

    async def start(self) -> None: ...

    def generate(self, request: GenerateRequest) -> AsyncIterator[Delta]: ...

    async def abort(self, request_id: str) -> None: ...

    def stats(self) -> ReplicaStats: ...

    async def check_health(self) -> None: ...

    async def ping(self) -> None:
        """Returns once the engine's core has answered (vLLM: a round trip to the engine
        core process). The replica pings an idle engine to find one that hung before a
        request does."""
        ...

    def dead(self) -> str | None:
        """Why the engine can serve nothing more (it died under its requests), else None;
        cheap: the replica asks it for every item it relays."""
        ...

    async def shutdown(self) -> None: ...
