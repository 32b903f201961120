import json
from typing import Any

import pytest

from cluster.request_prep import Limits, decode_json, prepare
from contracts.hashing import block_hashes
from contracts.http import APIError, ForwardedRequest
from replicas.openai_lite.format import SSE_DONE, Formatter, sse, usage
from replicas.openai_lite.frontend import check_context
from replicas.openai_lite.protocol import ChatRequest, CompletionRequest, validate

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
    for raw in (b"null", b"1", b'"x"'):
        assert err_of(decode_json, raw).message == "request body must be a JSON object"
    assert err_of(decode_json, b"\xff\xfe").status == 400


def test_bodies_the_decoder_or_the_engine_would_fail_on() -> None:
    """Found by hand against vLLM 0.32: 1,000 nested arrays gave a 500 (the decoder's
    RecursionError), and ``stop: ["\\ud800"]`` (an unpaired surrogate, valid JSON escape,
    invalid Unicode) a 500 ``engine_error``; in a prompt it got a cryptic tokenizer 400."""
    for raw in (
        b'{"stop": ["\\ud800"]}',
        b'{"prompt": "a\\udfffb"}',
        b'{"messages": [{"role": "user", "content": "\\uDBFF"}]}',
        b'{"logit_bias": {"\\ud800": 1}}',
    ):
        e = err_of(decode_json, raw)
        assert (e.status, e.code) == (400, "invalid_json"), raw
        assert "unpaired surrogate" in e.message
    assert decode_json(b'{"prompt": "\\ud83d\\ude00"}') == {"prompt": "\U0001f600"}  # a pair
    ok = b'{"a": ' + b"[" * 127 + b"]" * 127 + b"}"
    assert decode_json(ok)
    for depth in (128, 1_000, 100_000):
        e = err_of(decode_json, b'{"a": ' + b"[" * depth + b"]" * depth + b"}")
        assert e.code == "invalid_json"
        assert e.message.endswith("more than 128 deep"), e.message
    e = err_of(decode_json, b'{"a": ' + b'{"b": ' * 500 + b"1" + b"}" * 500 + b"}")
    assert "deep" in e.message


def test_numbers_json_does_not_have_are_refused() -> None:
    """Found by hand against vLLM 0.32: Python's decoder reads ``NaN`` and ``Infinity``;
    vLLM refused most such fields, but ``logit_bias: {"28": NaN}`` reached the sampler and
    changed a greedy completion (200)."""
    for raw, why in (
        (b'{"logit_bias": {"28": NaN}}', "NaN is not a JSON number"),
        (b'{"temperature": Infinity}', "Infinity is not a JSON number"),
        (b'{"a": [1, -Infinity]}', "-Infinity is not a JSON number"),
        (b'{"length_penalty": 1e999}', "1e999 is too large for a 64-bit float"),
    ):
        e = err_of(decode_json, raw)
        assert (e.status, e.code) == (400, "invalid_json"), raw
        assert why in e.message, e.message
    assert decode_json(b'{"a": 1.5e308, "b": -2.5e-320, "c": 7}') == {
        "a": 1.5e308,
        "b": -2.5e-320,
        "c": 7,
    }


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


def _prep(path: str, body: dict[str, Any], tokenizer: Any) -> Any:
    return prepare(path, json.dumps(body).encode(), tokenizer, LIMITS)


def _sent(p: Any) -> dict[str, Any]:
    fwd = p.payload["request"]
    assert isinstance(fwd, ForwardedRequest)
    return json.loads(fwd.body)


def test_unknown_or_missing_model(tokenizer: Any) -> None:
    e = err_of(_prep, "/v1/completions", {"model": "other", "prompt": "hi"}, tokenizer)
    assert (e.status, e.code, e.param) == (404, "model_not_found", "model")
    e = err_of(_prep, "/v1/completions", {"prompt": "hi"}, tokenizer)
    assert (e.status, e.code) == (400, "missing_required_parameter")
    assert _prep("/tokenize", {"prompt": "hi"}, tokenizer).view.token_ids == ()


