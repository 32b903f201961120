"""The front door (``server.ingress: resume``): an HTTP relay in front of Serve's proxy that
keeps what each stream has sent, so that a stream whose ingress replica dies goes on.

::

    client ─► front door ─► Serve's proxy (127.0.0.1, port + 100) ─► OpenAIIngress ─► LLMReplica
               │ keeps the events it passed on (StreamLog)
               └ the upstream ends without [DONE]: POST the same body + {"llmfleet_resume":
                 the text streamed, id, created, model} → another ingress continues it

Why: the ingress relays every stream, and Serve's proxy does not resend a request whose
ingress replica died — it cuts the streams that ingress was relaying and answers the
requests just handed to it with a plain-text 500 (``docs/results/chaos.md``). The relay's
own migration (``cluster/relay.py``) covers a dead engine replica; this covers a dead
ingress, one hop further out, with the same continuation (``cluster/migration.py``):

- Before any byte reached the client, a connection error or a 5xx that is not the
  fleet's own (not JSON or SSE: Serve's proxy's) is sent again, ``retry_attempts`` times
  with a growing pause. Generation is safe to repeat; a repeat costs engine work only.
- After its 200, a migratable stream that ends without ``[DONE]`` is continued, up to
  ``resume_attempts`` times (a continuation refused with 429 — the key's stream slots,
  still counted for the dead ingress — is tried again after ``Retry-After``, up to
  ``resume_wait_s``). The ingress builds the continuation (it has the tokenizer
  that counts the tokens already streamed) and rewrites its events to the stream's id,
  so the client sees one stream. Any other stream cut ends with an in-band error and
  ``[DONE]``, never a bare close.
- Only whole SSE events are passed on, so a cut never leaves half an event at the client.

Cost: one more local HTTP hop per request and per streamed chunk (``make bench-overhead``
measures it beside ``proxy``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

from cluster.http_limits import too_large, too_slow
from cluster.migration import (
    DONE_EVENT,
    RESUME_FIELD,
    RESUME_HEADER,
    StreamLog,
    echo_prefix,
    migratable,
)
from contracts.http import JSON, SSE, APIError

log = logging.getLogger("llmfleet.front_door")

HOP_BY_HOP = frozenset(
    (
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "date",
        "server",
    )
)


@dataclass
class DoorSettings:
    upstream: str  # Serve's proxy, e.g. "http://127.0.0.1:8100"
    max_body_bytes: int = 8 << 20  # as the ingress's: 413 before forwarding anything
    max_header_bytes: int = 64 << 10
    body_timeout_s: float = 60.0
    retry_attempts: int = 3  # resends before the first byte
    resume_attempts: int = 2  # continuations after it
    backoff_s: float = 0.1  # first pause between resends; doubles
    resume_wait_s: float = 8.0  # a continuation refused with 429 is tried again this long


@dataclass
class DoorCounters:
    retried: int = 0  # sent again before any byte reached the client
    resumed: int = 0  # streams continued after their upstream was cut
    cut: int = 0  # streams ended with an in-band error (not resumable, or out of attempts)


class FrontDoor:
    def __init__(self, s: DoorSettings) -> None:
        self.s = s
        self.counters = DoorCounters()
        self._session: aiohttp.ClientSession | None = None

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, force_close=False),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=5.0),
                auto_decompress=False,
                skip_auto_headers=("User-Agent", "Accept-Encoding", "Content-Type"),
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.s.max_body_bytes + 1)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        app.on_cleanup.append(lambda _: self.close())
        return app

    async def handle(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await self._read_body(request)
        except APIError as err:
            return _error(err)
        headers = _forward_headers(request.headers)
        path = request.rel_url.path_qs
        try:
            resp = await self._open(request.method, path, headers, body)
        except APIError as err:
            return _error(err)
        try:
            if resp.status == 200 and resp.content_type == SSE:
                return await self._stream(request, resp, headers, body)
            return web.Response(
                body=resp.data, status=resp.status, headers=_answer_headers(resp.headers)
            )
        finally:
            resp.close()

    async def _read_body(self, request: web.Request) -> bytes:
        """As the ingress reads it (``cluster/http_limits.py``), with its answers."""
        cap = self.s.max_body_bytes
        if request.content_length is not None and request.content_length > cap:
            raise too_large(cap)
        buf = bytearray()
        try:
            async with asyncio.timeout(self.s.body_timeout_s):
                async for chunk in request.content.iter_any():
                    buf += chunk
                    if len(buf) > cap:
                        raise too_large(cap)
        except TimeoutError:
            raise too_slow(self.s.body_timeout_s, len(buf)) from None
        return bytes(buf)

    async def _open(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> _Upstream:
        """The upstream's answer: its head, and its whole body unless it is a stream.
        Resent while nothing has reached the client and the failure is not the fleet's own
        answer."""
        attempt = 0
        while True:
            try:
                up = await self.session().request(
                    method, self.s.upstream + path, headers=headers, data=body or None,
                    allow_redirects=False,
                )  # fmt: skip
                if up.status == 200 and up.content_type == SSE:
                    return _Upstream(up, b"")
                data = await up.read()
                ours = up.content_type in (JSON, SSE)
                if up.status < 500 or ours or attempt >= self.s.retry_attempts:
                    return _Upstream(up, data)
                up.close()
                why = f"HTTP {up.status} {data[:80]!r}"
            except (aiohttp.ClientError, ConnectionError) as err:
                if attempt >= self.s.retry_attempts:
                    raise APIError(
                        503,
                        "no ingress replica answered; retry shortly",
                        type="server_error",
                        code="service_unavailable",
                        headers={"retry-after": "1"},
                    ) from None
                why = repr(err)
            attempt += 1
            self.counters.retried += 1
            log.warning("upstream failed before any byte (%s); resending (%d)", why, attempt)
            await asyncio.sleep(self.s.backoff_s * 2 ** (attempt - 1))

    async def _stream(
        self, request: web.Request, up: _Upstream, headers: dict[str, str], body: bytes
    ) -> web.StreamResponse:
        out = web.StreamResponse(status=200, headers=_answer_headers(up.resp.headers))
        await out.prepare(request)
        path = request.rel_url.path
        parsed = _json(body)
        slog = None
        if parsed is not None and migratable(path, parsed):
            slog = StreamLog(path, echo=echo_prefix(path, parsed) or "")
        budget = self.s.resume_attempts
        try:
            while await _pump(up, out, slog):
                up.close()
                nxt = None
                if slog is not None and budget > 0:
                    budget -= 1
                    slog.fold()
                    nxt = await self._resume(request.method, request.rel_url.path_qs, headers,
                                             parsed, slog)  # fmt: skip
                if nxt is None:  # not resumable, out of attempts, or refused
                    self.counters.cut += 1
                    await out.write(cut_event())
                    break
                self.counters.resumed += 1
                up = nxt
        finally:
            up.close()  # the client went away: so does the upstream request
        await out.write_eof()
        return out

    async def _resume(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        body: Any,
        slog: StreamLog,
    ) -> _Upstream | None:
        """The continuation of a cut stream (a stream again), or None if it was refused."""
        log.warning("stream %s cut after %d chars; resuming", slog.id, len(slog.generated))
        ask = {
            **body,
            RESUME_FIELD: {
                "text": slog.generated,
                "id": slog.id,
                "created": slog.created,
                "model": slog.model,
                "finished": slog.finished,
                "usage_seen": slog.usage_seen,
            },
        }
        data = json.dumps(ask, separators=(",", ":")).encode()
        waited = 0.0
        while True:
            try:
                up = await self._open(method, path, {**headers, RESUME_HEADER: "1"}, data)
            except APIError:
                return None
            if up.resp.status == 200 and up.resp.content_type == SSE:
                return up
            up.close()
            pause = _retry_after(up) if up.resp.status == 429 else None
            if pause is None or waited + pause > self.s.resume_wait_s:
                log.warning("resume refused: HTTP %d %r", up.resp.status, up.data[:200])
                return None
            waited += pause  # e.g. the dead ingress's stream slots, freed 5 s after it died
            await asyncio.sleep(pause)


@dataclass
class _Upstream:
    resp: aiohttp.ClientResponse
    data: bytes  # the whole body, unless a stream

    @property
    def status(self) -> int:
        return self.resp.status

    @property
    def content_type(self) -> str:
        return self.resp.content_type

    @property
    def headers(self) -> Any:
        return self.resp.headers

    def close(self) -> None:
        self.resp.close()


async def _pump(up: _Upstream, out: web.StreamResponse, slog: StreamLog | None) -> bool:
    """Pass the upstream's whole SSE events on until it ends; True when it was cut: it
    failed before ``[DONE]``, or a stream that always ends with ``[DONE]`` (a migratable
    one) ended without it. The client's going away raises (from ``out.write``)."""
    tail = b""
    done = False
    chunks = up.resp.content.iter_any().__aiter__()
    while True:
        try:
            chunk = await chunks.__anext__()
        except StopAsyncIteration:
            return not done and slog is not None
        except (aiohttp.ClientError, ConnectionError):
            return not done
        tail += chunk
        cut = tail.rfind(b"\n\n")
        if cut < 0:
            continue
        whole, tail = tail[: cut + 2], tail[cut + 2 :]
        if slog is not None:
            slog.add(whole)
        done = done or DONE_EVENT in whole
        await out.write(whole)


