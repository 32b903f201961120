"""``llmfleet sim``: replay a workload through N simulated replicas in virtual time.

Example: llmfleet sim --replicas 64 --hardware h100 --model llama-3-8b \
  --workload mooncake:data/traces/mooncake_synthetic.jsonl --router prefix --out r.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from bench import argtypes
from cluster.twin.spec import TwinSpec, arrival_times, build_twin
from replicas.sim.profiles import HARDWARE, MODELS
from replicas.sim.scheduler import BATCHING_MODES
from router.defaults import DEFAULT_POLICY


def add_arguments(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a("--replicas", type=argtypes.positive_int, default=1, help="replicas at start")
    a("--hardware", choices=sorted(HARDWARE), default="h100")
    a("--model", choices=sorted(MODELS), default="llama-3-8b")
    a("--tp", type=argtypes.positive_int, default=1, help="tensor-parallel degree per replica")
    a(
        "--workload",
        required=True,
        help="bench dataset spec, e.g. mooncake:PATH or random:input=512",
    )
    a(
        "--router",
        default=DEFAULT_POLICY,
        help=f"routing policy name (router.registry; default {DEFAULT_POLICY}, as llmfleet up)",
    )
    a("--autoscale", default=None, help="scaling policy name (autoscaler.registry)")
    a("--min-replicas", type=argtypes.nonneg_int, default=None)
    a("--max-replicas", type=argtypes.positive_int, default=None)
    a(
        "--startup-s",
        type=argtypes.nonneg_float,
        default=30.0,
        help="virtual seconds until a new replica is ready",
    )
    a(
        "--warm-pool",
        type=argtypes.nonneg_int,
        default=0,
        help="sleeping replicas kept (vLLM sleep mode, level 1): a scale-up wakes them first",
    )
    a(
        "--wake-s",
        type=argtypes.nonneg_float,
        default=None,
        help="virtual seconds to wake a sleeping replica (default: weights / host-to-GPU copy)",
    )
    a(
        "--kv-event-delay-ms",
        type=argtypes.nonneg_float,
        default=0.0,
        help="prefix-precise: delay from the engine to the router of each KV event",
    )
    a("--slo", default=None, help="e.g. ttft_ms=2000,tpot_ms=100")
    a("--batching", choices=BATCHING_MODES, default="continuous")
    a(
        "--batch-size",
        type=argtypes.nonneg_int,
        default=0,
        help="static/dynamic batch size (0 = max_num_seqs)",
    )
    a(
        "--batch-timeout-ms",
        type=argtypes.nonneg_float,
        default=50.0,
        help="dynamic batching timeout",
    )
    a("--seed", type=int, default=0)
    a("--time-scale", type=argtypes.positive_float, default=1.0, help="multiply trace timestamps")
    a("--length-scale", type=argtypes.positive_float, default=1.0, help="multiply token lengths")
    a(
        "--rate",
        type=argtypes.positive_float,
        default=None,
        help="Poisson req/s when the workload has no timestamps",
    )
    a("--num-requests", type=argtypes.positive_int, default=None)
    a(
        "--block-size",
        type=argtypes.positive_int,
        default=None,
        help="KV block size (default 16 GPU, 128 CPU)",
    )
    a("--max-num-seqs", type=argtypes.positive_int, default=None)
    a("--max-num-batched-tokens", type=argtypes.positive_int, default=None)
    a("--kv-capacity-tokens", type=argtypes.positive_int, default=None)
    a("--no-chunked-prefill", action="store_true")
    a("--no-prefix-caching", action="store_true")
    a(
        "--replica-hour-cost",
        type=argtypes.nonneg_float,
        default=None,
        help="$ per replica-hour for cost numbers",
    )
    a("--out", required=True, help="result JSON path (records go to the .jsonl beside it)")


def check_bounds(args: argparse.Namespace) -> None:
    """What argparse cannot check one flag at a time (found by hand: ``--min-replicas 5
    --max-replicas 2`` ran, and its result said nothing of it)."""
    lo, hi = args.min_replicas, args.max_replicas
    if lo is not None and hi is not None and lo > hi:
        raise ValueError(f"--min-replicas {lo} is above --max-replicas {hi}")
    if args.autoscale in (None, "none") and (lo is not None or hi is not None):
        raise ValueError("--min-replicas / --max-replicas need --autoscale POLICY")


def spec_from_args(args: argparse.Namespace) -> TwinSpec:
    return TwinSpec(
        replicas=args.replicas, hardware=args.hardware, model=args.model, tp=args.tp,
        router=args.router, autoscale=args.autoscale, min_replicas=args.min_replicas,
        max_replicas=args.max_replicas, startup_s=args.startup_s,
        warm_pool=args.warm_pool, wake_s=args.wake_s,
        kv_event_delay_ms=args.kv_event_delay_ms, batching=args.batching,
        batch_size=args.batch_size, batch_timeout_ms=args.batch_timeout_ms, seed=args.seed,
        block_size=args.block_size, max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        kv_capacity_tokens=args.kv_capacity_tokens, chunked_prefill=not args.no_chunked_prefill,
        prefix_caching=not args.no_prefix_caching,
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from bench.datasets import build_requests
    from bench.report import write_results
    from bench.slo import parse_slo
    from cluster.twin.results import build_result

    t0, c0 = time.perf_counter(), time.process_time()
    try:
        check_bounds(args)
        slo = parse_slo(args.slo)
        specs = build_requests(
            args.workload, num_requests=args.num_requests, seed=args.seed,
            length_scale=args.length_scale, time_scale=args.time_scale,
        )  # fmt: skip
        arrivals = arrival_times(specs, args.rate, args.seed)
        # a setup the twin cannot model (e.g. a warm pool on CPU) is refused here too
        sim = build_twin(spec_from_args(args), slo)
    except (ValueError, OSError) as err:  # found by hand: tracebacks for a bad workload
        print(f"llmfleet sim: error: {err}", file=sys.stderr)
        return 2
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
