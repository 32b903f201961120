"""Virtual-time experiments on one simulated engine, written under results/ as PNG + JSON.

1. Batching: static (wait for a full batch of B), dynamic (full or ``timeout``) and
   continuous batching of Llama-3-8B on one H100 under Poisson load at several rates;
   mean queue wait (arrival -> admission), P95 TTFT, output throughput.
2. Chunked prefill: 16 sequences decoding when one long prompt arrives; inter-token
   latency of the running decodes with chunked prefill on (budget 2048) and off (the whole
   prompt in one step, budget = prompt), plus the long prompt's TTFT.
Run: python -m experiments.batching.batching [--out-dir results] [--requests 300]
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from contracts.hashing import block_hashes
from replicas.sim.core import CoreConfig, EngineCore
from replicas.sim.request import SimRequest

RATES = (2.0, 4.0, 8.0, 16.0, 24.0, 32.0)
MODES = ("static", "dynamic", "continuous")


def simulate(core: EngineCore, arrivals: Sequence[tuple[float, SimRequest]]) -> float:
    """Drive one core in virtual time until every request finished; returns the end time."""
    now, i, pending = 0.0, 0, sorted(arrivals, key=lambda a: a[0])
    while i < len(pending) or core.scheduler.has_work():
        while i < len(pending) and pending[i][0] <= now:
            core.add(pending[i][1], pending[i][0])
            i += 1
        batch, dt = core.begin_step(now)
        if batch is None:
            nxt = [pending[i][0]] if i < len(pending) else []
            wake = core.scheduler.next_wakeup()
            nxt += [wake] if wake is not None else []
            if not nxt:
                core.scheduler.flush()  # static batching: release the last partial batch
                continue
            now = max(now, min(nxt))
            continue
        core.end_step(batch, now, now + dt)
        now += dt
    return now


def _q(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _workload(n: int, rate: float, seed: int) -> list[tuple[float, SimRequest]]:
    rng = random.Random(seed)
    t, out = 0.0, []
    for k in range(n):
        t += rng.expovariate(rate)
        prompt = [rng.randrange(1000, 30000) for _ in range(512)]
        req = SimRequest(
            str(k), 512, block_hashes(prompt, 16), max(1, int(rng.expovariate(1 / 128)))
        )
        out.append((t, req))
    return out


def batching_experiment(n: int, seed: int) -> list[dict[str, Any]]:
    rows = []
    for mode in MODES:
        for rate in RATES:
            cfg = CoreConfig(
                model="llama-3-8b",
                hardware="h100",
                batching=mode,
                batch_size=16,
                batch_timeout_s=0.1,
            )
            core = EngineCore(cfg)
            work = _workload(n, rate, seed)
            end = simulate(core, work)
            reqs = [r for _, r in work]
            waits = [(r.first_scheduled or 0.0) - r.arrival for r in reqs]
            ttfts = [(r.first_token_time or 0.0) - r.arrival for r in reqs]
            rows.append(
                {
                    "mode": mode,
                    "rate": rate,
                    "mean_queue_wait_ms": 1000 * sum(waits) / len(waits),
                    "p95_ttft_ms": 1000 * _q(ttfts, 0.95),
                    "output_tok_s": sum(r.num_output for r in reqs) / end,
                }
            )
    return rows


def chunked_prefill_experiment(prompt: int = 32_768, decoders: int = 16) -> list[dict[str, Any]]:
    rows = []
    for chunked in (True, False):
        budget = 2048 if chunked else prompt + 2048  # off: the whole prompt fits one step
        cfg = CoreConfig(
            model="llama-3-8b",
            hardware="h100",
            enable_chunked_prefill=chunked,
            max_num_batched_tokens=budget,
        )
        core = EngineCore(cfg)
        work = [
            (0.0, SimRequest(f"d{k}", 256, block_hashes([k] * 256, 16), 400))
            for k in range(decoders)
        ]
        long_req = SimRequest("long", prompt, block_hashes(list(range(prompt)), 16), 1)
        work.append((1.0, long_req))
        simulate(core, work)
        window = (1.0, long_req.first_token_time or 1.0)  # while the long prompt prefills
        itls = [
            b - a
            for _, r in work[:-1]
            for a, b in zip(r.token_times, r.token_times[1:], strict=False)
            if window[0] <= b <= window[1]
        ]
        rows.append(
            {
                "chunked_prefill": chunked,
                "max_num_batched_tokens": budget,
                "long_prompt_tokens": prompt,
                "long_prompt_ttft_ms": 1000 * ((long_req.first_token_time or 0.0) - 1.0),
                "decode_itl_p50_ms": 1000 * _q(itls, 0.5),
                "decode_itl_mean_ms": 1000 * sum(itls) / len(itls),
                "decode_itl_max_ms": 1000 * max(itls),
                "decode_itl_series_ms": [1000 * x for x in _series(work[0][1].token_times, window)],
            }
        )
    return rows


def _series(times: list[float], window: tuple[float, float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(times) if window[0] - 0.3 <= b <= window[1] + 0.3]


def _plot(batching: list[dict[str, Any]], chunked: list[dict[str, Any]], out_dir: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for mode in MODES:
        rows = [r for r in batching if r["mode"] == mode]
        axes[0].plot(
            [r["rate"] for r in rows], [r["mean_queue_wait_ms"] for r in rows], "o-", label=mode
        )
        axes[1].plot([r["rate"] for r in rows], [r["p95_ttft_ms"] for r in rows], "o-", label=mode)
    for ax, title in zip(axes, ("mean queue wait (ms)", "P95 TTFT (ms)"), strict=True):
        ax.set(xlabel="request rate (req/s)", title=title, yscale="log")
        ax.legend()
    fig.suptitle("Llama-3-8B / H100 (simulated): static vs dynamic vs continuous batching")
    fig.tight_layout()
    fig.savefig(out_dir / "sim_batching.png", dpi=100)
    fig, ax = plt.subplots(figsize=(6, 4))
    for row in chunked:
        ax.plot(
            row["decode_itl_series_ms"],
            ".-",
            label=f"chunked prefill {'on' if row['chunked_prefill'] else 'off'}",
        )
    ax.set(
        xlabel="decode step of one running sequence",
        ylabel="inter-token latency (ms)",
        yscale="log",
    )
    ax.set_title("ITL of running decodes while a 32k-token prompt arrives")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out_dir / "sim_chunked_prefill.png", dpi=100)
    plt.close("all")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out-dir", default="results")
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    batching = batching_experiment(args.requests, args.seed)
    chunked = chunked_prefill_experiment()
    (out / "sim_batching.json").write_text(json.dumps(batching, indent=2) + "\n")
    (out / "sim_chunked_prefill.json").write_text(json.dumps(chunked, indent=2) + "\n")
    _plot(batching, chunked, out)
    for r in batching:
        print(
            f"{r['mode']:>10} rate {r['rate']:5.1f}: wait {r['mean_queue_wait_ms']:9.1f} ms  p95 TTFT {r['p95_ttft_ms']:9.1f} ms  {r['output_tok_s']:7.0f} tok/s"
        )
    for r in chunked:
        print(
            f"chunked={r['chunked_prefill']}: decode ITL p50 {r['decode_itl_p50_ms']:.1f} ms max {r['decode_itl_max_ms']:.1f} ms; long TTFT {r['long_prompt_ttft_ms']:.0f} ms"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
