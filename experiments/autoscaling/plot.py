"""One PNG per (mode, workload): replicas, worst queue delay and TTFT over time, one line
per policy (queue delay as the worst sample per bucket/6, TTFT as the P95 of the requests
sent in each bucket, SLO dashed; dotted verticals mark the load steps)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from bench.types import RequestRecord
from experiments.autoscaling.metrics import Sample


def ttft_buckets(
    records: Sequence[RequestRecord], bucket_s: float
) -> tuple[list[float], list[float]]:
    """(bucket mid-times, P95 TTFT in s) over requests by send time; failures excluded."""
    buckets: dict[int, list[float]] = {}
    for r in records:
        if r.error is None and r.ttft_s is not None:
            buckets.setdefault(int(r.send_s // bucket_s), []).append(r.ttft_s)
    xs, ys = [], []
    for k in sorted(buckets):
        vals = sorted(buckets[k])
        xs.append((k + 0.5) * bucket_s)
        ys.append(vals[min(len(vals) - 1, int(0.95 * len(vals)))])
    return xs, ys


def queue_buckets(samples: Sequence[Sample], width_s: float) -> tuple[list[float], list[float]]:
    """Worst queue delay per ``width_s`` bucket (raw samples flicker between 0 and a peak)."""
    worst: dict[int, float] = {}
    for s in samples:
        k = int(s.t // width_s)
        worst[k] = max(worst.get(k, 0.0), s.queue_delay_s)
    keys = sorted(worst)
    return [(k + 0.5) * width_s for k in keys], [worst[k] for k in keys]


def plot_runs(
    runs: dict[str, tuple[Sequence[Sample], Sequence[RequestRecord]]],
    *,
    title: str,
    slo_s: float,
    out: Path,
    bucket_s: float,
    marks: Sequence[float] = (),
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, figsize=(11, 9), sharex=True)
    for label, (samples, records) in runs.items():
        axes[0].step(
            [s.t for s in samples], [s.replicas for s in samples], where="post", label=label
        )
        axes[1].plot(*queue_buckets(samples, bucket_s / 6), lw=0.8, label=label)
        bx, by = ttft_buckets(records, bucket_s)
        axes[2].plot(bx, by, lw=0.9, label=label)
    axes[2].axhline(slo_s, color="k", ls="--", lw=0.8, label="TTFT SLO")
    for ax, name in zip(axes, ("replicas (running + starting)", f"worst queue delay per {bucket_s / 6:.2g} s (s)",
                                f"P95 TTFT per {bucket_s:g} s (s)"), strict=True):  # fmt: skip
        ax.set_ylabel(name)
        for m in marks:
            ax.axvline(m, color="grey", ls=":", lw=0.8)
    axes[2].set_yscale("log")
    axes[2].set_xlabel("time (s)")
    axes[0].legend(fontsize=8, ncol=2)
    fig.suptitle(title)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)
