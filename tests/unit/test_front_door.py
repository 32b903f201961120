"""The front door (``cluster/front_door.py``) against a scripted upstream standing in for Serve's
proxy: what it resends, how it continues a cut stream, what it refuses itself."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from aiohttp import web

from cluster.front_door import DoorSettings, serve
from cluster.migration import RESUME_FIELD, RESUME_HEADER

CHAT = "/v1/chat/completions"
pytestmark = pytest.mark.asyncio(loop_scope="session")  # the fixture's loop


def _event(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _chunk(text: str, finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": {"content": text}, "finish_reason": finish}
    return _event({"id": "chatcmpl-1", "created": 7, "model": "m", "choices": [choice]})


class Upstream:
    """Answers each request with the next script in ``scripts`` and records what it got."""

    def __init__(self, scripts: list[Callable[[web.Request], Any]]) -> None:
        self.scripts = scripts
        self.seen: list[tuple[dict[str, str], bytes]] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.seen.append((dict(request.headers), await request.read()))
        return await self.scripts.pop(0)(request)


async def plain_500(_: web.Request) -> web.Response:
    return web.Response(status=500, text="Internal Server Error")


async def json_500(_: web.Request) -> web.Response:
    return web.json_response({"error": {"message": "x", "code": "engine_error"}}, status=500)


async def ok_json(_: web.Request) -> web.Response:
    return web.json_response({"ok": True}, headers={"x-ratelimit-remaining-requests": "9"})


def stream(events: list[bytes], *, cut: bytes | None = None) -> Callable[..., Any]:
    """A 200 stream of ``events``; with ``cut``, those bytes (half an event) and then the
    connection dropped without the chunked body's end, as a dying ingress leaves it."""

    async def script(request: web.Request) -> web.StreamResponse:
        out = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await out.prepare(request)
        for e in events:
            await out.write(e)
        if cut is None:
            await out.write_eof()
            return out
        await out.write(cut)
        assert request.transport is not None
        request.transport.abort()
        return out

    return script


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
async def door() -> AsyncIterator[Callable[..., Any]]:
    runners: list[web.AppRunner] = []

    async def make(up: Upstream, **kw: Any) -> tuple[str, Any]:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", up.handle)
        ur = web.AppRunner(app)
        await ur.setup()
        port = _free_port()
        await web.TCPSite(ur, "127.0.0.1", port).start()
        s = DoorSettings(upstream=f"http://127.0.0.1:{port}", backoff_s=0.01, **kw)
        dport = _free_port()
        dr, d = await serve(s, "127.0.0.1", dport)
        runners.extend([ur, dr])
        return f"http://127.0.0.1:{dport}", d

    yield make
    for r in runners:
        await r.cleanup()


def _body(**kw: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], **kw}


async def _post(url: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=10) as c:
        return await c.post(url + CHAT, json=body, headers=headers)


async def test_a_stream_cut_mid_event_continues_from_what_the_client_got(door: Any) -> None:
    first = [_chunk("Hel"), _chunk("lo")]
    rest = [_chunk(" world", "length"), b"data: [DONE]\n\n"]
    up = Upstream([stream(first, cut=b'data: {"id": "chatcmpl-1", "cho'), stream(rest)])
    url, d = await door(up)
    r = await _post(url, _body(stream=True, max_tokens=3), authorization="Bearer k")
    assert r.status_code == 200
    # the half event never reached the client; the continuation's events follow whole
    assert r.content == b"".join(first + rest)
    headers, sent = up.seen[1]
    assert headers[RESUME_HEADER] == "1"
    assert headers["Authorization"] == "Bearer k"
    mark = json.loads(sent)[RESUME_FIELD]
    assert mark == {
        "text": "Hello",
        "id": "chatcmpl-1",
        "created": 7,
        "model": "m",
        "finished": False,
        "usage_seen": False,
    }
    assert d.counters.resumed == 1
    assert d.counters.cut == 0


async def test_a_stream_that_cannot_migrate_ends_with_an_error_event_and_done(door: Any) -> None:
    up = Upstream([stream([_chunk("a")], cut=b"")])
    url, d = await door(up)
    r = await _post(url, _body(stream=True, n=2))
    lines = [ln for ln in r.text.split("\n\n") if ln]
    assert json.loads(lines[-2][6:])["error"]["code"] == "stream_error"
    assert lines[-1] == "data: [DONE]"
    assert len(up.seen) == 1
    assert d.counters.cut == 1


