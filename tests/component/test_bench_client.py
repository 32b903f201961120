"""The generator against a local SSE server on 127.0.0.1: success paths and every failure
kind (server down, HTTP 500, stream cut, stall → timeout, error event), plus the runner's
scheduling bounds."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from bench import client
from bench.datasets import build_requests
from bench.report import peak_concurrency
from bench.runner import LoadPlan, run_load
from bench.types import RequestSpec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.fakes import closed_port, sse_server

SPEC = RequestSpec(index=0, prompt_token_ids=(11, 12, 13), output_tokens=3)


def _target(port: int, **kw) -> client.Target:
    return client.Target(f"http://127.0.0.1:{port}", "stub-model", **kw)


async def _send(target: client.Target, spec: RequestSpec = SPEC, prompt=None):
    body = client.build_payload(target, spec, prompt if prompt is not None else [11, 12, 13])
    async with aiohttp.ClientSession() as session:
        return await client.send(
            session, target, spec, body, intended_s=0.0, t0=time.perf_counter()
        )


async def test_completions_stream_uses_usage_counts() -> None:
    async with sse_server(chunks=5, delay_s=0.01) as srv:
        rec = await _send(_target(srv.port))
        body = srv.bodies[0]
    assert rec.error is None
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["prompt"] == [11, 12, 13]
    assert body["max_tokens"] == 3
    assert body["ignore_eos"]
    assert rec.output_tokens == 3
    assert rec.prompt_tokens == 3
    assert len(rec.token_times_s) == 3
    assert rec.replica == "stub-0"
    assert 0 < rec.ttft_s < rec.e2e_s
    gaps = [b - a for a, b in zip(rec.token_times_s, rec.token_times_s[1:], strict=False)]
    assert all(g >= 0.008 for g in gaps)


async def test_chat_endpoint() -> None:
    async with sse_server(chunks=2) as srv:
        rec = await _send(_target(srv.port, endpoint="chat"), prompt="hello there")
        body = srv.bodies[0]
    assert rec.error is None
    assert rec.output_tokens == 2
    assert len(rec.token_times_s) == 2
    assert body["messages"] == [{"role": "user", "content": "hello there"}]


async def test_missing_usage_falls_back_to_chunks() -> None:
    async with sse_server(mode="nousage", chunks=2) as srv:
        rec = await _send(_target(srv.port))
    assert rec.error is None
    assert rec.output_tokens == 2


@pytest.mark.parametrize(
    ("mode", "kind"),
    [("http500", "http_500"), ("cut", "stream_cut"), ("error_event", "server_error")],
)
async def test_failures_by_kind(mode: str, kind: str) -> None:
    async with sse_server(mode=mode, chunks=4) as srv:
        rec = await _send(_target(srv.port, timeout_s=5.0))
    assert rec.error == kind
    assert rec.e2e_s is None


async def test_server_down() -> None:
    t = time.monotonic()
    rec = await _send(_target(closed_port(), timeout_s=5.0))
    assert rec.error == "connect_error"
    assert time.monotonic() - t < 2


async def test_stall_times_out() -> None:
    async with sse_server(mode="stall") as srv:
        t = time.monotonic()
        rec = await _send(_target(srv.port, timeout_s=0.3))
    assert rec.error == "timeout"
    assert 0.25 < time.monotonic() - t < 2


def _payload(target: client.Target):
    return lambda spec: client.build_payload(target, spec, list(spec.prompt_token_ids))


async def test_multi_turn_waits_for_previous_turn() -> None:
    specs = build_requests("multi-turn:sessions=2,turns=3,system=8,question=4,output=3")
    async with sse_server(chunks=3, delay_s=0.02) as srv:
        target = _target(srv.port)
        plan = LoadPlan(offsets=[0.0] * len(specs), duration_s=10)
        out = await run_load(specs, plan, target, _payload(target))
    assert [r.error for r in out.records] == [None] * 6
    by_index = {r.index: r for r in out.records}
    for s in specs:
        later = [t for t in specs if t.session_id == s.session_id and t.index > s.index]
        if later:
            nxt, cur = by_index[later[0].index], by_index[s.index]
            assert nxt.send_s >= cur.send_s + cur.e2e_s - 1e-6


async def test_closed_loop_and_cap_limit_concurrency() -> None:
    specs = build_requests("random:input=5,output=3", num_requests=8)
    async with sse_server(chunks=3, delay_s=0.02) as srv:
        target = _target(srv.port)
        closed = await run_load(
            specs, LoadPlan(concurrency=2, duration_s=10), target, _payload(target)
        )
        capped = await run_load(
            specs,
            LoadPlan(offsets=[0.0] * 8, max_concurrency=3, duration_s=10),
            target,
            _payload(target),
        )
    for out, cap in ((closed, 2), (capped, 3)):
        assert len(out.records) == 8
        assert all(r.error is None for r in out.records)
        assert peak_concurrency(out.records) <= cap
    assert max(r.send_s - r.intended_send_s for r in capped.records) > 0.04  # waited for cap


async def test_duration_bounds_the_run() -> None:
    specs = build_requests("random:input=5,output=2", num_requests=1000)
    async with sse_server(chunks=2) as srv:
        target = _target(srv.port)
        plan = LoadPlan(offsets=[i / 100 for i in range(1000)], duration_s=0.3)
        t = time.monotonic()
        out = await run_load(specs, plan, target, _payload(target))
    assert time.monotonic() - t < 2
    assert 25 <= len(out.records) <= 30
    assert not out.interrupted


async def test_stop_keeps_measured_records() -> None:
    specs = build_requests("random:input=5,output=2", num_requests=4)
    stop = asyncio.Event()
    async with sse_server(mode="stall") as srv:
        target = _target(srv.port, timeout_s=30)
        plan = LoadPlan(offsets=[0.0, 0.0, 0.0, 5.0], duration_s=60)
        asyncio.get_running_loop().call_later(0.3, stop.set)
        t = time.monotonic()
        out = await run_load(specs, plan, target, _payload(target), stop=stop)
    assert time.monotonic() - t < 2
    assert out.interrupted
    assert [r.error for r in out.records] == ["cancelled"] * 3
