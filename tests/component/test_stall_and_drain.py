"""Component: a hung engine is detected and replaced; a scale-down drains its streams.

Null engines (one token per running request per ``step_s``) make stream lengths exact.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest

from replicas.replica import PROBE_EVERY_S
from tests.serve_fixtures import TEST_URL, delete_app, deploy_app

pytestmark = [pytest.mark.component]
MODEL = "smollm2-135m-instruct"


def _fleet(replicas: int, step_s: float, **extra: Any) -> dict[str, Any]:
    return {
        "engine": {"type": "null", "null": {"step_s": step_s}, **extra},
        "replicas": {
            "num_replicas": replicas,
            "num_cpus": 0.1,
            "health_check_period_s": 1.0,
            "stall_timeout_s": 3.0,
            "drain_timeout_s": 120.0,
        },
        "routing": {"policy": "least-loaded", "stats_period_s": 0.2},
        "server": {"ingress_replicas": 1},
    }


async def _stream(c: httpx.AsyncClient, max_tokens: int) -> dict[str, Any]:
    body = {
        "model": MODEL,
        "prompt": "hello",
        "max_tokens": max_tokens,
        "stream": True,
        "ignore_eos": True,
    }
    events: list[str] = []
    async with c.stream("POST", "/v1/completions", json=body) as r:
        async for line in r.aiter_lines():
            if line.startswith("data: "):
                events.append(line[6:])
    parsed = [json.loads(e) for e in events if e != "[DONE]"]
    return {
        "status": r.status_code,
        "done": events[-1:] == ["[DONE]"],
        "errors": [e for e in parsed if "error" in e],
        "finish": [
            ch["finish_reason"]
            for e in parsed
            for ch in e.get("choices") or ()
            if ch.get("finish_reason")
        ],
    }


def _replica_ids() -> set[str]:
    r = httpx.get(f"{TEST_URL}/fleet/status", timeout=30).json()
    return {row["replica"] for row in r["replicas"]}


async def test_hung_engine_is_replaced_and_its_streams_end(ray_session: None) -> None:
    from ray import serve

    from cluster.app import APP_NAME, REPLICA_DEPLOYMENT

    deploy_app(_fleet(2, 0.02, fault_injection=True), timeout_s=180)
    try:
        async with httpx.AsyncClient(base_url=TEST_URL, timeout=120) as c:
            before = _replica_ids()
            streams = [asyncio.create_task(_stream(c, 600)) for _ in range(4)]
            await asyncio.sleep(1.0)
            handle = serve.get_deployment_handle(REPLICA_DEPLOYMENT, APP_NAME)
            await handle.inject_fault.remote("hang")
            t0 = time.monotonic()
            results = await asyncio.gather(*streams)
            ended_s = time.monotonic() - t0
            # every stream ends: migrated to the healthy replica, or with an in-band error
            assert all(r["status"] == 200 and r["done"] for r in results), results
            assert all(r["finish"] == ["length"] or r["errors"] for r in results), results
            assert ended_s < 30
            ok = await _stream(c, 5)  # new requests succeed meanwhile
            assert ok["finish"] == ["length"], ok
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and len(_replica_ids() - before) < 1:
                await asyncio.sleep(1.0)
            assert _replica_ids() - before, "the hung replica was not replaced"
            # an engine that hangs while idle: no stall to see, so the replica pings it
            # (every PROBE_EVERY_S); found by hand on vLLM, where such a replica passed
            # every health check and each request routed to it waited the stall timeout
            await handle.inject_fault.remote("hang")
            await asyncio.sleep(PROBE_EVERY_S + 3.0 + 1.0)  # a probe, its timeout, a report
            took = []
            for _ in range(8):
                t0 = time.monotonic()
                r = await _stream(c, 5)
                took.append(time.monotonic() - t0)
                assert r["finish"] == ["length"], r
            assert max(took) < 2.0, took  # none waited the 3-s stall timeout on it
    finally:
        delete_app()


async def test_a_dead_engine_core_fails_its_streams_over_at_once(ray_session: None) -> None:
    """Found by hand on vLLM: SIGKILL of a replica's engine core (the actor stays up) ended
    its 8 streams with vLLM's in-band "EngineCore encountered an issue", and the next
    request got a 500. Now the replica gives its requests up as soon as its engine is dead:
    the ingress migrates them. The stall timeout (60 s here) plays no part."""
    from ray import serve

    from cluster.app import APP_NAME, REPLICA_DEPLOYMENT

    cfg = _fleet(2, 0.02, fault_injection=True)
    cfg["replicas"]["stall_timeout_s"] = 60.0
    # Serve keeps routing to a replica until 3 health checks in a row failed: a long
    # period holds the dead replica in the set for the whole test (replacement is the hang
    # test's to show)
    cfg["replicas"]["health_check_period_s"] = 60.0
    deploy_app(cfg, timeout_s=180)
    try:
        async with httpx.AsyncClient(base_url=TEST_URL, timeout=120) as c:
            before = _replica_ids()
            streams = [asyncio.create_task(_stream(c, 300)) for _ in range(6)]  # ~6 s each
            await asyncio.sleep(1.0)
            handle = serve.get_deployment_handle(REPLICA_DEPLOYMENT, APP_NAME)
            dead = await handle.inject_fault.remote("die")
            assert dead in before
            t0 = time.monotonic()
            results = await asyncio.gather(*streams)
            ended_s = time.monotonic() - t0
            ok = await _stream(c, 5)
            # one after another, while the dead replica is still in Serve's set: it is the
            # least loaded (it holds nothing), yet none of these may end on it
            after = [await _stream(c, 5) for _ in range(8)]
            counters = (await c.get("/fleet/status")).json()["ingress"]
        assert all(r["status"] == 200 and r["done"] and not r["errors"] for r in results), results
        assert all(r["finish"] == ["length"] for r in results), results
        assert ended_s < 20, ended_s  # the streams' own length, not the stall timeout
        assert ok["finish"] == ["length"], ok
        assert [r["status"] for r in after] == [200] * 8, after
        assert counters["migrated"] >= 1, counters
        assert counters["failed"] == 0, counters
    finally:
        delete_app()


async def test_scale_down_drains_streams(ray_session: None) -> None:
    deploy_app(_fleet(3, 0.2), timeout_s=180)
    try:
        async with httpx.AsyncClient(
            base_url=TEST_URL, timeout=300, limits=httpx.Limits(max_connections=64)
        ) as c:
            streams = [asyncio.create_task(_stream(c, 300)) for _ in range(30)]  # ~60 s each
            await asyncio.sleep(5.0)
            await asyncio.to_thread(deploy_app, _fleet(1, 0.2), 180)
            results = await asyncio.gather(*streams)
        assert all(r["status"] == 200 and r["done"] and not r["errors"] for r in results), [
            r for r in results if r["errors"] or not r["done"]
        ][:3]
        assert all(r["finish"] == ["length"] for r in results)
    finally:
        delete_app()
