"""Trust benchmark for the load generator (``make bench-fidelity``).

(a) Ceiling: our generator against the raw-asyncio stub SSE server in a subprocess, at
    fixed open-loop rates; reports achieved streamed requests/s and P99 send lag (intended
    vs actual send time). Goal: ≥ 1,000 req/s with P99 lag ≤ 5 ms.
(b) Agreement with vLLM's own client: start a vLLM OpenAI server on 127.0.0.1 (small
    model, eager, prefix caching off so the second client does not get cache hits the first
    paid for), send the same request set with ``bench.runner`` and with
    ``vllm.benchmarks.serve`` (closed loop, same concurrency), and print P50/P95 TTFT,
    TPOT, E2E side by side with the difference in %.
Both parts are bounded: fixed request counts, per-request timeouts, a server start deadline.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import arrivals, client, report
from bench.datasets import build_requests
from bench.runner import LoadPlan, run_load
from experiments.fidelity.common import ROOT

CEILING_RATES = (500.0, 1000.0, 2000.0, 4000.0)
CEILING_SECONDS = 3.0


def _wait_line(proc: subprocess.Popen, needle: str, timeout_s: float = 20.0) -> None:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if needle in line:
            return
        if not line and proc.poll() is not None:
            break
    raise RuntimeError(f"subprocess did not print {needle!r}")


async def _ceiling_rate(url: str, rate: float) -> dict[str, Any]:
    n = int(rate * CEILING_SECONDS)
    specs = build_requests("random:input=16,output=4", num_requests=n, seed=1)
    target = client.Target(url, "stub-model", timeout_s=10.0)
    bodies = {s.index: client.build_payload(target, s, list(s.prompt_token_ids)) for s in specs}
    plan = LoadPlan(offsets=arrivals.constant(n, rate), duration_s=CEILING_SECONDS + 1)
    out = await run_load(specs, plan, target, lambda s: bodies[s.index])
    res = report.summarize(out.records, duration_s=out.duration_s, config={})
    return {
        "target_rate": rate,
        "sent": n,
        "completed": res["requests"]["completed"],
        "failed": res["requests"]["failed"],
        "errors": res["requests"]["errors"],
        "streamed_req_s": res["throughput"]["req_s"],
        "send_lag_p50_ms": res["send_lag_ms"]["p50"],
        "send_lag_p99_ms": res["send_lag_ms"]["p99"],
        "ttft_p99_ms": res["ttft_ms"]["p99"],
    }


def run_ceiling(port: int = 18123) -> list[dict[str, Any]]:
    cmd = [sys.executable, "-m", "bench.stub_server", "--port", str(port), "--chunks", "4"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        _wait_line(proc, "stub server on")
        url = f"http://127.0.0.1:{port}"
        return [asyncio.run(_ceiling_rate(url, rate)) for rate in CEILING_RATES]
    finally:
        proc.terminate()
        proc.wait(10)


def print_ceiling(rows: list[dict[str, Any]]) -> None:
    print(f"{'target/s':>9}{'streamed/s':>12}{'failed':>8}{'lag p50 ms':>12}{'lag p99 ms':>12}")
    for r in rows:
        print(
            f"{r['target_rate']:>9.0f}{r['streamed_req_s']:>12.1f}{r['failed']:>8}"
            f"{r['send_lag_p50_ms']:>12.2f}{r['send_lag_p99_ms']:>12.2f}"
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="load-generator trust benchmark")
    p.add_argument("--out", type=Path, default=Path("results/fidelity.json"))
    p.add_argument("--skip-vllm", action="store_true", help="only part (a)")
    p.add_argument("--skip-ceiling", action="store_true", help="only part (b)")
    p.add_argument("--num-requests", type=int, default=32)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--input-len", type=int, default=256)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--port", type=int, default=8011)
    p.add_argument("--url", default=None, help="use this running server instead of starting vLLM")
    args = p.parse_args(argv)
    result: dict[str, Any] = {"schema_version": 1}
    if not args.skip_ceiling:
        result["ceiling"] = run_ceiling()
        print_ceiling(result["ceiling"])
    if not args.skip_vllm:
        from experiments.fidelity import vllm_client as fidelity_vllm

        result["vllm"] = fidelity_vllm.run(args)
        fidelity_vllm.print_side_by_side(result["vllm"], "compare")
        fidelity_vllm.print_side_by_side(result["vllm"], "compare_again")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
