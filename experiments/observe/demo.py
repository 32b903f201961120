"""`make report-demo`: a real run seen only through Prometheus, drawn by `llmfleet report`.

A simulated fleet (SmolLM2/CPU profile, prefix routing, the TTFT-queue autoscaler 1–4
replicas) behind the real Serve stack, started in this process on its own ports; Debian's
Prometheus on 127.0.0.1 scrapes Ray's metrics port every second with the generated alert
rules loaded; ``llmfleet bench`` sends three phases of shared-prefix chat load (calm,
overload, calm; each bounded in requests and seconds). Then ``llmfleet report`` renders the
SLA panels of the whole run from Prometheus alone into ``--out`` (PNG per panel,
``report.png``, ``report.html``, ``report.json``), and the bench results sit beside them so
the report's goodput can be compared with the load generator's. ``--publish`` copies
``report.png`` to ``docs/img/report.png`` (the README's picture).
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path
from typing import Any

PORT = 8230
METRICS_PORT = 18230
PHASES = (  # (name, req/s, requests, seconds)
    ("calm", 1.5, 60, 40),
    ("overload", 7.0, 280, 40),
    ("calm again", 1.5, 60, 40),
)
SLO = {"ttft_s": 1.0, "tpot_s": 0.1}


def fleet() -> dict[str, Any]:
    return {
        "engine": {"type": "sim", "sim": {
            "hardware": "cpu", "model_profile": "smollm2-135m", "speed": 1.0,
            "block_size": 16, "kv_capacity_tokens": 20_000,
        }},
        "replicas": {"num_replicas": 1, "num_cpus": 0.1, "max_ongoing_requests": 8,
                     "max_queued_requests": 8},
        "routing": {"policy": "prefix", "stats_period_s": 0.2},
        "autoscaling": {"enabled": True, "policy": "ttft-queue", "min_replicas": 1,
                        "max_replicas": 4, "ttft_slo_s": 1.0},
        "server": {"port": PORT, "metrics_export_port": METRICS_PORT, "ray_num_cpus": 16,
                   "admission_timeout_s": 2.0},
        "slo": SLO,
    }  # fmt: skip


def bench_phase(
    name: str, rate: float, n: int, seconds: int, out: Path, seed: int
) -> dict[str, Any]:
    from cluster import cli  # `llmfleet bench`: the default model's tokenizer for chat text

    path = out / f"bench-{name.replace(' ', '-')}.json"
    cli.main([
        "bench", "--url", f"http://127.0.0.1:{PORT}", "--endpoint", "chat",
        "--dataset", "shared-prefix:groups=6,system=384,question=24,output=64,zipf=1.0",
        "--rate", str(rate), "--burstiness", "0.7", "--seed", str(seed),
        "--num-requests", str(n), "--duration", str(seconds), "--timeout", "90",
        "--slo", f"ttft_ms={SLO['ttft_s'] * 1000:g},tpot_ms={SLO['tpot_s'] * 1000:g}",
        "--warmup", "0", "--no-progress", "--out", str(path),
    ])  # fmt: skip
    return dict(json.loads(path.read_text()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.observe.demo")
    ap.add_argument("--out", type=Path, default=Path("results/report"))
    ap.add_argument("--publish", action="store_true", help="copy report.png into docs/img/")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)

    import ray
    from ray import serve

    from cluster import cli as fleet_cli
    from cluster.config import parse_config
    from cluster.observe.prometheus import PrometheusServer
    from cluster.runtime import deploy, http_options, start_ray, wait_ready

    rules = Path(__file__).resolve().parents[2] / "dashboards" / "rules" / "llmfleet.rules.yaml"
    cfg = parse_config(fleet())
    start_ray(cfg)
    serve.start(http_options=http_options(cfg))
    prom = PrometheusServer(
        [f"127.0.0.1:{METRICS_PORT}"], interval_s=1.0, rule_files=[str(rules)]
    ).start()
    results: dict[str, Any] = {"prometheus": prom.url, "phases": {}}
    try:
        deploy(cfg)
        wait_ready(f"http://127.0.0.1:{PORT}", timeout_s=300)
        start = time.time()
        for i, (name, rate, n, seconds) in enumerate(PHASES):
            res = bench_phase(name, rate, n, seconds, args.out, seed=11 + i)
            results["phases"][name] = {
                "sent": res["requests"]["total"],
                "failed": res["requests"]["failed"],
                "attainment": res["goodput"]["attainment"],
                "good": res["goodput"]["good"],
            }
            print(f"{name}: {results['phases'][name]}", flush=True)
        time.sleep(20)  # Ray exports every ~10 s; let the last counters reach Prometheus
        since = int(time.time() - start) + 10
        rc = fleet_cli.main([
            "report", "--prometheus", prom.url, "--since", f"{since}s",
            "--out", str(args.out), "--step", "5s",
        ])  # fmt: skip
        results["report_rc"] = rc
        phases = results["phases"].values()
        sent = sum(p["sent"] for p in phases)
        results["bench_attainment"] = sum(p["good"] for p in phases) / sent if sent else None
        report = json.loads((args.out / "report.json").read_text())
        results["report_summary"] = report.get("summary", report)
        (args.out / "demo.json").write_text(json.dumps(results, indent=2))
        print(json.dumps(results, indent=2))
        if args.publish and rc == 0:
            dest = Path(__file__).resolve().parents[2] / "docs" / "img" / "report.png"
            shutil.copyfile(args.out / "report.png", dest)
            print(f"published {dest}")
        return rc
    finally:
        prom.stop()
        serve.shutdown()
        ray.shutdown()


if __name__ == "__main__":
    raise SystemExit(main())
