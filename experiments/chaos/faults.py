"""Faults and what the fleet says about them: kill a replica process, scale, probe Serve.

- **Kill.** ``SIGKILL`` to one Serve replica process of *this* Ray node (found under its
  raylet; Ray titles workers ``ray::ServeReplica:<app>:<deployment>``), so other Ray
  clusters on the machine are never touched. The victim is picked by a seeded RNG.
- **Scale.** ``cluster.runtime.deploy`` of the same config with another ``num_replicas``
  (``chaos.py``): the deployment versions are unchanged, so Serve drains the removed
  replicas in place and restarts nothing.
- **Recovered (Serve).** The deployment is ``HEALTHY``, all its replicas ``RUNNING``, as many
  as targeted, and this node has exactly that many live processes of it (so a kill counts
  as recovered only once the replacement runs, not in the instant before Serve notices).
- **Ingress counters.** The relay logs each resend (``retried``), migration and failure
  (``cluster/relay.py``; a migration when it is attempted: one whose continuation then
  fails is a failure too); Serve's log files of the ingress replicas are tailed, so counts
  survive an ingress's death and fall into the fault window they were seen in. ``GET /fleet/status``
  answers for one ingress replica per call and dies with it; it is sampled as a cross-check.
"""

from __future__ import annotations

import os
import random
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cluster.app import APP_NAME, INGRESS_DEPLOYMENT, REPLICA_DEPLOYMENT

# cluster/relay.py's log lines, one per event
RELAY_EVENTS = {
    "retried": "died before answering; resending",
    "migrated": "died mid-stream; migrating",
    "resumed": "resuming a stream for the front door",
    "failed_start": "request failed on replica",
    "failed_stream": "stream failed:",
}


def _node() -> Any:
    import ray

    node = ray._private.worker._global_node  # the head node this process started
    if node is None:
        raise RuntimeError("Ray is not started in this process")
    return node


def node_processes(deployment: str) -> list[Any]:
    """Live processes of this Ray node whose title names ``deployment``."""
    from cluster.local_state import node_processes as named

    return named(f"ServeReplica:{APP_NAME}:{deployment}")


def kill_one(deployment: str, rng: random.Random, prefer: int | None = None) -> tuple[int, float]:
    """SIGKILL ``prefer`` if it is a live process of ``deployment`` here, else a random one;
    returns the pid and the ``time.monotonic()`` of the kill."""
    procs = sorted(node_processes(deployment), key=lambda p: p.pid)
    if not procs:
        raise RuntimeError(f"no live {deployment} process on this node")
    chosen = [p for p in procs if p.pid == prefer]
    victim = chosen[0] if chosen else rng.choice(procs)
    os.kill(victim.pid, signal.SIGKILL)
    return int(victim.pid), time.monotonic()


def replica_pids() -> dict[str, int]:
    """Replica id -> pid, from the replicas' own reports (``replicas/status_registry.py``)."""
    import ray

    from replicas.status_registry import get_status_actor

    actor = get_status_actor()
    rows = ray.get(actor.snapshot.remote(), timeout=10) if actor is not None else []
    return {str(r["replica"]): int(r.get("pid") or 0) for r in rows}


@dataclass(frozen=True, slots=True)
class DeploymentState:
    status: str
    replicas: dict[str, int]  # Serve replica state -> count
    processes: int  # live processes on this node

    def recovered(self, target: int) -> bool:
        return (
            self.status == "HEALTHY"
            and self.replicas == {"RUNNING": target}
            and self.processes == target
        )

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "replicas": self.replicas, "processes": self.processes}


def deployment_states() -> dict[str, DeploymentState]:
    from ray import serve

    app = serve.status().applications.get(APP_NAME)
    out = {}
    for name in (REPLICA_DEPLOYMENT, INGRESS_DEPLOYMENT):
        dep = app.deployments.get(name) if app else None
        if dep is None:
            out[name] = DeploymentState("MISSING", {}, len(node_processes(name)))
            continue
        states = {str(getattr(k, "value", k)): n for k, n in dep.replica_states.items() if n}
        status = str(getattr(dep.status, "value", dep.status))
        out[name] = DeploymentState(status, states, len(node_processes(name)))
    return out


@dataclass
class LogTail:
    """Counts ``RELAY_EVENTS`` lines appended to this session's log files since the last read."""

    logs_dir: Path
    pattern: str
    offsets: dict[Path, int] = field(default_factory=dict)

    def read_new(self) -> dict[str, int]:
        counts = dict.fromkeys(RELAY_EVENTS, 0)
        for path in sorted(self.logs_dir.glob(self.pattern)):
            try:
                size = path.stat().st_size
                start = self.offsets.get(path, 0)
                if size <= start:
                    continue
                with path.open("rb") as f:
                    f.seek(start)
                    data = f.read(size - start)
            except OSError:
                continue
            cut = data.rfind(b"\n") + 1  # whole lines only; the rest next time
            self.offsets[path] = start + cut
            text = data[:cut].decode(errors="replace")
            for key, marker in RELAY_EVENTS.items():
                counts[key] += text.count(marker)
        return counts


def session_logs_dir() -> Path:
    return Path(_node().get_session_dir_path()) / "logs"


def ingress_counters(url: str, samples: int = 24) -> list[dict[str, int]]:
    """Distinct ``/fleet/status`` ingress counters seen over ``samples`` calls (one ingress
    answers each call; two ingresses with equal counters look like one)."""
    import httpx

    seen: list[dict[str, int]] = []
    for _ in range(samples):
        try:
            c = httpx.get(f"{url}/fleet/status", timeout=10).json()["ingress"]
        except (httpx.HTTPError, ValueError, KeyError):
            continue
        if c not in seen:
            seen.append(c)
    return seen
