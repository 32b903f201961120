"""What the ingress does to a request before routing it, once, off the relay loop.

The replica's OpenAI layer (vLLM's own) validates and renders the request; the ingress only
needs what routing and fleet policy need:
- the JSON object (400 ``invalid_json`` otherwise) and its ``model`` (404 unless it is the
  served name; the fleet serves one model);
- the fleet's ``max_tokens`` cap (400 above it) and its default when the client gives none
  (``default_max_tokens``, capped by the room the prompt leaves), and its cap on ``n`` /
  ``best_of`` (``max_choices``, 400 above it; a completions request with a batch of
  prompts runs ``n`` sequences for each, and the cap bounds them all); the output a
  request may produce, which quotas charge and the router weighs, is ``max_tokens`` times
  its sequences, and its prompt tokens are those of every prompt in the batch;
- the prompt's token ids, for the prefix-aware router's block hashes: the chat template
  applied to the messages' text, or the completion prompt. This is best effort for shapes
  the ingress does not render exactly (tools, multimodal parts, ``/v1/responses``): a
  wrong guess costs a cache hit, never a rejected request. Out-of-vocabulary prompt token
  ids are refused here (400), as the engine would.
``prepare`` is synchronous and CPU-bound (template, tokenizer, hashes): the ingress runs it
in a worker thread so a long prompt never stalls the streams it is relaying.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

from cluster.request_checks import check_body
from cluster.request_fields import normalize_lax, output_limit_field
from contracts.http import APIError, ForwardedRequest, decode_json
from router.ray_compat import RoutedPayload
from router.types import RequestView
from router.views import make_request_view

GENERATE_PATHS = {
    "/v1/chat/completions": "chatcmpl",
    "/v1/completions": "cmpl",
    "/v1/responses": "resp",
}
MODEL_OPTIONAL = {"/tokenize", "/detokenize"}


@dataclass(frozen=True, slots=True)
class Limits:
    served_name: str
    max_model_len: int
    max_tokens_cap: int
    default_max_tokens: int
    block_size: int
    max_choices: int = 128


@dataclass(frozen=True, slots=True)
class Prepared:
    request_id: str
    stream: bool
    view: RequestView
    payload: dict[str, Any]  # RoutedPayload(request=ForwardedRequest, view=RequestView)
    usage_injected: bool = False  # the ingress asked for the usage event (edge_metrics.py)
    prompt_tokens: int = 0  # every prompt's, as far as the ingress can tell (quotas)


def check_model(body: dict[str, Any], path: str, limits: Limits) -> None:
    name = body.get("model")
    if name is None and path in MODEL_OPTIONAL:
        return
    if name is None:
        raise APIError(
            400, "model: Field required", param="model", code="missing_required_parameter"
        )
    if name != limits.served_name:
        raise APIError(
            404,
            f"The model `{name}` does not exist. Available: {limits.served_name}",
            param="model",
            code="model_not_found",
        )


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return ""


def _ids(prompt: list[Any], tokenizer: Any) -> list[int] | None:
    """A prompt given as token ids (None if it is not a list of integers); out-of-vocabulary
    ids are a 400 here, as the engine would answer."""
    if not prompt or not all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return None
    vocab = len(tokenizer)
    if any(t < 0 or t >= vocab for t in prompt):
        raise APIError(400, f"prompt token ids must be in [0, {vocab})", param="prompt")
    return list(prompt)


def batch_prompts(path: str, body: dict[str, Any]) -> list[Any] | None:
    """A completions request's prompts when it sends several (a list of strings, or of
    token-id lists; vLLM runs each as its own sequence group); None for a single prompt."""
    prompt = body.get("prompt")
    if path != "/v1/completions" or not isinstance(prompt, list) or not prompt:
        return None
    if all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return None  # one prompt, as token ids
    return prompt


def batch_counts(batch: list[Any], tokenizer: Any, limits: Limits) -> list[int]:
    """Each prompt's tokens, each checked against the context on its own (a batch is not
    one long prompt). Items of other shapes are vLLM's to refuse; they count 0."""
    counts = [0] * len(batch)
    texts: list[tuple[int, str]] = []
    for i, item in enumerate(batch):
        if isinstance(item, str):
            n = bounded_count(item, tokenizer, limits)
            check_context("/v1/completions", n, limits, at_least=True)
            texts.append((i, item))
        elif isinstance(item, list):
            counts[i] = len(_ids(item, tokenizer) or ())
    if texts:
        strings = [t for _, t in texts]
        if hasattr(tokenizer, "encode_batch"):  # LightTokenizer
            encoded = tokenizer.encode_batch(strings)
        else:  # transformers
            encoded = [tokenizer.encode(t, add_special_tokens=False) for t in strings]
        for (i, _), ids in zip(texts, encoded, strict=True):
            counts[i] = len(ids)
    for n in counts:
        check_context("/v1/completions", n, limits)
    return counts


