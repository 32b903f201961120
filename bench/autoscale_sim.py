"""Virtual-time autoscaling runs: one workload × one policy through ``replicas.sim``.

Builds the simulator exactly as ``python -m replicas.sim.cli ... --autoscale POLICY
--min-replicas A --max-replicas B`` does (same argument parser), then swaps in our
``ScalingConfig`` (SLO, tuned knobs) and wraps the policy in ``LookBackRecorder`` so it
sees Ray-style look-back averages and leaves a timeline behind.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from autoscaler.registry import make_policy
from autoscaler.types import ScalingConfig
from bench.autoscale_metrics import Sample
from bench.autoscale_workloads import LookBackRecorder
from bench.types import RequestRecord, RequestSpec


@dataclass(frozen=True, slots=True)
class SimSetup:
    hardware: str = "a100"
    model: str = "llama-3-70b"
    tp: int = 4
    router: str = "least-loaded"
    startup_s: float = 30.0
    look_back_s: float = 5.0
    min_replicas: int = 1
    max_replicas: int = 64


@dataclass(slots=True)
class PolicyRun:
    summary: dict[str, Any]
    samples: list[Sample]
    records: list[RequestRecord]
    end_s: float
    replica_s: float | None = None  # exact, where the runner knows it


def sim_args(setup: SimSetup, policy: str, slo_ms: float) -> argparse.Namespace:
    from replicas.sim import cli

    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    argv = [
        "--workload", "random", "--out", "unused.json", "--autoscale", policy,
        "--replicas", str(setup.min_replicas), "--min-replicas", str(setup.min_replicas),
        "--max-replicas", str(setup.max_replicas), "--hardware", setup.hardware,
        "--model", setup.model, "--tp", str(setup.tp), "--router", setup.router,
        "--startup-s", str(setup.startup_s), "--slo", f"ttft_ms={slo_ms:g}",
    ]  # fmt: skip
    return parser.parse_args(argv)


def run_sim(
    specs: list[RequestSpec], policy: str, scaling: ScalingConfig, setup: SimSetup
) -> PolicyRun:
    from replicas.sim import cli
    from replicas.sim.results import build_result

    slo = {"ttft_ms": scaling.ttft_slo_s * 1000.0}
    sim = cli.build_sim(sim_args(setup, policy, slo["ttft_ms"]), slo)
    recorder = LookBackRecorder(make_policy(policy), setup.look_back_s)
    sim.scaler, sim.scaling = recorder, scaling
    arrivals = [float(s.arrival_s or 0.0) for s in specs]
    records = sim.run(specs, arrivals)
    result = build_result(sim, records, {"policy": policy}, slo)
    end = float(sim.now)
    samples = [Sample(0.0, setup.min_replicas), *recorder.samples]
    return PolicyRun(result, samples, records, end, float(result["replica_seconds"]))
