"""Component: API keys on every route, a browser app's CORS, stored responses refused, and
per-key quotas (requests and tokens a minute, concurrent streams) on one simulated fleet with a
key file (``guarded_fleet.py``; body caps and load shedding: test_limits_and_shedding.py).
"""

from __future__ import annotations

import httpx
import pytest

from tests.component.guarded_fleet import APP_ORIGIN, KEYS, MODEL, auth, completion
from tests.serve_fixtures import TEST_URL

pytestmark = [pytest.mark.component]


ROUTES = [
    ("GET", "/health", None),
    ("GET", "/v1/models", None),
    ("GET", f"/v1/models/{MODEL}", None),
    ("GET", "/openapi.json", None),
    ("GET", "/fleet/status", None),
    ("POST", "/v1/completions", completion()),
    (
        "POST",
        "/v1/chat/completions",
        {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
    ),
    ("POST", "/v1/responses", {"model": MODEL, "input": "hi"}),
    ("GET", "/v1/responses/resp_1", None),
    ("POST", "/v1/responses/resp_1/cancel", None),
    ("POST", "/tokenize", {"model": MODEL, "prompt": "hi"}),
    ("POST", "/detokenize", {"model": MODEL, "tokens": [1, 2]}),
]


@pytest.mark.parametrize("who", ["none", "wrong", "user", "admin"])
@pytest.mark.parametrize(("method", "path", "body"), ROUTES)
def test_every_route_by_key(
    guarded_app: None, method: str, path: str, body: object, who: str
) -> None:
    r = httpx.request(method, f"{TEST_URL}{path}", json=body, headers=auth(who), timeout=30)
    if path == "/health":
        assert r.status_code == 200
    elif who in ("none", "wrong"):
        assert r.status_code == 401, r.text
        assert r.json()["error"]["code"] == "invalid_api_key"
    elif path == "/fleet/status" and who == "user":
        assert r.status_code == 403
        assert r.json()["error"]["code"] == "insufficient_permissions"
    else:
        assert r.status_code not in (401, 403, 500), r.text


def test_retrieve_model_and_head_health(guarded_app: None) -> None:
    """OpenAI's "retrieve model" (vLLM has no such route: 404), and ``HEAD /health`` (was
    405) for load balancers' health checks."""
    import openai

    client = openai.OpenAI(base_url=f"{TEST_URL}/v1", api_key=KEYS["user"], max_retries=0)
    card = client.models.retrieve(MODEL)
    assert (card.id, card.object) == (MODEL, "model")
    with pytest.raises(openai.NotFoundError) as err:
        client.models.retrieve("gpt-4")
    assert err.value.code == "model_not_found"
    head = httpx.head(f"{TEST_URL}/health", timeout=30)
    assert (head.status_code, head.content) == (200, b"")


def test_a_browser_app_on_an_allowed_origin_can_call_and_read_refusals(
    guarded_app: None,
) -> None:
    """Through Serve's proxy: the preflight a browser sends before a POST with a key is
    answered, and the answers (a stream, a 401) carry the CORS headers, so the app can read
    them; another origin gets none (tests/unit/test_cors.py: the headers it exposes)."""
    origin = {"origin": APP_ORIGIN}
    pre = httpx.options(
        f"{TEST_URL}/v1/chat/completions",
        headers={**origin, "access-control-request-method": "POST",
                 "access-control-request-headers": "authorization,content-type"},
        timeout=30,
    )  # fmt: skip
    assert pre.status_code == 200, pre.text
    assert pre.headers["access-control-allow-origin"] == APP_ORIGIN
    url = f"{TEST_URL}/v1/completions"
    body = completion(stream=True)
    with httpx.stream("POST", url, json=body, headers={**origin, **auth("user")}) as r:
        assert r.status_code == 200
        assert r.headers["access-control-allow-origin"] == APP_ORIGIN
        assert list(r.iter_lines())[-2:] == ["data: [DONE]", ""]
    denied = httpx.post(url, json=completion(), headers={**origin, **auth("wrong")})
    assert denied.status_code == 401
    assert denied.headers["access-control-allow-origin"] == APP_ORIGIN
    other = httpx.post(url, json=completion(), headers={"origin": "https://x.io", **auth("user")})
    assert other.status_code == 200
    assert "access-control-allow-origin" not in other.headers


def test_stored_responses_are_refused_for_what_they_are(guarded_app: None) -> None:
    """Found by hand with the OpenAI SDK on vLLM: ``previous_response_id`` of a response the
    server had just returned got 404 "Response with id … not found", ``background`` a 400
    naming a vLLM environment variable, retrieve / delete / cancel FastAPI's bare "Not
    Found". The fleet stores no responses, and each answer says so."""
    import openai

    client = openai.OpenAI(base_url=f"{TEST_URL}/v1", api_key=KEYS["user"], max_retries=0)
    first = "resp_8e754f3b7d6cb812"  # (this fleet's null engine has no /v1/responses)
    with pytest.raises(openai.BadRequestError) as bad:
        client.responses.create(model=MODEL, input="again", previous_response_id=first)
    assert bad.value.body["param"] == "previous_response_id"  # type: ignore[index]
    assert "stores no responses" in bad.value.message
    with pytest.raises(openai.BadRequestError) as bad:
        client.responses.create(model=MODEL, input="hi", background=True)
    assert bad.value.body["param"] == "background"  # type: ignore[index]
    for call in (client.responses.retrieve, client.responses.delete, client.responses.cancel):
        with pytest.raises(openai.NotFoundError) as missing:
            call(first)
        assert "stores no responses" in missing.value.message


def test_requests_per_minute_quota(guarded_app: None) -> None:
    codes = []
    for _ in range(4):
        r = httpx.post(
            f"{TEST_URL}/v1/completions", json=completion(), headers=auth("rpm"), timeout=30
        )
        codes.append(r.status_code)
    assert codes == [200, 200, 200, 429]
    assert r.json()["error"]["code"] == "rate_limit_exceeded"
    assert int(r.headers["retry-after"]) >= 1
    assert r.headers["x-ratelimit-limit-requests"] == "3"
    assert r.headers["x-ratelimit-remaining-requests"] == "0"
    ok = httpx.post(
        f"{TEST_URL}/v1/completions", json=completion(), headers=auth("user"), timeout=30
    )
    assert ok.status_code == 200  # another key is unaffected


def test_tokens_are_charged_for_generation_only(guarded_app: None) -> None:
    """A request the engine refuses, and a route that generates nothing, cost no tokens
    (they still count as requests). Found by hand: every 4xx was charged its prompt plus
    ``max_tokens``, and ``/tokenize`` the default ``max_tokens`` (256), so a key with 100
    tokens a minute could never call it ("Request too large")."""
    url = f"{TEST_URL}/v1/completions"
    for _ in range(4):  # 4 x (3 + 60) charged would be far above 100
        bad = httpx.post(url, json=completion(max_tokens=60, temperature=-1),
                         headers=auth("tpm"), timeout=30)  # fmt: skip
        assert bad.status_code == 400, bad.text
    for _ in range(3):
        r = httpx.post(f"{TEST_URL}/tokenize", json={"model": MODEL, "prompt": "hi"},
                       headers=auth("tpm"), timeout=30)  # fmt: skip
        assert r.status_code != 429, r.text  # the simulated engine has no /tokenize (404)
    ok = httpx.post(url, json=completion(max_tokens=60), headers=auth("tpm"), timeout=30)
    assert ok.status_code == 200, ok.text


def test_concurrent_streams_quota(guarded_app: None) -> None:
    body = completion(max_tokens=60, stream=True, ignore_eos=True)
    url = f"{TEST_URL}/v1/completions"
    with httpx.stream("POST", url, json=body, headers=auth("streams"), timeout=30) as first:
        assert first.status_code == 200
        second = httpx.post(url, json=completion(), headers=auth("streams"), timeout=30)
        assert second.status_code == 429
        assert second.headers["retry-after"] == "1"
    assert (
        httpx.post(url, json=completion(), headers=auth("streams"), timeout=30).status_code == 200
    )
