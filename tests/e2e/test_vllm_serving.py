"""End to end: HTTP → Ray Serve ingress → LLMReplica → real vLLM (CPU) with SmolLM2."""

from __future__ import annotations

import json
import threading
import time

import httpx
import openai
import pytest

from tests.serve_fixtures import TEST_METRICS_PORT, TEST_URL, post, replica_stats

pytestmark = [pytest.mark.e2e]


@pytest.fixture(scope="module")
def client(vllm_app: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{TEST_URL}/v1", api_key="unused", max_retries=0)


def test_models_and_health(client: openai.OpenAI, vllm_app: str) -> None:
    assert [m.id for m in client.models.list().data] == [vllm_app]
    r = httpx.get(f"{TEST_URL}/health", timeout=10)
    assert r.status_code == 200
    assert r.json()["healthy_replicas"] >= 1


def test_greedy_chat_answer_is_sane(client: openai.OpenAI, vllm_app: str) -> None:
    # The answer's first token is a near tie ("The" -1.86 vs "L" -1.96 nats in float32) that
    # bf16 kernels may flip (they do with AMX); past the opening the answer is decisive.
    out = client.chat.completions.create(
        model=vllm_app,
        messages=[
            {"role": "user", "content": "What is the capital of France?"},
            {"role": "assistant", "content": "The capital of France is"},
        ],
        max_tokens=24,
        temperature=0,
        extra_body={"continue_final_message": True, "add_generation_prompt": False},
    )
    assert "Paris" in out.choices[0].message.content
    assert out.choices[0].finish_reason in ("stop", "length")
    assert out.usage.prompt_tokens > 10
    assert 0 < out.usage.completion_tokens <= 24


def test_streamed_chat_matches_non_streamed_and_usage(client: openai.OpenAI, vllm_app: str) -> None:
    msgs = [{"role": "user", "content": "Name three colors."}]
    full = client.chat.completions.create(
        model=vllm_app, messages=msgs, max_tokens=20, temperature=0
    )
    stream = client.chat.completions.create(
        model=vllm_app,
        messages=msgs,
        max_tokens=20,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    parts, usage, finish = [], None, None
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for ch in chunk.choices:
            parts.append(ch.delta.content or "")
            finish = ch.finish_reason or finish
    assert "".join(parts) == full.choices[0].message.content
    assert usage is not None
    assert usage.completion_tokens == full.usage.completion_tokens
    assert usage.prompt_tokens == full.usage.prompt_tokens
    assert finish == full.choices[0].finish_reason


def test_completion_with_token_ids_and_length_finish(
    client: openai.OpenAI, vllm_app: str, tokenizer
) -> None:
    ids = tokenizer.encode("The quick brown fox", add_special_tokens=False)
    out = client.completions.create(
        model=vllm_app, prompt=ids, max_tokens=6, temperature=0, extra_body={"ignore_eos": True}
    )
    assert out.usage.prompt_tokens == len(ids)
    assert out.usage.completion_tokens == 6
    assert out.choices[0].finish_reason == "length"
    text = client.completions.create(
        model=vllm_app,
        prompt="The quick brown fox",
        max_tokens=6,
        temperature=0,
        extra_body={"ignore_eos": True},
    )
    assert text.choices[0].text == out.choices[0].text


def test_raw_sse_framing(vllm_app: str) -> None:
    body = {"model": vllm_app, "prompt": "Hello", "max_tokens": 4, "stream": True}
    with httpx.stream("POST", f"{TEST_URL}/v1/completions", json=body, timeout=60) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        events = [line for line in r.iter_lines() if line]
    assert events[-1] == "data: [DONE]"
    payloads = [json.loads(e[len("data: ") :]) for e in events[:-1]]
    assert all(p["object"] == "text_completion" for p in payloads)
    assert payloads[-1]["choices"][0]["finish_reason"] is not None


@pytest.mark.parametrize(
    ("path", "body", "status", "code"),
    [
        ("/v1/completions", b"{not json", 400, "invalid_json"),
        ("/v1/completions", {"prompt": "x"}, 400, "missing_required_parameter"),
        ("/v1/completions", {"model": "smollm2-135m-instruct", "prompt": 5}, 400, "invalid_value"),
        ("/v1/completions", {"model": "nope", "prompt": "x"}, 404, "model_not_found"),
        (
            "/v1/completions",
            {"model": "smollm2-135m-instruct", "prompt": "x", "max_tokens": 0},
            400,
            "invalid_value",
        ),
        (
            "/v1/completions",
            {"model": "smollm2-135m-instruct", "prompt": "x", "max_tokens": 5000},
            400,
            "invalid_value",
        ),
        (
            "/v1/completions",
            # vLLM clamps max_tokens to the room a prompt leaves; a prompt over the context
            # itself is refused
            {"model": "smollm2-135m-instruct", "prompt": list(range(100, 2200)), "max_tokens": 10},
            400,
            "context_length_exceeded",
        ),
        (
            "/v1/chat/completions",
            {"model": "smollm2-135m-instruct", "messages": []},
            400,
            "invalid_value",
        ),
        (
            "/v1/chat/completions",
            {"model": "smollm2-135m-instruct"},
            400,
            "missing_required_parameter",
        ),
    ],
)
def test_bad_input_gets_openai_error(
    vllm_app: str, path: str, body, status: int, code: str
) -> None:
    if isinstance(body, bytes):
        r = httpx.post(f"{TEST_URL}{path}", content=body, timeout=30)
    else:
        r = post(path, body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["code"] == code
    assert set(err) == {"message", "type", "param", "code"}
    assert "Traceback" not in r.text


def test_a_compressed_body_gets_415(vllm_app: str) -> None:
    import gzip

    body = gzip.compress(json.dumps({"model": vllm_app, "prompt": "x"}).encode())
    headers = {"content-type": "application/json", "content-encoding": "gzip"}
    r = httpx.post(f"{TEST_URL}/v1/completions", content=body, headers=headers, timeout=30)
    assert r.status_code == 415, r.text
    assert r.json()["error"]["code"] == "unsupported_content_encoding"
    plain = {"content-type": "application/json", "content-encoding": "identity"}
    ok = httpx.post(
        f"{TEST_URL}/v1/completions",
        content=json.dumps({"model": vllm_app, "prompt": "x", "max_tokens": 1}).encode(),
        headers=plain,
        timeout=30,
    )
    assert ok.status_code == 200, ok.text


def test_openai_client_raises_typed_errors(client: openai.OpenAI, vllm_app: str) -> None:
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="nope", prompt="x", max_tokens=1)
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model=vllm_app, messages=[{"role": "user", "content": "x " * 3000}], max_tokens=10
        )
    assert info.value.code == "context_length_exceeded"


def _running() -> int:
    return sum(int(s["running"] + s["waiting"]) for s in replica_stats())


def test_client_disconnect_aborts_engine_request(vllm_app: str) -> None:
    body = {
        "model": vllm_app,
        "prompt": "Count: 1, 2, 3,",
        "max_tokens": 1000,
        "stream": True,
        "ignore_eos": True,
    }
    with httpx.stream("POST", f"{TEST_URL}/v1/completions", json=body, timeout=60) as r:
        lines = r.iter_lines()  # keep a reference: dropping the iterator closes the connection
        got = 0
        while got < 3:
            got += next(lines).startswith("data: ")
        assert _running() == 1  # the request holds a slot while streaming
    closed = time.monotonic()
    while _running() != 0 and time.monotonic() - closed < 5:
        time.sleep(0.05)
    freed_after = time.monotonic() - closed
    assert _running() == 0
    assert freed_after < 1.0, f"slot freed only after {freed_after:.2f} s"


@pytest.mark.parametrize("n", [1, 4])
def test_client_disconnect_aborts_a_non_streamed_request(vllm_app: str, n: int) -> None:
    """A non-streamed request whose client leaves frees its slots at once. It used to run to
    its end: vLLM's handler watches for the disconnect in a task of its own, and the replica
    cancelled vLLM's app before that watch could see it (``replicas/vllm_openai.py``)."""
    body = {
        "model": vllm_app,
        "prompt": "Count: 1, 2, 3,",
        "max_tokens": 1000,
        "ignore_eos": True,
        "n": n,
    }
    outcome: list[BaseException | int] = []

    def post_and_give_up() -> None:
        try:  # the read timeout is the client leaving
            r = httpx.post(
                f"{TEST_URL}/v1/completions", json=body, timeout=httpx.Timeout(10.0, read=3.0)
            )
            outcome.append(r.status_code)
        except httpx.ReadTimeout as err:
            outcome.append(err)

    client = threading.Thread(target=post_and_give_up)
    client.start()
    held = 0
    while client.is_alive() and held < n:
        held = _running()
        time.sleep(0.05)
    client.join()
    assert held == n, f"the request held {held} slots, not {n}"
    assert len(outcome) == 1
    assert isinstance(outcome[0], httpx.ReadTimeout), outcome  # 1,000 tokens take longer
    closed = time.monotonic()
    while _running() != 0 and time.monotonic() - closed < 10:
        time.sleep(0.05)
    freed_after = time.monotonic() - closed
    assert _running() == 0, "the abandoned request still holds its slots"
    assert freed_after < 1.5, f"slots freed only after {freed_after:.2f} s"


def test_concurrent_requests_all_complete(client: openai.OpenAI, vllm_app: str) -> None:
    import concurrent.futures as cf

    def one(i: int) -> int:
        out = client.completions.create(
            model=vllm_app,
            prompt=f"Item {i}:",
            max_tokens=8,
            temperature=0,
            extra_body={"ignore_eos": True},
        )
        return out.usage.completion_tokens

    with cf.ThreadPoolExecutor(8) as pool:
        assert list(pool.map(one, range(8))) == [8] * 8
    assert _running() == 0


def test_latency_and_queue_metrics_are_exported_through_ray(
    client: openai.OpenAI, vllm_app: str
) -> None:
    from contracts import metrics as M

    long_prompt = " ".join(["the quick brown fox jumps over the lazy dog"] * 40)  # > 2 blocks
    client.completions.create(model=vllm_app, prompt="Hi", max_tokens=3)
    client.completions.create(model=vllm_app, prompt=long_prompt, max_tokens=3)
    stream = client.completions.create(model=vllm_app, prompt="Hi", max_tokens=4, stream=True)
    assert [c for c in stream if not c.choices] == []  # the usage the ingress asked for is gone
    kv_events = M.prom(M.ROUTER_KV_EVENTS)
    wanted = [
        kv_events,
        M.prom(M.ROUTER_DECISIONS),
        M.prom(M.ROUTER_PREDICTED_CACHED_TOKENS),
        M.prom(M.ENGINE_TTFT, "count"),
        M.prom(M.ENGINE_QUEUE, "count"),  # from the engine core's own timestamps
        M.prom(M.ENGINE_PREFILL, "count"),
        M.prom(M.ENGINE_E2E, "count"),
        M.prom(M.TTFT, "count"),  # the edge: streamed requests
        M.prom(M.ITL, "count"),
        M.prom(M.REQUESTS),
        M.prom(M.KV_USAGE),
        M.prom(M.WAITING),
        M.prom(M.CACHED_TOKENS),
        "ray_vllm_time_to_first_token_seconds_count",
    ]
    deadline = time.monotonic() + 45
    while True:
        text = httpx.get(f"http://127.0.0.1:{TEST_METRICS_PORT}/metrics", timeout=10).text
        missing = [w for w in wanted if w not in text]
        if not missing or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert not missing, missing
    ttft = [ln for ln in text.splitlines() if ln.startswith(M.prom(M.ENGINE_TTFT, "count"))]
    assert sum(float(ln.rsplit(" ", 1)[1]) for ln in ttft) >= 1
    answered = [
        ln
        for ln in text.splitlines()
        if ln.startswith(M.prom(M.REQUESTS)) and 'outcome="good"' in ln
    ]
    assert sum(float(ln.rsplit(" ", 1)[1]) for ln in answered) >= 1, answered
    # prefix-precise: the router applied the engine's BlockStored events to its index
    stored = [ln for ln in text.splitlines() if ln.startswith(kv_events) and 'kind="stored"' in ln]
    assert sum(float(ln.rsplit(" ", 1)[1]) for ln in stored) >= 1, stored
