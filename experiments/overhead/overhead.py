"""`make bench-overhead`: llmfleet (1 replica) vs the bare vLLM OpenAI server, same model,
same engine arguments, same request set, alternating runs in one script.

Prints and writes: output tok/s ratio (llmfleet / vLLM), P50/P95 TTFT difference (ms) and
P95 ITL ratio, each the median over the alternating rounds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from bench import cli as bench_cli
from experiments import serverproc
from replicas.model_prep import DEFAULT_MODEL, default_model_dir, ensure_default_model
from replicas.vllm_engine import VLLMSettings

VLLM_PORT, FLEET_PORT = 8011, 8012


# The engine arguments both sides run with: llmfleet's engine.vllm section, and through
# VLLMSettings (the one translation to vLLM's arguments) the bare server's flags.
ENGINE: dict[str, Any] = {"max_num_seqs": 32, "max_num_batched_tokens": 512, "kv_cache_gib": 1.0}


def _fleet_config(path: Path, args: argparse.Namespace) -> None:
    engine = "".join(f"    {k}: {v}\n" for k, v in ENGINE.items())
    path.write_text(
        f"server:\n  port: {FLEET_PORT}\n  metrics_export_port: 18012\n"
        f"replicas:\n  num_replicas: 1\n"
        f"engine:\n  vllm:\n{engine}"
        f"routing:\n  policy: {args.router}\n"
    )


def drive(url: str, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    argv = [
        "--url",
        url,
        "--dataset",
        f"random:input={args.input},output={args.output}",
        "--concurrency",
        str(args.concurrency),
        "--num-requests",
        str(args.num_requests),
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
    }


def _plot(rows: dict[str, list[dict]], out_png: Path) -> None:
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", type=Path, default=Path("results/overhead.json"))
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--num-requests", type=int, default=64)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--input", type=int, default=256)
    p.add_argument("--output", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--router", default="prefix")
    args = p.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    model_dir = str(ensure_default_model())
    work = Path(tempfile.mkdtemp(prefix="llmfleet-overhead-"))
    rows: dict[str, list[dict]] = {"vllm": [], "llmfleet": []}
    settings = VLLMSettings(model_path=model_dir, **ENGINE)
    vllm = serverproc.start_vllm(settings, DEFAULT_MODEL, VLLM_PORT, work / "vllm.log")
    try:
        cfg = work / "fleet.yaml"
        _fleet_config(cfg, args)
        fleet = serverproc.start_llmfleet(cfg, work / "home", work / "fleet.log")
        try:
            serverproc.wait_http(f"http://127.0.0.1:{FLEET_PORT}/health", fleet)
            for rnd in range(args.rounds):
                order = ("vllm", "llmfleet") if rnd % 2 == 0 else ("llmfleet", "vllm")
                for name in order:
                    port = VLLM_PORT if name == "vllm" else FLEET_PORT
                    res = drive(f"http://127.0.0.1:{port}", work / f"{name}-{rnd}.json", args)
                    rows[name].append(res)
                    print(
                        f"round {rnd} {name}: {res['throughput']['output_tok_s']:.1f} tok/s, "
                        f"P50 TTFT {res['ttft_ms']['p50']:.1f} ms",
                        flush=True,
                    )
        finally:
            serverproc.stop(fleet)
    finally:
        serverproc.stop(vllm)
    summary = {
        "ratios": _ratios(rows["llmfleet"], rows["vllm"]),
        "runs": rows,
        "config": vars(args) | {"out": str(args.out)},
    }
    args.out.write_text(json.dumps(summary, indent=2, default=str))
    _plot(rows, args.out.with_suffix(".png"))
    print(json.dumps(summary["ratios"], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