def test_context_length_exceeded_in_the_lite_layer() -> None:
    e = err_of(check_context, 250, 10, 256)
    assert (e.status, e.code) == (400, "context_length_exceeded")
    assert "256" in e.message
    assert "260" in e.message
    assert err_of(check_context, 300, None, 256).code == "context_length_exceeded"
    assert check_context(230, None, 256) == 26


def test_max_tokens_cap(tokenizer: Any) -> None:
    body = {"model": "m", "prompt": "hi", "max_tokens": 101}
    e = err_of(_prep, "/v1/completions", body, tokenizer)
    assert (e.status, e.param) == (400, "max_tokens")
    chat = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    e = err_of(_prep, "/v1/chat/completions", {**chat, "max_completion_tokens": 101}, tokenizer)
    assert e.param == "max_completion_tokens"
    # with both, vLLM reads max_completion_tokens: the cap and the charge follow it (found by
    # hand: max_tokens 1 beside max_completion_tokens 1,500 passed a cap of 1,024)
    both = {**chat, "max_tokens": 1, "max_completion_tokens": 101}
    assert err_of(_prep, "/v1/chat/completions", both, tokenizer).param == "max_completion_tokens"
    both = {**chat, "max_tokens": 100, "max_completion_tokens": 7}
    assert _prep("/v1/chat/completions", both, tokenizer).view.expected_output_tokens == 7
    assert _prep("/v1/chat/completions", {**chat, "max_tokens": 9}, tokenizer).view.expected_output_tokens == 9  # fmt: skip


def test_choices_are_capped_and_multiply_the_expected_output(tokenizer: Any) -> None:
    """``n`` (or ``best_of``) runs that many sequences: above ``max_choices`` it is a 400, and
    the output a request may produce (what quotas charge and the router weighs) counts
    every choice. Found by hand: ``n`` = 1,000 was charged as one answer and kept an engine
    busy for minutes (vLLM's own bound is 16,384)."""
    limits = Limits("m", max_model_len=256, max_tokens_cap=100, default_max_tokens=50,
                    block_size=16, max_choices=8)  # fmt: skip
    chat = {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 10}
    for path, body in (("/v1/chat/completions", chat), ("/v1/completions", {"model": "m", "prompt": "hi", "max_tokens": 10})):  # fmt: skip
        assert prepare(path, json.dumps({**body, "n": 8}).encode(), tokenizer, limits).view.expected_output_tokens == 80  # fmt: skip
        for field in ("n", "best_of"):
            with pytest.raises(APIError) as info:
                prepare(path, json.dumps({**body, field: 9}).encode(), tokenizer, limits)
            assert (info.value.status, info.value.param, info.value.code) == (400, field, "invalid_value")  # fmt: skip
    done = prepare("/v1/completions", json.dumps({"model": "m", "prompt": "hi", "max_tokens": 10, "n": 2, "best_of": 5}).encode(), tokenizer, limits)  # fmt: skip
    assert done.view.expected_output_tokens == 50  # best_of sequences run
    for odd in ("x", 2.5, 0, -2, True, None):  # not a positive integer (True is 1): counts 1
        p = prepare("/v1/completions", json.dumps({"model": "m", "prompt": "hi", "max_tokens": 10, "n": odd}).encode(), tokenizer, limits)  # fmt: skip
        assert p.view.expected_output_tokens == 10
    default = prepare("/v1/completions", json.dumps({"model": "m", "prompt": "hi", "n": 3}).encode(), tokenizer, limits)  # fmt: skip
    assert default.view.expected_output_tokens == 150  # the default max_tokens, 3 times


@pytest.fixture(scope="module", params=["light", "transformers"])
def either_tokenizer(request: Any, tokenizer: Any, model_dir: Any) -> Any:
    """The ingress's own tokenizer (``LightTokenizer``) and the ``transformers`` fallback."""
    from cluster.light_tokenizer import LightTokenizer

    return LightTokenizer(model_dir) if request.param == "light" else tokenizer


