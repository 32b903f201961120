"""`make bench-overhead`: llmfleet (1 replica) vs the bare vLLM OpenAI server, same model,
same engine arguments, same request set, alternating runs in one script.

Per concurrency (default 1 and 8) it prints and writes: output tok/s ratio (llmfleet /
vLLM), P50/P95 TTFT difference (ms), P95 ITL ratio — each the median over the alternating
rounds — and serving CPU seconds per 1k output tokens for each process role of each server
(``experiments/proctree.py``). Once per run: start to first token of each server (started
one after the other, from process start to the first streamed token) and the peak RSS of
all of each server's processes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from bench import cli as bench_cli
from experiments import proctree, serverproc
from replicas.engine_args import check_engine_args
from replicas.model_prep import DEFAULT_MODEL, default_model_dir, ensure_default_model
from replicas.vllm_settings import VLLMSettings

VLLM_PORT, FLEET_PORT = 8011, 8012


# The engine arguments both sides run with: llmfleet's engine.vllm section, and through
# VLLMSettings (the one translation to vLLM's arguments) the bare server's flags.
ENGINE: dict[str, Any] = {"max_num_seqs": 32, "max_num_batched_tokens": 512, "kv_cache_gib": 1.0}


def _fleet_config(path: Path, args: argparse.Namespace) -> None:
    cfg = {
        "server": {"port": FLEET_PORT, "metrics_export_port": 18012, "ingress": args.ingress},
        "replicas": {"num_replicas": 1},
        "engine": {"vllm": ENGINE | {"engine_args": args.engine_args}},
        "routing": {"policy": args.router},
    }
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))


def drive(url: str, out: Path, args: argparse.Namespace, concurrency: int) -> dict[str, Any]:
    argv = [
        "--url",
        url,
        "--dataset",
        f"random:input={args.input},output={args.output}",
        "--concurrency",
        str(concurrency),
        "--num-requests",
        str(max(args.num_requests // 8 * min(concurrency, 8), 8)),
        "--seed",
        str(args.seed),
        "--warmup",
        "4",
        "--out",
        str(out),
        "--no-progress",
    ]
    rc = bench_cli.main(argv, default_tokenizer=str(default_model_dir()))
    if rc != 0:
        raise RuntimeError(f"bench run against {url} failed with {rc}")
    return json.loads(out.read_text())


def first_token_s(url: str, proc: Any, t0: float, timeout_s: float = 600.0) -> float:
    """Seconds from ``t0`` (process start) to the first streamed token of a 1-token request."""
    body = {"model": DEFAULT_MODEL, "prompt": "Hello", "max_tokens": 1, "stream": True}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server at {url} exited with {proc.returncode}")
        try:
            with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=30) as r:
                if r.status_code == 200:
                    for line in r.iter_lines():
                        if line.startswith("data: {"):
                            return time.monotonic() - t0
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    raise TimeoutError(f"{url}: no first token after {timeout_s:.0f} s")


def cpu_per_1k(delta: dict[str, float], output_tokens: int) -> dict[str, float]:
    k = max(output_tokens, 1) / 1000
    out = {r: round(v / k, 3) for r, v in sorted(delta.items()) if v > 0.005}
    out["total"] = round(sum(delta.values()) / k, 3)
    return out


def _ratios(fleet: list[dict], vllm: list[dict]) -> dict[str, float]:
    def med(runs: list[dict], *path: str) -> float:
        vals = []
        for r in runs:
            v: Any = r
            for p in path:
                v = v[p]
            vals.append(float(v))
        return statistics.median(vals)

    return {
        "output_tok_s_ratio": med(fleet, "throughput", "output_tok_s")
        / med(vllm, "throughput", "output_tok_s"),
        "ttft_p50_diff_ms": med(fleet, "ttft_ms", "p50") - med(vllm, "ttft_ms", "p50"),
        "ttft_p95_diff_ms": med(fleet, "ttft_ms", "p95") - med(vllm, "ttft_ms", "p95"),
        "itl_p95_ratio": med(fleet, "itl_ms", "p95") / med(vllm, "itl_ms", "p95"),
        "e2e_p50_ratio": med(fleet, "e2e_ms", "p50") / med(vllm, "e2e_ms", "p50"),
        "cpu_s_per_1k_tokens_vllm": med(vllm, "serving_cpu_s_per_1k_tokens", "total"),
        "cpu_s_per_1k_tokens_llmfleet": med(fleet, "serving_cpu_s_per_1k_tokens", "total"),
    }


def _plot(by_c: dict[int, dict[str, list[dict]]], out_png: Path) -> None:
    rows = by_c[max(by_c)]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(12, 3.5))
    metrics = [
        ("throughput", "output_tok_s", "output tok/s"),
        ("ttft_ms", "p50", "P50 TTFT (ms)"),
        ("itl_ms", "p95", "P95 ITL (ms)"),
    ]
    for ax, (grp, key, label) in zip(axes, metrics, strict=True):
        for i, name in enumerate(("vllm", "llmfleet")):
            vals = [r[grp][key] for r in rows[name]]
            ax.scatter([i] * len(vals), vals, label=name)
            ax.bar(i, statistics.median(vals), alpha=0.3)
        ax.set_xticks([0, 1], ["bare vLLM", "llmfleet"])
        ax.set_title(label)
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)


def _start(name: str, args: argparse.Namespace, work: Path, settings: VLLMSettings) -> Any:
    t0 = time.monotonic()
    if name == "vllm":
        proc = serverproc.start_vllm(
            settings, DEFAULT_MODEL, VLLM_PORT, work / "vllm.log", wait=False
        )
        url = f"http://127.0.0.1:{VLLM_PORT}"
    else:
        cfg = work / "fleet.yaml"
        _fleet_config(cfg, args)
        env = dict(kv.split("=", 1) for kv in args.fleet_env)
        proc = serverproc.start_llmfleet(cfg, work / "home", work / "fleet.log", env=env)
        url = f"http://127.0.0.1:{FLEET_PORT}"
    took = first_token_s(url, proc, t0)
    print(f"{name}: start to first token {took:.1f} s", flush=True)
    return proc, url, took


def _round(name: str, proc: Any, url: str, out: Path, args: argparse.Namespace, c: int) -> dict:
    before = proctree.cpu_by_role(proc.pid)
    res = drive(url, out, args, c)
    delta = proctree.cpu_delta(before, proctree.cpu_by_role(proc.pid))
    res["serving_cpu_s"] = delta
    res["serving_cpu_s_per_1k_tokens"] = cpu_per_1k(delta, res["tokens"]["output"])
    print(
        f"c={c} {name}: {res['throughput']['output_tok_s']:.1f} tok/s, "
        f"P50 TTFT {res['ttft_ms']['p50']:.1f} ms, P95 ITL {res['itl_ms']['p95']:.1f} ms, "
        f"CPU s/1k tok {res['serving_cpu_s_per_1k_tokens']}",
        flush=True,
    )
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", type=Path, default=Path("results/overhead.json"))
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--num-requests", type=int, default=64, help="at concurrency >= 8")
    p.add_argument("--concurrency", default="1,8", help="comma-separated")
    p.add_argument("--input", type=int, default=256)
    p.add_argument("--output", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--router", default="prefix")
    p.add_argument("--fleet-env", action="append", default=[], help="KEY=VALUE for llmfleet")
    p.add_argument("--ingress", choices=("proxy", "direct"), default="proxy")
    p.add_argument(
        "--engine-args",
        type=json.loads,
        default={},
        help='engine.vllm.engine_args for both servers, as JSON (e.g. \'{"kv_cache_dtype": "fp8"}\')',
    )
    args = p.parse_args(argv)
    check_engine_args(args.engine_args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    levels = [int(c) for c in str(args.concurrency).split(",")]
    model_dir = str(ensure_default_model())
    work = Path(tempfile.mkdtemp(prefix="llmfleet-overhead-"))
    settings = VLLMSettings(model_path=model_dir, **ENGINE, engine_args=args.engine_args)
    servers: dict[str, Any] = {}
    peaks: dict[str, proctree.PeakRSS] = {}
    starts: dict[str, float] = {}
    by_c: dict[int, dict[str, list[dict]]] = {c: {"vllm": [], "llmfleet": []} for c in levels}
    try:
        for name in ("vllm", "llmfleet"):  # one after the other: each starts on a quiet box
            proc, url, starts[name] = _start(name, args, work, settings)
            servers[name] = (proc, url)
            peaks[name] = proctree.PeakRSS(proc.pid).__enter__()
        for c in levels:
            for rnd in range(args.rounds):
                order = ("vllm", "llmfleet") if rnd % 2 == 0 else ("llmfleet", "vllm")
                for name in order:
                    proc, url = servers[name]
                    out = work / f"{name}-c{c}-{rnd}.json"
                    by_c[c][name].append(_round(name, proc, url, out, args, c))
    finally:
        for peak in peaks.values():
            peak.__exit__()
        for proc, _ in servers.values():
            serverproc.stop(proc)
    rss = {n: round(pk.peak / 2**30, 2) for n, pk in peaks.items()}
    summary = {
        "ratios": {f"c{c}": _ratios(rows["llmfleet"], rows["vllm"]) for c, rows in by_c.items()},
        "start_to_first_token_s": {n: round(v, 1) for n, v in starts.items()},
        "start_ratio": starts["llmfleet"] / starts["vllm"],
        "peak_rss_gib": rss,
        "peak_rss_ratio": rss["llmfleet"] / rss["vllm"],
        "runs": {f"c{c}": rows for c, rows in by_c.items()},
        "config": vars(args) | {"out": str(args.out), "cpus": os.cpu_count()},
    }
    args.out.write_text(json.dumps(summary, indent=2, default=str))
    _plot(by_c, args.out.with_suffix(".png"))
    show = {k: summary[k] for k in ("ratios", "start_to_first_token_s", "start_ratio")}
    print(
        json.dumps(
            show | {"peak_rss_gib": rss, "peak_rss_ratio": summary["peak_rss_ratio"]}, indent=2
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
