"""Component: an engine that fails mid-stream leaves no hung request and no leaked slot."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from tests.serve_fixtures import TEST_URL, delete_app, deploy_app, replica_stats

pytestmark = [pytest.mark.component]
MODEL = "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def failing_app(ray_session: None) -> Iterator[None]:
    deploy_app(
        {
            "engine": {"type": "sim", "fail_after_tokens": 5, "sim": {"speed": 5.0}},
            "replicas": {"num_replicas": 1, "num_cpus": 0.1},
        },
        timeout_s=180,
    )
    yield
    delete_app()


def _idle() -> bool:
    return all(s["running"] == 0 and s["waiting"] == 0 for s in replica_stats())


def _complete(max_tokens: int) -> httpx.Response:
    body = {"model": MODEL, "prompt": "hello", "max_tokens": max_tokens, "ignore_eos": True}
    return httpx.post(f"{TEST_URL}/v1/completions", timeout=30, json=body)


def test_stream_failure_ends_stream_with_error_and_frees_slot(failing_app: None) -> None:
    body = {"model": MODEL, "prompt": "hello", "max_tokens": 50, "stream": True, "ignore_eos": True}
    with httpx.stream("POST", f"{TEST_URL}/v1/completions", json=body, timeout=30) as r:
        events = [ln[len("data: ") :] for ln in r.iter_lines() if ln.startswith("data: ")]
    assert events[-1] == "[DONE]"  # the client's loop ends as on any stream
    err = json.loads(events[-2])
    assert err["error"]["code"] == "stream_error"
    assert "Traceback" not in events[-2]
    assert sum("text_completion" in e for e in events) <= 5
    assert _idle()


def test_non_stream_failure_is_a_clean_500(failing_app: None) -> None:
    r = _complete(max_tokens=50)  # past the engine's injected failure
    assert r.status_code == 500
    assert r.json()["error"]["type"] == "server_error"
    assert "Traceback" not in r.text
    assert _idle()


def test_short_requests_still_succeed(failing_app: None) -> None:
    r = _complete(max_tokens=4)  # ends before it
    assert r.status_code == 200
    assert r.json()["usage"]["completion_tokens"] == 4
