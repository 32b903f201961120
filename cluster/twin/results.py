"""Result JSON of a simulated run: ``bench.report.summarize`` plus cluster-level numbers
(prefix-cache hit rate, replica-seconds, load imbalance, simulator speed; with a warm pool,
its sleeping replica-seconds and the cost with them counted)."""

from __future__ import annotations

from typing import Any

from bench.report import summarize
from bench.types import RequestRecord
from cluster.twin.fleet import ClusterSim


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def cluster_numbers(sim: ClusterSim) -> dict[str, Any]:
    reps = list(sim.replicas.values()) + sim.retired
    hits = sum(r.core.kv.hit_tokens for r in reps)
    queries = sum(r.core.kv.query_tokens for r in reps)
    steps = sum(r.core.steps for r in reps)
    served = [r.core.kv.query_tokens for r in reps if r.core.kv.query_tokens]
    samples = sim.imbalance_samples
    wall = getattr(sim, "wall_s", 0.0)
    cpu = getattr(sim, "cpu_s", 0.0)
    awake = sum(r.lifetime(sim.now) for r in reps)
    pool = sim.config.pool
    asleep = sim.pool.sleeping_seconds(sim.now)
    return {
        "cache": {
            "hit_rate": hits / queries if queries else 0.0,
            "hit_tokens": hits,
            "query_tokens": queries,
        },
        "replica_seconds": awake,  # awake: GPUs held (booting, serving, going to sleep)
        "pool": {
            "size": pool.size,
            "wake_s": pool.wake_s,
            "sleeping_replica_seconds": asleep,
            "cost_fraction": pool.cost_fraction,
            "cost_replica_seconds": awake + pool.cost_fraction * asleep,
        },
        "imbalance": {
            "mean": sum(samples) / len(samples) if samples else None,
            "p95": _quantile(samples, 0.95),
            "max": max(samples) if samples else None,
            "prompt_tokens_max_over_mean": max(served) / (sum(served) / len(served))
            if served
            else None,
        },
        "preemptions": sum(r.core.scheduler.num_preemptions for r in reps),
        "scaling_events": [{"t_s": t, "desired": d} for t, d in sim.scale_log],
        "sim": {
            "engine_steps": steps,
            "wall_s": wall,
            "steps_per_wall_s": steps / wall if wall > 0 else None,
            "cpu_s": cpu,
            "steps_per_cpu_s": steps / cpu if cpu > 0 else None,
            "virtual_s": sim.now,
        },
    }


def build_result(
    sim: ClusterSim,
    records: list[RequestRecord],
    config: dict[str, Any],
    slo: dict[str, float] | None = None,
) -> dict[str, Any]:
    out = summarize(records, duration_s=sim.now, config=config, slo=slo)
    out.update(cluster_numbers(sim))
    return out
