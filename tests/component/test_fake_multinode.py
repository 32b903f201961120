"""Multi-node end to end on one machine: Ray's fake multi-node provider launches worker
nodes of the type llmfleet's ``cluster:`` section describes (2 logical L4 GPUs each) when
a simulated fleet whose replicas reserve 2 GPUs scales up under ``llmfleet bench`` load;
the new replicas run on those nodes (never on the GPU-less head) and serve; after the load
the fleet returns to 1 replica and the idle nodes leave. The scenario runs in its own
process (``fake_multinode_scenario.py``): this process may already be a driver of the
session's local cluster. Everything stays on 127.0.0.1 and every Ray process the scenario
started is gone afterwards."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from cluster.config import FleetConfig
from cluster.deploy.fake_cluster import FakeCluster
from tests.component.fake_multinode_scenario import CANNOT_START

pytestmark = [pytest.mark.component, pytest.mark.slow, pytest.mark.timeout(270)]

ROOT = Path(__file__).resolve().parents[2]
MAX_WORKERS = 3


def run_scenario(temp_dir: Path, out: Path, log: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "tests.component.fake_multinode_scenario"]
    cmd += ["--temp-dir", str(temp_dir), "--out", str(out)]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["RAY_AUTH_MODE"] = "token"  # read when Ray is imported: the scenario's driver joins
    # The fake cluster's own token (the cluster and the driver inherit it): the scenario
    # needs no ~/.ray/auth_token, which exists only once some other Ray session made one.
    env["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    with log.open("w") as f:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT,
                              text=True, timeout=240)  # fmt: skip
    return proc


@pytest.fixture
def scenario_result(tmp_path: Path, model_dir: Path) -> Any:
    # Ray's unix socket paths must stay short (~107 bytes): not under pytest's tmp_path.
    temp_dir = Path(tempfile.mkdtemp(prefix="lf-fake-", dir="/tmp"))
    out, log = tmp_path / "scenario.json", tmp_path / "scenario.log"
    cleanup = FakeCluster(FleetConfig(), temp_dir)  # finds the processes by temp dir
    try:
        proc = run_scenario(temp_dir, out, log)
        text = log.read_text()
        if proc.returncode == CANNOT_START:
            pytest.skip(f"Ray's fake multi-node provider cannot start here: {text[-1500:]}")
        assert proc.returncode == 0, text[-4000:]
        result = json.loads(out.read_text())
        result["left_behind"] = [" ".join(p.cmdline()[:3]) for p in cleanup.live_processes()]
        yield result
    finally:
        cleanup.stop()  # also after a timeout or crash of the scenario process
        subprocess.run(["rm", "-rf", str(temp_dir)], check=False)


SIGNALS = (
    "desired",
    "prefill_arrival_ratio",
    "prefill_backlog_s",
    "burst_reserve_replicas",
    "boot_s",
    "ttft_over_slo_ratio",
)


def report(r: Any) -> str:
    """Phase ends, then one line per sample: time, replicas, workers, and what the policy saw
    (its desired count and signals from the head's metrics endpoint), so a failed drain says
    which term held the replicas."""
    ends = {k: r.get(f"{k}_s") for k in ("first_replica", "bench", "one_replica", "one_worker")}
    lines = [f"phase ends (s): {ends}"]
    for s in r["samples"]:
        view = s.get("autoscaler", {})
        sig = " ".join(f"{k}={view[k]}" for k in SIGNALS if k in view)
        lines.append(f"{s['t']:7.2f} replicas={s['replicas']} workers={len(s['workers'])} {sig}")
    return "\n".join(lines)


def test_worker_nodes_come_for_gpu_replicas_and_leave_when_idle(scenario_result: Any) -> None:
    r = scenario_result
    samples, head = r["samples"], r["head"]
    trace = report(r)
    bench = r["bench"]["requests"]
    assert bench["failed"] == 0, bench
    assert bench["completed"] == r["bench"]["sent"], bench

    peak_workers = max(len(s["workers"]) for s in samples)
    assert 2 <= peak_workers <= MAX_WORKERS, trace  # the autoscaler launched worker nodes
    assert max(s["replicas"] for s in samples) >= 2, trace

    placement: dict[str, str] = {}
    for s in samples:
        placement.update(s["placement"])
    assert placement
    assert head not in placement.values(), placement  # GPU replicas run on workers only
    served_nodes = {placement[rid] for rid in r["bench"]["served_by_replica"] if rid in placement}
    assert len(served_nodes) >= 2, (r["bench"]["served_by_replica"], placement)

    assert r["one_replica"], trace  # the load gone, the fleet drains back to 1 ...
    assert r["one_worker"], trace  # ... and the idle nodes leave
    last = samples[-1]
    assert last["replicas"] == 1, trace
    assert len(last["workers"]) == 1, trace
    assert set(last["placement"].values()) == set(last["workers"])
    assert all(s["ips"] == ["127.0.0.1"] for s in samples), {tuple(s["ips"]) for s in samples}
    # Beyond loopback only the replicas' internal gRPC servers listen, on the wildcard
    # address (server.throughput_mode documents it): nothing binds the machine's own address.
    beyond = r["listen"]["beyond_loopback"]
    assert all(b.split()[0] in ("::", "0.0.0.0") and "ServeReplica" in b for b in beyond), beyond
    assert r["left_behind"] == [], "Ray processes outlived the scenario"
