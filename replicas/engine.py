"""The Engine protocol every replica engine implements (vLLM and simulated).

Contract
- ``start()`` loads the model / builds the engine; ``shutdown()`` releases it.
- ``generate(request)`` is an async iterator of ``Delta``s: new token ids, their text, the
  wall-clock time each token was produced, and on the last delta a finish reason
  (``"stop"``, ``"length"`` or ``"abort"``) and the engine's own usage counts.
- ``abort(request_id)`` frees the request's slot and KV blocks; the iterator then ends.
  Cancelling the consumer of ``generate`` must have the same effect (engines abort in a
  ``finally``).
- ``stats()`` is cheap and synchronous: it is polled for routing and autoscaling.
- ``check_health()`` raises if the engine cannot serve.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from typing import Protocol, runtime_checkable

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


@dataclass(frozen=True, slots=True)
class EngineStats:
    waiting: int = 0  # requests queued, not yet scheduled
    running: int = 0  # requests holding a batch slot
    waiting_prefill_tokens: int = 0  # uncached prompt tokens still to prefill (waiting+partial)
    kv_usage: float = 0.0  # fraction of KV blocks in use, 0..1
    kv_capacity_tokens: int = 0  # total KV capacity in tokens
    prefix_hits: int = 0  # cumulative prompt tokens found in the prefix cache
    prefix_queries: int = 0  # cumulative prompt tokens looked up in the prefix cache
    block_size: int = 16
    prefill_tokens_per_s: float = 0.0  # measured (smoothed) prefill rate; 0 if unknown
    decode_tokens_per_s: float = 0.0  # measured (smoothed) output token rate; 0 if unknown
    queue_delay_s: float = 0.0  # estimated wait to first token for the newest waiting request
    ttft_p95_s: float = 0.0  # recent TTFT P95 observed by this engine; 0 if no sample
    healthy: bool = True
    extra: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, float]:
        out = {k: float(v) for k, v in asdict(self).items() if k != "extra"}
        out.update(self.extra)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, float]) -> EngineStats:
        names = set(cls.__dataclass_fields__) - {"extra"}
        kwargs = {k: data[k] for k in names if k in data}
        for key in (
            "waiting",
            "running",
            "waiting_prefill_tokens",
            "kv_capacity_tokens",
            "prefix_hits",
            "prefix_queries",
            "block_size",
        ):
            if key in kwargs:
                kwargs[key] = int(kwargs[key])
        if "healthy" in kwargs:
            kwargs["healthy"] = bool(kwargs["healthy"])
        return cls(**kwargs)


@runtime_checkable
class Engine(Protocol):
    block_size: int
    max_model_len: int

    async def start(self) -> None: ...

    def generate(self, request: GenerateRequest) -> AsyncIterator[Delta]: ...

    async def abort(self, request_id: str) -> None: ...

    def stats(self) -> EngineStats: ...

    async def check_health(self) -> None: ...

    async def shutdown(self) -> None: ...
