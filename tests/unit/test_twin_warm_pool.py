"""The twin's warm pool of sleeping replicas (``cluster.twin.warm_pool``): its sizing from the
hardware, its bookkeeping, and a scripted fleet waking, sleeping and refilling through it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from autoscaler.types import MetricsSnapshot, ScalingConfig
from bench.types import RequestSpec
from cluster.twin import cli
from cluster.twin.fleet import ClusterConfig, ClusterSim
from cluster.twin.results import build_result
from cluster.twin.spec import TwinSpec, build_twin
from cluster.twin.warm_pool import (
    HOST_MEMORY_PER_GPU,
    HOST_TO_DEVICE_BPS,
    WAKE_OVERHEAD_S,
    PoolConfig,
    WarmPool,
    pool_config,
)
from replicas.sim import profiles
from replicas.sim.core import CoreConfig
from router.types import ReplicaView, RequestView, RoutingDecision
from tests.fakes import StepScaler

CORE = CoreConfig(model="llama-3-8b", hardware="h100", block_size=16, max_num_batched_tokens=512)
POOL = PoolConfig(size=2, wake_s=0.5, sleep_s=0.25, cost_fraction=0.1)


def test_pool_config_from_the_weights_and_the_hardware() -> None:
    weights = profiles.model("llama-3-70b").weight_bytes
    c = pool_config(3, "a100", "llama-3-70b", 4)
    copy_s = weights / 4 / HOST_TO_DEVICE_BPS["a100"]  # one GPU's share over its link
    assert c.size == 3
    assert c.sleep_s == pytest.approx(copy_s)
    assert c.wake_s == pytest.approx(copy_s + WAKE_OVERHEAD_S)
    assert c.cost_fraction == pytest.approx(weights / (4 * HOST_MEMORY_PER_GPU["a100"]))
    assert 0 < c.cost_fraction < 1
    assert pool_config(3, "a100", "llama-3-70b", 4, wake_s=7.0).wake_s == 7.0
    assert pool_config(0, "cpu", "smollm2-135m", 1) == PoolConfig()  # no pool: nothing asked
    with pytest.raises(ValueError, match="no sleep mode"):
        pool_config(1, "cpu", "smollm2-135m", 1)  # vLLM-CPU has no sleep mode
    with pytest.raises(ValueError, match="-1"):
        pool_config(-1, "h100", "llama-3-8b", 1)


def test_the_cli_refuses_a_pool_the_hardware_cannot_have(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["--hardware", "cpu", "--model", "smollm2-135m", "--workload", "random:input=64",
            "--num-requests", "2", "--warm-pool", "1", "--out", "unused.json"]  # fmt: skip
    assert cli.main(argv) == 2
    assert "no sleep mode on 'cpu'" in capsys.readouterr().err


def test_warm_pool_bookkeeping() -> None:
    pool = WarmPool.full(POOL, now=0.0)
    assert (pool.asleep, pool.shortfall()) == ([0.0, 0.0], 0)
    assert pool.take(4.0)
    assert pool.take(6.0)
    assert not pool.take(7.0)  # empty
    assert pool.shortfall() == 2
    pool.filling = 1
    assert pool.shortfall() == 1
    pool.put(10.0)
    assert pool.shortfall() == 0
    assert pool.sleeping_seconds(12.0) == pytest.approx(4.0 + 6.0 + 2.0)


class FirstReady:
    name = "test-first"

    def choose(self, _request: RequestView, replicas: Sequence[ReplicaView], /) -> RoutingDecision:
        return RoutingDecision(
            min(replicas, key=lambda r: (r.ongoing, r.replica_id)).replica_id, "balance"
        )

    def observe(self, _event: Any) -> None:
        pass


def _run(plan: list[tuple[float, int]], pool: PoolConfig) -> tuple[ClusterSim, StepScaler, dict]:
    specs = [RequestSpec(i, tuple(range(i, i + 32)), 4) for i in range(30)]
    scaler = StepScaler(plan)
    cfg = ClusterConfig(replicas=1, core=CORE, startup_s=5.0, tick_s=1.0, pool=pool)
    sim = ClusterSim(
        cfg, FirstReady(), scaler=scaler, scaling=ScalingConfig(min_replicas=1, max_replicas=8)
    )
    recs = sim.run(specs, [1.0 * i for i in range(30)])
    assert all(r.error is None for r in recs)
    return sim, scaler, build_result(sim, recs, {})


def _at(scaler: StepScaler, t: float) -> MetricsSnapshot:
    return next(s for s in scaler.snapshots if s.now >= t)


def test_scale_up_wakes_sleepers_then_boots_and_the_pool_refills() -> None:
    sim, scaler, res = _run([(2.0, 4), (14.0, 1)], POOL)
    assert _at(scaler, 0.0).warm_replicas == 2  # the pool starts full
    # t=2: two woken (serving at 2.5), one booted (serving at 7); two boot into the pool
    s3 = _at(scaler, 3.0)
    assert (s3.current_replicas, len(s3.replicas), s3.warm_replicas) == (4, 3, 0)
    s7 = _at(scaler, 7.0)
    assert (len(s7.replicas), s7.warm_replicas) == (4, 2)  # the refill booted and fell asleep
    # t=14: three drained; the pool is full, so they are retired, not put to sleep
    end = _at(scaler, 16.0)
    assert (end.current_replicas, end.warm_replicas) == (1, 2)
    pool = res["pool"]
    assert (pool["size"], pool["cost_fraction"]) == (2, 0.1)
    # asleep: 2 x 2 s before the wake, then the refill from 7 s (booted) + sleep_s to the end
    after = sim.now - 7.0 - POOL.sleep_s
    assert pool["sleeping_replica_seconds"] == pytest.approx(4.0 + 2 * after)
    awake = res["replica_seconds"]
    assert pool["cost_replica_seconds"] == pytest.approx(
        awake + 0.1 * pool["sleeping_replica_seconds"]
    )


def test_a_drained_replica_takes_the_place_of_one_booting_into_the_pool() -> None:
    # t=2: both sleepers woken, two refills start booting (ready at 7); t=4: back to 1
    sim, scaler, res = _run([(2.0, 3), (4.0, 1)], POOL)
    s5 = _at(scaler, 5.0)
    assert (s5.current_replicas, s5.warm_replicas) == (1, 2)  # the woken two went back to sleep
    assert not any(r.for_pool for r in sim.replicas.values())  # the refills were cancelled
    # awake: 1 replica all along + 2 woken from 2 s to 4 s (+ sleep_s each) + 2 refills 2-4 s
    expected = sim.now + 2 * (2.0 + POOL.sleep_s) + 2 * 2.0
    assert res["replica_seconds"] == pytest.approx(expected, abs=1e-6)


def test_without_a_pool_nothing_changes() -> None:
    _, scaler, res = _run([(2.0, 3), (14.0, 1)], PoolConfig())
    assert all(s.warm_replicas == 0 for s in scaler.snapshots)
    assert len(_at(scaler, 3.0).replicas) == 1  # booting: 5 s
    assert res["pool"]["sleeping_replica_seconds"] == 0.0
    assert res["pool"]["cost_replica_seconds"] == res["replica_seconds"]


def test_twin_spec_builds_the_pool_from_the_profile() -> None:
    sim = build_twin(TwinSpec(hardware="h100", model="llama-3-8b", warm_pool=3), {})
    assert sim.config.pool == pool_config(3, "h100", "llama-3-8b", 1)
    assert len(sim.pool.asleep) == 3
