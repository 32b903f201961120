"""Turn a validated OpenAI body into engine + routing inputs, once, at the ingress.

Applies the chat template with the served model's tokenizer, checks token limits
(``max_tokens`` cap, prompt + ``max_tokens`` within the context) and computes the prefix
block hashes the router matches on.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from cluster.openai_protocol import APIError, ChatRequest, CompletionRequest
from router.ray_compat import RoutedPayload
from router.types import RequestView
from router.views import make_request_view


@dataclass(frozen=True, slots=True)
class Limits:
    served_name: str
    max_model_len: int
    max_tokens_cap: int
    default_max_tokens: int
    block_size: int


@dataclass(frozen=True, slots=True)
class Prepared:
    request_id: str
    token_ids: list[int]
    max_tokens: int
    view: RequestView
    payload: dict[str, Any]


def check_model(name: str, limits: Limits) -> None:
    if name != limits.served_name:
        raise APIError(
            404,
            f"The model `{name}` does not exist. Available: {limits.served_name}",
            type="invalid_request_error",
            param="model",
            code="model_not_found",
        )


def prompt_ids(req: CompletionRequest, tokenizer: Any) -> list[int]:
    p = req.prompt
    if isinstance(p, list) and p and isinstance(p[0], int):
        vocab = len(tokenizer)
        if any(t < 0 or t >= vocab for t in p):
            raise APIError(
                400,
                f"prompt token ids must be in [0, {vocab})",
                param="prompt",
                code="invalid_value",
            )
        return list(p)
    text = p[0] if isinstance(p, list) else p
    if not text:
        raise APIError(400, "prompt must not be empty", param="prompt", code="invalid_value")
    return list(tokenizer.encode(text, add_special_tokens=False))


def chat_ids(req: ChatRequest, tokenizer: Any) -> list[int]:
    try:
        messages = [{"role": m.role, "content": m.text()} for m in req.messages]
    except ValueError as err:
        raise APIError(400, str(err), param="messages", code="invalid_value") from None
    out = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if isinstance(out, dict) or hasattr(out, "input_ids"):
        out = out["input_ids"]
    return list(out)


def resolve_max_tokens(asked: int | None, prompt_len: int, limits: Limits) -> int:
    room = limits.max_model_len - prompt_len
    if asked is not None and asked > limits.max_tokens_cap:
        raise APIError(
            400,
            f"max_tokens={asked} is above this server's cap of {limits.max_tokens_cap}",
            param="max_tokens",
            code="invalid_value",
        )
    if room <= 0 or (asked is not None and asked > room):
        want = asked if asked is not None else 1
        raise APIError(
            400,
            f"This model's maximum context length is {limits.max_model_len} tokens. "
            f"However, you requested {prompt_len + want} tokens ({prompt_len} in the prompt, "
            f"{want} for the completion).",
            param="messages" if asked is None else "max_tokens",
            code="context_length_exceeded",
        )
    return asked if asked is not None else min(limits.default_max_tokens, room)


def prepare(req: CompletionRequest | ChatRequest, tokenizer: Any, limits: Limits) -> Prepared:
    check_model(req.model, limits)
    if isinstance(req, ChatRequest):
        ids = chat_ids(req, tokenizer)
        asked = (
            req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
        )
    else:
        ids = prompt_ids(req, tokenizer)
        asked = req.max_tokens
    if req.presence_penalty or req.frequency_penalty:
        raise APIError(
            400,
            "presence/frequency penalties are not supported",
            param="presence_penalty",
            code="invalid_value",
        )
    max_tokens = resolve_max_tokens(asked, len(ids), limits)
    rid = f"{'chatcmpl' if isinstance(req, ChatRequest) else 'cmpl'}-{uuid.uuid4().hex}"
    view = make_request_view(
        rid,
        ids,
        block_size=limits.block_size,
        expected_output_tokens=max_tokens,
        model=req.model,
        session_id=req.user,
    )
    gen = dict(
        request_id=rid,
        prompt_token_ids=ids,
        max_tokens=max_tokens,
        temperature=req.temperature,
        top_p=req.top_p,
        seed=req.seed,
        stop=req.stop_list(),
        ignore_eos=req.ignore_eos,
        arrival_time=time.time(),
    )
    return Prepared(rid, ids, max_tokens, view, RoutedPayload(request=gen, view=view))


def view_dict(view: RequestView) -> dict[str, Any]:
    return asdict(view)
