"""The typed way to build the virtual-time twin: ``TwinSpec`` → ``build_twin(spec, slo)``.

``llmfleet sim`` parses its flags into a ``TwinSpec``; studies construct one directly. One
spec gives one ``ClusterSim``: ``replicas`` engines of ``model`` on ``hardware`` (the cost
model's profile), the routing policy ``router`` (``router.registry``), and with ``autoscale``
a scaling policy (``autoscaler.registry``) between ``min_replicas`` and ``max_replicas``.
Engine limits left ``None`` take the hardware profile's defaults.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autoscaler.types import ScalingConfig
from bench.arrivals import poisson
from bench.types import RequestSpec
from cluster.twin.fleet import ClusterConfig, ClusterSim
from cluster.twin.warm_pool import pool_config
from replicas.sim.core import CoreConfig
from router.defaults import DEFAULT_POLICY


@dataclass(frozen=True, slots=True)
class TwinSpec:
    replicas: int = 1
    hardware: str = "h100"
    model: str = "llama-3-8b"
    tp: int = 1
    router: str = DEFAULT_POLICY  # the product's default, as `llmfleet up` routes
    autoscale: str | None = None
    min_replicas: int | None = None
    max_replicas: int | None = None
    startup_s: float = 30.0  # virtual seconds until a new replica is ready
    warm_pool: int = 0  # sleeping replicas kept (vLLM sleep mode; ``twin.warm_pool``)
    wake_s: float | None = None  # asleep -> serving; None: from the weights and the hardware
    kv_event_delay_ms: float = 0.0  # prefix-precise: engine → router delay of each KV event
    batching: str = "continuous"
    batch_size: int = 0  # static/dynamic batch size (0 = max_num_seqs)
    batch_timeout_ms: float = 50.0
    seed: int = 0
    block_size: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    kv_capacity_tokens: int | None = None
    chunked_prefill: bool = True
    prefix_caching: bool = True

    def core_config(self) -> CoreConfig:
        return CoreConfig(
            model=self.model, hardware=self.hardware, tp=self.tp, block_size=self.block_size,
            kv_capacity_tokens=self.kv_capacity_tokens, max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens,
            enable_chunked_prefill=self.chunked_prefill,
            enable_prefix_caching=self.prefix_caching, batching=self.batching,
            batch_size=self.batch_size, batch_timeout_s=self.batch_timeout_ms / 1000.0,
        )  # fmt: skip

    def bounds(self) -> tuple[int, int, int]:
        """(start, min, max) replicas: without autoscaling the fleet stays at ``replicas``."""
        lo = self.min_replicas if self.min_replicas is not None else self.replicas
        hi = self.max_replicas if self.max_replicas is not None else max(self.replicas, lo)
        start = max(lo, min(hi, self.replicas)) if self.autoscale else self.replicas
        return start, lo, hi


def build_twin(spec: TwinSpec, slo: Mapping[str, float]) -> ClusterSim:
    from router.registry import make_policy

    start, lo, hi = spec.bounds()
    cfg = ClusterConfig(
        replicas=start, core=spec.core_config(), model_name=spec.model,
        min_replicas=lo, max_replicas=hi, startup_s=spec.startup_s,
        kv_events=spec.router == "prefix-precise", kv_event_delay_s=spec.kv_event_delay_ms / 1000,
        pool=pool_config(spec.warm_pool, spec.hardware, spec.model, spec.tp, spec.wake_s),
    )  # fmt: skip
    scaler = scaling = None
    if spec.autoscale:
        from autoscaler.registry import make_policy as make_scaler

        scaler = make_scaler(spec.autoscale)
        ttft_slo_s = slo["ttft_ms"] / 1000.0 if "ttft_ms" in slo else ScalingConfig().ttft_slo_s
        scaling = ScalingConfig(min_replicas=lo, max_replicas=hi, ttft_slo_s=ttft_slo_s)

    def factory(sim: ClusterSim) -> Any:
        kw: dict[str, Any] = {"cache_lookup": sim.cache_lookup} if spec.router == "oracle" else {}
        block = next(iter(sim.replicas.values())).core.block_size
        return make_policy(
            spec.router, seed=spec.seed, block_size=block, clock=lambda: sim.now, **kw
        )

    return ClusterSim(cfg, scaler=scaler, scaling=scaling, policy_factory=factory)


def arrival_times(specs: Sequence[RequestSpec], rate: float | None, seed: int) -> list[float]:
    """The trace's own arrival times, else Poisson at ``rate`` req/s (all at 0 without one)."""
    if specs and all(s.arrival_s is not None for s in specs):
        return [float(s.arrival_s) for s in specs]  # type: ignore[arg-type]
    generated = poisson(len(specs), rate if rate else math.inf, random.Random(seed))
    return [
        s.arrival_s if s.arrival_s is not None else t for s, t in zip(specs, generated, strict=True)
    ]
