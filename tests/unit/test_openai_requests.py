from typing import Any

import pytest

from cluster.openai_format import SSE_DONE, Formatter, sse, usage
from cluster.openai_protocol import APIError, ChatRequest, CompletionRequest, decode_json, validate
from cluster.request_prep import Limits, prepare
from contracts.hashing import block_hashes

LIMITS = Limits(
    served_name="m", max_model_len=256, max_tokens_cap=100, default_max_tokens=50, block_size=16
)


def err_of(fn: Any, *args: Any) -> APIError:
    with pytest.raises(APIError) as info:
        fn(*args)
    return info.value


def test_malformed_json_and_non_object() -> None:
    e = err_of(decode_json, b"{nope")
    assert (e.status, e.code) == (400, "invalid_json")
    assert err_of(decode_json, b"[1, 2]").code == "invalid_json"
    assert err_of(decode_json, b"\xff\xfe").status == 400


@pytest.mark.parametrize(
    ("model", "body", "param", "code"),
    [
        (CompletionRequest, {"prompt": "hi"}, "model", "missing_required_parameter"),
        (CompletionRequest, {"model": "m"}, "prompt", "missing_required_parameter"),
        (
            CompletionRequest,
            {"model": "m", "prompt": "hi", "max_tokens": "lots"},
            "max_tokens",
            "invalid_value",
        ),
        (
            CompletionRequest,
            {"model": "m", "prompt": "hi", "max_tokens": 0},
            "max_tokens",
            "invalid_value",
        ),
        (
            CompletionRequest,
            {"model": "m", "prompt": "hi", "max_tokens": -3},
            "max_tokens",
            "invalid_value",
        ),
        (
            CompletionRequest,
            {"model": "m", "prompt": "hi", "temperature": 5},
            "temperature",
            "invalid_value",
        ),
        (CompletionRequest, {"model": "m", "prompt": []}, "prompt", "invalid_value"),
        (CompletionRequest, {"model": "m", "prompt": "hi", "n": 2}, "n", "invalid_value"),
        (CompletionRequest, {"model": "m", "prompt": "hi", "bogus": 1}, "bogus", "invalid_value"),
        (ChatRequest, {"model": "m", "messages": []}, "messages", "invalid_value"),
        (
            ChatRequest,
            {"model": "m", "messages": [{"role": "wizard", "content": "x"}]},
            "messages.0.role",
            "invalid_value",
        ),
        (ChatRequest, {"model": "m", "messages": "hello"}, "messages", "invalid_value"),
    ],
)
def test_validation_errors_are_openai_shaped(
    model: type, body: dict, param: str, code: str
) -> None:
    e = err_of(validate, model, body)
    assert e.status == 400
    assert e.param == param
    assert e.code == code
    assert set(e.body()["error"]) == {"message", "type", "param", "code"}


def test_unknown_model_is_404(tokenizer: Any) -> None:
    req = validate(CompletionRequest, {"model": "other", "prompt": "hi"})
    e = err_of(prepare, req, tokenizer, LIMITS)
    assert (e.status, e.code, e.param) == (404, "model_not_found", "model")


def test_context_length_exceeded(tokenizer: Any) -> None:
    long_ids = list(range(1000, 1250))
    req = validate(CompletionRequest, {"model": "m", "prompt": long_ids, "max_tokens": 10})
    e = err_of(prepare, req, tokenizer, LIMITS)
    assert (e.status, e.code) == (400, "context_length_exceeded")
    assert "256" in e.message
    assert "260" in e.message
    over = validate(CompletionRequest, {"model": "m", "prompt": list(range(1000, 1300))})
    assert err_of(prepare, over, tokenizer, LIMITS).code == "context_length_exceeded"


def test_max_tokens_cap(tokenizer: Any) -> None:
    req = validate(CompletionRequest, {"model": "m", "prompt": "hi", "max_tokens": 101})
    e = err_of(prepare, req, tokenizer, LIMITS)
    assert (e.status, e.param) == (400, "max_tokens")


def test_token_ids_out_of_vocab(tokenizer: Any) -> None:
    req = validate(CompletionRequest, {"model": "m", "prompt": [1, 10**9]})
    assert err_of(prepare, req, tokenizer, LIMITS).param == "prompt"


def test_default_max_tokens_fits_context(tokenizer: Any) -> None:
    ids = list(range(1000, 1230))
    p = prepare(validate(CompletionRequest, {"model": "m", "prompt": ids}), tokenizer, LIMITS)
    assert p.max_tokens == 26  # min(default 50, room 256 - 230)
    p = prepare(validate(CompletionRequest, {"model": "m", "prompt": "hi"}), tokenizer, LIMITS)
    assert p.max_tokens == 50


def test_chat_template_and_routing_view(tokenizer: Any) -> None:
    body = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
        ],
        "max_completion_tokens": 7,
        "user": "u1",
        "temperature": 0,
    }
    p = prepare(validate(ChatRequest, body), tokenizer, LIMITS)
    text = tokenizer.decode(p.token_ids)
    assert "Be brief." in text
    assert "Hi" in text
    assert text.rstrip().endswith("assistant")
    assert p.max_tokens == 7
    assert p.view.session_id == "u1"
    assert p.view.block_hashes == block_hashes(p.token_ids, 16)
    gen = p.payload["request"]
    assert gen["prompt_token_ids"] == p.token_ids
    assert gen["temperature"] == 0


def test_formatter_shapes() -> None:
    f = Formatter("chatcmpl-1", "m", chat=True)
    first, second = f.chunk("a", None), f.chunk("b", "stop")
    assert first["choices"][0]["delta"] == {"content": "a", "role": "assistant"}
    assert second["choices"][0]["delta"] == {"content": "b"}
    assert second["choices"][0]["finish_reason"] == "stop"
    u = usage(3, 2, cached=1)
    assert u["total_tokens"] == 5
    assert u["prompt_tokens_details"]["cached_tokens"] == 1
    full = Formatter("cmpl-1", "m", chat=False).full("xy", "length", u)
    assert full["object"] == "text_completion"
    assert full["choices"][0]["text"] == "xy"
    assert sse({"a": 1}) == b'data: {"a":1}\n\n'
    assert SSE_DONE == b"data: [DONE]\n\n"
