"""Router comparison, virtual time: one workload through the cluster simulator per policy.

Uses the simulator's own argument parser and builder (``cluster.twin.cli``) so a row here is
exactly what ``llmfleet sim --router NAME`` would produce for the same flags. The workload
is built once and replayed unchanged for every policy (same tokens, same arrivals).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.types import RequestRecord, RequestSpec
from cluster.twin.spec import TwinSpec, arrival_times, build_twin
from experiments.routing.metrics import PolicyRow, policy_row
from experiments.traces import MOONCAKE_TRACE

SIM_POLICIES = (
    "prefix",
    "prefix-precise",
    "round-robin",
    "least-loaded",
    "p2c",
    "sglang-tree",
    "oracle",
)


@dataclass(frozen=True, slots=True)
class SimScenario:
    name: str = "sim-mooncake"
    workload: str = f"mooncake:{MOONCAKE_TRACE}"
    replicas: int = 64
    hardware: str = "h100"
    model: str = "llama-3-8b"
    slo: str = "ttft_ms=2000"
    time_scale: float = 1.0
    length_scale: float = 1.0
    num_requests: int | None = None
    rate: float | None = None  # Poisson req/s for workloads without timestamps
    shared_prefix: bool = False  # the P95 TTFT ratio goals apply (shared-prefix workloads)
    seed: int = 0
    policies: tuple[str, ...] = SIM_POLICIES
    router_config: dict[str, Any] = field(default_factory=dict)

    def twin_spec(self, policy: str) -> TwinSpec:
        return TwinSpec(
            replicas=self.replicas,
            hardware=self.hardware,
            model=self.model,
            router=policy,
            seed=self.seed,
        )

    def describe(self) -> str:
        if self.rate is not None:
            load = f"{self.workload}, Poisson {self.rate:g} req/s"
        else:
            load = f"{self.workload.split(':')[0]} trace, time x{self.time_scale:g}, length x{self.length_scale:g}"
        return f"{self.replicas} simulated {self.model}/{self.hardware} replicas, {load}"


def run_policy(
    scenario: SimScenario, policy: str, specs: Sequence[RequestSpec], arrivals: Sequence[float]
) -> tuple[dict[str, Any], list[RequestRecord]]:
    from bench.slo import parse_slo
    from cluster.twin.results import build_result

    spec = scenario.twin_spec(policy)
    slo = parse_slo(scenario.slo)
    t0 = time.perf_counter()
    sim = build_twin(spec, slo)
    if scenario.router_config and hasattr(sim.policy, "config"):
        from router.config import RouterConfig

        sim.policy.config = RouterConfig.from_dict(scenario.router_config)  # type: ignore[union-attr]
    records = sim.run(list(specs), list(arrivals))
    config: dict[str, Any] = {
        **asdict(spec),
        "workload": scenario.workload,
        "slo": scenario.slo,
        "time_scale": scenario.time_scale,
        "length_scale": scenario.length_scale,
        "num_requests": scenario.num_requests,
        "rate": scenario.rate,
    }
    config.update(mode="sim", block_size=sim.block_size, router_config=scenario.router_config)
    result = build_result(sim, records, config, slo)
    result["sim"]["total_wall_s"] = time.perf_counter() - t0
    return result, records


def build_workload(scenario: SimScenario) -> tuple[list[RequestSpec], list[float]]:
    from bench.datasets import build_requests

    specs = build_requests(
        scenario.workload,
        num_requests=scenario.num_requests,
        seed=scenario.seed,
        length_scale=scenario.length_scale,
        time_scale=scenario.time_scale,
    )
    return specs, arrival_times(specs, scenario.rate, scenario.seed)


def run_sim(
    scenario: SimScenario, out_dir: Path, log: Any = print
) -> tuple[list[PolicyRow], dict[str, Any]]:
    """Every policy on the same workload; per-policy result JSON/JSONL under ``out_dir``."""
    from bench.report import write_results

    specs, arrivals = build_workload(scenario)
    rows: list[PolicyRow] = []
    extra: dict[str, Any] = {}
    for policy in scenario.policies:
        result, records = run_policy(scenario, policy, specs, arrivals)
        write_results(result, records, out_dir / scenario.name / f"{policy}.json")
        rows.append(policy_row(policy, result, records, scenario.replicas))
        extra[policy] = {
            "engine_hit_rate": result["cache"]["hit_rate"],
            "sampled_inflight_imbalance_mean": result["imbalance"]["mean"],
            "prompt_tokens_max_over_mean": result["imbalance"]["prompt_tokens_max_over_mean"],
            "preemptions": result["preemptions"],
            "wall_s": result["sim"]["total_wall_s"],
        }
        log(f"[sim] {policy}: p95 TTFT {rows[-1].ttft_p95_ms or 0:.0f} ms, hit {rows[-1].hit_rate:.3f}, "
            f"imbalance {rows[-1].imbalance or 0:.2f} ({extra[policy]['wall_s']:.0f} s)")  # fmt: skip
    return rows, extra