def _retry_after(up: _Upstream) -> float | None:
    try:
        return max(0.05, float(up.headers.get("retry-after", "1")))
    except ValueError:
        return None


def cut_event() -> bytes:
    err = APIError(
        500, "the stream's ingress failed mid-stream", type="server_error", code="stream_error"
    )
    return f"data: {json.dumps(err.body())}\n\n".encode() + DONE_EVENT


def _json(body: bytes) -> Any:
    with contextlib.suppress(ValueError):
        parsed = json.loads(body)
        return parsed if isinstance(parsed, dict) else None
    return None


def _forward_headers(headers: Any) -> dict[str, str]:
    # a client's own x-llmfleet-resume goes no further: only the front door continues a stream
    drop = HOP_BY_HOP | {RESUME_HEADER}
    return {k: v for k, v in headers.items() if k.lower() not in drop}


def _answer_headers(headers: Any) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.lower() not in HOP_BY_HOP}


def _error(err: APIError) -> web.Response:
    return web.json_response(err.body(), status=err.status, headers=err.headers or None)


async def serve(s: DoorSettings, host: str, port: int) -> tuple[web.AppRunner, FrontDoor]:
    """Start listening on ``host:port``; the caller keeps the loop running."""
    door = FrontDoor(s)
    runner = web.AppRunner(
        door.app(),
        handler_cancellation=True,  # a client that goes away cancels its upstream request
        access_log=None,
        max_field_size=s.max_header_bytes,  # the ingress answers 431 on the whole set
        max_line_size=s.max_header_bytes,
    )
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    await site.start()
    return runner, door
