"""Component: body and header caps, a stalled upload, and load shedding before the 200 on one
simulated fleet (2 replicas × 4 slots, 8 queued at the one ingress) with a key file
(``guarded_fleet.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
import time

import httpx
import pytest

from experiments.chaos.overload import burst
from tests.component.guarded_fleet import BODY_TIMEOUT_S, KEYS, MODEL, auth, completion
from tests.serve_fixtures import TEST_URL, session_processes

pytestmark = [pytest.mark.component]


class StreamGaps:
    """Two streams read in their own threads, each gap between chunks kept with the time it
    ended: the test's own sending (building and writing a 64 MiB body) must not stall the
    clock that judges the server. Bounded: 300 tokens each, stopped when the block ends."""

    def __init__(self, n: int = 2) -> None:
        self.gaps: list[tuple[float, float]] = []  # (end, gap)
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._read, daemon=True) for _ in range(n)]
        self.started = threading.Barrier(n + 1)

    def _read(self) -> None:
        body = completion(max_tokens=300, stream=True, ignore_eos=True)
        with (
            httpx.Client(base_url=TEST_URL, headers=auth("admin"), timeout=60) as c,
            c.stream("POST", "/v1/completions", json=body) as r,
        ):
            last = time.monotonic()
            for i, _ in enumerate(r.iter_bytes()):
                now = time.monotonic()
                if i:  # the first gap is the TTFT
                    self.gaps.append((now, now - last))
                else:
                    self.started.wait(timeout=30)
                last = now
                if self._stop.is_set():
                    return

    def __enter__(self) -> StreamGaps:
        for t in self._threads:
            t.start()
        self.started.wait(timeout=30)  # both streams have their first token
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=60)


async def test_big_bodies_are_refused_fast_while_streams_flow(guarded_app: None) -> None:
    too_big = b"x" * (64 << 20)  # built before the streams: building is not the server's time
    too_long = json.dumps(completion(prompt="ab " * 2_600_000)).encode()
    headers = {**auth("admin"), "content-type": "application/json"}
    async with httpx.AsyncClient(base_url=TEST_URL, headers=headers, timeout=60) as c:
        with StreamGaps() as streams:
            await asyncio.sleep(1.0)
            t0 = time.monotonic()
            big = await c.post("/v1/completions", content=too_big)
            t1 = time.monotonic()
            long = await c.post("/v1/completions", content=too_long)
            t2 = time.monotonic()
            await asyncio.sleep(0.5)
    assert big.status_code == 413
    assert big.json()["error"]["code"] == "request_too_large"
    assert t1 - t0 < 1.0
    assert long.status_code == 400, long.text[:300]
    assert long.json()["error"]["code"] == "context_length_exceeded"
    gaps = streams.gaps
    assert len(gaps) > 20, gaps
    assert max(end for end, _ in gaps) > t2, "the streams ended before the big requests did"
    worst = sorted(gaps, key=lambda g: g[1])[-5:]
    when = [(f"{(end - t0) * 1000:+.0f} ms", f"{gap * 1000:.0f} ms") for end, gap in worst]
    assert max(g for _, g in gaps) < 0.25, (
        f"slowest gaps (end relative to the 64 MiB post; it took {(t1 - t0) * 1000:.0f} ms, "
        f"the 8 MiB prompt {(t2 - t1) * 1000:.0f} ms): {when}"
    )


def _busy_processes(window_s: float = 0.5) -> list[tuple[float, int, str]]:
    """The machine's busiest processes over ``window_s`` (CPU %, pid, command), for the
    timing assertion's message: on 2 cores a test's time is also whatever else runs."""
    import psutil

    procs = list(psutil.process_iter(["pid"]))
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.cpu_percent(None)
    time.sleep(window_s)
    out = []
    for p in procs:
        with contextlib.suppress(psutil.Error):
            out.append((p.cpu_percent(None), p.pid, " ".join(p.cmdline())[:60]))
    return sorted(out, reverse=True)[:6]


def _ingress_rss() -> int:
    procs = session_processes("OpenAIIngress")
    assert len(procs) == 1
    return int(procs[0].memory_info().rss)


async def _one(c: httpx.AsyncClient, max_tokens: int = 200) -> tuple[int, float, str, float]:
    """(status, seconds to the status line, Retry-After, seconds to the end of the body)."""
    t0 = time.monotonic()
    body = completion(max_tokens=max_tokens, stream=True, ignore_eos=True)
    async with c.stream("POST", "/v1/completions", json=body) as r:
        took = time.monotonic() - t0
        retry = r.headers.get("retry-after", "")
        async for _ in r.aiter_bytes():
            pass
    return r.status_code, took, retry, time.monotonic() - t0


async def test_overload_is_shed_before_the_200(guarded_app: None) -> None:
    """100 streams at once: at most 16 200s, and every other request a 429 decided at once:
    each 429 reaches the client before any admitted stream has ended, i.e. before any slot
    freed, so none waited in a queue. How fast that is (the issue's < 1 s) is a speed
    target measured in ``python -m experiments.chaos.overload``, side by side with the same
    burst of trivial requests: on 2 cores most of a 429's time is the path every answer
    takes (this client, Serve's proxy, the ingress's event loop)."""
    before = _ingress_rss()
    busy = _busy_processes()
    limits = httpx.Limits(max_connections=200)
    async with httpx.AsyncClient(
        base_url=TEST_URL, headers=auth("admin"), timeout=60, limits=limits
    ) as c:
        results = await asyncio.gather(*[_one(c) for _ in range(100)])
    ok = [r for r in results if r[0] == 200]
    shed = [r for r in results if r[0] != 200]
    assert 0 < len(ok) <= 16, sorted((round(t, 2), code) for code, t, _, _ in results)
    assert all(code == 429 and retry for code, _, retry, _ in shed), shed[:3]
    slowest = max(took for _, took, _, _ in shed)
    slot_freed = min(end for _, _, _, end in ok)
    if slowest >= slot_freed:  # say how long any answer took in such a burst on this machine
        floor = await burst(TEST_URL, "floor", 100, headers=auth("admin"))
        pytest.fail(
            f"slowest 429 {slowest:.2f} s, after the first admitted stream ended "
            f"({slot_freed:.2f} s): {sorted(round(t, 2) for _, t, _, _ in results)}; the same "
            f"burst of GET /v1/models took up to {max(t for _, t in floor):.2f} s; "
            f"load {os.getloadavg()}; busiest before the burst {busy}"
        )
    assert _ingress_rss() - before < 50 << 20
    await asyncio.sleep(2.5)  # > one status report period: every replica idle again
    rows = httpx.get(f"{TEST_URL}/fleet/status", headers=auth("admin"), timeout=30).json()
    fresh = [r for r in rows["replicas"] if time.time() - r["reported_at"] < 2.0]
    assert len(fresh) == 2, rows  # this app's two replicas (earlier apps' rows are stale)
    assert all(r["running"] == 0 and r["waiting"] == 0 for r in fresh), fresh


async def test_a_burst_that_fits_the_slots_and_the_queue_is_served_whole(
    guarded_app: None,
) -> None:
    """16 streams at once to 2 replicas × 4 slots with a queue of 8: all 16 fit, so all 16
    get their 200. Counting every request not yet accepted by a replica as queued refused
    7 of them (9 200s): 8 were on their way to free slots (``router/admission.py``)."""
    await asyncio.sleep(2.5)  # the overload test's streams are over; every slot is free
    async with httpx.AsyncClient(base_url=TEST_URL, headers=auth("admin"), timeout=60) as c:
        # 16 connections open first, so that the 16 requests leave within milliseconds
        await asyncio.gather(*[c.get("/v1/models") for _ in range(16)])
        results = await asyncio.gather(*[_one(c, max_tokens=32) for _ in range(16)])
    assert [code for code, _, _, _ in results] == [200] * 16, sorted(results)


def test_errors_are_openai_shaped(guarded_app: None) -> None:
    r = httpx.post(
        f"{TEST_URL}/v1/completions", content=b"{not json", headers=auth("user"), timeout=30
    )
    assert r.status_code == 400
    assert set(json.loads(r.text)["error"]) == {"message", "type", "param", "code"}


def test_oversized_headers_are_refused(guarded_app: None) -> None:
    headers = {**auth("user"), "x-padding": "a" * (128 << 10)}
    try:
        r = httpx.post(f"{TEST_URL}/v1/completions", json=completion(), headers=headers, timeout=30)
    except httpx.RemoteProtocolError:  # the server may drop the connection instead
        return
    assert r.status_code == 431, r.status_code
    assert r.json()["error"]["code"] == "request_header_fields_too_large"


def test_a_stalled_upload_gets_408_and_frees_its_request(guarded_app: None) -> None:
    """Found by hand: a client that declares more body than it sends held its request (and
    its ingress slot: Serve's max_ongoing_requests) for as long as it kept the connection
    open. Now the ingress answers 408 once ``server.body_timeout_s`` has passed."""
    import socket
    from urllib.parse import urlsplit

    url = urlsplit(TEST_URL)
    part = b'{"model": "' + MODEL.encode() + b'", "prompt": "hel'
    head = (
        "POST /v1/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        f"authorization: Bearer {KEYS['user']}\r\ncontent-length: {len(part) + 100}\r\n\r\n"
    ).encode()
    with socket.create_connection((url.hostname, url.port), timeout=BODY_TIMEOUT_S + 20) as s:
        t0 = time.monotonic()
        s.sendall(head + part)
        got = b""
        while b"\r\n\r\n" not in got or not got.rstrip().endswith(b"}"):
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
        took = time.monotonic() - t0
    head_text, _, body = got.partition(b"\r\n\r\n")
    assert head_text.startswith(b"HTTP/1.1 408"), got[:300]
    err = json.loads(body)["error"]
    assert err["code"] == "request_timeout"
    assert f"{len(part)} bytes received" in err["message"]
    assert BODY_TIMEOUT_S - 0.5 < took < BODY_TIMEOUT_S + 10, took
    r = httpx.post(f"{TEST_URL}/v1/completions", json=completion(), headers=auth("user"))
    assert r.status_code == 200
