"""Virtual-time autoscaling runs: one workload × one policy through ``replicas.sim``.

Builds the simulator exactly as ``python -m cluster.twin.cli ... --autoscale POLICY
--min-replicas A --max-replicas B`` does (same argument parser), then swaps in our
``ScalingConfig`` (SLO, tuned knobs) and wraps the policy in ``LookBackRecorder`` so it
sees Ray-style look-back averages and leaves a timeline behind.

``LIVE_MODEL`` is the live benchmark's setup in virtual time (simulated SmolLM2 on CPU,
~3-s boot, Serve's 2-s look-back, a decision every 0.1 s as Serve's control loop makes
them, 1..6 replicas); with ``tail_s`` the run goes on that long
after the last request (a 1-token probe, left out of the results), as the live runner keeps
polling for the scale-down. It reproduces the live rows within a few percent in about a
second per run, so live tuning is done here and only checked live.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from autoscaler.registry import make_policy
from autoscaler.types import ScalingConfig, ScalingPolicy
from bench.types import RequestRecord, RequestSpec
from cluster.twin.spec import TwinSpec, build_twin
from experiments.autoscaling.metrics import Sample
from experiments.autoscaling.workloads import LookBackRecorder


@dataclass(frozen=True, slots=True)
class SimSetup:
    hardware: str = "a100"
    model: str = "llama-3-70b"
    tp: int = 4
    router: str = "least-loaded"
    startup_s: float = 30.0
    look_back_s: float = 5.0
    tick_s: float = 1.0  # how often the policy decides (Serve's control loop: 0.1 s)
    min_replicas: int = 1
    max_replicas: int = 64
    warm_pool: int = 0  # sleeping replicas kept (``cluster.twin.warm_pool``)


LIVE_MODEL = SimSetup(
    hardware="cpu", model="smollm2-135m", tp=1, startup_s=3.0, look_back_s=2.0, tick_s=0.1,
    max_replicas=6,
)  # fmt: skip


@dataclass(slots=True)
class PolicyRun:
    summary: dict[str, Any]
    samples: list[Sample]
    records: list[RequestRecord]
    end_s: float
    replica_s: float | None = None  # exact, where the runner knows it


def twin_spec(setup: SimSetup, policy: str) -> TwinSpec:
    return TwinSpec(
        replicas=setup.min_replicas, min_replicas=setup.min_replicas,
        max_replicas=setup.max_replicas, hardware=setup.hardware, model=setup.model,
        tp=setup.tp, router=setup.router, autoscale=policy, startup_s=setup.startup_s,
        warm_pool=setup.warm_pool,
    )  # fmt: skip


def run_sim(
    specs: list[RequestSpec],
    policy: str,
    scaling: ScalingConfig,
    setup: SimSetup,
    tail_s: float = 0.0,
    policy_obj: ScalingPolicy[Any] | None = None,
) -> PolicyRun:
    """``policy_obj``: a ``ScalingPolicy`` to run instead of the registry's ``policy``
    (a study's own rule; ``policy`` still names the twin's setup)."""
    from cluster.twin.results import build_result

    slo = {"ttft_ms": scaling.ttft_slo_s * 1000.0}
    sim = build_twin(twin_spec(setup, policy), slo)
    sim.config = replace(sim.config, tick_s=setup.tick_s)
    recorder = LookBackRecorder(policy_obj or make_policy(policy), setup.look_back_s)
    sim.scaler, sim.scaling, sim.scale_state = recorder, scaling, recorder.initial_state()
    arrivals = [float(s.arrival_s or 0.0) for s in specs]
    probe = []
    if tail_s > 0:  # keep the clock (and the policy) running past the last request
        end = max(arrivals, default=0.0) + tail_s
        probe = [RequestSpec(max((s.index for s in specs), default=-1) + 1, (1,), 1, arrival_s=end)]
    records = sim.run([*specs, *probe], [*arrivals, *(p.arrival_s or 0.0 for p in probe)])
    records = records[: len(specs)] if probe else records
    result = build_result(sim, records, {"policy": policy}, slo)
    end = float(sim.now)
    samples = [Sample(0.0, setup.min_replicas), *recorder.samples]
    # the cost: awake replica-seconds, plus the warm pool's sleepers at their cost fraction
    cost = float(result["pool"]["cost_replica_seconds"])
    return PolicyRun(result, samples, records, end, cost)


def nominal_prefill_rate(setup: SimSetup) -> float:
    """Prefill tokens/s of one replica of ``setup`` before any step is measured."""
    from cluster.twin.spec import build_twin

    sim = build_twin(twin_spec(setup, "none"), {})
    return float(next(iter(sim.replicas.values())).core.prefill_tokens_per_s)
