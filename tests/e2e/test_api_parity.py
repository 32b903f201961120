"""API parity: what the pinned vLLM's OpenAI server accepts, llmfleet accepts — through the
official ``openai`` client, on the real engine, with each raw response body (and each
streamed event) validated against OpenAI's published schema (``tests/openai_schema.py``)."""

from __future__ import annotations

import json
import math
from typing import Any

import httpx
import jsonschema
import openai
import pytest

from tests import openai_schema as S
from tests.serve_fixtures import TEST_URL

pytestmark = [pytest.mark.e2e]
MSGS = [{"role": "user", "content": "What is the capital of France?"}]
CITY = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather in a city",
            "parameters": CITY,
            # this vLLM pins a call's arguments to the tool's schema only for strict tools
            # (or with the engine argument tool_strict_level: parameter); without it the
            # envelope is constrained and the arguments are whatever the model writes
            "strict": True,
        },
    }
]


@pytest.fixture(scope="module")
def client(vllm_app: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{TEST_URL}/v1", api_key="unused", max_retries=0)


def raw(path: str, body: dict[str, Any]) -> dict[str, Any]:
    r = httpx.post(f"{TEST_URL}{path}", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def events(path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    with httpx.stream("POST", f"{TEST_URL}{path}", json=body, timeout=120) as r:
        assert r.status_code == 200
        lines = [ln for ln in r.iter_lines() if ln]
    assert lines[-1] == "data: [DONE]"
    for ln in lines[:-1]:
        assert ln.startswith("data: ")
        out.append(json.loads(ln[len("data: ") :]))
    return out


def call(path: str, body: dict[str, Any], stream: bool, kind: str) -> Any:
    """POST ``body`` (streamed or not) and validate every body or event as OpenAI's ``kind``."""
    if stream:
        evs = events(path, {**body, "stream": True})
        for e in evs:
            S.validate(f"{kind}_chunk", e)
        return evs
    out = raw(path, body)
    S.validate(kind, out)
    return out


def chat(model: str, stream: bool = False, **kw: Any) -> Any:
    body = {"model": model, "messages": MSGS, "max_tokens": 16, "temperature": 0, **kw}
    return call("/v1/chat/completions", body, stream, "chat")


def completion(model: str, stream: bool = False, **kw: Any) -> Any:
    body = {"model": model, "prompt": "The capital of France is", "max_tokens": 8, **kw}
    body.setdefault("temperature", 0)
    return call("/v1/completions", body, stream, "completion")


def stream_text(evs: list[dict[str, Any]], index: int = 0) -> str:
    parts = []
    for e in evs:
        for ch in e.get("choices", []):
            if ch["index"] == index:
                parts.append((ch.get("delta") or {}).get("content") or ch.get("text") or "")
    return "".join(parts)


@pytest.mark.parametrize("stream", [False, True])
def test_n_gives_that_many_choices(vllm_app: str, stream: bool) -> None:
    out = chat(vllm_app, stream, n=2, temperature=1.0, seed=1)
    if stream:
        assert {ch["index"] for e in out for ch in e["choices"]} == {0, 1}
    else:
        assert [c["index"] for c in out["choices"]] == [0, 1]


@pytest.mark.parametrize("stream", [False, True])
def test_chat_logprobs_are_present_and_finite(vllm_app: str, stream: bool) -> None:
    out = chat(vllm_app, stream, logprobs=True, top_logprobs=3, max_tokens=6)
    choices = [ch for e in out for ch in e["choices"]] if stream else out["choices"]
    entries = [t for ch in choices if ch.get("logprobs") for t in ch["logprobs"]["content"]]
    assert len(entries) >= 3
    for t in entries:
        assert math.isfinite(t["logprob"])
        assert t["logprob"] <= 0
        assert 1 <= len(t["top_logprobs"]) <= 3
        assert all(math.isfinite(x["logprob"]) for x in t["top_logprobs"])


@pytest.mark.parametrize("stream", [False, True])
def test_completion_logprobs_echo_and_penalties(vllm_app: str, stream: bool) -> None:
    out = completion(
        vllm_app,
        stream,
        logprobs=2,
        presence_penalty=0.5,
        frequency_penalty=0.5,
        top_k=5,
        min_p=0.05,
        repetition_penalty=1.1,
    )
    choices = [ch for e in out for ch in e["choices"]] if stream else out["choices"]
    lps = [x for ch in choices if ch.get("logprobs") for x in ch["logprobs"]["token_logprobs"]]
    assert lps
    assert all(x is None or math.isfinite(x) for x in lps)
    echoed = completion(vllm_app, echo=True, max_tokens=2)
    assert echoed["choices"][0]["text"].startswith("The capital of France is")


def test_stop_token_ids_stop(client: openai.OpenAI, vllm_app: str, tokenizer: Any) -> None:
    free = client.completions.create(
        model=vllm_app, prompt="Count: 1, 2, 3,", max_tokens=12, temperature=0
    )
    ids = tokenizer.encode(free.choices[0].text, add_special_tokens=False)
    stop_at = ids[2]
    out = client.completions.create(
        model=vllm_app,
        prompt="Count: 1, 2, 3,",
        max_tokens=12,
        temperature=0,
        extra_body={"stop_token_ids": [stop_at]},
    )
    assert out.choices[0].finish_reason == "stop"
    assert out.usage.completion_tokens <= ids.index(stop_at) + 1


def test_logit_bias_and_seed(client: openai.OpenAI, vllm_app: str, tokenizer: Any) -> None:
    tok = tokenizer.encode(" banana", add_special_tokens=False)[0]
    out = client.completions.create(
        model=vllm_app, prompt="Hi", max_tokens=3, logit_bias={str(tok): 100}
    )
    assert tokenizer.encode(out.choices[0].text, add_special_tokens=False) == [tok] * 3
    same = [
        client.completions.create(
            model=vllm_app, prompt="Once upon", max_tokens=8, temperature=1.0, seed=7
        )
        .choices[0]
        .text
        for _ in range(2)
    ]
    assert same[0] == same[1]


@pytest.mark.parametrize("stream", [False, True])
def test_json_schema_response_validates(vllm_app: str, stream: bool) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "city", "schema": CITY}}
    out = chat(vllm_app, stream, response_format=fmt, max_tokens=40)
    text = stream_text(out) if stream else out["choices"][0]["message"]["content"]
    jsonschema.validate(json.loads(text), CITY)


def test_json_object_response_parses(vllm_app: str) -> None:
    ask = [{"role": "user", "content": "Give a JSON object with keys name and age for a person."}]
    out = chat(vllm_app, messages=ask, response_format={"type": "json_object"}, max_tokens=200)
    assert out["choices"][0]["finish_reason"] == "stop"
    assert isinstance(json.loads(out["choices"][0]["message"]["content"]), dict)


@pytest.mark.parametrize("stream", [False, True])
def test_named_tool_choice_returns_a_parsable_call(vllm_app: str, stream: bool) -> None:
    choice = {"type": "function", "function": {"name": "get_weather"}}
    out = chat(vllm_app, stream, tools=TOOLS, tool_choice=choice, max_tokens=100)
    if stream:
        calls: dict[int, dict[str, str]] = {}
        for e in out:
            for ch in e["choices"]:
                for tc in (ch.get("delta") or {}).get("tool_calls") or []:
                    c = calls.setdefault(tc["index"], {"name": "", "arguments": ""})
                    fn = tc.get("function") or {}
                    c["name"] += fn.get("name") or ""
                    c["arguments"] += fn.get("arguments") or ""
        got = list(calls.values())
    else:
        got = [tc["function"] for tc in out["choices"][0]["message"]["tool_calls"]]
    assert got
    assert got[0]["name"] == "get_weather"
    jsonschema.validate(json.loads(got[0]["arguments"]), CITY)


def test_required_and_auto_tool_choice(client: openai.OpenAI, vllm_app: str) -> None:
    out = client.chat.completions.create(
        model=vllm_app, messages=MSGS, tools=TOOLS, tool_choice="required", max_tokens=100
    )
    assert out.choices[0].finish_reason == "tool_calls"
    call = out.choices[0].message.tool_calls[0].function
    assert call.name == "get_weather"
    jsonschema.validate(json.loads(call.arguments), CITY)
    auto = client.chat.completions.create(
        model=vllm_app, messages=MSGS, tools=TOOLS, tool_choice="auto", max_tokens=8
    )
    assert auto.choices[0].finish_reason in ("stop", "length", "tool_calls")


def test_fields_clients_send_are_accepted(client: openai.OpenAI, vllm_app: str) -> None:
    out = client.chat.completions.create(
        model=vllm_app,
        messages=MSGS,
        max_completion_tokens=4,
        metadata={"team": "x"},
        user="u1",
        stream_options=None,
    )
    assert out.usage.completion_tokens <= 4


def test_best_of_follows_vllm(vllm_app: str) -> None:
    r = httpx.post(
        f"{TEST_URL}/v1/completions",
        json={"model": vllm_app, "prompt": "Hi", "max_tokens": 2, "best_of": 2, "n": 1},
        timeout=60,
    )
    if r.status_code == 200:
        S.validate_completion(r.json())
    else:  # this vLLM refuses it: an OpenAI-shaped 400, not a 500
        assert r.status_code == 400
        S.validate_error(r.json())


def test_tokenize_detokenize_round_trip(vllm_app: str, tokenizer: Any) -> None:
    tok = raw("/tokenize", {"model": vllm_app, "prompt": "Hello world"})
    assert tok["tokens"] == tokenizer.encode("Hello world", add_special_tokens=False)
    text = raw("/detokenize", {"model": vllm_app, "tokens": tok["tokens"]})
    assert text["prompt"] == "Hello world"


def test_responses_api(client: openai.OpenAI, vllm_app: str) -> None:
    out = client.responses.create(model=vllm_app, input="Say hi.", max_output_tokens=8)
    assert out.output_text
    assert out.usage.output_tokens <= 8


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"n": 0}, None),
        ({"logprobs": True, "top_logprobs": 99}, None),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, None),
        ({"response_format": {"type": "json_schema"}}, None),
    ],
)
def test_rejections_are_openai_shaped(vllm_app: str, body: dict[str, Any], param: Any) -> None:
    r = httpx.post(
        f"{TEST_URL}/v1/chat/completions",
        json={"model": vllm_app, "messages": MSGS, "max_tokens": 4, **body},
        timeout=60,
    )
    assert r.status_code == 400, r.text
    S.validate_error(r.json())
    assert isinstance(r.json()["error"]["code"], str)
    assert "Traceback" not in r.text
    del param
