"""The ingress app's own 404 / 405, without a fleet: OpenAI-shaped, and a trailing slash is
answered by name, not by FastAPI's empty-bodied 307 redirect (a client following it re-sends
the request)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from cluster.ingress import app


def test_a_trailing_slash_names_the_route_meant() -> None:
    client = TestClient(app)
    resp = client.post("/v1/completions/", json={"prompt": "hi"}, follow_redirects=False)
    assert resp.status_code == 404
    err = resp.json()["error"]
    assert err["code"] == "not_found"
    assert "did you mean /v1/completions" in err["message"]


def test_an_unknown_route_is_named() -> None:
    client = TestClient(app)
    resp = client.post("/v1/embeddings", json={})
    assert resp.status_code == 404
    err = resp.json()["error"]
    assert err["message"] == "no route POST /v1/embeddings"
    assert "did you mean" not in err["message"]


def test_a_wrong_method_is_405() -> None:
    client = TestClient(app)
    resp = client.get("/v1/completions")
    assert resp.status_code == 405
    assert resp.json()["error"]["code"] == "method_not_allowed"
