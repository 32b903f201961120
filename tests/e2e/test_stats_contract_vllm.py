"""End to end: the real vLLM engine's ``ReplicaStats`` through Serve, decoded strictly, into
the router's view and the autoscaler's metrics. A prompt behind a warmed prefix: its waiting
prefill is its whole prompt until the scheduler looks it up, then exactly prompt − cached
blocks; decode rate and prefill load are measured (they were always 0 before)."""

from __future__ import annotations

import concurrent.futures as cf
import itertools
import random
import time
from typing import Any

import httpx
import pytest

from autoscaler.types import ReplicaMetrics
from contracts.stats import STATS_VERSION, ReplicaStats, from_wire, ttft_tail
from router.views import replica_view_from_stats
from tests.serve_fixtures import TEST_URL

pytestmark = [pytest.mark.e2e]
WARM_SUFFIX, SUFFIX, OUT = 64, 1400, 24
WINDOW_S = 10.0  # LoadTracker's busy/prefill-load window


def _handle() -> Any:
    from ray import serve

    from cluster.app import APP_NAME, REPLICA_DEPLOYMENT

    return serve.get_deployment_handle(REPLICA_DEPLOYMENT, APP_NAME)


def _stats(method: str = "stats") -> ReplicaStats:
    d = getattr(_handle(), method).remote().result(timeout_s=10)
    assert all(isinstance(v, float) for v in d.values())
    assert d["version"] == STATS_VERSION
    return from_wire(d)  # strict: a missing field fails the test


def _complete(model: str, ids: list[int], max_tokens: int) -> None:
    body = {"model": model, "prompt": ids, "max_tokens": max_tokens, "ignore_eos": True}
    r = httpx.post(f"{TEST_URL}/v1/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text


def test_vllm_stats_uncached_backlog_rates_and_views(vllm_app: str) -> None:
    before = _stats()
    block = before.block_size
    assert block > 0
    assert before.kv_capacity_tokens > 0
    assert before.healthy
    rng = random.Random(23)
    prefix_len = block * -(-512 // block)  # whole blocks
    prefix = [rng.randrange(1000, 30000) for _ in range(prefix_len)]
    t0 = time.monotonic()
    _complete(vllm_app, prefix + [rng.randrange(1000, 30000) for _ in range(WARM_SUFFIX)], 2)
    prompt = prefix + [rng.randrange(1000, 30000) for _ in range(SUFFIX)]
    samples: list[ReplicaStats] = []
    with cf.ThreadPoolExecutor(1) as pool:
        done = pool.submit(_complete, vllm_app, prompt, OUT)
        while not done.done():
            samples.append(_stats())
            time.sleep(0.02)
        done.result()
    elapsed = time.monotonic() - t0
    after = _stats()

    # waiting prefill: the whole prompt before the lookup, prompt − cached blocks after it
    backlog = {int(s.waiting_prefill_tokens) for s in samples} - {0}
    assert len(prompt) - prefix_len in backlog, sorted(backlog)
    assert backlog <= {len(prompt), len(prompt) - prefix_len}, sorted(backlog)
    assert max(s.running for s in samples) >= 1
    assert max(s.ongoing for s in samples) >= 1
    assert max(s.kv_usage for s in samples) > 0

    # exact cache accounting; rates and windows measured
    assert after.prefix_hits - before.prefix_hits == prefix_len
    warm_len = prefix_len + WARM_SUFFIX
    assert after.prefix_queries - before.prefix_queries == warm_len + len(prompt)
    assert after.decode_tokens_per_s > 0
    assert after.prefill_tokens_per_s > 0
    load = after.prefill_load_tokens_per_s * WINDOW_S  # uncached tokens prefilled recently
    assert load >= SUFFIX - 1e-6  # the long prompt's first token is seconds old
    if elapsed < WINDOW_S:  # then both requests' first tokens are in the window
        assert load >= SUFFIX + warm_len - 1e-6
    assert after.ttft_p95_s > 0
    # the tail counters: the two first tokens, and at most those over each edge, fewer
    # over each higher edge
    assert after.first_tokens - before.first_tokens == 2
    grown = [a - b for a, b in zip(ttft_tail(after), ttft_tail(before), strict=True)]
    assert all(2 >= x >= y >= 0 for x, y in itertools.pairwise(grown)), grown
    assert 0 < after.busy_fraction <= 1
    assert after.steps > before.steps
    assert after.healthy
    assert not after.draining
    assert after.waiting_prefill_tokens == after.waiting == after.running == after.ongoing == 0

    # the router's and the autoscaler's channels carry the same record
    routing, auto = _stats("record_routing_stats"), _stats("record_autoscaling_stats")
    view = replica_view_from_stats("r", routing)
    assert view.block_size == block
    assert view.kv_capacity_tokens == after.kv_capacity_tokens
    assert view.prefill_tokens_per_s > 0
    assert view.healthy
    m = ReplicaMetrics.from_stats("r", auto)
    assert m.prefill_load_tokens_per_s > 0
    assert m.busy_fraction > 0
    assert m.ttft_p95_s > 0
    assert m.prefix_hits - before.prefix_hits == prefix_len
    assert (m.first_tokens, ttft_tail(m)) == (auto.first_tokens, ttft_tail(auto))