def test_a_batch_of_prompts_is_several_prompts(either_tokenizer: Any) -> None:
    """Found by hand: 10 prompts of 841 tokens each (context 2,048) got a 400 "your prompt
    has 7,059 tokens" (the batch was judged as one joined text), while a batch of 200 short
    prompts passed the cap on choices and was charged as its first prompt alone."""
    tokenizer = either_tokenizer
    limits = Limits("m", max_model_len=256, max_tokens_cap=100, default_max_tokens=50,
                    block_size=16, max_choices=8)  # fmt: skip
    text = "the quick brown fox jumps over the lazy dog " * 18  # ~ 180 tokens
    one = len(tokenizer.encode(text, add_special_tokens=False))
    assert 150 < one < 256
    body = {"model": "m", "prompt": [text] * 4, "max_tokens": 10}
    p = prepare("/v1/completions", json.dumps(body).encode(), tokenizer, limits)
    assert p.prompt_tokens == 4 * one  # quotas charge every prompt
    assert p.view.expected_output_tokens == 40  # and every prompt's output
    assert len(p.view.token_ids) == one  # routing goes by the first prompt
    ids = [[5, 6, 7], [8, 9]]
    p = prepare("/v1/completions", json.dumps({**body, "prompt": ids, "n": 2}).encode(), tokenizer, limits)  # fmt: skip
    assert (p.prompt_tokens, p.view.expected_output_tokens) == (5, 40)
    with pytest.raises(APIError) as info:  # 5 prompts x n=2 = 10 sequences > 8
        prepare("/v1/completions", json.dumps({**body, "prompt": ["a"] * 5, "n": 2}).encode(), tokenizer, limits)  # fmt: skip
    assert (info.value.status, info.value.param) == (400, "prompt")
    assert "10 sequences" in info.value.message
    with pytest.raises(APIError) as info:  # one prompt of the batch is too long on its own
        prepare("/v1/completions", json.dumps({**body, "prompt": ["a", text * 2]}).encode(), tokenizer, limits)  # fmt: skip
    assert info.value.code == "context_length_exceeded"
    with pytest.raises(APIError) as info:
        prepare("/v1/completions", json.dumps({**body, "prompt": [[1], [10**9]]}).encode(), tokenizer, limits)  # fmt: skip
    assert info.value.param == "prompt"
    # the default max_tokens leaves room for the longest prompt
    p = prepare("/v1/completions", json.dumps({"model": "m", "prompt": ["a", text]}).encode(), tokenizer, limits)  # fmt: skip
    assert _sent(p)["max_tokens"] == min(50, 256 - one)


def test_lax_forms_vllm_accepts_are_read_as_vllm_reads_them(tokenizer: Any) -> None:
    """vLLM's request models coerce "16", 16.0 and "true" (pydantic's lax mode). Found by
    hand: ``max_tokens: "1100"`` passed a cap of 1,024 and ``n: "130"`` a cap of 128, and
    vLLM ran both (1,100 tokens for 63 s; 130 choices); ``stream: "true"`` streamed while the
    ingress took it for a plain answer (no usage asked, no migration)."""
    limits = Limits("m", max_model_len=256, max_tokens_cap=100, default_max_tokens=50,
                    block_size=16, max_choices=8)  # fmt: skip
    base = {"model": "m", "prompt": "hi"}
    for field, value in (("max_tokens", "101"), ("max_tokens", 101.0), ("n", " 9 "), ("best_of", "9.0")):  # fmt: skip
        with pytest.raises(APIError) as info:
            prepare("/v1/completions", json.dumps({**base, field: value}).encode(), tokenizer, limits)  # fmt: skip
        assert (info.value.status, info.value.param) == (400, field), (field, value)
    p = prepare("/v1/completions", json.dumps({**base, "max_tokens": "7", "n": 2.0, "stream": "true", "echo": "0"}).encode(), tokenizer, limits)  # fmt: skip
    assert p.view.expected_output_tokens == 14
    assert p.stream
    assert p.usage_injected  # the usage event is asked for, as for stream: true
    sent = _sent(p)
    assert (sent["max_tokens"], sent["n"], sent["stream"], sent["echo"]) == (7, 2, True, False)
    p = prepare("/v1/completions", json.dumps({**base, "max_tokens": "many", "stream": "maybe"}).encode(), tokenizer, limits)  # fmt: skip
    assert (_sent(p)["max_tokens"], _sent(p)["stream"]) == ("many", "maybe")  # vLLM's to refuse


