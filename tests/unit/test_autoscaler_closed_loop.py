"""Closed-loop sanity checks on a toy fleet (not the cluster simulator).

Toy: per-replica FIFO prefill queues at 1000 tok/s, join-shortest-queue routing, new
replicas serve ``boot_s`` after the decision, Poisson arrivals of random prompt sizes,
a decision every 0.5 s. A request's TTFT is its replica's queued work when it joins.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from autoscaler.registry import make_policy
from autoscaler.types import MetricsSnapshot, ReplicaMetrics, ScalingConfig

RATE = 1000.0
CFG = ScalingConfig(min_replicas=1, max_replicas=12, ttft_slo_s=2.0, target_ongoing_requests=8)


@dataclass
class _Replica:
    ready_at: float
    queue: float = 0.0  # tokens
    load: float = 0.0  # smoothed tokens/s served


@dataclass(frozen=True)
class Outcome:
    counts: list[int]
    ttfts: list[float]

    @property
    def slo_miss(self) -> float:
        return sum(t > CFG.ttft_slo_s for t in self.ttfts) / len(self.ttfts)

    @property
    def changes(self) -> int:
        return sum(a != b for a, b in zip(self.counts, self.counts[1:], strict=False))


def _metrics(i: int, r: _Replica) -> ReplicaMetrics:
    return ReplicaMetrics(
        f"r{i}",
        waiting=r.queue / 700,
        running=min(8.0, r.load / 100),
        waiting_prefill_tokens=r.queue,
        prefill_tokens_per_s=RATE,
        queue_delay_s=r.queue / RATE,
        kv_usage=0.1 + 0.5 * r.load / RATE,
        busy_fraction=min(1.0, 0.3 + r.load / RATE),
        prefill_load_tokens_per_s=r.load,
        ongoing=r.queue / 700 + min(8.0, r.load / 100),
    )


def run_toy(name: str, tokens_per_s: Callable[[float], float], *, seed: int = 0) -> Outcome:
    rng, policy = random.Random(seed), make_policy(name)
    state = policy.initial_state()
    fleet, counts, ttfts, dt, boot_s = [_Replica(0.0)], [], [], 0.5, 10.0
    next_arrival = 0.0
    for tick in range(1200):  # 600 s
        t = tick * dt
        ready = [r for r in fleet if r.ready_at <= t]
        while next_arrival < t + dt:  # Poisson arrivals, mean prompt 700 tokens
            target = min(ready, key=lambda r: r.queue)
            target.queue += rng.uniform(100, 1300)
            ttfts.append(target.queue / RATE)
            next_arrival += rng.expovariate(tokens_per_s(t) / 700)
        for r in ready:
            served = min(r.queue, RATE * dt)
            r.queue -= served
            r.load += 0.2 * (served / dt - r.load)
        snapshot = MetricsSnapshot(
            t, len(fleet), tuple(_metrics(i, r) for i, r in enumerate(ready))
        )
        desired, state = policy.decide(snapshot, CFG, state)
        if desired > len(fleet):
            fleet += [_Replica(t + boot_s) for _ in range(desired - len(fleet))]
        elif desired < len(fleet):
            fleet = sorted(fleet, key=lambda r: (r.ready_at <= t, r.queue == 0))[-desired:]
        counts.append(len(fleet))
    return Outcome(counts, ttfts)


def step_load(t: float) -> float:
    return 4000.0 if 60 <= t < 240 else 800.0


def test_ttft_queue_follows_a_load_step_without_flapping() -> None:
    out = run_toy("ttft-queue", step_load)
    high = out.counts[int(100 / 0.5) : int(240 / 0.5)]
    assert min(high) >= 5
    assert max(out.counts) <= 9
    assert out.counts[-1] <= 2  # back down, one replica per cooldown, once the load is gone
    assert out.changes <= 12
    assert out.slo_miss < 0.05
    assert out.slo_miss < run_toy("ongoing-requests", step_load).slo_miss
    assert run_toy("none", step_load).slo_miss > 0.5  # the toy does overload one replica


def test_ttft_queue_holds_steady_under_constant_noisy_load() -> None:
    out = run_toy("ttft-queue", lambda _t: 2500.0, seed=3)
    settled = out.counts[int(120 / 0.5) :]
    assert max(settled) - min(settled) <= 1
    assert out.changes <= 8
    assert out.slo_miss < 0.04
