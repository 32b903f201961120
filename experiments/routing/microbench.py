"""Decision-latency microbenchmark for the routing policies.

Setup: ``--replicas`` (64) replicas whose KV capacity adds up to ``--blocks`` (1M) indexed
(block, replica) pairs, filled by routing ``--fill`` prompts that share one of
``--groups`` system prompts; then ``--decisions`` timed ``choose`` calls (plus untimed
``observe``) with 50–2000-token prompts and random loads. Prints P50/P99 per policy and
writes JSON to ``results/router_microbench.json``. Goal: P99 ≤ 200 µs for ``prefix``.
The decision hash (sha256 of every decision's replica, reason and matched blocks, warm-up
included) shows whether a change to the routing code changed any decision.
Run: ``.venv/bin/python -m experiments.routing.microbench``.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import platform
import random
import statistics
import time
from pathlib import Path
from typing import Any

from router.registry import make_policy
from router.types import KVBlocksStored, ReplicaView, RequestView, Routed, RoutingPolicy

BLOCK = 16


def _requests(n: int, groups: int, rng: random.Random) -> list[RequestView]:
    systems = [[rng.getrandbits(63) for _ in range(rng.randint(8, 64))] for _ in range(groups)]
    out = []
    for k in range(n):
        head = systems[rng.randrange(groups)] if rng.random() < 0.8 else []
        tail = [rng.getrandbits(63) for _ in range(rng.randint(3, 60))]
        hashes = tuple((head + tail)[:125])
        out.append(RequestView(str(k), "m", (0,) * (len(hashes) * BLOCK + 7), hashes, 128))
    return out


def _views(n: int, cap_blocks: int, rng: random.Random) -> list[ReplicaView]:
    return [
        ReplicaView(
            f"replica-{i:03d}",
            ongoing=rng.randint(0, 12),
            max_ongoing=64,
            waiting=rng.randint(0, 4),
            running=rng.randint(0, 16),
            waiting_prefill_tokens=rng.randint(0, 8000),
            kv_usage=rng.random(),
            kv_capacity_tokens=cap_blocks * BLOCK,
            prefill_tokens_per_s=rng.uniform(2000, 20000),
        )
        for i in range(n)
    ]


def _fill(policy: RoutingPolicy, views: list[ReplicaView], blocks: int, rng: random.Random) -> int:
    per_replica = blocks // len(views)
    index = getattr(policy, "index", None)
    if index is None:
        return 0
    for v in views:  # unique chains per replica fill the LRU to its cap
        index.set_capacity(v.replica_id, per_replica)
        index.insert(v.replica_id, (rng.getrandbits(63) for _ in range(per_replica)))
    return int(index.size())


def _learn(policy: RoutingPolicy, request: RequestView, replica_id: str) -> None:
    policy.observe(Routed(request, replica_id, 0.0))
    if policy.name == "prefix-precise":  # stand-in for the engine's BlockStored event
        policy.observe(KVBlocksStored(replica_id, request.block_hashes, 0.0))


def bench_policy(name: str, args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    policy = make_policy(name, seed=args.seed, block_size=BLOCK)
    views = _views(args.replicas, args.blocks // args.replicas, rng)
    indexed = _fill(policy, views, args.blocks, rng)
    reqs = _requests(args.fill + args.decisions, args.groups, rng)
    digest = hashlib.sha256()  # every decision, warm-up included: a change of behaviour shows
    for r in reqs[: args.fill]:  # warm: shared prefixes spread over the replicas
        d = policy.choose(r, views)
        digest.update(f"{d.replica_id}|{d.reason}|{d.matched_blocks};".encode())
        _learn(policy, r, d.replica_id)
    samples: list[float] = []
    cpu: list[float] = []
    reasons: dict[str, int] = {}
    gc.collect()
    for r in reqs[args.fill :]:
        t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        d = policy.choose(r, views)
        cpu.append((time.thread_time_ns() - c0) / 1000.0)
        samples.append((time.perf_counter_ns() - t0) / 1000.0)
        digest.update(f"{d.replica_id}|{d.reason}|{d.matched_blocks};".encode())
        _learn(policy, r, d.replica_id)
        reasons[d.reason] = reasons.get(d.reason, 0) + 1
    q = statistics.quantiles(samples, n=100)
    qc = statistics.quantiles(cpu, n=100)
    return {
        "policy": name,
        "indexed_blocks": indexed,
        "decisions": len(samples),
        "p50_us": round(q[49], 1),
        "p99_us": round(q[98], 1),
        "mean_us": round(statistics.fmean(samples), 1),
        "cpu_p50_us": round(qc[49], 1),  # thread CPU time: excludes preemption on a busy host
        "cpu_p99_us": round(qc[98], 1),
        "reasons": reasons,
        "decision_hash": digest.hexdigest()[:16],
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", type=int, default=64)
    ap.add_argument("--blocks", type=int, default=1_000_000)
    ap.add_argument("--groups", type=int, default=32)
    ap.add_argument("--fill", type=int, default=2000)
    ap.add_argument("--decisions", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--policies", default="prefix,prefix-precise,sglang-tree,consistent-hash,p2c")
    ap.add_argument("--out", default="results/router_microbench.json")
    args = ap.parse_args(argv)
    results = [bench_policy(name, args) for name in args.policies.split(",")]
    report = {
        "replicas": args.replicas,
        "target_indexed_blocks": args.blocks,
        "goal_p99_us": 200,
        "host": {
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "load1": os.getloadavg()[0],
        },
        "results": results,
    }
    for r in results:
        print(
            f"{r['policy']:>16}: p50 {r['p50_us']:7.1f} us  p99 {r['p99_us']:7.1f} us  "
            f"(cpu p50 {r['cpu_p50_us']:6.1f} p99 {r['cpu_p99_us']:6.1f})  "
            f"indexed {r['indexed_blocks']:>9,}  decisions {r['decision_hash']}  reasons {r['reasons']}"
        )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    return report


if __name__ == "__main__":
    main()
