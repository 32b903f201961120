"""OpenAI's published response schemas (``openai-openapi``), the parts our API returns, as
JSON Schema: what a client generated from that spec may rely on.

Transcribed from the specification's component schemas (``CreateChatCompletionResponse``,
``CreateChatCompletionStreamResponse``, ``CreateCompletionResponse``, ``ChatCompletion*``,
``CompletionUsage``, ``ErrorResponse``): required keys, types, enums and nullability.
Extra keys are allowed, as in the specification (vLLM adds ``stop_reason``, ``token_ids``, …);
a ``null`` where the specification types a key without ``null`` is not. One deliberate
relaxation, where OpenAI's own streamed completions differ from its spec: a completion
chunk's ``finish_reason`` may be ``null`` until the last chunk, and an echoed prompt's first
``token_logprobs`` entry may be ``null``.
"""

from __future__ import annotations

from typing import Any

import jsonschema

INT = {"type": "integer"}
STR = {"type": "string"}
NUM = {"type": "number"}


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


def obj(required: list[str], **props: Any) -> dict[str, Any]:
    return {"type": "object", "required": required, "properties": props}


def arr(items: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": items}


USAGE = obj(
    ["prompt_tokens", "completion_tokens", "total_tokens"],
    prompt_tokens=INT,
    completion_tokens=INT,
    total_tokens=INT,
    prompt_tokens_details={
        "type": "object",
        "properties": {"cached_tokens": INT, "audio_tokens": INT},
    },
    completion_tokens_details={
        "type": "object",
        "properties": {
            k: INT
            for k in (
                "reasoning_tokens",
                "audio_tokens",
                "accepted_prediction_tokens",
                "rejected_prediction_tokens",
            )
        },
    },
)
TOP_LOGPROB = obj(["token", "logprob", "bytes"], token=STR, logprob=NUM, bytes=nullable(arr(INT)))
TOKEN_LOGPROB = obj(
    ["token", "logprob", "bytes", "top_logprobs"],
    token=STR,
    logprob=NUM,
    bytes=nullable(arr(INT)),
    top_logprobs=arr(TOP_LOGPROB),
)
CHAT_LOGPROBS = nullable(
    obj(
        ["content", "refusal"],
        content=nullable(arr(TOKEN_LOGPROB)),
        refusal=nullable(arr(TOKEN_LOGPROB)),
    )
)
TOOL_CALL = obj(
    ["id", "type", "function"],
    id=STR,
    type={"enum": ["function"]},
    function=obj(["name", "arguments"], name=STR, arguments=STR),
)
MESSAGE = obj(
    ["role", "content", "refusal"],
    role={"enum": ["assistant"]},
    content=nullable(STR),
    refusal=nullable(STR),
    tool_calls=arr(TOOL_CALL),
    annotations=arr({"type": "object"}),
    function_call=obj(["name", "arguments"], name=STR, arguments=STR),
    audio=nullable({"type": "object"}),
)
CHAT_FINISH = {"enum": ["stop", "length", "tool_calls", "content_filter", "function_call"]}
SERVICE_TIER = nullable({"enum": ["auto", "default", "flex", "scale", "priority"]})
_CHAT_TOP = {
    "id": STR,
    "created": INT,
    "model": STR,
    "system_fingerprint": STR,
    "service_tier": SERVICE_TIER,
}
CHAT = obj(
    ["id", "choices", "created", "model", "object"],
    object={"const": "chat.completion"},
    choices=arr(
        obj(
            ["finish_reason", "index", "message", "logprobs"],
            finish_reason=CHAT_FINISH,
            index=INT,
            message=MESSAGE,
            logprobs=CHAT_LOGPROBS,
        )
    ),
    usage=USAGE,
    **_CHAT_TOP,
)
DELTA = {
    "type": "object",
    "properties": {
        "content": nullable(STR),
        "refusal": nullable(STR),
        "role": {"enum": ["developer", "system", "user", "assistant", "tool"]},
        "function_call": {"type": "object", "properties": {"name": STR, "arguments": STR}},
        "tool_calls": arr(
            obj(
                ["index"],
                index=INT,
                id=STR,
                type={"enum": ["function"]},
                function={"type": "object", "properties": {"name": STR, "arguments": STR}},
            )
        ),
    },
}
CHAT_CHUNK = obj(
    ["id", "choices", "created", "model", "object"],
    object={"const": "chat.completion.chunk"},
    choices=arr(
        obj(
            ["delta", "finish_reason", "index"],
            delta=DELTA,
            finish_reason=nullable(CHAT_FINISH),
            index=INT,
            logprobs=CHAT_LOGPROBS,
        )
    ),
    usage=nullable(USAGE),
    **_CHAT_TOP,
)
COMPLETION_LOGPROBS = nullable(
    {
        "type": "object",
        "properties": {
            "text_offset": arr(INT),
            "token_logprobs": arr(nullable(NUM)),
            "tokens": arr(STR),
            "top_logprobs": arr(nullable({"type": "object", "additionalProperties": NUM})),
        },
    }
)


def _completion(finish: dict[str, Any]) -> dict[str, Any]:
    return obj(
        ["id", "object", "created", "model", "choices"],
        id=STR,
        object={"const": "text_completion"},
        created=INT,
        model=STR,
        system_fingerprint=STR,
        choices=arr(
            obj(
                ["finish_reason", "index", "logprobs", "text"],
                finish_reason=finish,
                index=INT,
                logprobs=COMPLETION_LOGPROBS,
                text=STR,
            )
        ),
        usage=USAGE,
    )


_COMPLETION_FINISH = {"enum": ["stop", "length", "content_filter"]}
COMPLETION = _completion(_COMPLETION_FINISH)
COMPLETION_CHUNK = _completion(nullable(_COMPLETION_FINISH))
COMPLETION_CHUNK["properties"]["usage"] = nullable(USAGE)
ERROR = obj(
    ["error"],
    error=obj(
        ["code", "message", "param", "type"],
        code=nullable(STR),
        message=STR,
        param=nullable(STR),
        type=STR,
    ),
)


def _validator(schema: dict[str, Any]) -> Any:
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


_V = {
    name: _validator(s)
    for name, s in {
        "chat": CHAT,
        "chat_chunk": CHAT_CHUNK,
        "completion": COMPLETION,
        "completion_chunk": COMPLETION_CHUNK,
        "error": ERROR,
    }.items()
}


def validate(name: str, body: Any) -> None:
    """Raise AssertionError listing where ``body`` breaks OpenAI's schema ``name``."""
    errors = sorted(_V[name].iter_errors(body), key=lambda e: list(e.absolute_path))
    if errors:
        lines = [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in errors]
        raise AssertionError(f"not an OpenAI {name} body:\n  " + "\n  ".join(lines[:10]))


def validate_chat(body: Any) -> None:
    validate("chat", body)


def validate_chat_chunk(body: Any) -> None:
    validate("chat_chunk", body)


def validate_completion(body: Any) -> None:
    validate("completion", body)


def validate_completion_chunk(body: Any) -> None:
    validate("completion_chunk", body)


def validate_error(body: Any) -> None:
    validate("error", body)
