"""The pictures and the page of ``llmfleet report``, and the panel values they draw
(``report.py`` builds the panels' queries and fetches the data).

One PNG per panel, ``report.png`` (the panels in a grid) and ``report.html`` (self-contained:
the summary table and the PNGs by relative path). Matplotlib through ``Figure`` objects with
the Agg canvas — no pyplot state, no display. Thresholds are dashed horizontal lines; a panel
without samples says "no data".
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.dates import DateFormatter, date2num
from matplotlib.figure import Figure

if TYPE_CHECKING:
    from matplotlib.axes import Axes

GRID_COLUMNS = 2
_THRESHOLD_COLORS = ("tab:red", "tab:orange")


@dataclass(frozen=True, slots=True)
class Line:
    label: str
    expr: str  # PromQL giving one series


@dataclass(frozen=True, slots=True)
class Panel:
    key: str  # file stem
    title: str
    unit: str
    lines: tuple[Line, ...]
    thresholds: tuple[tuple[str, float], ...] = ()


@dataclass(slots=True)
class Series:
    """A line's samples (unix seconds, values), NaN and Inf dropped."""

    label: str
    t: list[float] = field(default_factory=list)
    v: list[float] = field(default_factory=list)


@dataclass(slots=True)
class PanelData:
    panel: Panel
    series: list[Series]

    @property
    def empty(self) -> bool:
        return not any(s.v for s in self.series)


def _num(ts: float) -> float:
    return float(date2num(datetime.fromtimestamp(ts)))


def draw_panel(ax: Axes, data: PanelData, span: tuple[float, float]) -> None:
    """``span``: the report window (unix seconds), the x range even where data is missing."""
    panel = data.panel
    ax.set_title(panel.title)
    ax.set_ylabel(panel.unit)
    ax.grid(alpha=0.3)
    if data.empty:
        ax.text(
            0.5,
            0.5,
            "no data",
            ha="center",
            va="center",
            transform=ax.transAxes,
            fontsize=14,
            color="0.4",
        )
        ax.set_xticks([])
        ax.set_yticks([])
        return
    for i, s in enumerate(data.series):  # later lines dashed: equal values stay visible
        ax.plot([_num(t) for t in s.t], s.v, label=s.label, linestyle="-" if i == 0 else "--")
    for (label, value), color in zip(panel.thresholds, _THRESHOLD_COLORS, strict=False):
        ax.axhline(value, linestyle="--", color=color, linewidth=1, label=label)
    ax.set_xlim(_num(span[0]), _num(span[1]))
    ax.xaxis.set_major_formatter(DateFormatter("%H:%M:%S"))
    ax.tick_params(axis="x", labelsize=8)
    top = max([v for s in data.series for v in s.v] + [v for _, v in panel.thresholds])
    ax.set_ylim(0, top * 1.15 or 1.0)
    ax.legend(fontsize=8, loc="best")


def _save(fig: Figure, path: Path) -> None:
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=90)


def write_panel(data: PanelData, span: tuple[float, float], path: Path) -> None:
    fig = Figure(figsize=(7, 3.6), layout="tight")
    draw_panel(fig.add_subplot(), data, span)
    _save(fig, path)


def write_grid(data: list[PanelData], span: tuple[float, float], title: str, path: Path) -> None:
    rows = math.ceil(len(data) / GRID_COLUMNS)
    fig = Figure(figsize=(7 * GRID_COLUMNS, 3.6 * rows + 0.6), layout="constrained")
    fig.suptitle(title)
    axes = fig.subplots(rows, GRID_COLUMNS, squeeze=False).ravel()
    for ax, d in zip(axes, data, strict=False):
        draw_panel(ax, d, span)
    for ax in axes[len(data) :]:
        ax.set_visible(False)
    _save(fig, path)


def _fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "no data"
    if unit == "s":
        return f"{value * 1000:.0f} ms" if value < 10 else f"{value:.1f} s"
    if unit == "%":
        return f"{value:.1f} %"
    return f"{value:,.1f}" if isinstance(value, float) else f"{value:,}"


def summary_rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    outcomes = ", ".join(f"{k} {v:g}" for k, v in sorted(s["requests_by_outcome"].items()))
    return [
        ("requests", _fmt(s["requests"]) + (f" ({outcomes})" if outcomes else "")),
        (
            "goodput",
            f"{_fmt(s['goodput_pct'], '%')} (objective {s['goodput_objective_pct']:.1f} %)",
        ),
        ("TTFT P50", _fmt(s["ttft_p50_s"], "s")),
        ("TTFT P95", f"{_fmt(s['ttft_p95_s'], 's')} (limit {_fmt(s['ttft_slo_s'], 's')})"),
        ("TTFT P99", _fmt(s["ttft_p99_s"], "s")),
        ("ITL P95", _fmt(s["itl_p95_s"], "s")),
        ("output tok/s (mean)", _fmt(s["output_tokens_per_s"])),
        ("good tok/s (mean)", _fmt(s["good_tokens_per_s"])),
    ]


def _window_text(result: dict[str, Any]) -> str:
    w = result["window"]
    start = datetime.fromtimestamp(w["start"]).strftime("%Y-%m-%d %H:%M:%S")
    end = datetime.fromtimestamp(w["end"]).strftime("%H:%M:%S")
    return f"{start} – {end} ({w['seconds']:g} s, step {result['step_s']:g} s, rate window {result['rate_window_s']} s)"


def page(result: dict[str, Any], panel_files: list[tuple[str, str]]) -> str:
    e = html.escape
    rows = "\n".join(
        f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in summary_rows(result["summary"])
    )
    links = " · ".join(f'<a href="{e(f)}">{e(t)}</a>' for t, f in panel_files)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>llmfleet report</title>
<style>
body {{ font-family: sans-serif; margin: 1.5em; color: #222; }}
table {{ border-collapse: collapse; margin-bottom: 1em; }}
th, td {{ text-align: left; padding: 0.2em 1em 0.2em 0; border-bottom: 1px solid #ddd; }}
img {{ max-width: 100%; }}
</style></head>
<body>
<h1>llmfleet report</h1>
<p>{e(_window_text(result))}. Quantiles from the edge histograms summed over replicas
(<code>histogram_quantile</code> over the whole window).</p>
<table>
{rows}
</table>
<img src="report.png" alt="SLA panels">
<p>Panels: {links} · <a href="report.json">report.json</a></p>
</body></html>
"""


def write_all(data: list[PanelData], result: dict[str, Any], out: Path) -> None:
    span = (result["window"]["start"], result["window"]["end"])
    files = []
    for d in data:
        name = f"{d.panel.key}.png"
        write_panel(d, span, out / name)
        files.append((d.panel.title, name))
    write_grid(data, span, f"llmfleet report — {_window_text(result)}", out / "report.png")
    (out / "report.html").write_text(page(result, files))
