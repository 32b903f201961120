"""A tiny named actor holding each replica's latest stats, for ``llmfleet status`` and
``GET /health``. Replicas report every second (fire-and-forget); readers get a snapshot.
Not on the request path: routing and autoscaling read Serve's own stats channels.
A row is the replica's ``ReplicaStats.to_wire()`` plus ``replica``, ``pid`` and ``reported_at``;
readers decode it with ``contracts.stats.from_wire`` (``llmfleet status``) or read single
keys that every version has (``healthy`` for ``GET /health``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import ray

NAMESPACE = "llmfleet"
ACTOR_NAME = "llmfleet-status"
STALE_S = 30.0


@ray.remote(num_cpus=0)
class FleetStatus:
    def __init__(self) -> None:
        self._replicas: dict[str, dict[str, Any]] = {}
        self._snapshots: dict[str, bytes] = {}  # router state (prefix index), by router key

    def report(self, replica_id: str, stats: dict[str, float], pid: int = 0) -> None:
        # stats: ReplicaStats wire; pid: the replica's process (operators, chaos tests)
        row = {"replica": replica_id, "reported_at": time.time(), "pid": pid}
        self._replicas[replica_id] = {**row, **stats}

    def put_snapshot(self, key: str, data: bytes) -> None:
        self._snapshots[key] = data

    def get_snapshot(self, key: str) -> bytes | None:
        return self._snapshots.get(key)

    def forget(self, replica_id: str) -> None:
        self._replicas.pop(replica_id, None)

    def snapshot(self) -> list[dict[str, Any]]:
        now = time.time()
        for rid in [r for r, v in self._replicas.items() if now - v["reported_at"] > STALE_S]:
            del self._replicas[rid]
        return sorted(self._replicas.values(), key=lambda v: v["replica"])


def ensure_status_actor() -> Any:
    """Restarted by Ray whenever its process dies (``max_restarts=-1``); it holds only the
    latest reports, which the replicas send again within a second, and the router
    snapshots, which routers store again every ``SNAPSHOT_PERIOD_S``."""
    return FleetStatus.options(  # type: ignore[attr-defined]  # @ray.remote adds options()
        name=ACTOR_NAME,
        namespace=NAMESPACE,
        get_if_exists=True,
        lifetime="detached",
        max_restarts=-1,
        max_task_retries=-1,
    ).remote()


def get_status_actor() -> Any | None:
    try:
        return ray.get_actor(ACTOR_NAME, namespace=NAMESPACE)
    except ValueError:
        return None


async def fleet_snapshot(timeout_s: float) -> list[dict[str, Any]]:
    actor = get_status_actor()
    if actor is None:
        return []
    try:
        return await asyncio.wait_for(actor.snapshot.remote(), timeout_s)
    except Exception:
        return []
