"""Calibration outputs: ``results/calibration.json`` and a PNG beside it.

The PNG has three panels: TTFT CDF and ITL CDF of the held-out run (real vs sim), and the
fit's measured vs predicted step/TTFT times for the grid samples.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from experiments.calibration.fit import FitResult, Sample
from experiments.calibration.metrics import Summary, compare, markdown_table
from experiments.calibration.workload import Trace
from replicas.sim import profiles
from replicas.sim.cost import CostModel


def predicted(samples: list[Sample]) -> list[float]:
    cost = CostModel(profiles.model("smollm2-135m"), profiles.hardware("cpu"))
    return [sum(cost.step_time(s) for s in smp.shapes) for smp in samples]


def write_outputs(
    path: Path,
    raw: dict[str, Any],
    samples: list[Sample],
    fit: FitResult,
    real: Summary,
    sim: Summary,
    sim_traces: list[Trace],
) -> str:
    rows = compare(real, sim)
    table = markdown_table(rows)
    pred = predicted(samples)
    doc = {
        "command": "make calibrate-sim",
        "load_avg": raw["load_avg"],
        "heldout": raw["heldout"],
        "fit": {"constants": fit.constants, "rel_rmse": fit.rel_rmse,
                "max_rel_err": fit.max_rel_err, "unbound": list(fit.unbound)},
        "grid": [{"label": s.label, "measured_s": s.seconds, "predicted_s": p}
                 for s, p in zip(samples, pred, strict=True)],
        "real": real.as_dict(),
        "sim": sim.as_dict(),
        "comparison": rows,
        "all_goals_met": all(bool(r["met"]) for r in rows),
        "table_markdown": table,
    }  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n")
    real_traces = [Trace(**t) for t in raw["traces"]]
    _plot(path.with_suffix(".png"), real_traces, sim_traces, samples, pred)
    return table


def _cdf(ax: Any, values: list[float], label: str) -> None:
    xs = np.sort(np.asarray(values) * 1000.0)
    ax.plot(xs, np.arange(1, len(xs) + 1) / len(xs), label=label)


def _plot(
    path: Path, real: list[Trace], sim: list[Trace], samples: list[Sample], pred: list[float]
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for traces, name in ((real, "real vLLM-CPU"), (sim, "simulator")):
        done = [t for t in traces if t.times]
        _cdf(axes[0], [t.ttft for t in done], name)
        _cdf(axes[1], [g for t in done for g in t.itls()], name)
    axes[0].set(xlabel="TTFT (ms)", ylabel="CDF", title="Held-out TTFT", xscale="log")
    axes[1].set(xlabel="ITL (ms)", ylabel="CDF", title="Held-out ITL", xscale="log")
    meas = [s.seconds * 1000 for s in samples]
    pr = [p * 1000 for p in pred]
    colors = ["tab:red" if s.label.startswith("prefill") else "tab:blue" for s in samples]
    axes[2].scatter(meas, pr, c=colors, s=14)
    lim = [min(meas + pr) * 0.8, max(meas + pr) * 1.25]
    axes[2].plot(lim, lim, "k--", lw=0.8)
    axes[2].set(xscale="log", yscale="log", xlabel="measured (ms)", ylabel="fitted model (ms)",
                title="Grid fit (blue decode step, red cold TTFT)")  # fmt: skip
    from matplotlib.ticker import NullFormatter

    for ax in axes[:2]:
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.legend()
        ax.grid(alpha=0.3)
    axes[2].grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
