"""A tiny named actor holding each replica's latest stats, for ``llmfleet status`` and
``GET /health``. Replicas report every second (fire-and-forget); readers get a snapshot.
Routing and autoscaling read Serve's own stats channels, not this actor. The one call on a
request's path: ``acquire_slot``, for a key with a concurrency limit while several ingress
replicas share quotas (``replicas/slot_table.py``; the ingress waits for it with a
deadline and falls back to its own view). It also holds what the routers share: each router's prefix index snapshot
(``router/serve_snapshot.py``) and the live route log (``replicas/route_log.py``, read and
written by ``router/serve_share.py``; ``routes_since`` waits up to ``wait_s`` for a batch,
so the actor is async: every method runs on its one event loop, one at a time).
Replicas whose engine could not start say why (``start_failed``); those reasons are kept
until a replica starts (its first report), at most ``START_FAILURES_KEPT`` of them for
``START_FAILURE_KEEP_S``: an ingress then stops holding requests for a start that keeps
failing, and ``llmfleet up`` / ``status`` show the reason (``overview``).
A row is the replica's ``ReplicaStats.to_wire()`` plus ``replica``, ``pid`` and ``reported_at``;
readers decode it with ``contracts.stats.from_wire`` (``llmfleet status``) or read single
keys that every version has (``healthy`` for ``GET /health``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import ray

from replicas.route_log import RouteLog
from replicas.slot_table import SlotTable

NAMESPACE = "llmfleet"
ACTOR_NAME = "llmfleet-status"
STALE_S = 30.0
START_FAILURES_KEPT = 8
START_FAILURE_KEEP_S = 600.0


@ray.remote(num_cpus=0)
class FleetStatus:
    def __init__(self) -> None:
        self._replicas: dict[str, dict[str, Any]] = {}
        self._snapshots: dict[str, bytes] = {}  # router state (prefix index), by router key
        self._routes = RouteLog()
        self._appended: dict[str, asyncio.Event] = {}  # channel -> set on its next append
        self._slots = SlotTable()  # concurrency limits decided in one place (quota_sync)
        self._start_failures: list[dict[str, Any]] = []  # since the last replica started

    def report(self, replica_id: str, stats: dict[str, float], pid: int = 0) -> None:
        # stats: ReplicaStats wire; pid: the replica's process (operators, chaos tests)
        if replica_id not in self._replicas:  # a first report: this replica started
            self._start_failures.clear()
        row = {"replica": replica_id, "reported_at": time.time(), "pid": pid}
        self._replicas[replica_id] = {**row, **stats}

    def put_snapshot(self, key: str, data: bytes) -> None:
        self._snapshots[key] = data

    def get_snapshot(self, key: str) -> bytes | None:
        return self._snapshots.get(key)

    async def append_routes(
        self,
        channel: str,
        origin: str,
        batch: bytes,
        slots: tuple[int, dict[str, int]] | None = None,
    ) -> int:
        """Append ``batch``; ``slots`` (version, held per key) is the origin's whole map of
        held slots (``SlotTable.report``), sent along to save a call."""
        if slots is not None:
            self._slots.report(origin, slots[1], slots[0], time.monotonic())
        seq = self._routes.append(channel, origin, batch)
        event = self._appended.pop(channel, None)
        if event is not None:
            event.set()
        return seq

    async def routes_since(
        self, channel: str, epoch: str, seq: int, origin: str, wait_s: float = 0.0
    ) -> tuple[str, int, list[tuple[str, bytes]]]:
        """Batches of other origins from ``seq`` on (``RouteLog.since``); with none yet, wait
        up to ``wait_s`` for one (a long poll: a router hears of a route within one call)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while True:
            got = self._routes.since(channel, epoch, seq, origin)
            left = deadline - loop.time()
            if got[2] or left <= 0:
                return got
            epoch, seq = got[0], got[1]  # skip own batches and read on from there
            event = self._appended.setdefault(channel, asyncio.Event())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), left)

    def acquire_slot(
        self, key: str, origin: str, held: int, limit: int, ver: int
    ) -> tuple[bool, int]:
        """One more slot of ``key`` for ``origin`` if the fleet stays within ``limit``
        (``SlotTable.acquire``): (granted, the fleet's count)."""
        return self._slots.acquire(key, origin, held, limit, ver, time.monotonic())

    def start_failed(self, replica_id: str, why: dict[str, str], pid: int = 0) -> None:
        # why: ``start_failure.diagnose`` (error, root_cause, log)
        row = {"replica": replica_id, "failed_at": time.time(), "pid": pid, **why}
        self._start_failures = [*self._start_failures, row][-START_FAILURES_KEPT:]

    def overview(self) -> dict[str, Any]:
        """The replicas' rows (``snapshot``) and the start failures since one last started."""
        now = time.time()
        failed = [f for f in self._start_failures if now - f["failed_at"] < START_FAILURE_KEEP_S]
        return {"replicas": self.snapshot(), "start_failures": failed}

    def forget(self, replica_id: str) -> None:
        self._replicas.pop(replica_id, None)

    def snapshot(self) -> list[dict[str, Any]]:
        now = time.time()
        for rid in [r for r, v in self._replicas.items() if now - v["reported_at"] > STALE_S]:
            del self._replicas[rid]
        return sorted(self._replicas.values(), key=lambda v: v["replica"])


def ensure_status_actor() -> Any:
    """Restarted by Ray whenever its process dies (``max_restarts=-1``); it holds only the
    latest reports, which the replicas send again within a second, the router
    snapshots, which routers store again every ``SNAPSHOT_PERIOD_S``, and the shared route
    log, which a new epoch tells the routers to read again from its (empty) start."""
    return FleetStatus.options(  # type: ignore[attr-defined]  # @ray.remote adds options()
        name=ACTOR_NAME,
        namespace=NAMESPACE,
        get_if_exists=True,
        lifetime="detached",
        max_restarts=-1,
        max_task_retries=-1,
        # No per-call task events to the GCS (as Serve's own actors): found in a soak, the
        # replicas' reports and the per-request slot calls kept ~100k events there (GCS RSS
        # 49 -> 183 MB in 5 min, still growing), which nothing here reads
        enable_task_events=False,
    ).remote()


def get_status_actor() -> Any | None:
    try:
        return ray.get_actor(ACTOR_NAME, namespace=NAMESPACE)
    except ValueError:
        return None


async def fleet_rows(timeout_s: float) -> list[dict[str, Any]] | None:
    """The replicas' last reports, or None when the status actor did not answer."""
    actor = get_status_actor()
    if actor is None:
        return None
    try:
        return await asyncio.wait_for(actor.snapshot.remote(), timeout_s)
    except Exception:
        return None


async def fleet_overview(timeout_s: float) -> dict[str, Any] | None:
    """``FleetStatus.overview``, or None when the status actor did not answer."""
    actor = get_status_actor()
    if actor is None:
        return None
    try:
        return dict(await asyncio.wait_for(actor.overview.remote(), timeout_s))
    except Exception:
        return None


async def fleet_snapshot(timeout_s: float) -> list[dict[str, Any]]:
    return await fleet_rows(timeout_s) or []