def routing_ids(path: str, body: dict[str, Any], tokenizer: Any) -> list[int]:
    """The prompt's token ids as far as the ingress can tell ([] when it cannot)."""
    prompt = body.get("prompt", body.get("input"))
    if path == "/v1/completions" and isinstance(prompt, list) and prompt:
        ids = _ids(prompt, tokenizer)
        if ids is not None:
            return ids
        prompt = prompt[0]  # a batch routes on its first prompt
        if isinstance(prompt, list):
            return _ids(prompt, tokenizer) or []
    messages = body.get("messages")
    if path == "/v1/responses" and isinstance(prompt, list):
        messages, prompt = prompt, None
    try:
        if isinstance(messages, list) and messages:
            msgs = [
                {"role": str(m.get("role", "user")), "content": _text(m.get("content"))}
                for m in messages
                if isinstance(m, dict)
            ]
            out = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
            if isinstance(out, dict) or hasattr(out, "input_ids"):
                out = out["input_ids"]
            return list(out)
        if isinstance(prompt, str):
            return list(tokenizer.encode(prompt, add_special_tokens=False))
    except Exception:  # a template that rejects this shape: route on load alone
        return []
    return []


CHARS_PER_TOKEN_BOUND = 16  # no real text averages more characters per token than this


def prompt_text(body: dict[str, Any]) -> str:
    """All the prompt's text, for a length bound (not for routing)."""
    prompt = body.get("prompt", body.get("input"))
    if isinstance(prompt, str):
        return prompt
    messages = body.get("messages")  # not a list (found by fuzzing: true): vLLM's 400
    messages = messages if isinstance(messages, list) else ()
    parts = [_text(m.get("content")) for m in messages if isinstance(m, dict)]
    if isinstance(prompt, list):
        parts += [p for p in prompt if isinstance(p, str)]
    return "".join(parts)


def bounded_count(text: str, tokenizer: Any, limits: Limits) -> int:
    """Tokens in ``text`` as far as the context check needs: a huge prompt is judged by
    tokenizing a prefix (``CHARS_PER_TOKEN_BOUND`` × context characters), so an 8 MB prompt
    costs milliseconds, not seconds of tokenizer time."""
    window = limits.max_model_len * CHARS_PER_TOKEN_BOUND
    if len(text) <= window:
        return 0  # short enough: the full tokenization that follows decides
    return len(tokenizer.encode(text[:window], add_special_tokens=False))


PROMPT_PARAM = {"/v1/chat/completions": "messages", "/v1/responses": "input"}


def check_context(path: str, n_prompt: int, limits: Limits, at_least: bool = False) -> None:
    """A prompt longer than the context is refused here, before it travels to a replica
    (``>``: the ingress's count is an estimate for shapes it does not render exactly;
    ``at_least``: ``n_prompt`` counts only a prefix of the prompt, see ``bounded_count``)."""
    if n_prompt > limits.max_model_len:
        raise APIError(
            400,
            f"This model's maximum context length is {limits.max_model_len} tokens. However, "
            f"your prompt has {'more than ' if at_least else ''}{n_prompt} tokens.",
            param=PROMPT_PARAM.get(path, "prompt"),
            code="context_length_exceeded",
        )


def apply_token_limits(path: str, body: dict[str, Any], n_prompt: int, limits: Limits) -> int:
    """Enforce the fleet's cap; fill in its default. Returns the expected output tokens."""
    field = output_limit_field(path, body)
    asked = body.get(field)
    if isinstance(asked, int) and not isinstance(asked, bool):
        if asked > limits.max_tokens_cap:
            raise APIError(
                400,
                f"{field}={asked} is above this server's cap of {limits.max_tokens_cap}",
                param=field,
                code="invalid_value",
            )
        return asked
    if asked is None and path in GENERATE_PATHS:
        room = limits.max_model_len - n_prompt
        if n_prompt and room > 0:
            body[field] = min(limits.default_max_tokens, room)
        return min(limits.default_max_tokens, max(room, 1))
    return limits.default_max_tokens


