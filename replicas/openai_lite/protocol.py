"""OpenAI request bodies (pydantic, strict) and OpenAI-shaped errors.

Errors are ``{"error": {"message", "type", "param", "code"}}`` with a 4xx status; nothing a
client sends can produce a 500 or a stack trace.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from contracts.http import APIError


def _at_least_one(cls: type, v: int | None, info: ValidationInfo) -> int | None:  # noqa: ARG001 (pydantic reads the name)
    """Shared by ``max_tokens`` and ``max_completion_tokens``."""
    if v is not None and v <= 0:
        raise ValueError(f"{info.field_name} must be at least 1")
    return v


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    include_usage: bool = Field(False, description="Send a final chunk with token usage.")
    continuous_usage_stats: bool = Field(
        False, description="Accepted for vLLM compatibility; ignored."
    )


class _Sampling(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=False)
    model: str = Field(..., description="Served model id.")
    max_tokens: int | None = Field(None, description="Most tokens to generate.")
    temperature: float = Field(
        1.0, ge=0.0, le=2.0, description="Sampling temperature; 0 is greedy."
    )
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling mass.")
    n: int = Field(1, ge=1, le=1, description="Only one choice per request is supported.")
    stream: bool = Field(False, description="Stream server-sent events.")
    stream_options: StreamOptions | None = Field(None, description="Streaming options.")
    stop: str | list[str] | None = Field(None, description="Stop strings.")
    seed: int | None = Field(None, description="Sampling seed.")
    user: str | None = Field(None, description="End-user id (used as session id for routing).")
    ignore_eos: bool = Field(False, description="Keep generating past EOS (benchmarks).")
    presence_penalty: float = Field(0.0, description="Accepted; only 0 is supported.")
    frequency_penalty: float = Field(0.0, description="Accepted; only 0 is supported.")

    _positive = field_validator("max_tokens")(_at_least_one)

    def stop_list(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)


class CompletionRequest(_Sampling):
    prompt: str | list[int] | list[str] = Field(
        ..., description="Prompt text, token ids, or a one-item list of text."
    )
    echo: Literal[False] = Field(False, description="Echo is not supported.")
    logprobs: None = Field(None, description="Log-probs are not supported.")

    @field_validator("prompt")
    @classmethod
    def _non_empty(cls, v: Any) -> Any:
        if isinstance(v, list) and not v:
            raise ValueError("prompt must not be empty")
        if isinstance(v, list) and isinstance(v[0], str) and len(v) != 1:
            raise ValueError("only one prompt per request is supported")
        return v


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["system", "user", "assistant", "developer", "tool"] = Field(
        ..., description="Author role."
    )
    content: str | list[dict[str, Any]] = Field(..., description="Text, or a list of text parts.")
    name: str | None = Field(None, description="Optional author name.")

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        parts = []
        for part in self.content:
            if part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ValueError("only text content parts are supported")
            parts.append(part["text"])
        return "".join(parts)


class ChatRequest(_Sampling):
    messages: list[ChatMessage] = Field(..., min_length=1, description="The conversation so far.")
    max_completion_tokens: int | None = Field(
        None, description="Alias of max_tokens (newer clients)."
    )
    logprobs: bool | None = Field(None, description="Log-probs are not supported.")
    continue_final_message: bool = Field(
        False,
        description="vLLM's: continue the final assistant message (the ingress's token ids already end with it).",
    )
    add_generation_prompt: bool = Field(
        True, description="vLLM's: accepted; the ingress's token ids decide the prompt."
    )

    @field_validator("logprobs")
    @classmethod
    def _no_logprobs(cls, v: bool | None) -> bool | None:
        if v:
            raise ValueError("logprobs are not supported")
        return v

    _positive_mct = field_validator("max_completion_tokens")(_at_least_one)


def validate(model: type[BaseModel], data: dict[str, Any]) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        param = ".".join(str(p) for p in first["loc"]) or None
        kind = "missing_required_parameter" if first["type"] == "missing" else "invalid_value"
        raise APIError(
            400, f"{param}: {first['msg']}" if param else first["msg"], param=param, code=kind
        ) from None
