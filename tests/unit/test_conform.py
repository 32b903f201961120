"""replicas.conform: vLLM's response bodies rewritten to OpenAI's published schema, checked
with the same schema module the API-parity suite validates live responses with."""

from __future__ import annotations

import json

import pytest

from replicas.conform import conform_json_body, conform_sse
from tests import openai_schema as S

VLLM_CHAT = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Paris",
                "reasoning": None,
                "annotations": None,
                "audio": None,
                "function_call": None,
                "tool_calls": [],
            },
            "logprobs": None,
            "finish_reason": "stop",
            "stop_reason": None,
            "token_ids": None,
        }
    ],
    "service_tier": None,
    "system_fingerprint": None,
    "usage": {
        "prompt_tokens": 5,
        "completion_tokens": 1,
        "total_tokens": 6,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": None,
    },
}


def test_vllm_chat_body_fails_the_schema_and_conformed_one_passes() -> None:
    raw = json.dumps(VLLM_CHAT).encode()
    with pytest.raises(AssertionError, match="refusal"):
        S.validate_chat(json.loads(raw))
    out = json.loads(conform_json_body(raw, 200))
    S.validate_chat(out)
    assert out["choices"][0]["message"]["refusal"] is None
    assert "tool_calls" not in out["choices"][0]["message"]
    assert out["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
    assert out["choices"][0]["stop_reason"] is None  # vLLM's own extra field is kept


def test_chat_logprobs_gain_refusal() -> None:
    body = json.loads(json.dumps(VLLM_CHAT))
    lp = {"token": "P", "logprob": -0.1, "bytes": [80], "top_logprobs": []}
    body["choices"][0]["logprobs"] = {"content": [lp]}
    out = json.loads(conform_json_body(json.dumps(body).encode(), 200))
    S.validate_chat(out)
    assert out["choices"][0]["logprobs"] == {"content": [lp], "refusal": None}


def test_vllm_error_gets_openai_type_and_string_code() -> None:
    raw = json.dumps(
        {
            "error": {
                "message": "This model's maximum context length is 2048 tokens.",
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            }
        }
    ).encode()
    out = json.loads(conform_json_body(raw, 400))
    S.validate_error(out)
    assert out["error"]["type"] == "invalid_request_error"
    assert out["error"]["code"] == "context_length_exceeded"
    missing = json.loads(
        conform_json_body(
            json.dumps(
                {
                    "error": {
                        "type": "NotFoundError",
                        "code": 404,
                        "message": "The model `x` does not exist.",
                    }
                }
            ).encode(),
            404,
        )
    )
    assert missing["error"]["type"] == "not_found_error"
    assert missing["error"]["code"] == "model_not_found"
    assert json.loads(conform_json_body(b"", 502))["error"]["type"] == "server_error"


@pytest.mark.parametrize(
    "vllm_says",
    [
        '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
        'tool_choice="required" requires --tool-call-parser to be set',
        'tool_choice=function "f" requires --tool-call-parser to be set',
    ],
)
def test_tool_parser_errors_name_our_config_key_not_vllm_flags(vllm_says: str) -> None:
    """Found by hand with the OpenAI SDK: vLLM's 400 named `vllm serve` flags, which no
    llmfleet config or command takes."""
    raw = json.dumps({"error": {"message": vllm_says, "type": "BadRequestError", "code": 400}})
    message = json.loads(conform_json_body(raw.encode(), 400))["error"]["message"]
    assert "--" not in message
    assert "requires a tool-call parser, and this server has none" in message
    assert message.endswith("(its operator sets model.tool_call_parser)")
    assert message.split(" requires ")[0] == vllm_says.split(" requires ")[0]


def test_streamed_error_event_is_rewritten_and_other_events_pass_unchanged() -> None:
    chunk = b'data: {"id":"c","choices":[]}\n\n'
    assert conform_sse(chunk) is chunk
    err = b'data: {"error":{"message":"boom","type":"InternalServerError","code":500}}\n\n'
    events = [e for e in conform_sse(chunk + err).split(b"\n\n") if e]
    assert events[0] == chunk.strip()
    out = json.loads(events[1][len(b"data: ") :])
    S.validate_error(out)
    assert out["error"]["type"] == "server_error"
    assert out["error"]["code"] == "internal_error"


def test_streamed_logprobs_chunk_gains_refusal() -> None:
    ev = {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "delta": {"content": "P"},
                "finish_reason": None,
                "logprobs": {
                    "content": [{"token": "P", "logprob": -0.1, "bytes": [80], "top_logprobs": []}]
                },
            }
        ],
    }
    data = b"data: " + json.dumps(ev, separators=(",", ":")).encode() + b"\n\n"
    out = json.loads(conform_sse(data).split(b"\n\n")[0][len(b"data: ") :])
    S.validate_chat_chunk(out)
    assert out["choices"][0]["logprobs"]["refusal"] is None
