"""OpenAI response bodies and SSE chunks for completions and chat completions."""

from __future__ import annotations

import json
import time
from typing import Any


def usage(prompt: int, completion: int, cached: int = 0) -> dict[str, Any]:
    out: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if cached:
        out["prompt_tokens_details"] = {"cached_tokens": cached}
    return out


class Formatter:
    """Builds bodies for one request; ``chat`` selects the chat.completion shapes."""

    def __init__(self, request_id: str, model: str, chat: bool) -> None:
        self.id, self.model, self.chat = request_id, model, chat
        self.created = int(time.time())
        self._sent_role = False

    def _base(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def chunk(self, text: str, finish_reason: str | None) -> dict[str, Any]:
        if self.chat:
            delta: dict[str, Any] = {"content": text}
            if not self._sent_role:
                delta["role"] = "assistant"
                self._sent_role = True
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            return {**self._base("chat.completion.chunk"), "choices": [choice]}
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
        return {**self._base("text_completion"), "choices": [choice]}

    def usage_chunk(self, u: dict[str, Any]) -> dict[str, Any]:
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        return {**self._base(obj), "choices": [], "usage": u}

    def full(self, text: str, finish_reason: str | None, u: dict[str, Any]) -> dict[str, Any]:
        if self.chat:
            msg = {"role": "assistant", "content": text, "refusal": None}
            choice = {"index": 0, "message": msg, "logprobs": None, "finish_reason": finish_reason}
            return {**self._base("chat.completion"), "choices": [choice], "usage": u}
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
        return {**self._base("text_completion"), "choices": [choice], "usage": u}


def sse(data: dict[str, Any] | str) -> bytes:
    body = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {body}\n\n".encode()


SSE_DONE = sse("[DONE]")
