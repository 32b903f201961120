"""Component: a key's quota holds fleet-wide with two ingress replicas (each enforces its part).

Tolerance (``cluster/quotas.py``): the fleet never admits more than the limit; a client can
be refused early by the imbalance of Serve's proxy spreading its requests over the ingress
replicas, so fewer than the limit may pass.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cluster.keys import KeyLimits, add_key
from tests.serve_fixtures import TEST_URL, delete_app, deploy_app, session_processes

pytestmark = [pytest.mark.component]
MODEL = "smollm2-135m-instruct"
LIMIT = 10


KEY_FILE: list[Path] = []
STREAMS_KEY: list[str] = []
STREAMS = 3  # over 2 ingress replicas: parts 2 + 1 (by rank), not 1 + 1


@pytest.fixture(scope="module")
def key(ray_session: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = Path(tmp_path_factory.mktemp("keys")) / "keys.yaml"
    KEY_FILE.append(path)
    secret = add_key(path, "capped", limits=KeyLimits(requests_per_min=LIMIT))
    STREAMS_KEY.append(add_key(path, "three-streams", limits=KeyLimits(max_streams=STREAMS)))
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


def _codes(secret: str, n: int) -> list[int]:
    body = {"model": MODEL, "prompt": "hi", "max_tokens": 2}
    auth = {"authorization": f"Bearer {secret}"}
    url = f"{TEST_URL}/v1/completions"
    return [httpx.post(url, json=body, headers=auth, timeout=30).status_code for _ in range(n)]


def test_requests_per_minute_hold_across_two_ingress_replicas(key: str) -> None:
    assert len(session_processes("OpenAIIngress")) == 2  # the default for this fleet
    codes = _codes(key, 3 * LIMIT)
    admitted = codes.count(200)
    assert set(codes) <= {200, 429}
    assert admitted <= LIMIT  # never above the limit, fleet-wide
    assert admitted >= LIMIT // 2  # at least one ingress replica's whole share


def test_a_key_added_while_serving_works_without_a_restart(key: str) -> None:
    import time

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
    # One at a time, each 200 held open (~7 s at 7 ms a token): Serve's proxy sends the next
    # to the less busy ingress replica, at random on a tie, so both fill their parts (2 + 1)
    # within a few tries; the fleet then refuses every further stream. With 1 + 1 (the old
    # split) only 2 would ever pass.
    hold, codes = asyncio.Event(), []
    tasks = []
    async with httpx.AsyncClient(base_url=TEST_URL, timeout=60) as c:
        for i in range(12):
            tasks.append(asyncio.create_task(_stream_status(c, STREAMS_KEY[0], hold, codes)))
            while len(codes) <= i and not tasks[-1].done():
                await asyncio.sleep(0.01)
        hold.set()
        await asyncio.gather(*tasks)
    assert codes.count(200) == STREAMS, codes
    assert set(codes) == {200, 429}, codes
