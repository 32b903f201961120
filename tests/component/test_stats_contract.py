"""Component: a simulated replica's ``ReplicaStats`` through Serve, decoded strictly, into the
router's view and the autoscaler's metrics. A known workload with a cached prefix: every field
the router and the autoscaler read is populated and plausible, uncached counts are exact."""

from __future__ import annotations

import concurrent.futures as cf
import random
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from autoscaler.types import ReplicaMetrics
from contracts.stats import STATS_VERSION, WIRE_FIELDS, ReplicaStats, from_wire
from router.views import replica_view_from_stats
from tests.serve_fixtures import TEST_URL, delete_app, deploy_app, sim_fleet

pytestmark = [pytest.mark.component]
MODEL = "smollm2-135m-instruct"
BLOCK = 16  # sim_fleet's block size
PREFIX, SUFFIX, BURST = 512, 160, 12  # prefix: 32 whole blocks
BUSY_WINDOW_S = 10.0  # LoadTracker's window in the sim core


@pytest.fixture(scope="module")
def sim_one(ray_session: None) -> Iterator[Any]:
    from ray import serve

    from cluster.app import APP_NAME, REPLICA_DEPLOYMENT

    deploy_app(sim_fleet(1, speed=0.5, kv_capacity_tokens=40000), timeout_s=180)
    yield serve.get_deployment_handle(REPLICA_DEPLOYMENT, APP_NAME)
    delete_app()


def _complete(ids: list[int], max_tokens: int = 8) -> None:
    body = {"model": MODEL, "prompt": ids, "max_tokens": max_tokens, "ignore_eos": True}
    r = httpx.post(f"{TEST_URL}/v1/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text


def _wire(handle: Any, method: str = "stats") -> dict[str, float]:
    d = getattr(handle, method).remote().result(timeout_s=10)
    assert all(isinstance(v, float) for v in d.values())
    assert d["version"] == STATS_VERSION
    return d


def test_sim_stats_reach_router_and_autoscaler_populated(sim_one: Any) -> None:
    rng = random.Random(11)
    prefix = [rng.randrange(1000, 30000) for _ in range(PREFIX)]
    t0 = time.monotonic()
    _complete(prefix + [rng.randrange(1000, 30000) for _ in range(64)])  # warms the prefix
    prompts = [prefix + [rng.randrange(1000, 30000) for _ in range(SUFFIX)] for _ in range(BURST)]
    samples: list[ReplicaStats] = []
    with cf.ThreadPoolExecutor(BURST) as pool:
        futures = [pool.submit(_complete, p) for p in prompts]
        while not all(f.done() for f in futures):
            samples.append(from_wire(_wire(sim_one)))
            time.sleep(0.02)
        for f in futures:
            f.result()
    assert time.monotonic() - t0 < BUSY_WINDOW_S - 1  # every first token is in the window
    after = from_wire(_wire(sim_one))

    # under load: queue, batch, KV and in-flight numbers moved; waiting prefill is uncached
    # work only: never more than the burst's whole prompts, and at least once (after the
    # scheduler looked the burst up) at most the burst's uncached suffixes
    assert max(s.running for s in samples) > 0
    assert max(s.ongoing for s in samples) > 0
    assert max(s.kv_usage for s in samples) > 0
    busy = [s.waiting_prefill_tokens for s in samples if s.ongoing > 0]
    assert busy
    assert max(busy) <= BURST * (PREFIX + SUFFIX)
    assert min(busy) <= BURST * SUFFIX

    # after: exact cache accounting, measured rates and windows
    assert after.prefix_hits == BURST * PREFIX  # each burst prompt hit the 32 warm blocks
    assert after.prefix_queries == 64 + PREFIX + BURST * (PREFIX + SUFFIX)
    uncached = (PREFIX + 64) + BURST * SUFFIX
    assert after.prefill_load_tokens_per_s == pytest.approx(uncached / BUSY_WINDOW_S)
    assert after.prefill_tokens_per_s > 0
    assert after.decode_tokens_per_s > 0
    assert after.ttft_p95_s > 0
    assert 0 < after.busy_fraction <= 1
    assert after.steps > 0
    assert after.num_preemptions == 0
    assert (after.block_size, after.kv_capacity_tokens) == (BLOCK, 40000)
    assert after.healthy
    assert not after.draining
    assert after.ongoing == 0
    assert after.waiting == after.running == after.waiting_prefill_tokens == 0

    # the same record through the router's and the autoscaler's channels
    routing = from_wire(_wire(sim_one, "record_routing_stats"))
    auto = from_wire(_wire(sim_one, "record_autoscaling_stats"))
    assert routing.prefix_hits == auto.prefix_hits == after.prefix_hits
    view = replica_view_from_stats("r", routing, default_block_size=999)
    assert (view.block_size, view.kv_capacity_tokens, view.healthy) == (BLOCK, 40000, True)
    assert view.prefill_tokens_per_s == routing.prefill_tokens_per_s > 0
    m = ReplicaMetrics.from_stats("r", auto)
    assert m.prefill_load_tokens_per_s > 0
    assert m.busy_fraction > 0
    assert m.ttft_p95_s > 0
    assert (m.prefix_hits, m.prefix_queries) == (auto.prefix_hits, auto.prefix_queries)


def test_status_rows_are_complete_wire_records(sim_one: Any) -> None:
    # The status actor outlives apps and keeps a row for STALE_S after a replica's last
    # report, so earlier tests' replicas can still be listed: live ones report every second.
    deadline = time.monotonic() + 10
    rows: list[dict[str, Any]] = []
    while not rows and time.monotonic() < deadline:
        listed = httpx.get(f"{TEST_URL}/fleet/status", timeout=10).json()["replicas"]
        rows = [r for r in listed if time.time() - r["reported_at"] < 3.0]
        time.sleep(0.5)
    assert len(rows) == 1
    assert set(WIRE_FIELDS) <= set(rows[0])
    assert from_wire(rows[0]).healthy
