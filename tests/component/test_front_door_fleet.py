"""Component: the front door (``server.ingress: resume``) in front of a real fleet: streams an
ingress replica was relaying when it was SIGKILLed go on through the other one, as one
stream; a resume whose output is already complete gets the stream's close; Ray restarts a
killed front door.

The session's Serve proxy listens on ``TEST_URL``; the front door (the Ray actor
``llmfleet up`` starts) is put in front of it on a port of its own.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Iterator

import httpx
import pytest

from cluster.migration import RESUME_FIELD, RESUME_HEADER
from tests.component.test_replica_death import MAX_TOKENS, _one
from tests.fakes import closed_port
from tests.serve_fixtures import TEST_URL, delete_app, deploy_app, session_processes

pytestmark = [pytest.mark.component]
MODEL = "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def door(ray_session: None) -> Iterator[str]:
    import ray

    from cluster.config import parse_config
    from cluster.serve_front_door import start_front_door

    deploy_app(
        {
            "engine": {"type": "sim", "sim": {"speed": 1.0}},
            "replicas": {"num_replicas": 2, "num_cpus": 0.1, "max_ongoing_requests": 32},
            "routing": {"policy": "p2c", "stats_period_s": 0.2},
            "server": {"ingress_replicas": 2},
        },
        timeout_s=180,
    )
    port = closed_port()
    actor = start_front_door(parse_config({"server": {"port": port}}), TEST_URL)
    yield f"http://127.0.0.1:{port}"
    ray.kill(actor, no_restart=True)  # detached: it would outlive the module
    delete_app()


def _counters() -> dict[str, int]:
    from cluster.serve_front_door import front_door_counters

    got = front_door_counters()
    assert got is not None
    return got


async def test_streams_of_a_killed_ingress_finish_as_one_stream(door: str) -> None:
    before = _counters()
    async with httpx.AsyncClient(base_url=door, timeout=120) as c:
        runs = [asyncio.ensure_future(_one(c, i)) for i in range(16)]
        await asyncio.sleep(1.0)  # every stream has started
        victim = session_processes("OpenAIIngress")[0]
        os.kill(victim.pid, signal.SIGKILL)
        results = await asyncio.gather(*runs)
    bad = [r for r in results if r["status"] != 200 or r["errors"] or not r["done"]]
    assert not bad, bad[:3]
    assert all(r["finish"] == ["length"] for r in results), [r["finish"] for r in results]
    assert all(len(r["ids"]) == 1 for r in results)  # the continuation kept the stream's id
    # usage counts the tokens streamed before the cut (the ingress's estimate: ± a few)
    assert all(abs(int(r["completion_tokens"]) - MAX_TOKENS) <= 3 for r in results)
    after = _counters()
    assert after["resumed"] > before["resumed"], after  # some went through the victim
    assert after["cut"] == before["cut"]


def test_the_front_door_listens_only_on_the_configured_host(door: str) -> None:
    import psutil

    port = int(door.rsplit(":", 1)[1])
    listening = [
        c
        for c in psutil.net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN and c.laddr.port == port
    ]
    assert listening
    assert all(c.laddr.ip == "127.0.0.1" for c in listening), listening


def test_a_resume_with_no_output_left_gets_the_streams_close(door: str) -> None:
    """Sent to Serve's proxy as the front door sends it: the output limit is spent, so the
    ingress answers the close itself (finish ``length``, usage, ``[DONE]``), as that stream's."""
    mark = {"text": "one two three four", "id": "chatcmpl-x", "created": 1, "model": MODEL,
            "finished": False, "usage_seen": False}  # fmt: skip
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "count"}],
        "max_tokens": 2,
        "stream": True,
        "stream_options": {"include_usage": True},
        RESUME_FIELD: mark,
    }
    r = httpx.post(
        f"{TEST_URL}/v1/chat/completions", json=body, headers={RESUME_HEADER: "1"}, timeout=30
    )
    assert r.status_code == 200, r.text
    events = [ln[6:] for ln in r.text.split("\n") if ln.startswith("data: ")]
    assert events[-1] == "[DONE]"
    parsed = [json.loads(e) for e in events[:-1]]
    assert {e["id"] for e in parsed} == {"chatcmpl-x"}
    assert parsed[0]["choices"][0]["finish_reason"] == "length"
    assert parsed[-1]["usage"]["completion_tokens"] >= 4


async def test_a_killed_front_door_is_restarted(door: str) -> None:
    (proc,) = session_processes("FrontDoorActor")
    os.kill(proc.pid, signal.SIGKILL)
    t0 = time.monotonic()
    code = 0
    while time.monotonic() - t0 < 30:
        try:
            code = httpx.get(f"{door}/v1/models", timeout=5).status_code
        except httpx.HTTPError:
            code = 0
        if code == 200:
            break
        await asyncio.sleep(0.25)
    assert code == 200
    assert time.monotonic() - t0 < 15
