"""The ingress's limits on a request's HTTP envelope (``cluster/http_limits.py``), on
Starlette requests fed by a scripted ASGI ``receive``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from starlette.requests import Request

from cluster.http_limits import check_headers, read_body
from contracts.http import APIError

Message = dict[str, Any]


def _request(
    parts: list[bytes | float], headers: dict[str, str] | None = None, complete: bool = True
) -> tuple[Request, list[int]]:
    """A request whose body arrives as ``parts``: bytes are chunks, a float is a pause (s)
    before the next chunk; not ``complete``: the client stalls after the last part (never
    sends the rest). Returns the request and a one-item list counting ``receive`` calls."""
    calls = [0]
    queue = list(parts)

    async def receive() -> Message:
        calls[0] += 1
        while queue and isinstance(queue[0], float):
            await asyncio.sleep(queue.pop(0))
        if not queue:
            await asyncio.sleep(3600)  # a stalled upload
        chunk = queue.pop(0)
        assert isinstance(chunk, bytes)
        return {"type": "http.request", "body": chunk, "more_body": bool(queue) or not complete}

    raw = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    scope = {"type": "http", "method": "POST", "path": "/v1/completions", "headers": raw}
    recv: Callable[[], Awaitable[Message]] = receive
    return Request(scope, recv), calls


async def test_a_whole_body_is_returned() -> None:
    req, _ = _request([b'{"a":', 0.01, b" 1}"])
    assert await read_body(req, cap=1024, timeout_s=5) == b'{"a": 1}'


async def test_a_declared_length_over_the_cap_is_refused_before_reading() -> None:
    req, calls = _request([b"x" * 10], {"content-length": "2048"})
    with pytest.raises(APIError) as err:
        await read_body(req, cap=1024, timeout_s=5)
    assert (err.value.status, err.value.code) == (413, "request_too_large")
    assert calls[0] == 0


async def test_a_streamed_body_over_the_cap_is_refused_while_reading() -> None:
    req, _ = _request([b"x" * 600, b"x" * 600, b"x" * 600])
    with pytest.raises(APIError) as err:
        await read_body(req, cap=1024, timeout_s=5)
    assert err.value.status == 413


async def test_a_compressed_body_is_refused() -> None:
    req, calls = _request([b"\x1f\x8b"], {"content-encoding": "gzip"})
    with pytest.raises(APIError) as err:
        await read_body(req, cap=1024, timeout_s=5)
    assert (err.value.status, err.value.code) == (415, "unsupported_content_encoding")
    assert calls[0] == 0
    ok, _ = _request([b"{}"], {"content-encoding": "identity"})
    assert await read_body(ok, cap=1024, timeout_s=5) == b"{}"


async def test_a_stalled_upload_gets_408_at_the_deadline() -> None:
    """Found by hand: a client that declared more than it sent held its request (and its
    ingress slot) until it hung up; now it gets 408 when the deadline passes."""
    req, _ = _request([b'{"model": "m", '], {"content-length": "100"}, complete=False)
    t0 = time.monotonic()
    with pytest.raises(APIError) as err:
        await asyncio.wait_for(read_body(req, cap=1024, timeout_s=0.3), 5)  # fail, not hang
    took = time.monotonic() - t0
    assert (err.value.status, err.value.code) == (408, "request_timeout")
    assert "15 bytes received" in err.value.message
    assert err.value.headers.get("connection") == "close"
    assert 0.25 < took < 2.0


async def test_the_deadline_bounds_the_whole_body_not_each_chunk() -> None:
    """A trickle (a chunk every 0.1 s) still ends at the deadline: a per-read timeout would
    let it hold the request for as long as it keeps trickling."""
    req, _ = _request([b"x", 0.1] * 50 + [b"x"])
    t0 = time.monotonic()
    with pytest.raises(APIError) as err:
        await asyncio.wait_for(read_body(req, cap=1 << 20, timeout_s=0.5), 10)
    assert err.value.status == 408
    assert time.monotonic() - t0 < 2.0


def test_headers_over_the_cap_get_431() -> None:
    small, _ = _request([], {"authorization": "Bearer k"})
    check_headers(small, cap=1024)
    big, _ = _request([], {"x-big": "a" * 2000})
    with pytest.raises(APIError) as err:
        check_headers(big, cap=1024)
    assert (err.value.status, err.value.code) == (431, "request_header_fields_too_large")
