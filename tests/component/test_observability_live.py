"""Observability end to end: a real Prometheus (Debian's, on 127.0.0.1) scrapes a live
simulated fleet while ``llmfleet bench`` sends a bounded, overloading load (some requests
good, some slow, some refused); then

- every metric of the catalogue is exported under the name the dashboards use;
- every panel query of every committed dashboard (variables substituted) returns a
  non-empty, finite result;
- the overview's goodput panel agrees with the load generator's own attainment within
  2 points (beyond what Serve's proxy hop, measured during the run, can explain: see
  ``test_goodput_panel_agrees_with_the_load_generator``);
- the generated alert rules load into that Prometheus and evaluate without error.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cluster.observe.prometheus import PrometheusServer, available
from contracts import metrics as M
from tests.serve_fixtures import TEST_METRICS_PORT, TEST_URL, delete_app, deploy_app, sim_fleet

pytestmark = pytest.mark.skipif(available() is not None, reason=str(available()))

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "dashboards"
MODEL = "smollm2-135m-instruct"
N_REQUESTS = 140
SLO = {"ttft_s": 0.5, "tpot_s": 0.05}
NOT_EXPECTED = {  # exported only in situations this run does not create
    M.ROUTER_KV_EVENTS.name: "prefix-precise routing only",
    M.INGRESS_QUOTA_SHARED.name: "API keys and several ingress replicas only (test_quota_fleet)",
}
NOT_EXPECTED_SERIES = {M.prom(M.ROUTER_KV_EVENTS)}


def fleet() -> dict[str, Any]:
    cfg = sim_fleet(1, speed=1.0, kv_capacity_tokens=12_000)
    cfg["engine"]["sim"]["max_num_seqs"] = 2  # the rest wait in the engine: a queue to scale on
    # 4 per replica (2 running, 2 waiting in the engine): bursts wait at the ingress, where
    # the admission timeout refuses some. With 6, the engines held the bursts: 0 to 4
    # refusals of 140 (0 failed test_outcomes_cover_the_load in a fresh-clone run); with
    # 4, 15 in each of 2 runs
    cfg["replicas"].update(max_ongoing_requests=4, max_queued_requests=4)
    return {
        **cfg,
        "autoscaling": {
            "enabled": True,
            "policy": "ttft-queue",
            "min_replicas": 1,
            "max_replicas": 3,
            "ttft_slo_s": 0.5,
            # no burst reserve: the fleet scales 1 -> N -> 1 within the run, as the bursty
            # load asks, so that every outcome and both directions of scaling occur
            "params": {"target_attainment": 0.0},
        },
        "server": {"metrics_export_port": TEST_METRICS_PORT, "admission_timeout_s": 1.0},
        "slo": SLO,
    }


def run_bench(out: Path) -> dict[str, Any]:
    from bench import cli

    rc = cli.main(
        [
            "--url", TEST_URL,
            "--dataset", "shared-prefix:groups=4,system=256,question=16,output=48",
            "--rate", "5", "--burstiness", "0.5", "--seed", "7",
            "--num-requests", str(N_REQUESTS), "--duration", "40",
            "--slo", f"ttft_ms={SLO['ttft_s'] * 1000:g},tpot_ms={SLO['tpot_s'] * 1000:g}",
            "--warmup", "0", "--timeout", "60", "--no-progress",
            "--out", str(out),
        ]
    )  # fmt: skip
    assert rc == 0
    return dict(json.loads(out.read_text()))


class ProxyHopProbe:
    """Times ``GET /v1/models`` through Serve's proxy every 0.2 s while the load runs: a
    round trip client -> proxy -> ingress -> proxy -> client that does no model work, so its
    time is what the proxy hop (and the machine's contention) adds to any request. The edge
    starts a request's clock in the ingress handler, so a client's TTFT is the edge's plus
    such a round trip. Bounded: at most 1,000 probes, and it stops with the load."""

    def __init__(self, period_s: float = 0.2, limit: int = 1000) -> None:
        self.period_s, self.limit = period_s, limit
        self.latencies: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hop-probe", daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=10.0) as client:
            while not self._stop.is_set() and len(self.latencies) < self.limit:
                t0 = time.monotonic()
                try:
                    client.get(f"{TEST_URL}/v1/models").raise_for_status()
                except httpx.HTTPError:
                    pass  # a missed probe only narrows the allowance
                else:
                    self.latencies.append(time.monotonic() - t0)
                self._stop.wait(self.period_s)

    def __enter__(self) -> ProxyHopProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=15.0)


@pytest.fixture(scope="module")
def live(ray_session: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("observe")
    deploy_app(fleet())
    rules = DASHBOARDS / "rules" / "llmfleet.rules.yaml"
    prom = PrometheusServer(
        [f"127.0.0.1:{TEST_METRICS_PORT}"],
        interval_s=1.0,
        rule_files=[str(rules)] if rules.exists() else None,
    ).start()
    try:
        time.sleep(3.0)  # a first scrape: series left by earlier apps of this Ray session
        _wait_for_zero_series(prom)
        before = _by_outcome(prom)  # (Ray's agent keeps exporting a gone actor's last values)
        start = time.time()
        with ProxyHopProbe() as hop:
            result = run_bench(tmp / "bench.json")
        sent = result["requests"]["total"]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # Ray exports ~every 10 s; scrape every 1 s
            if sum(_delta(_by_outcome(prom), before).values()) >= sent:
                break
            time.sleep(1.0)
        time.sleep(3.0)  # a few more scrapes: gauges and the last counters
        yield {
            "prom": prom,
            "bench": result,
            "records": [
                json.loads(line) for line in (tmp / "bench.jsonl").read_text().splitlines()
            ],
            "hops_s": list(hop.latencies),
            "start": start,
            "end": time.time(),
            "outcomes": _delta(_by_outcome(prom), before),
        }
    finally:
        prom.stop()
        delete_app()


def test_every_catalogue_metric_is_exported(live: dict[str, Any]) -> None:
    names = live["prom"].series_names()
    missing = []
    for m in M.CATALOGUE:
        if m.name in NOT_EXPECTED:
            continue
        want = M.prom(m, "bucket") if m.kind == "histogram" else M.prom(m)
        if want not in names:
            missing.append(want)
    assert not missing, f"not exported: {missing}; llmfleet names seen: " + ", ".join(
        sorted(n for n in names if "llmfleet" in n)
    )


def _live_ingresses() -> list[str]:
    """Names of this app's ingress replica actors now alive (Ray's agent keeps exporting the
    last values of earlier apps' replicas in this session, and they can still change)."""
    from ray._private import state  # the GCS's actor table (no dashboard needed)

    from cluster.app import INGRESS_DEPLOYMENT

    actors = state.actors().values()
    return [
        str(a["Name"])
        for a in actors
        if a.get("State") == "ALIVE" and f"#{INGRESS_DEPLOYMENT}#" in str(a.get("Name"))
    ]


def _wait_for_zero_series(prom: PrometheusServer, timeout_s: float = 30.0) -> None:
    """Until every live ingress's outcome series are in Prometheus (exported at 0 before
    any request). Ray's agent exports them some seconds after the replica starts; load sent
    before that lands in a series whose first sample is already above 0, which ``rate`` and
    ``increase`` cannot count: the goodput panel then missed the first requests of each
    outcome (e.g. good 12.4 of 14, rejected 7.3 of 13) while the load generator counted
    them all."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        names = _live_ingresses()
        rows = prom.query(f'sum by (replica) ({M.prom(M.REQUESTS)}{{outcome="good"}})')
        seen = {r["metric"].get("replica", "") for r in rows}
        if names and all(any(n.endswith(rep) for rep in seen if rep) for n in names):
            return
        time.sleep(0.5)


def _by_outcome(prom: PrometheusServer) -> dict[str, float]:
    """Requests by outcome counted by this app's live ingress replicas only."""
    names = _live_ingresses()
    rows = prom.query(f"sum by (outcome, replica) ({M.prom(M.REQUESTS)})")
    out: dict[str, float] = {}
    for r in rows:
        replica = r["metric"].get("replica", "")
        if replica and any(name.endswith(replica) for name in names):
            outcome = r["metric"]["outcome"]
            out[outcome] = out.get(outcome, 0.0) + float(r["value"][1])
    return out


def _delta(now: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in now.items()}


def test_outcomes_cover_the_load(live: dict[str, Any]) -> None:
    by = live["outcomes"]
    assert sum(by.values()) == live["bench"]["requests"]["total"], by
    assert by.get("good", 0) > 0, by
    assert by.get("rejected", 0) > 0, by  # the overload refused some before any work
    assert by.get("slow_ttft", 0) + by.get("slow_tpot", 0) > 0, by


def _window(live: dict[str, Any]) -> str:
    return f"{math.ceil(live['end'] - live['start']) + 30}s"


def test_every_panel_query_returns_finite_data(live: dict[str, Any]) -> None:
    from cluster.observe.dashboards import DEFAULT_VALUES, panel_queries, substitute

    prom: PrometheusServer = live["prom"]
    values = {**DEFAULT_VALUES, "model": MODEL, "__rate_interval": "30s"}
    values.update({"ttft_slo": f"{SLO['ttft_s']}", "tpot_slo": f"{SLO['tpot_s']}"})
    at = live["end"]
    empty, bad, checked = [], [], 0
    files = sorted(DASHBOARDS.glob("*.json"))
    assert files, "no dashboards committed"
    for path in files:
        board = json.loads(path.read_text())
        for title, expr in panel_queries(board):
            if any(name in expr for name in NOT_EXPECTED_SERIES):
                continue
            q = substitute(expr, values)
            if "__range" in expr:  # whole-window panels: the run's window
                q = substitute(expr, {**values, "__range": _window(live)})
            checked += 1
            if title.startswith("annotation:"):  # events: somewhere in the run, not at its end
                result = prom.query_range(q, live["start"], at, 5.0)
                if not result:
                    empty.append(f"{path.name} / {title}: {q} (over the whole run)")
                continue
            result = _query_recent(prom, q, at)
            if not result:
                empty.append(f"{path.name} / {title}: {q}")
                continue
            for r in result:
                v = float(r["value"][1])
                if not math.isfinite(v):
                    bad.append(f"{path.name} / {title}: {v} from {q}")
    assert checked > 20
    assert not empty, "panels with no data:\n" + "\n".join(empty)
    assert not bad, "panels with non-finite values:\n" + "\n".join(bad)


def _query_recent(prom: PrometheusServer, q: str, at: float) -> list[dict[str, Any]]:
    """The query at the end of the run, or (for rate panels whose window has passed the
    load) at the latest time within the run it had data."""
    for t in (at, at - 10, at - 20, at - 30):
        out = prom.query(q, at=t)
        if out:
            return out
    return []


def _client_outcomes(records: list[dict[str, Any]], ttft_slo_s: float) -> dict[str, int]:
    """The load generator's requests by the edge's outcome names, judged on the client's own
    timings against a TTFT limit of ``ttft_slo_s``."""
    from contracts.outcomes import classify

    out: dict[str, int] = {}
    for r in records:
        error = r.get("error")
        status = int(error[5:]) if error and error.startswith("http_") else (500 if error else 200)
        outcome = classify(
            status=status,
            ttft_s=r["ttft_s"],
            e2e_s=r["e2e_s"],
            output_tokens=r["output_tokens"],
            ttft_slo_s=ttft_slo_s,
            tpot_slo_s=SLO["tpot_s"],
        )
        out[outcome] = out.get(outcome, 0) + 1
    return dict(sorted(out.items()))


def test_goodput_panel_agrees_with_the_load_generator(live: dict[str, Any]) -> None:
    from cluster.observe.dashboards import DEFAULT_VALUES, panel_queries, substitute

    board = json.loads((DASHBOARDS / "overview.json").read_text())
    exprs = [e for title, e in panel_queries(board) if "goodput" in title.lower()]
    assert exprs, "the overview has no goodput panel"
    values = {**DEFAULT_VALUES, "model": MODEL, "__rate_interval": _window(live)}
    values["__range"] = _window(live)
    got = live["prom"].query(substitute(exprs[0], values), at=live["end"])
    assert got, exprs[0]
    panel = float(got[0]["value"][1])
    panel = panel / 100 if panel > 1.0 else panel  # a percent panel
    bench = live["bench"]["goodput"]["attainment"]
    n = len(live["records"])
    client = _client_outcomes(live["records"], SLO["ttft_s"])
    assert client.get("good", 0) / n == pytest.approx(bench), (client, bench)
    # The edge's TTFT starts in the ingress handler: the client's adds a round trip through
    # Serve's proxy (and the client's own event loop). A request the client saw over the TTFT
    # limit by less than the slowest such round trip measured during the load may have been
    # good at the edge: the panel may read higher by those requests, not lower.
    hop = max(live["hops_s"], default=0.0)
    relaxed = _client_outcomes(live["records"], SLO["ttft_s"] + hop).get("good", 0) / n
    edge = {k: round(v) for k, v in sorted(live["outcomes"].items()) if v}
    detail = (
        f"panel {panel:.3f}, load generator {bench:.3f} ({relaxed:.3f} with the TTFT limit "
        f"+{hop * 1000:.0f} ms: the slowest of {len(live['hops_s'])} proxy round trips timed "
        f"during the load); requests by outcome at the edge {edge}, at the client {client}"
    )
    print(detail)
    assert bench - 0.02 <= panel <= relaxed + 0.02, detail


def test_alert_rules_load_and_evaluate(live: dict[str, Any]) -> None:
    r = httpx.get(f"{live['prom'].url}/api/v1/rules", timeout=10).json()
    groups = r["data"]["groups"]
    assert groups, "no rule groups loaded"
    unhealthy = [
        (rule["name"], rule.get("lastError"))
        for g in groups
        for rule in g["rules"]
        if rule.get("health") not in ("ok", "unknown")
    ]
    assert not unhealthy, unhealthy
