"""Component: a key's quota holds fleet-wide with two ingress replicas, which share their
use (``cluster/quota_sync.py``): each enforces the whole limit against the fleet's use.

Tolerance (``cluster/quotas.py``): the fleet can exceed a per-minute limit only by what
another replica admitted within one sync delay (milliseconds); these requests are one at a
time, so the limit is met exactly, and no request is refused while the fleet has room (the
old split, limit/2 per replica, refused early whenever the proxy's spread was uneven).
Concurrency slots are granted by the status actor, so a burst gets exactly its limit too.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cluster.keys import KeyLimits, add_key
from contracts import metrics as M
from tests.serve_fixtures import (
    TEST_METRICS_PORT,
    TEST_URL,
    delete_app,
    deploy_app,
    session_processes,
)

pytestmark = [pytest.mark.component]
MODEL = "smollm2-135m-instruct"
LIMIT = 10


KEY_FILE: list[Path] = []
STREAMS_KEY: list[str] = []
STREAMS = 3
BURST_KEY: list[str] = []
BURST_STREAMS = 4
TPM_KEY: list[str] = []
ADMIN_KEY: list[str] = []
TPM = 1000  # the split gave each of 2 replicas 500: an 800-token request never passed


@pytest.fixture(scope="module")
def key(ray_session: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = Path(tmp_path_factory.mktemp("keys")) / "keys.yaml"
    KEY_FILE.append(path)
    secret = add_key(path, "capped", limits=KeyLimits(requests_per_min=LIMIT))
    STREAMS_KEY.append(add_key(path, "three-streams", limits=KeyLimits(max_streams=STREAMS)))
    TPM_KEY.append(add_key(path, "tpm", limits=KeyLimits(tokens_per_min=TPM)))
    BURST_KEY.append(add_key(path, "burst", limits=KeyLimits(max_streams=BURST_STREAMS)))
    ADMIN_KEY.append(add_key(path, "ops", admin=True))
    deploy_app(
        {
            "engine": {"type": "null"},
            "replicas": {"num_replicas": 2, "num_cpus": 0.1},
            "routing": {"policy": "p2c"},
            "server": {"api_keys_file": str(path)},
        },
        timeout_s=180,
    )
    yield secret
    delete_app()


def _answers(secret: str, n: int, max_tokens: int = 2) -> list[httpx.Response]:
    body = {"model": MODEL, "prompt": "hi", "max_tokens": max_tokens}
    auth = {"authorization": f"Bearer {secret}"}
    url = f"{TEST_URL}/v1/completions"
    return [httpx.post(url, json=body, headers=auth, timeout=30) for _ in range(n)]


def _codes(secret: str, n: int) -> list[int]:
    return [r.status_code for r in _answers(secret, n)]


def test_requests_per_minute_hold_across_two_ingress_replicas(key: str) -> None:
    assert len(session_processes("OpenAIIngress")) == 2  # the default for this fleet
    answers = _answers(key, 3 * LIMIT)
    codes = [r.status_code for r in answers]
    assert codes == [200] * LIMIT + [429] * (2 * LIMIT), codes  # exactly the limit, no early 429
    remaining = [int(r.headers["x-ratelimit-remaining-requests"]) for r in answers[:LIMIT]]
    assert remaining[-1] <= 1  # each answer counts the fleet's use, not one ingress's
    assert "limit 10, used 10" in answers[-1].json()["error"]["message"]


def test_a_request_larger_than_an_ingress_part_of_tokens_per_minute_passes(key: str) -> None:
    big = _answers(TPM_KEY[0], 3, max_tokens=800)  # prompt + 800 of 1000 a minute
    assert [r.status_code for r in big] == [200, 429, 429], [r.text for r in big]
    assert big[1].json()["error"]["code"] == "rate_limit_exceeded"
    assert "Request too large" not in big[1].json()["error"]["message"]


def test_a_key_added_while_serving_works_without_a_restart(key: str) -> None:
    fresh = add_key(KEY_FILE[0], "later")
    deadline = time.monotonic() + 10
    codes = []
    while time.monotonic() < deadline:  # every ingress replica re-reads within ~1 s
        codes = _codes(fresh, 4)
        if codes == [200] * 4:
            break
        time.sleep(0.5)
    assert codes == [200] * 4, codes


async def _stream_status(
    c: httpx.AsyncClient, secret: str, hold: asyncio.Event, codes: list[int]
) -> None:
    body = {"model": MODEL, "prompt": "hi", "max_tokens": 1000, "ignore_eos": True, "stream": True}
    auth = {"authorization": f"Bearer {secret}"}
    async with c.stream("POST", "/v1/completions", json=body, headers=auth) as r:
        codes.append(r.status_code)
        if r.status_code == 200:
            await hold.wait()  # keep the stream open until every request has its answer


async def test_concurrent_streams_reach_the_limit_fleet_wide(key: str) -> None:
    # One at a time, each 200 held open (~7 s at 7 ms a token), over both ingress replicas
    # as Serve's proxy spreads them: the first STREAMS pass wherever they land, the fleet then
    # refuses every further stream. (The old split, 2 + 1 by rank, refused the third
    # whenever it landed on the replica holding its 1.)
    hold, codes = asyncio.Event(), []
    tasks = []
    async with httpx.AsyncClient(base_url=TEST_URL, timeout=60) as c:
        for i in range(12):
            tasks.append(asyncio.create_task(_stream_status(c, STREAMS_KEY[0], hold, codes)))
            while len(codes) <= i and not tasks[-1].done():
                await asyncio.sleep(0.01)
        hold.set()
        await asyncio.gather(*tasks)
    assert codes == [200] * STREAMS + [429] * (12 - STREAMS), codes


async def _burst_of_streams(secret: str, n: int) -> list[int]:
    """``n`` streams sent at once, each 200 held open until all have their answers."""
    hold, codes = asyncio.Event(), []
    limits = httpx.Limits(max_connections=n + 4)
    auth = {"authorization": f"Bearer {secret}"}
    async with httpx.AsyncClient(base_url=TEST_URL, timeout=60, limits=limits) as c:
        # open the connections first, so that the streams reach the ingresses at once
        await asyncio.gather(*(c.get("/v1/models", headers=auth) for _ in range(n)))
        tasks = [asyncio.create_task(_stream_status(c, secret, hold, codes)) for _ in range(n)]
        deadline = time.monotonic() + 30
        while len(codes) < n and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        hold.set()
        await asyncio.gather(*tasks)
    return codes


async def test_a_burst_of_streams_gets_exactly_the_limit_then_the_slots_come_back(
    key: str,
) -> None:
    # 30 at once over both ingress replicas: before the slot table each replica could fill
    # the limit before hearing of the other (8 of a 4-stream limit was measured)
    codes = await _burst_of_streams(BURST_KEY[0], 30)
    assert sorted(codes) == [200] * BURST_STREAMS + [429] * (30 - BURST_STREAMS), codes
    # the held streams were closed by the client: their slots reach the table again
    deadline = time.monotonic() + 10
    again: list[int] = []
    while time.monotonic() < deadline:
        again = await _burst_of_streams(BURST_KEY[0], BURST_STREAMS)
        if again == [200] * BURST_STREAMS:
            break
        await asyncio.sleep(0.5)
    assert again == [200] * BURST_STREAMS, again


def test_fleet_status_shows_each_ingress_sharing_quotas(key: str) -> None:
    _codes(key, 1)  # each answering ingress has started its sync by now or on this call
    auth = {"authorization": f"Bearer {ADMIN_KEY[0]}"}
    seen: list[dict[str, object]] = []
    deadline = time.monotonic() + 20  # (a transient sync error would split one for ~1 s)
    while time.monotonic() < deadline:  # answered by either ingress replica
        r = httpx.get(f"{TEST_URL}/fleet/status", headers=auth, timeout=30)
        assert r.status_code == 200, r.text
        seen.append(r.json()["ingress"]["quotas"])
        if len(seen) >= 10 and all(q["mode"] == "shared" for q in seen[-10:]):
            break
        time.sleep(0.1)
    assert all(q["mode"] == "shared" for q in seen[-10:]), seen
    assert all(isinstance(q["sync_errors"], int) for q in seen)
    assert all(q["slot_errors"] == 0 for q in seen), seen


def _mode_series() -> dict[str, float]:
    """``llmfleet_ingress_quota_shared`` by its ``replica`` label, from Ray's metrics port."""
    text = httpx.get(f"http://127.0.0.1:{TEST_METRICS_PORT}/metrics", timeout=10).text
    name = M.prom(M.INGRESS_QUOTA_SHARED) + "{"
    out = {}
    for line in text.splitlines():
        if line.startswith(name):
            labels = dict(
                part.split("=", 1) for part in line[len(name) : line.index("}")].split(",")
            )
            out[labels.get("replica", "").strip('"')] = float(line.rsplit(" ", 1)[1])
    return out


def test_each_ingress_exports_its_quota_mode(key: str) -> None:
    # the alert LLMFleetQuotaSharingDown reads this gauge (0: the replica splits its quotas)
    from tests.component.test_observability_live import _live_ingresses

    auth = {"authorization": f"Bearer {ADMIN_KEY[0]}"}
    body = {"model": MODEL, "prompt": "hi", "max_tokens": 2}
    live: list[str] = []
    seen: dict[str, float] = {}
    deadline = time.monotonic() + 60  # Ray's agent exports every few seconds
    while time.monotonic() < deadline:
        r = httpx.post(f"{TEST_URL}/v1/completions", json=body, headers=auth, timeout=30)
        assert r.status_code == 200, r.text  # (each ingress starts its sync on a request)
        live, seen = _live_ingresses(), _mode_series()
        mine = [v for rep, v in seen.items() if rep and any(n.endswith(rep) for n in live)]
        if len(live) == 2 and len(mine) == 2 and all(v == 1.0 for v in mine):
            return
        time.sleep(1.0)
    raise AssertionError(f"live ingress replicas {live}, exported modes {seen}")
