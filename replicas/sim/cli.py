"""``llmfleet sim``: replay a workload through N simulated replicas in virtual time.

Example: llmfleet sim --replicas 64 --hardware h100 --model llama-3-8b \
  --workload mooncake:../shared/traces/mooncake_synthetic.jsonl --router prefix --out r.json
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from pathlib import Path
from typing import Any

from replicas.sim.profiles import HARDWARE, MODELS
from replicas.sim.scheduler import BATCHING_MODES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a("--replicas", type=int, default=1, help="replicas at start")
    a("--hardware", choices=sorted(HARDWARE), default="h100")
    a("--model", choices=sorted(MODELS), default="llama-3-8b")
    a("--tp", type=int, default=1, help="tensor-parallel degree per replica")
    a(
        "--workload",
        required=True,
        help="bench dataset spec, e.g. mooncake:PATH or random:input=512",
    )
    a("--router", default="round-robin", help="routing policy name (router.registry)")
    a("--autoscale", default=None, help="scaling policy name (autoscaler.registry)")
    a("--min-replicas", type=int, default=None)
    a("--max-replicas", type=int, default=None)
    a("--startup-s", type=float, default=30.0, help="virtual seconds until a new replica is ready")
    a(
        "--kv-event-delay-ms",
        type=float,
        default=0.0,
        help="prefix-precise: delay from the engine to the router of each KV event",
    )
    a("--slo", default=None, help="e.g. ttft_ms=2000,tpot_ms=100")
    a("--batching", choices=BATCHING_MODES, default="continuous")
    a("--batch-size", type=int, default=0, help="static/dynamic batch size (0 = max_num_seqs)")
    a("--batch-timeout-ms", type=float, default=50.0, help="dynamic batching timeout")
    a("--seed", type=int, default=0)
    a("--time-scale", type=float, default=1.0, help="multiply trace timestamps")
    a("--length-scale", type=float, default=1.0, help="multiply token lengths")
    a("--rate", type=float, default=None, help="Poisson req/s when the workload has no timestamps")
    a("--num-requests", type=int, default=None)
    a("--block-size", type=int, default=None, help="KV block size (default 16 GPU, 128 CPU)")
    a("--max-num-seqs", type=int, default=None)
    a("--max-num-batched-tokens", type=int, default=None)
    a("--kv-capacity-tokens", type=int, default=None)
    a("--no-chunked-prefill", action="store_true")
    a("--no-prefix-caching", action="store_true")
    a("--replica-hour-cost", type=float, default=None, help="$ per replica-hour for cost numbers")
    a("--out", required=True, help="result JSON path (records go to the .jsonl beside it)")


def _arrivals(specs: list, rate: float | None, seed: int) -> list[float]:
    from bench.arrivals import poisson

    if specs and all(s.arrival_s is not None for s in specs):
        return [float(s.arrival_s) for s in specs]
    generated = poisson(len(specs), rate if rate else math.inf, random.Random(seed))
    return [
        s.arrival_s if s.arrival_s is not None else t for s, t in zip(specs, generated, strict=True)
    ]


def _core_config(args: argparse.Namespace) -> Any:
    from replicas.sim.core import CoreConfig

    return CoreConfig(
        model=args.model, hardware=args.hardware, tp=args.tp, block_size=args.block_size,
        kv_capacity_tokens=args.kv_capacity_tokens, max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        enable_chunked_prefill=not args.no_chunked_prefill,
        enable_prefix_caching=not args.no_prefix_caching, batching=args.batching,
        batch_size=args.batch_size, batch_timeout_s=args.batch_timeout_ms / 1000.0,
    )  # fmt: skip


def build_sim(args: argparse.Namespace, slo: dict[str, float]) -> Any:
    from autoscaler.types import ScalingConfig
    from replicas.sim.cluster import ClusterConfig, ClusterSim
    from router.registry import make_policy

    lo = args.min_replicas if args.min_replicas is not None else args.replicas
    hi = args.max_replicas if args.max_replicas is not None else max(args.replicas, lo)
    start = max(lo, min(hi, args.replicas)) if args.autoscale else args.replicas
    cfg = ClusterConfig(
        replicas=start, core=_core_config(args), model_name=args.model,
        min_replicas=lo, max_replicas=hi, startup_s=args.startup_s,
        kv_events=args.router == "prefix-precise", kv_event_delay_s=args.kv_event_delay_ms / 1000,
    )  # fmt: skip
    scaler = scaling = None
    if args.autoscale:
        from autoscaler.registry import make_policy as make_scaler

        scaler = make_scaler(args.autoscale)
        ttft_slo_s = slo["ttft_ms"] / 1000.0 if "ttft_ms" in slo else ScalingConfig().ttft_slo_s
        scaling = ScalingConfig(min_replicas=lo, max_replicas=hi, ttft_slo_s=ttft_slo_s)

    def factory(sim: ClusterSim) -> Any:
        kw: dict[str, Any] = {"cache_lookup": sim.cache_lookup} if args.router == "oracle" else {}
        block = next(iter(sim.replicas.values())).core.block_size
        return make_policy(
            args.router, seed=args.seed, block_size=block, clock=lambda: sim.now, **kw
        )

    return ClusterSim(cfg, scaler=scaler, scaling=scaling, policy_factory=factory)


def run(args: argparse.Namespace) -> int:
    from bench.datasets import build_requests
    from bench.report import write_results
    from bench.slo import parse_slo
    from replicas.sim.results import build_result

    t0, c0 = time.perf_counter(), time.process_time()
    slo = parse_slo(args.slo)
    specs = build_requests(
        args.workload, num_requests=args.num_requests, seed=args.seed,
        length_scale=args.length_scale, time_scale=args.time_scale,
    )  # fmt: skip
    arrivals = _arrivals(specs, args.rate, args.seed)
    sim = build_sim(args, slo)
    records = sim.run(specs, arrivals)
    config = {k: v for k, v in vars(args).items() if k not in ("func", "out")}
    config.update(mode="sim", block_size=sim.block_size)
    result = build_result(sim, records, config, slo)
    result["sim"]["total_wall_s"] = time.perf_counter() - t0
    result["sim"]["total_cpu_s"] = time.process_time() - c0
    write_results(result, records, Path(args.out))
    s = result["sim"]
    print(
        f"sim: {len(records)} requests, {s['virtual_s']:.1f} virtual s, {s['engine_steps']} steps "
        f"in {s['wall_s']:.1f} s wall / {s['cpu_s']:.1f} s CPU ({s['steps_per_cpu_s'] or 0:.0f} steps/CPU-s; "
        f"total {s['total_wall_s']:.1f} s wall, {s['total_cpu_s']:.1f} s CPU); "
        f"hit rate {result['cache']['hit_rate']:.3f} -> {args.out}"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="llmfleet sim", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
