"""``LiteOpenAI``: a small OpenAI layer over any ``Engine``, for the simulated and null engines.

vLLM replicas answer with vLLM's own OpenAI layer (``replicas/vllm_openai.py``); engines
without one get this subset: chat and completions, streamed or not, greedy/temperature/top-p,
``stop``, ``seed``, ``ignore_eos`` and usage (with ``cached_tokens``). Anything else is a
clear 400 (``protocol.py``). It uses the ingress's tokenization (``prompt_token_ids``), so
a simulated replica needs no tokenizer. Each engine step's delta becomes one SSE event,
encoded here, once; the relays pass the bytes through.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from contracts.http import JSON, SSE, APIError, ForwardedRequest, ResponseHead, decode_json
from replicas.engine import Delta, Engine, GenerateRequest, RequestDone
from replicas.openai_lite.format import SSE_DONE, Formatter, sse, usage
from replicas.openai_lite.protocol import ChatRequest, CompletionRequest, validate

PATHS: dict[str, type] = {"/v1/chat/completions": ChatRequest, "/v1/completions": CompletionRequest}


def _error(err: APIError, replica_id: str) -> tuple[ResponseHead, bytes]:
    return ResponseHead(err.status, JSON, replica_id), json.dumps(err.body()).encode()


def check_context(prompt_len: int, max_tokens: int | None, max_model_len: int) -> int:
    room = max_model_len - prompt_len
    if room <= 0 or (max_tokens is not None and max_tokens > room):
        want = max_tokens if max_tokens is not None else 1
        raise APIError(
            400,
            f"This model's maximum context length is {max_model_len} tokens. However, you "
            f"requested {prompt_len + want} tokens ({prompt_len} in the prompt, {want} for "
            f"the completion).",
            param="max_tokens",
            code="context_length_exceeded",
        )
    return max_tokens if max_tokens is not None else room


class LiteOpenAI:
    def __init__(
        self,
        engine: Engine,
        served_name: str,
        replica_id: str,
        on_done: Callable[[RequestDone], None] | None = None,
        observe_itl: Callable[[float], None] | None = None,
    ) -> None:
        self.engine = engine
        self.served_name = served_name
        self.replica_id = replica_id
        self.on_done = on_done
        self.observe_itl = observe_itl

    async def _run(self, gen: GenerateRequest) -> AsyncIterator[Delta]:
        """The engine's deltas, with per-request metrics (ITL per engine step)."""
        start = time.monotonic()
        first: float | None = None
        last_t: float | None = None
        last: Delta | None = None
        try:
            async for d in self.engine.generate(gen):
                if d.token_times:
                    t = d.token_times[-1]
                    if first is None:
                        first = time.monotonic()
                    elif self.observe_itl is not None and last_t is not None:
                        self.observe_itl(max(0.0, (t - last_t) / len(d.token_times)))
                    last_t = t
                last = d
                yield d
        finally:
            if self.on_done is not None:
                p, c, _ = _counts(last)
                reason = (last.finish_reason if last else None) or "abort"
                ttft = first - start if first is not None else None
                queue = last.queue_s if last is not None else None
                self.on_done(RequestDone(ttft, time.monotonic() - start, p, c, reason, queue))

    def _request(self, fwd: ForwardedRequest) -> tuple[Any, GenerateRequest]:
        model = PATHS.get(fwd.path)
        if model is None:
            raise APIError(404, f"{fwd.path} is not served by this engine", code="not_found")
        body = validate(model, decode_json(fwd.body))
        ids = list(fwd.prompt_token_ids)
        if not ids:
            raise APIError(400, "the prompt is empty", param="prompt", code="invalid_value")
        asked = getattr(body, "max_completion_tokens", None) or body.max_tokens
        max_tokens = check_context(len(ids), asked, self.engine.max_model_len)
        if body.presence_penalty or body.frequency_penalty:
            raise APIError(
                400,
                "presence/frequency penalties are not supported by this engine",
                param="presence_penalty",
                code="invalid_value",
            )
        gen = GenerateRequest(
            request_id=fwd.request_id,
            prompt_token_ids=ids,
            max_tokens=max_tokens,
            temperature=body.temperature,
            top_p=body.top_p,
            seed=body.seed,
            stop=body.stop_list(),
            ignore_eos=body.ignore_eos,
            arrival_time=fwd.arrival_time,
        )
        return body, gen

    async def handle(self, fwd: ForwardedRequest) -> AsyncIterator[ResponseHead | bytes]:
        try:
            body, gen = self._request(fwd)
        except APIError as err:
            head, data = _error(err, self.replica_id)
            yield head
            yield data
            return
        fmt = Formatter(gen.request_id, body.model, isinstance(body, ChatRequest))
        if body.stream:
            yield ResponseHead(200, SSE, self.replica_id)
            opts = body.stream_options
            async for chunk in self._sse(gen, fmt, bool(opts and opts.include_usage)):
                yield chunk
            return
        parts: list[str] = []
        last: Any = None
        async for d in self._run(gen):
            parts.append(d.text)
            last = d
        u = usage(*_counts(last))
        out = fmt.full("".join(parts), last.finish_reason if last else None, u)
        yield ResponseHead(200, JSON, self.replica_id)
        yield json.dumps(out, separators=(",", ":")).encode()

    async def _sse(
        self, gen: GenerateRequest, fmt: Formatter, include_usage: bool
    ) -> AsyncIterator[bytes]:
        last: Any = None
        async for d in self._run(gen):
            last = d
            if d.text or d.finish_reason:
                yield sse(fmt.chunk(d.text, d.finish_reason))
        if include_usage:
            yield sse(fmt.usage_chunk(usage(*_counts(last))))
        yield SSE_DONE


def _counts(last: Any) -> tuple[int, int, int]:
    if last is None:
        return 0, 0, 0
    return last.prompt_tokens, last.completion_tokens, last.cached_tokens