def test_a_truncated_prompt_is_not_refused_for_its_length(tokenizer: Any) -> None:
    """``truncate_prompt_tokens`` asks vLLM to keep that many of the prompt's tokens: found by
    hand, a 3,000-token prompt with ``truncate_prompt_tokens: 100`` got the ingress's 400
    context_length_exceeded, where vLLM serves it."""
    long = "hi " * 3000
    p = _prep("/v1/completions", {"model": "m", "prompt": long, "truncate_prompt_tokens": 100}, tokenizer)  # fmt: skip
    assert p.prompt_tokens == 100  # charged as the tokens kept
    assert p.view.token_ids == ()  # routed on load: the kept tokens are vLLM's choice
    assert _sent(p)["max_tokens"] == 50  # the default, with the room after 100 tokens
    chat = {"model": "m", "messages": [{"role": "user", "content": long}], "truncate_prompt_tokens": -1}  # fmt: skip
    assert _prep("/v1/chat/completions", chat, tokenizer).prompt_tokens == 256  # -1: the context
    e = err_of(_prep, "/v1/completions", {"model": "m", "prompt": long}, tokenizer)
    assert e.code == "context_length_exceeded"  # without truncation, refused as before


def test_routes_that_generate_nothing_expect_no_output(tokenizer: Any) -> None:
    for path, body in (("/tokenize", {"model": "m", "prompt": "hi"}), ("/detokenize", {"model": "m", "tokens": [1, 2]})):  # fmt: skip
        p = _prep(path, body, tokenizer)
        assert (p.view.expected_output_tokens, p.prompt_tokens) == (0, 0)  # quotas charge 0


def test_token_ids_out_of_vocab(tokenizer: Any) -> None:
    e = err_of(_prep, "/v1/completions", {"model": "m", "prompt": [1, 10**9]}, tokenizer)
    assert e.param == "prompt"


def test_default_max_tokens_fits_context(tokenizer: Any) -> None:
    ids = list(range(1000, 1230))
    p = _prep("/v1/completions", {"model": "m", "prompt": ids}, tokenizer)
    assert _sent(p)["max_tokens"] == 26  # min(default 50, room 256 - 230)
    assert p.view.expected_output_tokens == 26
    p = _prep("/v1/completions", {"model": "m", "prompt": "hi"}, tokenizer)
    assert _sent(p)["max_tokens"] == 50
    p = _prep("/v1/completions", {"model": "m", "prompt": "hi", "max_tokens": 7}, tokenizer)
    assert _sent(p)["max_tokens"] == 7


def test_unrenderable_shapes_route_on_load_alone(tokenizer: Any) -> None:
    body = {"model": "m", "messages": [{"role": "assistant", "tool_calls": []}], "n": 2}
    p = _prep("/v1/chat/completions", body, tokenizer)
    assert _sent(p)["n"] == 2  # forwarded unchanged: the replica's OpenAI layer decides


@pytest.mark.parametrize("messages", [True, 5, 1.5, {"role": "user"}])
def test_messages_of_the_wrong_type_are_left_to_the_replica(tokenizer: Any, messages: Any) -> None:
    """Found by fuzzing: ``"messages": true`` made the ingress's length bound iterate a bool
    (500). The ingress now passes such a body on for the replica's OpenAI layer to refuse
    (vLLM: a 400 naming ``messages``; checked by the e2e fuzz test)."""
    body = {"model": "m", "messages": messages, "max_tokens": 1}
    p = _prep("/v1/chat/completions", body, tokenizer)
    assert _sent(p)["messages"] == messages


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
        "logprobs": True,
    }
    p = _prep("/v1/chat/completions", body, tokenizer)
    ids = list(p.view.token_ids)
    text = tokenizer.decode(ids)
    assert "Be brief." in text
    assert "Hi" in text
    assert text.rstrip().endswith("assistant")
    assert p.view.expected_output_tokens == 7
    assert p.view.session_id == "u1"
    assert p.view.block_hashes == block_hashes(ids, 16)
    fwd = p.payload["request"]
    assert list(fwd.prompt_token_ids) == ids
    assert _sent(p) == body
    assert p.payload.prompt == " ".join(map(str, ids))


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
