"""PNG plots (matplotlib, Agg backend): TTFT and ITL CDFs plus a request-lane timeline
(grey = waiting for the first token, i.e. queue + prefill; blue = decode; red = failed),
and for sweeps the latency-vs-throughput curve with the SLO line."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from bench.report import latency_samples
from bench.types import RequestRecord

MAX_LANES = 400


def _cdf(ax: Any, values: list[float], title: str) -> None:
    ax.set_title(title)
    ax.set_xlabel("ms")
    ax.set_ylabel("fraction ≤ x")
    if values:
        ordered = sorted(values)
        n = len(ordered)
        ax.plot(ordered, [(i + 1) / n for i in range(n)])
    ax.grid(alpha=0.3)


def _timeline(ax: Any, records: Sequence[RequestRecord]) -> None:
    ax.set_title("request lanes (grey: to first token, blue: decode, red: failed)")
    ax.set_xlabel("s since start")
    ax.set_ylabel("request")
    lanes = sorted(records, key=lambda r: r.send_s)[:MAX_LANES]
    for lane, r in enumerate(lanes):
        if r.error is not None:
            end = r.token_times_s[-1] if r.token_times_s else r.send_s + 0.001
            ax.broken_barh([(r.send_s, max(end - r.send_s, 0.001))], (lane, 0.8), color="tab:red")
            continue
        ttft = r.ttft_s or 0.0
        ax.broken_barh([(r.send_s, ttft)], (lane, 0.8), color="0.6")
        ax.broken_barh([(r.send_s + ttft, (r.e2e_s or ttft) - ttft)], (lane, 0.8), color="tab:blue")


def plot_run(result: dict, records: Sequence[RequestRecord], out_png: Path | str) -> None:
    lat = latency_samples([r for r in records if r.error is None])
    fig, axes = plt.subplots(3, 1, figsize=(9, 12))
    _cdf(axes[0], lat["ttft_ms"], f"TTFT CDF (p95 {result['ttft_ms']['p95'] or 0:.1f} ms)")
    _cdf(axes[1], lat["itl_ms"], f"ITL CDF (p95 {result['itl_ms']['p95'] or 0:.1f} ms)")
    _timeline(axes[2], records)
    fig.tight_layout()
    Path(out_png).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=90)
    plt.close(fig)


def plot_sweep(
    rows: list[dict[str, Any]], out_png: Path | str, slo: dict[str, float] | None = None
) -> None:
    """rows: [{"rate": R, "result": result_json}, ...] → P95 TTFT / TPOT vs output tok/s."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    xs = [row["result"]["throughput"]["output_tok_s"] for row in rows]
    for ax, key in zip(axes, ("ttft_ms", "tpot_ms"), strict=True):
        ys = [row["result"][key]["p95"] for row in rows]
        pts = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o")
        for row, x, y in zip(rows, xs, ys, strict=True):
            if y is not None:
                ax.annotate(f"{row['rate']:g} req/s", (x, y), fontsize=7)
        if slo and key in slo:
            ax.axhline(slo[key], color="tab:red", linestyle="--", label=f"SLO {slo[key]:g} ms")
            ax.legend()
        ax.set_xlabel("output tok/s")
        ax.set_ylabel(f"P95 {key}")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    Path(out_png).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=90)
    plt.close(fig)
