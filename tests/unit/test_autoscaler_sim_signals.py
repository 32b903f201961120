"""What simulated replicas report to autoscalers: busy fraction and a TTFT P95 that ages out,
in virtual time (``EngineCore``) and in real time (``SimEngine``), as the real engine does."""

from __future__ import annotations

import pytest

from autoscaler.baselines import UtilizationPolicy
from autoscaler.types import MetricsSnapshot, ReplicaMetrics, ScalingConfig
from replicas.engine import GenerateRequest
from replicas.sim.core import BUSY_WINDOW_S, TTFT_WINDOW_S, CoreConfig, EngineCore
from replicas.sim.engine import SimEngine
from replicas.sim.request import SimRequest

CORE = CoreConfig(model="llama-3-8b", hardware="h100", block_size=16)


def _drain(core: EngineCore, now: float) -> float:
    """Step the core until idle, starting at ``now``; returns the virtual end time."""
    while True:
        batch, dt = core.begin_step(now)
        if batch is None:
            return now
        core.end_step(batch, now, now + dt)
        now += dt


def _serve(core: EngineCore, rid: str, now: float, prompt: int = 512, out: int = 4) -> float:
    core.add(SimRequest(rid, prompt, [], out), now)
    return _drain(core, now)


def test_busy_fraction_is_stepped_time_over_a_sliding_window() -> None:
    core = EngineCore(CORE)
    assert core.stats(0.0).busy_fraction == 0.0
    end = _serve(core, "a", 100.0, prompt=4096, out=64)
    busy = end - 100.0
    assert 0.0 < busy < BUSY_WINDOW_S
    assert core.stats(end).busy_fraction == pytest.approx(busy / BUSY_WINDOW_S)
    assert core.stats(100.0 + BUSY_WINDOW_S + busy + 0.1).busy_fraction == 0.0


def test_ttft_p95_ages_out_in_virtual_time() -> None:
    core = EngineCore(CORE)
    for i in range(5):  # five requests queued together: later ones wait for earlier prefills
        core.add(SimRequest(f"r{i}", 8192, [], 2), 0.0)
    end = _drain(core, 0.0)
    slow = core.stats(end).ttft_p95_s
    assert slow > 0
    assert core.stats(end + TTFT_WINDOW_S / 2).ttft_p95_s == slow  # still in the window
    t = _serve(core, "fast", end + TTFT_WINDOW_S + 1.0, prompt=64)
    assert 0 < core.stats(t).ttft_p95_s < slow  # the burst aged out, only the new sample
    assert core.stats(t + TTFT_WINDOW_S + 1.0).ttft_p95_s == 0.0


def test_stats_without_now_use_the_latest_time_seen() -> None:
    core = EngineCore(CORE)
    end = _serve(core, "a", 5.0, prompt=2048)
    assert core.stats().busy_fraction == core.stats(end).busy_fraction > 0


async def test_real_time_sim_engine_reports_busy_fraction() -> None:
    engine = SimEngine(speed=100.0, block_size=16, seed=1)
    req = GenerateRequest("a", list(range(1, 200)), 20)
    _ = [d async for d in engine.generate(req)]
    assert 0.0 < engine.stats().busy_fraction <= 1.0
    await engine.shutdown()


def test_utilization_baseline_scales_on_simulated_replicas() -> None:
    """The baseline reads ``busy_fraction`` from the sim's own stats (it used to see 0)."""
    core = EngineCore(CORE)
    end = _serve(core, "a", 0.0, prompt=8192, out=400)  # ~2.8 s of steps
    m = ReplicaMetrics.from_stats("r0", core.stats(end))
    assert m.busy_fraction == pytest.approx(end / BUSY_WINDOW_S)
    cfg = ScalingConfig(min_replicas=1, max_replicas=8, params={"target_utilization": 0.1})
    policy = UtilizationPolicy()
    state = policy.initial_state()
    for t in (0.0, 5.0):  # Ray-like up delay (5 s here), then ceil(1 * 0.28 / 0.1)
        desired, state = policy.decide(MetricsSnapshot(t, 1, (m,)), cfg, state)
    assert desired == 3
