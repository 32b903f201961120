# ruff: noqa: ARG002  # EngineClient's interface: most arguments are unused by a null engine
"""The null engine as a vLLM ``EngineClient``, for ``rayllm.py``: vLLM's serving objects
inside Ray Serve LLM talk to it as to ``AsyncLLM``; it emits one token per running request
per step (the same clock as ``replicas/null_engine.py``) as ``RequestOutput`` deltas."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncGenerator, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from vllm.engine.protocol import EngineClient, StreamingInput
from vllm.outputs import CompletionOutput, RequestOutput
from vllm.renderers import renderer_from_config
from vllm.sampling_params import RequestOutputKind
from vllm.v1.engine.input_processor import InputProcessor

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.lora.request import LoRARequest
    from vllm.outputs import PoolingRequestOutput
    from vllm.pooling_params import PoolingParams
    from vllm.sampling_params import SamplingParams
    from vllm.tasks import SupportedTask


from replicas.null_engine import TOKEN_ID, TOKEN_TEXT


@dataclass(slots=True)
class _Seq:
    max_tokens: int
    queue: asyncio.Queue[bool] = field(default_factory=asyncio.Queue)  # True: last token
    emitted: int = 0
    done: bool = False


class _StepClock:
    """One task ticks every ``step_s`` (deadline-chained, so the period does not drift) while
    anything runs; each tick gives every running sequence one token. FIFO admission up to
    ``max_num_seqs``; a sequence admitted at a tick gets its first token at the next one."""

    def __init__(self, step_s: float, max_num_seqs: int) -> None:
        if step_s <= 0 or max_num_seqs < 1:
            raise ValueError("need step_s > 0 and max_num_seqs >= 1")
        self.step_s, self.max_num_seqs = step_s, max_num_seqs
        self._waiting: deque[_Seq] = deque()
        self._running: list[_Seq] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def add(self, seq: _Seq) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._loop())
        self._waiting.append(seq)
        self._wake.set()

    def failed(self) -> BaseException | None:
        if self._task is None or not self._task.done() or self._task.cancelled():
            return None
        return self._task.exception()

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    def _admit(self) -> None:
        while self._waiting and len(self._running) < self.max_num_seqs:
            seq = self._waiting.popleft()
            if not seq.done:
                self._running.append(seq)

    async def _loop(self) -> None:
        deadline = time.monotonic()
        while True:
            self._admit()
            if not self._running:
                self._wake.clear()
                await self._wake.wait()
                deadline = time.monotonic()
                continue
            now = time.monotonic()
            deadline = max(deadline, now - self.step_s) + self.step_s
            await asyncio.sleep(max(0.0, deadline - time.monotonic()))
            running: list[_Seq] = []
            for seq in self._running:
                if seq.done:
                    continue
                seq.emitted += 1
                last = seq.emitted >= seq.max_tokens
                seq.queue.put_nowait(last)
                if last:
                    seq.done = True
                else:
                    running.append(seq)
            self._running = running


class NullEngineClient(EngineClient):
    """The null object of vLLM's ``EngineClient`` (what ``AsyncLLM`` is to vLLM's serving
    objects): real config, renderer and input processor; ``generate`` driven by the clock."""

    def __init__(self, vllm_config: VllmConfig, step_s: float) -> None:
        self.vllm_config = vllm_config
        self.model_config = vllm_config.model_config
        self.renderer = renderer_from_config(vllm_config)  # as AsyncLLM.__init__ does
        self.input_processor = InputProcessor(vllm_config, self.renderer)
        self._clock = _StepClock(step_s, vllm_config.scheduler_config.max_num_seqs)
        self._seqs: dict[str, _Seq] = {}
        self._stopped = False

    @property
    def is_running(self) -> bool:
        return not self._stopped

    @property
    def is_stopped(self) -> bool:
        return self._stopped

    @property
    def errored(self) -> bool:
        return self._clock.failed() is not None

    @property
    def dead_error(self) -> BaseException:
        return RuntimeError(f"null engine clock died: {self._clock.failed()!r}")

    async def generate(
        self,
        prompt: Any,
        sampling_params: SamplingParams,
        request_id: str,
        *,
        prompt_text: str | None = None,
        lora_request: LoRARequest | None = None,
        tokenization_kwargs: dict[str, Any] | None = None,
        trace_headers: Mapping[str, str] | None = None,
        priority: int = 0,
        data_parallel_rank: int | None = None,
        session_id: str | None = None,
        kv_hints: Any = None,
        reasoning_ended: bool | None = None,
        reasoning_parser_kwargs: dict[str, Any] | None = None,
    ) -> AsyncGenerator[RequestOutput, None]:
        if isinstance(prompt, StreamingInput | AsyncGenerator):
            raise ValueError("the null engine takes no streaming input")
        ids = prompt.get("prompt_token_ids") if isinstance(prompt, dict) else None
        prompt_ids: list[int] = list(ids or [])
        seq = _Seq(max_tokens=max(1, sampling_params.max_tokens or 1))
        kind = sampling_params.output_kind  # DELTA when streaming, FINAL_ONLY when not
        self._seqs[request_id] = seq
        self._clock.add(seq)
        try:
            while True:
                last = await seq.queue.get()
                if kind is RequestOutputKind.FINAL_ONLY and not last:
                    continue
                n = 1 if kind is RequestOutputKind.DELTA else seq.emitted
                out = CompletionOutput(
                    index=0,
                    text=TOKEN_TEXT * n,
                    token_ids=[TOKEN_ID] * n,
                    cumulative_logprob=None,
                    logprobs=None,
                    finish_reason="length" if last else None,
                )
                yield RequestOutput(
                    request_id=request_id,
                    prompt=prompt_text,
                    prompt_token_ids=prompt_ids,
                    prompt_logprobs=None,
                    outputs=[out],
                    finished=last,
                    num_cached_tokens=0,
                )
                if last:
                    return
        finally:
            seq.done = True
            self._seqs.pop(request_id, None)

    async def abort(self, request_id: str | Iterable[str]) -> None:
        for rid in [request_id] if isinstance(request_id, str) else request_id:
            seq = self._seqs.get(rid)
            if seq is not None:
                seq.done = True

    async def get_supported_tasks(self) -> tuple[SupportedTask, ...]:
        return ("generate",)

    async def check_health(self) -> None:
        if (err := self._clock.failed()) is not None:
            raise RuntimeError("null engine clock died") from err

    def shutdown(self, timeout: float | None = None) -> None:
        self._stopped = True
        self._clock.stop()

    # The rest of EngineClient: nothing to do without a model.
    def encode(
        self,
        prompt: Any,
        pooling_params: PoolingParams,
        request_id: str,
        lora_request: LoRARequest | None = None,
        trace_headers: Mapping[str, str] | None = None,
        priority: int = 0,
        tokenization_kwargs: dict[str, Any] | None = None,
        reasoning_ended: bool | None = None,
    ) -> AsyncGenerator[PoolingRequestOutput, None]:
        raise NotImplementedError("the null engine does not pool")

    async def notify_kv_transfer_request_rejected(
        self,
        request_id: str,
        kv_transfer_params: dict[str, Any],
        *,
        data_parallel_rank: int | None = None,
    ) -> None:
        return None

    async def is_tracing_enabled(self) -> bool:
        return False

    async def do_log_stats(self) -> None:
        return None

    async def start_profile(
        self,
        profile_prefix: str | None = None,
        *,
        delay_iterations: int | None = None,
        max_iterations: int | None = None,
    ) -> None:
        return None

    async def stop_profile(self) -> None:
        return None

    async def reset_mm_cache(self) -> None:
        return None

    async def reset_encoder_cache(self) -> None:
        return None

    async def reset_prefix_cache(
        self, reset_running_requests: bool = False, reset_connector: bool = False
    ) -> bool:
        return True

    async def sleep(self, level: int = 1, mode: Any = "abort") -> None:
        return None

    async def release_kv_cache_memory(self) -> None:
        return None

    async def wake_up(self, tags: list[str] | None = None) -> bool:
        return True

    async def is_sleeping(self) -> bool:
        return False

    async def add_lora(self, lora_request: LoRARequest) -> bool:
        return False

    async def pause_generation(self, *, mode: Any = "abort", clear_cache: bool = True) -> None:
        return None

    async def resume_generation(self) -> None:
        return None

    async def is_paused(self) -> bool:
        return False
