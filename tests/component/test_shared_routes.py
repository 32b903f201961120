"""Component: two ingress replicas (the default for ``prefix``) share what their routers learn
(``router/route_share.py``), so a prefix first routed through one ingress is found by the
other: each prefix's later requests reach the replica that served its first, whichever
ingress Serve's proxy hands them to. Without sharing about half of them would go through
the ingress that never saw the prefix and land on a cold replica."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.serve_fixtures import TEST_URL, delete_app, deploy_app, session_processes

pytestmark = [pytest.mark.component]
MODEL = "smollm2-135m-instruct"
PREFIXES = 20
REPEATS = 3


@pytest.fixture(scope="module")
def fleet(ray_session: None) -> Iterator[None]:
    deploy_app(
        {
            "engine": {"type": "sim", "sim": {"speed": 4.0, "block_size": 16}},
            "replicas": {"num_replicas": 3, "num_cpus": 0.1},
            "routing": {"policy": "prefix", "stats_period_s": 0.2},
        },
        timeout_s=180,
    )
    yield
    delete_app()


def _send(client: httpx.Client, prefix: list[int], rng: random.Random) -> tuple[str, int, int]:
    """(replica, cached tokens, prompt tokens) of one request: the prefix and a fresh tail."""
    prompt = [*prefix, *(rng.randrange(1000, 40000) for _ in range(16))]
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 2, "ignore_eos": True}
    r = client.post("/v1/completions", json=body)
    assert r.status_code == 200, r.text
    usage = r.json()["usage"]
    cached = usage.get("prompt_tokens_details", {}).get("cached_tokens", 0)
    return r.headers["x-llmfleet-replica"], cached, usage["prompt_tokens"]


def test_second_requests_find_the_replica_of_the_first_through_either_ingress(
    fleet: None,
) -> None:
    assert len(session_processes("OpenAIIngress")) == 2  # the default for this fleet
    rng = random.Random(5)
    prefixes = [[rng.randrange(1000, 40000) for _ in range(256)] for _ in range(PREFIXES)]
    with httpx.Client(base_url=TEST_URL, timeout=60) as client:
        home = [_send(client, p, rng)[0] for p in prefixes]  # each prefix once: cold
        time.sleep(2.0)
        order = [i for i in range(PREFIXES) for _ in range(REPEATS)]
        rng.shuffle(order)
        same = cached = prompt = 0
        for i in order:
            replica, hit, total = _send(client, prefixes[i], rng)
            same += replica == home[i]
            cached += hit
            prompt += total
    share, hit_rate = same / len(order), cached / prompt
    print(f"second round: {share:.2f} on the first replica, prefix hit rate {hit_rate:.3f}")
    assert share >= 0.95, (share, hit_rate)
    assert hit_rate >= 0.9, (share, hit_rate)
