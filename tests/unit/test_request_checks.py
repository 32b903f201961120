"""cluster.request_checks: the body shapes vLLM's OpenAI layer crashes on get a 400 first.

Each refused shape is one the fuzz test (``tests/e2e/test_fuzz.py``) found answered with a
500; the last test shows the crash in vLLM's own request model, so the check can be dropped
when an upgrade makes that test fail.
"""

from __future__ import annotations

from typing import Any

import pytest

from cluster.request_checks import INT_FIELDS, check_body, lax_int
from contracts.http import APIError

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
MSG = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
@pytest.mark.parametrize("value", [[None, None], [], "json", 1, 0.5, True, False])
def test_structured_outputs_must_be_an_object(path: str, value: Any) -> None:
    with pytest.raises(APIError) as info:
        check_body(
            path, {"model": "m", "messages": MSG, "prompt": "hi", "structured_outputs": value}
        )
    err = info.value
    assert (err.status, err.param, err.code) == (400, "structured_outputs", "invalid_value")
    assert err.body()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("value", [-174754, 0, 1.5, True, "calls", {"id": "x"}])
def test_message_tool_calls_must_be_an_array(value: Any) -> None:
    messages = [*MSG, {"role": "assistant", "content": "", "tool_calls": value}]
    with pytest.raises(APIError) as info:
        check_body(CHAT, {"model": "m", "messages": messages})
    assert (info.value.status, info.value.param) == (400, "messages[1].tool_calls")


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("stream_interval", 5630167296171974218685322625024),  # the fuzz's case
        ("top_k", 2**63),
        ("priority", -(2**63) - 1),
        ("stop_token_ids", [1, 2**64]),
        ("top_k", "100000000000000000000000"),  # found by hand: vLLM reads it, a 500
        ("stream_interval", " 1_000_000_000_000_000_000_000.0 "),
    ],
)
def test_integers_beyond_64_bits_are_refused(path: str, field: str, value: Any) -> None:
    with pytest.raises(APIError) as info:
        check_body(path, {"model": "m", "messages": MSG, "prompt": "hi", field: value})
    assert (info.value.status, info.value.param, info.value.code) == (400, field, "invalid_value")


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (CHAT, {"messages": MSG, "stream_interval": 2**63 - 1, "priority": -(2**63)}),
        (COMPLETIONS, {"prompt": [1, 2], "stop_token_ids": [2**63 - 1], "echo": True}),
        (CHAT, {"messages": MSG, "structured_outputs": None}),
        (CHAT, {"messages": MSG, "structured_outputs": {"regex": "[a-z]+"}}),
        (CHAT, {"messages": [{"role": "assistant", "tool_calls": []}, "not a message"]}),
        (CHAT, {"messages": [{"role": "assistant", "tool_calls": None}]}),
        (CHAT, {"messages": "not a list"}),  # vLLM's own 400
        (CHAT, {"messages": MSG, "user": "100000000000000000000000"}),  # a string field
        (COMPLETIONS, {"prompt": "100000000000000000000000", "top_k": "1e30"}),  # vLLM's 400
        (COMPLETIONS, {"prompt": "hi", "structured_outputs": {"choice": ["a", "b"]}}),
        # paths without checks pass anything through to vLLM
        ("/tokenize", {"prompt": "hi", "structured_outputs": 1}),
        ("/detokenize", {"tokens": [1, 2]}),
        ("/v1/responses", {"input": "hi", "structured_outputs": []}),
    ],
)
def test_valid_or_unchecked_bodies_pass(path: str, body: dict[str, Any]) -> None:
    check_body(path, {"model": "m", **body})


def test_the_checked_shapes_still_crash_vllms_request_model() -> None:
    """When this fails, the pinned vLLM refuses these shapes itself: drop the checks."""
    chat = pytest.importorskip("vllm.entrypoints.openai.chat_completion.protocol")
    completion = pytest.importorskip("vllm.entrypoints.openai.completion.protocol")
    with pytest.raises(AttributeError):
        chat.ChatCompletionRequest.model_validate(
            {"model": "m", "messages": MSG, "structured_outputs": [None]}
        )
    with pytest.raises(AttributeError):
        completion.CompletionRequest.model_validate(
            {"model": "m", "prompt": "hi", "structured_outputs": "x"}
        )
    with pytest.raises(TypeError):
        chat.ChatCompletionRequest.model_validate(
            {"model": "m", "messages": [{"role": "assistant", "content": "", "tool_calls": 5}]}
        )
    serial = pytest.importorskip("vllm.v1.serial_utils")
    request = chat.ChatCompletionRequest.model_validate(
        {"model": "m", "messages": MSG, "stream_interval": 2**70}
    )  # the request model lets it through ...
    params = request.to_sampling_params(16, {})
    with pytest.raises(OverflowError):  # ... and the engine client cannot send it
        serial.MsgpackEncoder().encode(params)


def test_the_integer_fields_are_vllms() -> None:
    """``INT_FIELDS`` lists the fields vLLM's request models read as integers (a string
    there is parsed as one); when this fails, the pinned vLLM's models changed."""
    import typing

    chat = pytest.importorskip("vllm.entrypoints.openai.chat_completion.protocol")
    completion = pytest.importorskip("vllm.entrypoints.openai.completion.protocol")

    def leaves(t: Any) -> set[Any]:
        args = typing.get_args(t)
        if not args or typing.get_origin(t) is list:
            return {t}
        return set().union(*(leaves(a) for a in args))

    found = set()
    for model in (chat.ChatCompletionRequest, completion.CompletionRequest):
        for name, f in model.model_fields.items():
            kinds = leaves(f.annotation)
            if int in kinds and str not in kinds:
                found.add(name)
    assert found == INT_FIELDS


@pytest.mark.parametrize(
    ("value", "read"),
    [
        ("12", 12), (" +5 ", 5), ("-5", -5), ("1_000", 1000), ("12.000", 12), (2.0, 2),
        (True, 1), ("1.5", None), ("1e3", None), ("0x10", None), ("\u0661", None),
        ("1__0", None), (2.5, None), (None, None),
    ],
)  # fmt: skip
def test_lax_int_reads_what_pydantic_reads(value: Any, read: int | None) -> None:
    from pydantic import BaseModel, ValidationError

    class M(BaseModel):
        x: int | None = None

    assert lax_int(value) == read
    if value is not None:
        try:
            assert M(x=value).x == read
        except ValidationError:
            assert read is None


def test_responses_that_need_a_store_are_refused() -> None:
    check_body("/v1/responses", {"input": "hi", "previous_response_id": None, "store": True})
    check_body("/v1/responses", {"input": "hi", "background": False})
    for field, value in (("previous_response_id", "resp_1"), ("background", True)):
        with pytest.raises(APIError) as err:
            check_body("/v1/responses", {"input": "hi", field: value})
        assert (err.value.status, err.value.param) == (400, field)
        assert "stores no responses" in err.value.message
