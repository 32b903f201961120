"""Continue a streamed request on another replica after its replica died mid-stream.

Migration (as NVIDIA Dynamo does it): the new replica gets the original request with the
text already streamed appended to the prompt, and the client's stream goes on as if
nothing happened::

    client ◄── e1 e2 e3 ─┤replica A dies├── e4' e5' … [DONE]   (from replica B)
                          prompt' = prompt + text(e1..e3)
                          max_tokens' = max_tokens − tokens(e1..e3)

- ``/v1/completions``: the prompt (a string, or token ids) is extended by the text.
- ``/v1/chat/completions``: the messages get a final assistant message holding the text,
  with vLLM's ``continue_final_message: true`` and ``add_generation_prompt: false``.
- Only ``n`` = 1 streams without tools, a ``response_format`` or beam search migrate (a
  tool-call parser or a grammar restarted mid-output would produce something the client did
  not ask for); the rest end with an in-band error. A chat request that already ends in an
  assistant prefix (``continue_final_message``) has that message extended, so its content
  must be a string.
- The output limit and ``min_tokens`` shrink by the tokens streamed. An ``echo``ed prefix is
  not part of the output: it is left out of the continuation's prompt and not echoed again.
- The continuation's events are rewritten to the original ``id``, ``created`` and
  ``model``; its chat role chunk is dropped; its usage counts the migrated tokens as output.
- Output tokens already streamed are counted by the ingress's tokenizer (an estimate at a
  token boundary the replica may split differently: the continuation is the same text, not
  always the same token ids). Sampling continues from a different random state.

The same continuation serves the front door (``server.ingress: resume``,
``cluster/front_door.py``) when a stream's ingress replica died: it sends the original body
again with ``RESUME_FIELD`` (the text it passed on, the stream's id, created, model) and
``resume_plan`` here turns that into the continuation on another ingress.

``StreamLog`` keeps the raw events a relay passed on and parses them only when needed
(a failure, or every ``FOLD_BYTES``): a healthy stream pays one list append per item.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

from cluster.request_fields import output_limit_field
from contracts.http import APIError

FOLD_BYTES = 256 * 1024
DONE_EVENT = b"data: [DONE]\n\n"
RESUME_FIELD = "llmfleet_resume"  # the front door's: what a cut stream had sent
RESUME_HEADER = "x-llmfleet-resume"  # sent with it, so only those bodies are searched for it
CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"


def migratable(path: str, body: dict[str, Any]) -> bool:
    if path not in (CHAT, COMPLETIONS) or body.get("stream") is not True:
        return False
    if body.get("n") not in (None, 1) or body.get("best_of") not in (None, 1):
        return False
    rf = body.get("response_format")
    if isinstance(rf, dict) and rf.get("type") not in (None, "text"):
        return False
    if body.get("tools") or body.get("structured_outputs") or body.get("guided_json"):
        return False
    if body.get("use_beam_search") or echo_prefix(path, body) is None:
        return False
    if path == COMPLETIONS:
        prompt = body.get("prompt")
        ids = isinstance(prompt, list) and all(isinstance(t, int) for t in prompt)
        return isinstance(prompt, str) or (ids and bool(prompt))
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return False
    if body.get("continue_final_message"):
        # the client's own assistant prefix is extended in place, so it must be plain text
        last = messages[-1]
        return isinstance(last, dict) and isinstance(last.get("content"), str)
    return True


def echo_prefix(path: str, body: dict[str, Any]) -> str | None:
    """The text vLLM streams ahead of the output when ``echo`` is set (None: not known here).
    Completions echo the prompt, joined to the first token's text; chat echoes the last
    message when it is the assistant's (vLLM's ``echo``: same role as the answer)."""
    if not body.get("echo"):
        return ""
    if path == COMPLETIONS:
        prompt = body.get("prompt")
        return prompt if isinstance(prompt, str) else None
    messages = body.get("messages")
    last = messages[-1] if isinstance(messages, list) and messages else None
    if not isinstance(last, dict) or last.get("role") != "assistant":
        return ""
    content = last.get("content")
    return content if isinstance(content, str) else None


def split_events(data: bytes) -> list[bytes]:
    """``data: …`` payloads of whole SSE events (comments and blank lines dropped)."""
    out = []
    for event in data.split(b"\n\n"):
        for line in event.split(b"\n"):
            if line.startswith(b"data:"):
                out.append(line[5:].strip())
    return out


@dataclass
class StreamLog:
    path: str
    echo: str = ""  # echo_prefix(): streamed ahead of the output
    pending: list[bytes] = field(default_factory=list)
    pending_bytes: int = 0
    text: str = ""  # everything streamed, the echo included
    id: str | None = None
    created: int | None = None
    model: str | None = None
    finished: bool = False  # a finish_reason was streamed
    done: bool = False  # [DONE] was streamed
    usage_seen: bool = False  # the usage chunk was streamed

    @property
    def generated(self) -> str:
        """The output streamed so far: ``text`` without the echo."""
        return self.text[len(self.echo) :] if self.text.startswith(self.echo) else self.text

    def add(self, chunk: bytes) -> None:
        self.pending.append(chunk)
        self.pending_bytes += len(chunk)
        if self.pending_bytes > FOLD_BYTES:
            self.fold()

    def fold(self) -> None:
        data, self.pending, self.pending_bytes = b"".join(self.pending), [], 0
        for payload in split_events(data):
            if payload == b"[DONE]":
                self.done = True
                continue
            try:
                event = json.loads(payload)
            except ValueError:
                continue
            if isinstance(event, dict):
                self._observe(event)

    def _observe(self, event: dict[str, Any]) -> None:
        if "error" in event:
            return
        self.id = self.id or event.get("id")
        self.created = self.created or event.get("created")
        self.model = self.model or event.get("model")
        if event.get("usage") and not event.get("choices"):
            self.usage_seen = True
        for choice in event.get("choices") or ():
            if self.path == CHAT:
                self.text += (choice.get("delta") or {}).get("content") or ""
            else:
                self.text += choice.get("text") or ""
            if choice.get("finish_reason"):
                self.finished = True


def continuation(
    path: str, body: dict[str, Any], log: StreamLog, more_ids: list[int]
) -> dict[str, Any] | None:
    """The body that continues ``body`` after ``log.generated`` (``more_ids``: its token ids, by
    the ingress's tokenizer); None when no output is left.

    What the client asked of the whole output holds for the rest of it: the output limit
    (the field vLLM reads) and ``min_tokens`` shrink by the tokens already streamed. What
    it already received is not echoed again."""
    emitted_tokens = len(more_ids)
    out = copy.deepcopy(body)
    key = output_limit_field(path, out)
    if isinstance(out.get(key), int):
        left = out[key] - emitted_tokens
        if left <= 0:
            return None
        out[key] = left
    if isinstance(out.get("min_tokens"), int):
        out["min_tokens"] = max(0, out["min_tokens"] - emitted_tokens)
    if out.get("echo"):
        out["echo"] = False  # only when asked: the simulated engine's chat has no echo field
    if path == COMPLETIONS:
        if isinstance(out["prompt"], str):
            out["prompt"] = out["prompt"] + log.generated
        else:
            out["prompt"] = list(out["prompt"]) + list(more_ids)
        return out
    if out.get("continue_final_message"):
        last = out["messages"][-1]  # migratable(): its content is a string
        out["messages"][-1] = {**last, "content": last["content"] + log.generated}
    else:
        out["messages"] = [*out["messages"], {"role": "assistant", "content": log.generated}]
    out["continue_final_message"] = True
    out["add_generation_prompt"] = False
    return out


def closing_events(
    path: str, body: dict[str, Any], log: StreamLog, prompt_tokens: int, emitted: int
) -> bytes:
    """How a stream ends when its replica died after the last token, or with no output
    budget left to migrate: the finish chunk (``length``) if none was streamed, the usage
    chunk if the client asked for one (the ingress's estimates), then ``[DONE]``."""
    obj = "chat.completion.chunk" if path == CHAT else "text_completion"
    head: dict[str, Any] = {"id": log.id, "object": obj, "created": log.created, "model": log.model}
    out: list[dict[str, Any]] = []
    if not log.finished:
        choice: dict[str, Any] = {"index": 0, "finish_reason": "length"}
        if path == CHAT:
            choice["delta"] = {}
        else:
            choice["text"] = ""
        out.append({**head, "choices": [choice]})
    opts = body.get("stream_options")
    if isinstance(opts, dict) and opts.get("include_usage") and not log.usage_seen:
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": emitted,
            "total_tokens": prompt_tokens + emitted,
        }
        out.append({**head, "choices": [], "usage": usage})
    events = [b"data: " + json.dumps(e, separators=(",", ":")).encode() + b"\n\n" for e in out]
    return b"".join(events) + DONE_EVENT


@dataclass
class Rewriter:
    """Rewrites a continuation's events so the client sees one stream."""

    path: str
    log: StreamLog
    emitted_tokens: int

    def events(self, data: bytes) -> bytes:
        out = []
        for payload in split_events(data):
            if payload == b"[DONE]":
                out.append(DONE_EVENT)
                continue
            try:
                event = json.loads(payload)
            except ValueError:
                continue
            event = self._rewrite(event) if isinstance(event, dict) else None
            if event is not None:
                out.append(b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n")
        return b"".join(out)

    def _rewrite(self, event: dict[str, Any]) -> dict[str, Any] | None:
        if "error" in event:
            return event
        for key in ("id", "created", "model"):
            if getattr(self.log, key) is not None:
                event[key] = getattr(self.log, key)
        usage = event.get("usage")
        if isinstance(usage, dict):
            usage["completion_tokens"] = usage.get("completion_tokens", 0) + self.emitted_tokens
            usage["prompt_tokens"] = max(0, usage.get("prompt_tokens", 0) - self.emitted_tokens)
        choices = event.get("choices")
        if self.path != CHAT or not choices:
            return event
        for choice in choices:
            delta = choice.get("delta") or {}
            delta.pop("role", None)
        if all(_empty_chat_choice(c) for c in choices) and not usage:
            return None
        return event


def _empty_chat_choice(choice: dict[str, Any]) -> bool:
    delta = choice.get("delta") or {}
    return not choice.get("finish_reason") and not any(v for v in delta.values())


@dataclass
class ResumePlan:
    """How an ingress continues a stream another ingress was relaying when it died."""

    log: StreamLog  # what the client has: the text, the stream's id, created, model
    more_ids: list[int]  # that text's token ids (the ingress's tokenizer)
    body: dict[str, Any] | None  # what to run; None: nothing left, only the stream's close


def take_resume(raw: bytes) -> tuple[bytes, dict[str, Any] | None]:
    """The body without ``RESUME_FIELD``, and that field (None when absent or the body is not
    a JSON object: the request's own checks then answer)."""
    try:
        body = json.loads(raw)
    except ValueError:
        return raw, None
    if not isinstance(body, dict) or RESUME_FIELD not in body:
        return raw, None
    mark = body.pop(RESUME_FIELD)
    return json.dumps(body, separators=(",", ":")).encode(), _checked(mark)


def _checked(mark: Any) -> dict[str, Any]:
    opt = type(None)
    kinds: dict[str, type | tuple[type, ...]] = {"text": str, "finished": bool}
    kinds |= {"id": (str, opt), "created": (int, opt), "model": (str, opt), "usage_seen": bool}
    ok = isinstance(mark, dict) and all(isinstance(mark.get(k), t) for k, t in kinds.items())
    if not ok:
        raise APIError(
            400,
            f"{RESUME_FIELD} must hold text, id, created, model, finished and usage_seen",
            param=RESUME_FIELD,
        )
    return mark


def resume_plan(path: str, body: dict[str, Any], mark: dict[str, Any], encode: Any) -> ResumePlan:
    """``body``: the request as the ingress prepared it; ``mark``: ``take_resume``'s."""
    if not migratable(path, body):
        raise APIError(400, "this request cannot be resumed", param=RESUME_FIELD)
    slog = StreamLog(path, text=mark["text"], finished=mark["finished"])
    slog.id, slog.created, slog.model = mark["id"], mark["created"], mark["model"]
    slog.usage_seen = mark["usage_seen"]
    more_ids = list(encode(slog.text)) if slog.text else []
    if slog.finished:
        return ResumePlan(slog, more_ids, None)
    if not slog.text:  # cut before any output: run it as it was (the events are rewritten)
        return ResumePlan(slog, more_ids, body)
    return ResumePlan(slog, more_ids, continuation(path, body, slog, more_ids))
