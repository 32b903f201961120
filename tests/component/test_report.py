"""Component: `llmfleet report` against a real Prometheus (Debian's binary) scraping a synthetic
exporter every second. The exporter's traffic is known exactly — per tick (10/s): 10 edge TTFTs,
8 of 0.12 s and 2 of 0.45 s; outcomes good 8, slow_ttft 2, invalid 1 — so goodput is 80 % and
P95 TTFT lies in the (0.4, 0.5] bucket."""

from __future__ import annotations

import json
import struct
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from cluster import cli
from cluster.observe import prometheus
from contracts.metrics import (
    AUTOSCALER_DESIRED,
    ITL,
    LATENCY_BUCKETS_S,
    OUTPUT_TOKENS,
    REPLICA_HEALTHY,
    REQUEST_OUTPUT_TOKENS,
    REQUESTS,
    TTFT,
    Metric,
    prom,
)

pytestmark = [pytest.mark.component]

TICKS_PER_S = 10
TTFT_PER_TICK = {0.12: 8, 0.45: 2}
ITL_PER_TICK = {0.018: 36, 0.06: 4}
OUTCOMES_PER_TICK = {"good": 8, "slow_ttft": 2, "invalid": 1}
TOKENS_PER_TICK = {"good": 320, "slow_ttft": 80}
MODEL = 'model="m"'


def _histogram(metric: Metric, per_tick: dict[float, int], ticks: int) -> list[str]:
    name = prom(metric)
    lines = [f"# TYPE {name} histogram"]
    for le in (*LATENCY_BUCKETS_S, float("inf")):
        n = sum(c for v, c in per_tick.items() if v <= le) * ticks
        lines.append(f'{name}_bucket{{{MODEL},le="{"+Inf" if le == float("inf") else le}"}} {n}')
    lines.append(f"{name}_sum{{{MODEL}}} {sum(v * c for v, c in per_tick.items()) * ticks}")
    lines.append(f"{name}_count{{{MODEL}}} {sum(per_tick.values()) * ticks}")
    return lines


def exposition(ticks: int) -> str:
    lines = _histogram(TTFT, TTFT_PER_TICK, ticks) + _histogram(ITL, ITL_PER_TICK, ticks)
    lines.append(f"# TYPE {prom(REQUESTS)} counter")
    for outcome, n in OUTCOMES_PER_TICK.items():
        lines.append(f'{prom(REQUESTS)}{{{MODEL},outcome="{outcome}"}} {n * ticks}')
    lines.append(f"# TYPE {prom(REQUEST_OUTPUT_TOKENS)} counter")
    for outcome, n in TOKENS_PER_TICK.items():
        lines.append(f'{prom(REQUEST_OUTPUT_TOKENS)}{{{MODEL},outcome="{outcome}"}} {n * ticks}')
    for replica in ("r1", "r2"):
        lines.append(f'{prom(OUTPUT_TOKENS)}{{{MODEL},replica="{replica}"}} {200 * ticks}')
        lines.append(f'{prom(REPLICA_HEALTHY)}{{{MODEL},replica="{replica}"}} 1')
    lines.append(f'{prom(AUTOSCALER_DESIRED)}{{deployment_name="LLMReplica",policy="p"}} 2')
    return "\n".join(lines) + "\n"


@pytest.fixture
def exporter() -> Iterator[str]:
    t0 = time.monotonic()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_: Any) -> None:
            pass

        def do_GET(self) -> None:
            body = exposition(int((time.monotonic() - t0) * TICKS_PER_S)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def test_report_from_a_live_prometheus(exporter: str, tmp_path: Path, capsys: Any) -> None:
    why = prometheus.available()
    if why:
        pytest.skip(why)
    cfg = tmp_path / "fleet.yaml"
    cfg.write_text("slo:\n  ttft_s: 0.4\n  goodput_objective: 0.9\n")
    out = tmp_path / "report"
    with prometheus.PrometheusServer([exporter], interval_s=1.0) as server:
        assert server.wait_for(prom(REQUESTS), timeout_s=15), server.log_tail()
        time.sleep(12)
        argv = ["report", "--prometheus", server.url, "--since", "2m", "--out", str(out)]
        # the exporter moves every scrape (Ray's would every 10 s): short rate windows are fine
        argv += ["--config", str(cfg), "--rate-window", "4s"]
        assert cli.main(argv) == 0, capsys.readouterr().err

    panels = ["ttft_p95", "itl_p95", "tokens", "goodput", "replicas"]
    for name in panels:
        width, height = png_size(out / f"{name}.png")
        assert width >= 400
        assert height >= 200
        assert (out / f"{name}.png").stat().st_size > 10_000
    width, height = png_size(out / "report.png")
    assert width > 1000
    assert height > 800

    page = (out / "report.html").read_text()
    assert 'src="report.png"' in page
    assert all(f'href="{name}.png"' in page for name in panels)
    assert "no data" not in page
    assert "http" not in page.replace('lang="en"', "")  # no external assets

    result = json.loads((out / "report.json").read_text())
    s = result["summary"]
    assert s["goodput_pct"] == pytest.approx(80.0, abs=2.0)
    assert 0.4 < s["ttft_p95_s"] <= 0.5  # the (0.4, 0.5] bucket
    assert 0.1 < s["ttft_p50_s"] <= 0.15
    assert 0.05 < s["itl_p95_s"] <= 0.075
    assert s["requests_by_outcome"]["slow_ttft"] > 0
    assert result["scrape_interval_s"] == 1.0
    assert result["step_s"] == 1.0
    assert result["rate_window_s"] == 4

    series = {k: {x["label"]: x["v"] for x in p["series"]} for k, p in result["panels"].items()}
    assert set(series["tokens"]) == {"all (engine)", "good (edge)"}
    assert series["tokens"]["all (engine)"][-1] == pytest.approx(4000, rel=0.15)
    assert series["tokens"]["good (edge)"][-1] == pytest.approx(3200, rel=0.15)
    assert set(series["replicas"]["healthy"]) == {2.0}
    assert set(series["replicas"]["desired (autoscaler)"]) == {2.0}
    assert all(0.4 < v <= 0.5 for v in series["ttft_p95"]["P95 TTFT"])
    assert all(abs(v - 80) < 2 for v in series["goodput"]["goodput"])
    assert result["panels"]["ttft_p95"]["thresholds"] == {"slo.ttft_s 0.4s": 0.4}
