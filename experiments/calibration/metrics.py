"""Turning traces into fit samples and side-by-side metrics (pure functions).

- ``decode_sample``: steady-state step time of a decode grid point is the median
  per-request delta gap inside the window where every sequence is decoding (after the
  last first token, before the first final token); its shape is a pure decode step at the
  window's mean context.
- ``prefill_sample``: a cold prompt's TTFT spans its chunked prefill steps
  (``max_num_batched_tokens`` each, context growing; only the last one samples).
- ``summarize`` / ``compare``: P50/P95 TTFT and ITL, prefix hit rate (tokens), output
  throughput; goals: medians and throughput within 10 %, P95 within 20 %, hit rate within
  2 points.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import numpy as np

from experiments.calibration.fit import Sample
from experiments.calibration.workload import Trace
from replicas.sim.cost import BatchShape

GOALS = {
    "ttft_p50_s": ("rel", 0.10),
    "ttft_p95_s": ("rel", 0.20),
    "itl_p50_s": ("rel", 0.10),
    "itl_p95_s": ("rel", 0.20),
    "hit_rate": ("abs", 0.02),
    "throughput_tok_s": ("rel", 0.10),
}


def decode_sample(traces: list[Trace], ctx: int) -> Sample | None:
    lo = max(t.times[0] for t in traces)
    hi = min(t.times[-1] for t in traces)
    gaps: list[float] = []
    positions: list[int] = []
    for t in traces:
        for k in range(1, len(t.times)):
            if t.times[k - 1] >= lo and t.times[k] < hi:
                gaps.append((t.times[k] - t.times[k - 1]) / max(1, t.ntok[k]))
                positions.append(sum(t.ntok[:k]))
    if len(gaps) < 3:
        return None
    batch = len(traces)
    mean_ctx = ctx + statistics.fmean(positions)
    shape = BatchShape(decode_seqs=batch, decode_kv_tokens=round(batch * mean_ctx), sampled=batch)
    return Sample((shape,), statistics.median(gaps), f"decode b={batch} ctx={ctx}")


def prefill_shapes(length: int, budget: int, cached: int = 0) -> tuple[BatchShape, ...]:
    shapes: list[BatchShape] = []
    done = cached
    while done < length:
        n = min(budget, length - done)
        last = done + n >= length
        shapes.append(
            BatchShape(
                prefill_tokens=n,
                prefill_pairs=n * (done + (n + 1) * 0.5),
                prefill_kv_tokens=done + n,
                sampled=1 if last else 0,
            )
        )
        done += n
    return tuple(shapes)


def prefill_sample(trace: Trace, budget: int) -> Sample:
    shapes = prefill_shapes(trace.prompt_len, budget, trace.cached_tokens)
    return Sample(shapes, trace.ttft, f"prefill len={trace.prompt_len}")


@dataclass(frozen=True, slots=True)
class Summary:
    n: int
    ttft_p50_s: float
    ttft_p95_s: float
    itl_p50_s: float
    itl_p95_s: float
    hit_rate: float
    throughput_tok_s: float

    def as_dict(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def summarize(traces: list[Trace], hits: float, queries: float) -> Summary:
    done = [t for t in traces if t.times]
    ttft = [t.ttft for t in done]
    itl = [g for t in done for g in t.itls()]
    out_tokens = sum(sum(t.ntok) for t in done)
    span = max(t.times[-1] for t in done) - min(t.send for t in done)
    return Summary(
        n=len(done),
        ttft_p50_s=float(np.percentile(ttft, 50)),
        ttft_p95_s=float(np.percentile(ttft, 95)),
        itl_p50_s=float(np.percentile(itl, 50)) if itl else 0.0,
        itl_p95_s=float(np.percentile(itl, 95)) if itl else 0.0,
        hit_rate=hits / queries if queries else 0.0,
        throughput_tok_s=out_tokens / span if span > 0 else 0.0,
    )


def compare(real: Summary, sim: Summary) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for key, (kind, tol) in GOALS.items():
        r, s = getattr(real, key), getattr(sim, key)
        if kind == "abs":
            err = s - r
            ok = abs(err) <= tol
        else:
            err = (s - r) / r if r else float("inf")
            ok = abs(err) <= tol
        rows.append({"metric": key, "real": r, "sim": s, "error": err, "kind": kind,
                     "goal": tol, "met": ok})  # fmt: skip
    return rows


def markdown_table(rows: list[dict[str, object]]) -> str:
    lines = ["| metric | real | sim | error | goal | met |", "|---|---|---|---|---|---|"]
    for row in rows:
        key = str(row["metric"])
        scale, unit = {"hit_rate": (100.0, " %"), "throughput_tok_s": (1.0, " tok/s")}.get(
            key, (1000.0, " ms")
        )
        r, s = float(row["real"]) * scale, float(row["sim"]) * scale  # type: ignore[arg-type]
        err = float(row["error"])  # type: ignore[arg-type]
        goal = float(row["goal"])  # type: ignore[arg-type]
        if row["kind"] == "abs":
            err_s, goal_s = f"{err * 100:+.1f} pts", f"±{goal * 100:.0f} pts"
        else:
            err_s, goal_s = f"{err * 100:+.1f} %", f"±{goal * 100:.0f} %"
        met = "yes" if row["met"] else "**no**"
        lines.append(f"| {key} | {r:.1f}{unit} | {s:.1f}{unit} | {err_s} | {goal_s} | {met} |")
    return "\n".join(lines)
