"""The fake multi-node scenario, run in its own process by ``test_fake_multinode.py`` (the
test session's own Ray cluster lives in the pytest process; a process joins one cluster).

Starts a fake autoscaling cluster from a ``cluster:`` section (a GPU-less head, worker type
``gpu-2x`` with 2 logical L4 GPUs, at most 3), deploys a simulated fleet whose replicas
reserve 2 GPUs each (so every replica needs a worker node of its own) with ttft-queue
autoscaling 1..3 and Serve's HTTP proxy on the head only, loads it with ``llmfleet bench``,
then waits for the fleet to return to 1 replica and for idle nodes to leave. Samples the
fleet every 0.5 s and writes one JSON object to ``--out``. Every Ray process it started
is killed on the way out (also on error). Exit 3: the fake provider could not start.

    RAY_AUTH_MODE=token python -m tests.component.fake_multinode_scenario --temp-dir DIR --out OUT.json

(``RAY_AUTH_MODE`` is read when Ray is imported, so it comes from the environment.)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from cluster.config import FleetConfig, parse_config
from cluster.deploy.fake_cluster import FakeCluster, free_ports
from contracts.metrics import AUTOSCALER_DESIRED, AUTOSCALER_SIGNAL, prom

CANNOT_START = 3
LOAD = {"rate": 3.0, "input": 1200, "output": 8, "duration_s": 30.0}  # ~2.5x one sim replica
DOWN_FAST = {  # ttft-queue knobs: leave within seconds once the load is gone
    "downscale_stable_s": 3.0,
    "downscale_cooldown_s": 3.0,
    "upscale_cooldown_s": 2.0,
    "target_attainment": 0.0,  # no burst reserve: these tests time the reactive terms
}
IDLE_TIMEOUT_MIN = 0.25  # the autoscaler accepts fractions; the llmfleet section says >= 1


def scenario_config(port: int, metrics_port: int) -> FleetConfig:
    from experiments.autoscaling.live import LiveSetup, fleet_config

    setup = LiveSetup(port=port, metrics_export_port=metrics_port, min_replicas=1, max_replicas=3)
    cfg = fleet_config("ttft-queue", setup, DOWN_FAST)
    cfg["replicas"].update(num_gpus=2, accelerator_type="L4")
    cfg["cluster"] = {
        "name": "fake",
        "provider": "ssh",
        "head_ip": "127.0.0.1",
        "head": {"name": "head", "cpus": 4, "memory_gib": 4},
        "node_types": [
            {
                "name": "gpu-2x",
                "cpus": 4,
                "memory_gib": 4,
                "gpus": 2,
                "accelerator_type": "L4",
                "max_workers": 3,
            },
        ],
        "idle_timeout_minutes": 1,
    }
    return parse_config(cfg)


def cluster_env(cfg: FleetConfig) -> dict[str, str]:
    """What Serve's processes read at start, as ``start_ray`` sets it for a local fleet."""
    from cluster.runtime import direct_ingress_env, throughput_env

    return {
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_SERVE_LOG_TO_STDERR": "0",
        "TOKENIZERS_PARALLELISM": "false",
        **direct_ingress_env(cfg),
        **throughput_env(cfg),
    }


def sample(head_id: str) -> dict[str, Any]:
    import ray
    from ray._private import state

    from experiments.autoscaling.live import replica_count

    nodes = [n for n in ray.nodes() if n["Alive"]]
    placement = {}
    for a in state.actors().values():
        name = a.get("Name") or ""
        if a.get("State") == "ALIVE" and "#LLMReplica#" in name:
            placement[name.rsplit("#", 1)[1]] = a["Address"]["NodeID"]
    return {
        "replicas": replica_count(),
        "workers": sorted(n["NodeID"] for n in nodes if n["NodeID"] != head_id),
        "ips": sorted({n["NodeManagerAddress"] for n in nodes}),
        "placement": placement,
    }


AUTOSCALER_SERIES = (prom(AUTOSCALER_DESIRED), prom(AUTOSCALER_SIGNAL))


def autoscaler_view(metrics_port: int) -> dict[str, float]:
    """The policy's desired count and signals as the head's metrics endpoint shows them (the
    diagnosis when the fleet does not drain in time): ``desired`` and one key per signal."""
    import re
    import urllib.request

    url = f"http://127.0.0.1:{metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=2) as resp:
        text = resp.read().decode()
    view: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith(AUTOSCALER_SERIES):
            continue
        name, _, value = line.rpartition(" ")
        sig = re.search(r'signal="([^"]+)"', name)
        view[sig.group(1) if sig else "desired"] = round(float(value), 3)
    return view


