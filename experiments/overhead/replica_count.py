"""Measure 1 vs 2 vLLM replicas of llmfleet on this machine (the README's default choice).

Same request set as `bench-overhead` at two concurrencies; reports output tok/s, P50/P95
TTFT and P95 ITL for each replica count, plus peak RSS of the whole process tree.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
import threading
from pathlib import Path

import psutil

from experiments import serverproc
from experiments.overhead.overhead import drive

PORT = 8013


def _tree_rss(pid: int) -> int:
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            total += p.memory_info().rss
    return total


def _rss_sampler(pid: int, peak: list[int], stop: threading.Event) -> None:
    while not stop.wait(2.0):
        peak[0] = max(peak[0], _tree_rss(pid))


def measure(replicas: int, args: argparse.Namespace, work: Path) -> dict:
    cfg = work / f"r{replicas}.yaml"
    cfg.write_text(
        f"server:\n  port: {PORT}\n  metrics_export_port: 18013\nreplicas:\n  num_replicas: {replicas}\n"
        "engine:\n  vllm:\n    kv_cache_gib: 1\n    omp_threads: 1\n"
    )
    proc = serverproc.start_llmfleet(cfg, work / f"home{replicas}", work / f"r{replicas}.log")
    peak, stop = [0], threading.Event()
    sampler = threading.Thread(target=_rss_sampler, args=(proc.pid, peak, stop), daemon=True)
    sampler.start()
    out: dict = {"replicas": replicas, "runs": {}}
    try:
        serverproc.wait_http(f"http://127.0.0.1:{PORT}/health", proc)
        for c in args.concurrency:
            a = argparse.Namespace(**{**vars(args), "concurrency": c})
            res = drive(f"http://127.0.0.1:{PORT}", work / f"r{replicas}-c{c}.json", a, c)
            out["runs"][str(c)] = {
                "output_tok_s": res["throughput"]["output_tok_s"],
                "ttft_p50_ms": res["ttft_ms"]["p50"],
                "ttft_p95_ms": res["ttft_ms"]["p95"],
                "itl_p95_ms": res["itl_ms"]["p95"],
            }
    finally:
        stop.set()
        serverproc.stop(proc)
    out["peak_rss_gib"] = peak[0] / 2**30
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", type=Path, default=Path("results/replica_count.json"))
    p.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[8, 16])
    p.add_argument("--num-requests", type=int, default=64)
    p.add_argument("--input", type=int, default=256)
    p.add_argument("--output", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="llmfleet-replicas-"))
    rows = [measure(n, args, work) for n in (1, 2)]
    args.out.write_text(json.dumps(rows, indent=2))
    for r in rows:
        for c, m in r["runs"].items():
            print(
                f"replicas={r['replicas']} c={c}: {m['output_tok_s']:.1f} tok/s, P50 TTFT {m['ttft_p50_ms']:.0f} ms, "
                f"P95 TTFT {m['ttft_p95_ms']:.0f} ms, P95 ITL {m['itl_p95_ms']:.0f} ms"
            )
        print(f"replicas={r['replicas']} peak RSS {r['peak_rss_gib']:.1f} GiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