def choices(path: str, body: dict[str, Any], limits: Limits, prompts: int = 1) -> int:
    """The sequences the request runs (``n``, or ``best_of`` where larger, for each of its
    ``prompts``), at most ``limits.max_choices``: a request's output budget is this many
    times its ``max_tokens`` (OpenAI counts ``n`` the same way against a token limit). A
    value that is not a positive integer is vLLM's to refuse; it counts as 1 here."""
    if path not in GENERATE_PATHS:
        return 1
    most, field = 1, "n"
    for name in ("n", "best_of"):
        value = body.get(name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            continue
        if value > limits.max_choices:
            raise APIError(
                400,
                f"{name}={value} is above this server's cap of {limits.max_choices}",
                param=name,
                code="invalid_value",
            )
        if value > most:
            most, field = value, name
    if most * prompts > limits.max_choices:
        raise APIError(
            400,
            f"{prompts} prompts x {field}={most} is {most * prompts} sequences, above this "
            f"server's cap of {limits.max_choices}",
            param="prompt",
            code="invalid_value",
        )
    return most * prompts


def truncation(body: dict[str, Any], limits: Limits) -> int | None:
    """The prompt length vLLM truncates to (``truncate_prompt_tokens``; -1: the context),
    None when the request does not ask for truncation."""
    k = body.get("truncate_prompt_tokens")
    if not isinstance(k, int) or isinstance(k, bool) or k < -1:
        return None
    return limits.max_model_len if k == -1 else k


def prepare(path: str, raw: bytes, tokenizer: Any, limits: Limits) -> Prepared:
    arrival = time.time()
    body = decode_json(raw)
    check_model(body, path, limits)
    check_body(path, body)
    normalize_lax(body)
    batch = batch_prompts(path, body)
    cut = truncation(body, limits) if path in GENERATE_PATHS else None
    counts = None
    if cut is not None:  # vLLM keeps `cut` tokens of a longer prompt: no context check here,
        ids: list[int] = []  # and no routing on tokens it may drop (load alone)
    else:
        counts = batch_counts(batch, tokenizer, limits) if batch is not None else None
        if path in GENERATE_PATHS and counts is None:
            n = bounded_count(prompt_text(body), tokenizer, limits)
            check_context(path, n, limits, at_least=True)
        ids = routing_ids(path, body, tokenizer) if path in GENERATE_PATHS else []
        check_context(path, len(ids), limits)
    longest = cut if cut is not None else max(counts) if counts else len(ids)
    sequences = choices(path, body, limits, len(batch) if batch is not None else 1)
    expected = apply_token_limits(path, body, longest, limits) * sequences
    if path not in GENERATE_PATHS:
        expected = 0  # /tokenize, /detokenize: no output to charge or weigh
    prefix = GENERATE_PATHS.get(path, "req")
    rid = f"{prefix}-{uuid.uuid4().hex}"
    user = body.get("user")
    view = make_request_view(
        rid,
        ids,
        block_size=limits.block_size,
        expected_output_tokens=expected,
        model=limits.served_name,
        session_id=user if isinstance(user, str) else None,
    )
    stream = body.get("stream") is True
    injected = stream and ask_usage(path, body)
    fwd = ForwardedRequest(
        path=path,
        body=json.dumps(body, separators=(",", ":")).encode(),
        request_id=rid,
        prompt_token_ids=tuple(ids),
        stream=stream,
        arrival_time=arrival,
    )
    if cut is not None:  # charged as if every prompt were kept whole up to the cut
        prompt_tokens = cut * (len(batch) if batch is not None else 1)
    else:
        prompt_tokens = sum(counts) if counts is not None else len(ids)
    return Prepared(
        rid, stream, view, RoutedPayload(request=fwd, view=view), injected, prompt_tokens
    )


USAGE_PATHS = ("/v1/chat/completions", "/v1/completions")


def ask_usage(path: str, body: dict[str, Any]) -> bool:
    """A streamed chat/completion that did not ask for the final usage event gets it asked
    for (the edge metrics read the engine's token counts from it and remove it before the
    client sees it). True when the body was changed."""
    if path not in USAGE_PATHS:
        return False
    opts = body.get("stream_options")
    if opts is None:
        body["stream_options"] = {"include_usage": True}
        return True
    if isinstance(opts, dict) and opts.get("include_usage") is not True:
        if opts.get("continuous_usage_stats") or not isinstance(
            opts.get("include_usage", False), bool
        ):
            return False  # usage on every chunk would change the answer; or invalid
        body["stream_options"] = {**opts, "include_usage": True}
        return True
    return False


def resubmit(prev: Prepared, body: dict[str, Any], more_ids: list[int], limits: Limits) -> Any:
    """The payload that continues ``prev`` on another replica (``cluster/migration.py``):
    ``body`` is the continuation's, its prompt the original's plus ``more_ids``."""
    old: ForwardedRequest = prev.payload["request"]
    ids = [*old.prompt_token_ids, *more_ids]
    rid = f"{prev.request_id}-m{uuid.uuid4().hex[:6]}"
    view = make_request_view(
        rid,
        ids,
        block_size=limits.block_size,
        expected_output_tokens=prev.view.expected_output_tokens,
        model=limits.served_name,
        session_id=prev.view.session_id,
    )
    fwd = ForwardedRequest(
        path=old.path,
        body=json.dumps(body, separators=(",", ":")).encode(),
        request_id=rid,
        prompt_token_ids=tuple(ids),
        stream=old.stream,
        arrival_time=old.arrival_time,
    )
    return RoutedPayload(request=fwd, view=view)