class Sampler(threading.Thread):
    def __init__(self, head_id: str, t0: float, metrics_port: int | None = None) -> None:
        super().__init__(daemon=True)
        self.head_id, self.t0, self.metrics_port = head_id, t0, metrics_port
        self.samples: list[dict[str, Any]] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                s = sample(self.head_id)
                self.samples.append({"t": round(time.monotonic() - self.t0, 2), **s})
            except Exception:  # a transient GCS/controller hiccup must not end the run
                pass
            if self.metrics_port is not None and self.samples:
                # not exported yet, or a scrape mid-restart: the next sample tries again
                with contextlib.suppress(OSError, ValueError):
                    self.samples[-1]["autoscaler"] = autoscaler_view(self.metrics_port)
            self.stop_event.wait(0.5)

    def last(self) -> dict[str, Any]:
        return self.samples[-1] if self.samples else {"replicas": -1, "workers": []}

    def wait_for(self, cond: Any, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.samples and cond(self.last()):
                return True
            time.sleep(0.5)
        return False


def log(t0: float, msg: str) -> None:
    print(f"[{time.monotonic() - t0:6.1f} s] {msg}", file=sys.stderr, flush=True)


def run_bench(url: str, model: str, out: Path) -> dict[str, Any]:
    n = int(LOAD["rate"] * LOAD["duration_s"])
    cmd = [
        sys.executable, "-m", "cluster.cli", "bench", "--url", url, "--model", model,
        "--dataset", f"random:input={LOAD['input']},output={LOAD['output']},n={n}",
        "--rate", str(LOAD["rate"]), "--num-requests", str(n),
        "--duration", str(LOAD["duration_s"]), "--tokenizer", "none",
        "--timeout", "90", "--seed", "7", "--out", str(out), "--no-progress",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=LOAD["duration_s"] + 120)
    if proc.returncode != 0:
        raise RuntimeError(f"bench failed ({proc.returncode}): {proc.stderr[-2000:]}")
    summary = json.loads(out.read_text())
    rows = [json.loads(line) for line in out.with_suffix(".jsonl").read_text().splitlines()]
    served: dict[str, int] = {}
    for r in rows:
        if not r.get("error") and r.get("replica"):
            served[r["replica"]] = served.get(r["replica"], 0) + 1
    return {"requests": summary["requests"], "served_by_replica": served, "sent": n}


LOOPBACK = ("127.0.0.1", "::ffff:127.0.0.1", "::1")


def listen_sockets(cluster: FakeCluster) -> dict[str, Any]:
    """How many sockets the cluster's processes listen on, by address, and which processes
    listen beyond loopback."""
    import psutil

    hosts: dict[str, int] = {}
    beyond: set[str] = set()
    for proc in cluster.live_processes():
        try:
            conns = proc.net_connections(kind="inet")
            title = " ".join(proc.cmdline()[:2])[:80]
        except psutil.Error:
            continue
        for c in conns:
            if c.status == psutil.CONN_LISTEN:
                hosts[c.laddr.ip] = hosts.get(c.laddr.ip, 0) + 1
                if c.laddr.ip not in LOOPBACK:
                    beyond.add(f"{c.laddr.ip} {title}")
    return {"hosts": hosts, "beyond_loopback": sorted(beyond)}


def phases(cfg: FleetConfig, sampler: Sampler, out: Path, result: dict[str, Any]) -> None:
    """Deploy, load, drain; ``result`` gets each phase's outcome and when it ended."""
    from ray import serve

    from cluster.runtime import deploy, http_options, wait_ready

    t0 = sampler.t0

    def mark(key: str, value: Any) -> None:
        result[key], result[f"{key}_s"] = value, round(time.monotonic() - t0, 1)
        log(t0, f"{key}: {value if key != 'bench' else value['requests']}; {sampler.last()}")

    serve.start(proxy_location="HeadOnly", http_options=http_options(cfg))
    url = deploy(cfg)
    sample(sampler.head_id)  # imports what the sampler needs in this thread (imports race)
    sampler.start()
    wait_ready(url, timeout_s=90)
    mark("first_replica", sampler.wait_for(lambda s: len(s["placement"]) == 1, 60))
    mark("bench", run_bench(url, cfg.model.served_name, out.with_name("bench.json")))
    mark("one_replica", sampler.wait_for(lambda s: s["replicas"] == 1, 60))
    mark(
        "one_worker",
        sampler.wait_for(
            lambda s: len(s["workers"]) == 1 and len(s["placement"]) == 1,
            IDLE_TIMEOUT_MIN * 60 + 45,
        ),
    )


def scenario(cfg: FleetConfig, cluster: FakeCluster, out: Path) -> dict[str, Any]:
    import ray

    from cluster.runtime import loopback_node

    t0 = time.monotonic()
    try:
        address = cluster.start(env=cluster_env(cfg))
    except (subprocess.SubprocessError, OSError) as err:
        detail = getattr(err, "stderr", "") or ""
        print(f"fake provider cannot start: {err}\n{detail[-3000:]}", file=sys.stderr)
        sys.exit(CANNOT_START)
    result: dict[str, Any] = {"started_s": round(time.monotonic() - t0, 1)}
    log(t0, f"fake cluster up at {address}")
    loopback_node(cfg)
    ray.init(address=address, namespace="llmfleet", logging_level=logging.WARNING,
             log_to_driver=False)  # fmt: skip
    head_id = ray.get_runtime_context().get_node_id()
    sampler = Sampler(head_id, t0, cluster.ports.get("metrics-export-port"))
    result["head"] = sampler.head_id
    try:
        phases(cfg, sampler, out, result)
        result["listen"] = listen_sockets(cluster)
    finally:
        sampler.stop_event.set()
        if sampler.is_alive():
            sampler.join(timeout=5)
        result["samples"] = sampler.samples
        out.write_text(json.dumps(result, indent=1))
        ray.shutdown()  # the caller kills the cluster: no graceful Serve shutdown needed
    return result


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--temp-dir", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    if os.environ.get("RAY_AUTH_MODE") != "token":
        p.error("run with RAY_AUTH_MODE=token (the cluster and its driver use token auth)")
    cfg = scenario_config(*free_ports(2))
    cluster = FakeCluster(cfg, args.temp_dir, IDLE_TIMEOUT_MIN)
    try:
        scenario(cfg, cluster, args.out)
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
