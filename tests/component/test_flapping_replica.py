"""Component: a replica that stays up but fails every request stops getting traffic.

The ingress's circuit breaker (``cluster/breaker.py``) charges each failure to its replica;
after ``threshold`` in a row the replica is avoided for ``open_s``. Through the real Serve
stack: one of two replicas is made to fail every request it accepts (fault injection, its
health check still passes, so Serve keeps it); the client sees at most a handful of clean
500s and then only answers from the healthy replica.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from cluster.breaker import CircuitBreaker
from cluster.ingress import REPLICA_HEADER
from tests.serve_fixtures import TEST_URL, delete_app, deploy_app

pytestmark = [pytest.mark.component]
MODEL = "smollm2-135m-instruct"
CONCURRENCY = 4
THRESHOLD = CircuitBreaker().threshold


@pytest.fixture
def two_replicas(ray_session: None) -> Iterator[None]:
    deploy_app(
        {
            "engine": {"type": "null", "null": {"step_s": 0.02}, "fault_injection": True},
            "replicas": {"num_replicas": 2, "num_cpus": 0.1, "health_check_period_s": 1.0},
            "routing": {"policy": "least-loaded", "stats_period_s": 0.2},
            "server": {"ingress_replicas": 1},
        },
        timeout_s=180,
    )
    yield
    delete_app()


async def _complete(c: httpx.AsyncClient, i: int) -> tuple[int, str, dict[str, object]]:
    body = {"model": MODEL, "prompt": f"request {i}", "max_tokens": 8, "ignore_eos": True}
    r = await c.post("/v1/completions", json=body)
    return r.status_code, r.headers.get(REPLICA_HEADER, ""), r.json()


async def _batches(c: httpx.AsyncClient, first: int, n: int) -> list[tuple[int, str, dict]]:
    out: list[tuple[int, str, dict]] = []
    for b in range(first, first + n, CONCURRENCY):  # concurrent: both replicas get traffic
        out += await asyncio.gather(*(_complete(c, b + k) for k in range(CONCURRENCY)))
    return out


async def test_a_failing_replica_is_avoided_after_a_few_failures(two_replicas: None) -> None:
    from ray import serve

    from cluster.app import APP_NAME, REPLICA_DEPLOYMENT

    async with httpx.AsyncClient(base_url=TEST_URL, timeout=60) as c:
        warm = await _batches(c, 0, 2 * CONCURRENCY)
        assert all(code == 200 for code, _, _ in warm), warm
        served_before = {rid for _, rid, _ in warm}
        handle = serve.get_deployment_handle(REPLICA_DEPLOYMENT, APP_NAME)
        bad = await handle.inject_fault.remote("fail")
        try:
            first = await _batches(c, 100, 40)  # ~20 would fail without the breaker
            then = await _batches(c, 200, 40)
        finally:
            await handle.inject_fault.remote("recover")  # the fixture's app goes anyway

    assert len(served_before) == 2, served_before  # least-loaded used both replicas
    assert bad in served_before, (served_before, bad)
    failed = [(code, body) for code, _, body in first if code != 200]
    # it took failures to open the breaker; requests already on their way may add a few
    assert 1 <= len(failed) <= THRESHOLD + CONCURRENCY - 1, failed
    assert all(code == 500 for code, _ in failed), failed
    assert all(body["error"]["code"] == "engine_error" for _, body in failed), failed  # type: ignore[index]
    assert all(rid != bad for code, rid, _ in first if code == 200)
    # then only the healthy replica answers, and every request succeeds
    assert [code for code, _, _ in then] == [200] * len(then), then
    assert {rid for _, rid, _ in then} == served_before - {bad}
