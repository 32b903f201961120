"""Live autoscaling on Ray Serve with simulated replicas: a load step reaches the TTFT-queue
policy within seconds (1 → ≥ 2 replicas), the fleet returns to 1 once the load is gone,
and no request fails while replicas come and go (scale-down drains)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from bench.tokens import TokenSource
from bench.types import RequestSpec
from experiments.autoscaling.live import (
    LiveSetup,
    first_time_at_least,
    fleet_config,
    replica_count,
    run_live,
)
from tests.serve_fixtures import TEST_URL, delete_app, deploy_app, post

pytestmark = [pytest.mark.component, pytest.mark.timeout(240)]

LOAD_S = 10.0
RATE = 4.0  # req/s; prompts sized so the offered prefill load is OVERLOAD × one replica's
OVERLOAD = 3.0
FAST_DOWN = {
    "downscale_stable_s": 3.0,
    "downscale_cooldown_s": 3.0,
    "upscale_cooldown_s": 2.0,
    "target_attainment": 0.0,  # no burst reserve: these tests time the reactive terms
}


def _prompt_tokens() -> int:
    """Sized from the simulated CPU profile (its calibration may change): OVERLOAD × the
    nominal prefill rate of one replica, capped to fit the 2048-token context."""
    from replicas.sim.core import CoreConfig, EngineCore

    core = EngineCore(CoreConfig(model="smollm2-135m", hardware="cpu", block_size=16))
    rate = core.stats().prefill_tokens_per_s
    return max(64, min(1500, round(OVERLOAD * rate / RATE)))


def _specs() -> list[RequestSpec]:
    import random

    rng, src, n_in = random.Random(3), TokenSource(None, 3), _prompt_tokens()
    n = int(LOAD_S * RATE)
    return [RequestSpec(i, tuple(src.fresh(rng, n_in)), 8, arrival_s=i / RATE) for i in range(n)]


@pytest.fixture(scope="module")
def autoscaled_app(ray_session: None) -> Iterator[Any]:
    setup = LiveSetup(min_replicas=1, max_replicas=3)
    cfg = deploy_app(fleet_config("ttft-queue", setup, FAST_DOWN))
    deadline = time.monotonic() + 60
    while replica_count() != 1 and time.monotonic() < deadline:
        time.sleep(0.5)
    yield cfg
    delete_app()


def test_step_scales_up_fast_then_back_to_one_without_failures(autoscaled_app: Any) -> None:
    assert replica_count() == 1
    run = run_live(
        _specs(),
        url=TEST_URL,
        model=autoscaled_app.model.served_name,
        duration_s=LOAD_S + 1,
        tail_s=45.0,
        slo_ms=2000.0,
        until=lambda samples: bool(samples) and samples[-1].replicas == 1,
    )
    failed = [r.error for r in run.records if r.error]
    assert not failed, failed
    assert len(run.records) == int(LOAD_S * RATE)
    up_at = first_time_at_least(run.samples, 2)
    assert up_at is not None, [s.replicas for s in run.samples]
    assert up_at <= 12.0, f"load reached the policy only after {up_at:.1f} s"
    peak = max(s.replicas for s in run.samples)
    assert peak >= 2
    assert run.samples[-1].replicas == 1, [s.replicas for s in run.samples[-10:]]


def test_scale_to_zero_holds_a_request_at_the_ingress_until_a_replica_starts(
    autoscaled_app: Any,
) -> None:
    """min_replicas 0: an idle fleet goes to 0 replicas; a request then waits at the ingress
    (Serve starts the first replica for it), is served, and the fleet returns to 0. Runs
    after the step test: it redeploys the module's app (the fixture deletes it)."""
    setup = LiveSetup(min_replicas=0, max_replicas=2)
    cfg = fleet_config("ttft-queue", setup, FAST_DOWN)
    cfg["replicas"] = {**cfg["replicas"], "num_replicas": 1}  # start with one so /health is up
    deploy_app(cfg)

    def wait_for(count: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if replica_count() == count:
                return True
            time.sleep(0.5)
        return False

    assert wait_for(0, 90), f"idle fleet still has {replica_count()} replicas"
    t0 = time.monotonic()
    r = post("/v1/completions", {"model": "smollm2-135m-instruct", "prompt": "hi", "max_tokens": 4})
    waited = time.monotonic() - t0
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 4
    assert waited > 0.5, f"served in {waited:.2f} s: no replica start in the way?"
    assert wait_for(0, 90), f"fleet did not return to 0 ({replica_count()} replicas)"