async def test_resumes_are_bounded_then_the_stream_ends_in_band(door: Any) -> None:
    cut = stream([_chunk("a")], cut=b"")
    up = Upstream([cut, stream([_chunk("b")], cut=b""), stream([_chunk("c")], cut=b"")])
    url, d = await door(up, resume_attempts=2)
    r = await _post(url, _body(stream=True))
    assert r.text.endswith("data: [DONE]\n\n")
    assert '"stream_error"' in r.text
    assert len(up.seen) == 3
    assert d.counters.resumed == 2
    assert d.counters.cut == 1


async def test_a_continuation_refused_for_quota_is_tried_again_after_retry_after(
    door: Any,
) -> None:
    async def busy(_: web.Request) -> web.Response:
        body = {"error": {"message": "too many streams", "code": "rate_limit_exceeded"}}
        return web.json_response(body, status=429, headers={"retry-after": "0.1"})

    cut = stream([_chunk("a")], cut=b"")
    up = Upstream([cut, busy, busy, stream([_chunk("b", "length"), b"data: [DONE]\n\n"])])
    url, d = await door(up)
    r = await _post(url, _body(stream=True))
    assert r.text.endswith("data: [DONE]\n\n")
    assert "error" not in r.text
    assert len(up.seen) == 4
    up = Upstream([cut, busy, busy])
    url, d = await door(up, resume_wait_s=0.15)  # waits 0.1 s once, not twice
    r = await _post(url, _body(stream=True))
    assert '"stream_error"' in r.text
    assert d.counters.cut == 1


async def test_a_plain_5xx_before_any_byte_is_resent_the_fleets_own_is_not(door: Any) -> None:
    up = Upstream([plain_500, plain_500, ok_json])
    url, d = await door(up)
    r = await _post(url, _body())
    assert r.status_code == 200
    assert r.json() == {"ok": True}
    assert r.headers["x-ratelimit-remaining-requests"] == "9"
    assert d.counters.retried == 2
    up = Upstream([json_500, ok_json])
    url, d = await door(up)
    r = await _post(url, _body())
    assert r.status_code == 500
    assert r.json()["error"]["code"] == "engine_error"
    assert d.counters.retried == 0


async def test_no_upstream_is_a_json_503_after_the_resends(door: Any) -> None:
    up = Upstream([])
    url, d = await door(up, retry_attempts=2)
    d.s.upstream = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    r = await _post(url, _body())
    assert r.status_code == 503
    assert r.headers["retry-after"] == "1"
    assert r.json()["error"]["code"] == "service_unavailable"
    assert d.counters.retried == 2


async def test_an_oversized_body_is_refused_before_anything_is_forwarded(door: Any) -> None:
    up = Upstream([ok_json])
    url, _ = await door(up, max_body_bytes=1000)
    r = await _post(url, _body(x="y" * 2000))
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "request_too_large"
    assert up.seen == []


async def test_a_clients_own_resume_header_goes_no_further(door: Any) -> None:
    up = Upstream([ok_json])
    url, _ = await door(up)
    await _post(url, _body(), **{RESUME_HEADER: "1"})
    assert RESUME_HEADER not in {k.lower() for k in up.seen[0][0]}


async def test_a_client_that_goes_away_ends_the_upstream_stream(door: Any) -> None:
    ended = asyncio.Event()

    async def endless(request: web.Request) -> web.StreamResponse:
        out = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await out.prepare(request)
        try:
            for _ in range(200):  # 10 s at most
                await out.write(_chunk("x"))
                await asyncio.sleep(0.05)
        except (ConnectionError, asyncio.CancelledError):
            ended.set()
            raise
        return out

    url, _ = await door(Upstream([endless]))
    async with (
        httpx.AsyncClient(timeout=10) as c,
        c.stream("POST", url + CHAT, json=_body(stream=True)) as r,
    ):
        async for _ in r.aiter_bytes():
            break  # the first event arrived: leave
    await asyncio.wait_for(ended.wait(), timeout=2.0)
