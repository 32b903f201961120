"""CORS on the ingress app (``cluster/cors.py``), in-process: off by default (a preflight is
405, no CORS header), and once origins are configured a preflight is answered and every
answer, errors included, carries ``Access-Control-Allow-Origin`` and exposes the rate-limit
headers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from cluster.config import FleetConfig
from cluster.ingress import CORS, app

APP_ORIGIN = "https://chat.example.com"
PREFLIGHT = {
    "origin": APP_ORIGIN,
    "access-control-request-method": "POST",
    "access-control-request-headers": "authorization,content-type",
}


@pytest.fixture
def client() -> Iterator[TestClient]:
    yield TestClient(app)
    CORS.configure([])


def test_off_by_default(client: TestClient) -> None:
    assert FleetConfig().server.cors_allowed_origins == []
    r = client.options("/v1/chat/completions", headers=PREFLIGHT)
    assert r.status_code == 405
    assert "access-control-allow-origin" not in r.headers
    r = client.post("/v1/embeddings", json={}, headers={"origin": APP_ORIGIN})
    assert "access-control-allow-origin" not in r.headers


def test_configured_origin_gets_preflight_and_headers_on_errors(client: TestClient) -> None:
    CORS.configure([APP_ORIGIN])
    r = client.options("/v1/chat/completions", headers=PREFLIGHT)
    assert r.status_code == 200
    assert r.headers["access-control-allow-origin"] == APP_ORIGIN
    assert "POST" in r.headers["access-control-allow-methods"]
    assert "authorization" in r.headers["access-control-allow-headers"].lower()
    r = client.post("/v1/embeddings", json={}, headers={"origin": APP_ORIGIN})
    assert r.status_code == 404  # an error the app must be able to read
    assert r.headers["access-control-allow-origin"] == APP_ORIGIN
    exposed = r.headers["access-control-expose-headers"].lower()
    assert "x-ratelimit-remaining-requests" in exposed
    assert "retry-after" in exposed
    other = client.options("/v1/chat/completions", headers={**PREFLIGHT, "origin": "https://x.io"})
    assert other.status_code == 400  # Starlette refuses a preflight from an origin not listed
    assert "access-control-allow-origin" not in other.headers


def test_any_origin(client: TestClient) -> None:
    CORS.configure(["*"])
    r = client.post("/v1/embeddings", json={}, headers={"origin": "https://x.io"})
    assert r.headers["access-control-allow-origin"] == "*"


@pytest.mark.parametrize("bad", ["https://chat.example.com/", "chat.example.com", "https://a/b"])
def test_an_origin_that_could_never_match_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="is not an origin"):
        FleetConfig.model_validate({"server": {"cors_allowed_origins": [bad]}})
