"""Bar charts for the router comparison: P95 TTFT and prefix-cache hit rate per policy, one
row of two panels per scenario, ours highlighted."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

OURS_COLOR = "#1f77b4"
OTHER_COLOR = "#9a9a9a"


def plot_scenarios(scenarios: Sequence[Mapping[str, Any]], out: Path) -> Path | None:
    if not scenarios:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(scenarios), 2, figsize=(12, 3.4 * len(scenarios)), squeeze=False)
    for ax_row, sc in zip(axes, scenarios, strict=True):
        rows = sc["policies"]
        names = [r["policy"] for r in rows]
        colors = [OURS_COLOR if n.startswith("prefix") else OTHER_COLOR for n in names]
        p95 = [(r["ttft_p95_ms"] or 0.0) / 1000.0 for r in rows]
        hits = [r["hit_rate"] * 100 for r in rows]
        for ax, values, label in (
            (ax_row[0], p95, "P95 TTFT (s)"),
            (ax_row[1], hits, "hit rate (%)"),
        ):
            bars = ax.bar(names, values, color=colors)
            ax.bar_label(bars, fmt="%.2f" if label.startswith("P95") else "%.1f", fontsize=8)
            ax.set_ylabel(label)
            ax.set_title(f"{sc['scenario']}: {label}", fontsize=10)
            ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
