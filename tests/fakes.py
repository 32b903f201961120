"""Fakes and builders shared by the tests (one home: no fake is copied between files).

- Load generator: ``sse_server`` (a local OpenAI-shaped SSE server on 127.0.0.1,
  ``bench.stub_server``) and ``closed_port`` (a port nothing listens on).
- Router: ``request`` (a ``RequestView`` with block size 16), ``FakeReplica`` (what Serve's
  ``RunningReplica`` offers the request router), ``pending_request`` (Serve's
  ``PendingRequest`` carrying the ingress payload), ``serve_router`` (the Ray adapter,
  built without a cluster), ``full_rounds`` (Serve's retry loop over it, every replica
  full) and ``rounds_of`` (the rounds a request has had).
- Autoscaler: ``snapshot`` (a ``MetricsSnapshot`` from a list of replica metrics).
- Status actor: ``FakeStatusActor`` (its quota log and slot-table methods, in process) and
  ``until`` (poll a condition on the event loop).
- Metrics: ``FakeMetrics``, a metric factory (``factory(Metric)``) handing out one
  ``FakeMetric`` per catalogue entry, a Ray Counter/Gauge stand-in that checks tags as Ray does.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from types import SimpleNamespace
from typing import Any

from autoscaler.types import MetricsSnapshot, ReplicaMetrics, ScalingConfig
from bench.stub_server import StubServer
from contracts.metrics import Metric
from replicas.route_log import RouteLog
from replicas.slot_table import SlotTable
from router.types import RequestView
from router.views import make_request_view

# ---- load generator ----------------------------------------------------------------


@asynccontextmanager
async def sse_server(
    mode: str = "ok", chunks: int = 4, delay_s: float = 0.0
) -> AsyncIterator[StubServer]:
    server = StubServer(mode, chunks, delay_s)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def closed_port() -> int:
    """A port that was free a moment ago (bind, read the number, close)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---- router ------------------------------------------------------------------------


def request(rid: str, tokens: Sequence[int], session: str | None = None) -> RequestView:
    return make_request_view(rid, tokens, block_size=16, session_id=session)


def _deployment_id() -> Any:
    from ray.serve._private.common import DeploymentID

    return DeploymentID(name="llm", app_name="app")


class FakeReplica:
    """The part of Serve's ``RunningReplica`` the request router reads."""

    def __init__(self, uid: str, stats: dict[str, float] | None = None, max_ongoing: int = 8):
        from ray.serve._private.common import ReplicaID

        self.replica_id = ReplicaID(unique_id=uid, deployment_id=_deployment_id())
        self.routing_stats: dict[str, Any] = stats or {}
        self.max_ongoing_requests = max_ongoing

    async def get_queue_len(self, *, deadline_s: float) -> int:  # noqa: ARG002 (Serve's signature)
        return 0


def pending_request(view: Any, internal_id: str) -> Any:
    """Serve's ``PendingRequest`` for one ingress call (``view`` None: no RequestView)."""
    from ray.serve._private.request_router.common import RequestRoutingContext

    payload = {"view": view, "body": {}} if view is not None else {"body": {}}
    return SimpleNamespace(
        args=[payload],
        kwargs={},
        metadata=SimpleNamespace(internal_request_id=internal_id),
        routing_context=RequestRoutingContext(),
    )


def serve_router(**kw: Any) -> Any:
    """``LLMFleetRequestRouter`` as Serve builds it, ``initialize_state(**kw)`` applied."""
    from ray.serve._private.common import DeploymentHandleSource

    from router.serve_router import LLMFleetRequestRouter

    r = LLMFleetRequestRouter(
        deployment_id=_deployment_id(), handle_source=DeploymentHandleSource.UNKNOWN
    )
    r.initialize_state(**kw)
    return r


async def full_rounds(router: Any, request: Any, stop: asyncio.Event) -> None:
    """Serve's own retry loop over our router, as its routing tasks run it, with every
    replica full: each tier is taken by nobody (a probe's await, without the probe)."""
    rounds = router._choose_replicas_with_backoff(request)
    try:
        async for _ in rounds:
            if stop.is_set():
                return
            await asyncio.sleep(0)
    finally:
        await rounds.aclose()


def rounds_of(request: Any) -> int:
    from router.retry_pacer import ROUND_ATTR

    return int(getattr(request.routing_context, ROUND_ATTR, 0))


# ---- autoscaler --------------------------------------------------------------------


def snapshot(
    now: float, current: int, reps: Sequence[ReplicaMetrics], pending: float = 0.0
) -> MetricsSnapshot:
    return MetricsSnapshot(now, current, tuple(reps), pending)


def rep(i: int, wpt: float = 0.0, rate: float = 1000.0, **kw: float) -> ReplicaMetrics:
    """Replica ``r{i}`` with ``wpt`` prefill tokens waiting at ``rate`` tokens/s."""
    return ReplicaMetrics(f"r{i}", waiting_prefill_tokens=wpt, prefill_tokens_per_s=rate, **kw)


def idle(n: int) -> list[ReplicaMetrics]:
    return [rep(i) for i in range(n)]


class StepScaler:
    """A scaling policy that follows a plan ``[(from_t, replicas), ...]`` (the last entry whose
    time has come wins) and keeps every snapshot it was shown."""

    name = "step"

    def __init__(self, plan: list[tuple[float, int]]) -> None:
        self.plan = plan
        self.snapshots: list[MetricsSnapshot] = []

    def initial_state(self) -> dict[str, Any]:
        return {}

    def decide(
        self, snapshot: MetricsSnapshot, _config: ScalingConfig, state: dict[str, Any]
    ) -> tuple[int, dict[str, Any]]:
        self.snapshots.append(snapshot)
        desired = snapshot.current_replicas
        for t, n in self.plan:
            if snapshot.now >= t:
                desired = n
        return desired, state


# ---- metrics -----------------------------------------------------------------------


class FakeMetric:
    """Ray's Counter/Gauge as a recorder: per tag set the summed ``inc`` or the last ``set``.
    Like Ray it wants exactly the metric's tag keys, str values, and ``inc`` values > 0."""

    def __init__(self, metric: Metric) -> None:
        self.metric = metric
        self.values: dict[tuple[tuple[str, str], ...], float] = {}
        self.calls = 0

    def _key(self, tags: dict[str, str] | None) -> tuple[tuple[str, str], ...]:
        tags = tags or {}
        assert set(tags) == set(self.metric.labels), (self.metric.name, tags)
        assert all(isinstance(v, str) for v in tags.values())
        return tuple(sorted(tags.items()))

    def inc(self, value: float = 1.0, tags: dict[str, str] | None = None) -> None:
        assert self.metric.kind == "counter", self.metric.name
        assert value > 0, (self.metric.name, value)
        key = self._key(tags)
        self.values[key] = self.values.get(key, 0.0) + value
        self.calls += 1

    def set(self, value: float, tags: dict[str, str] | None = None) -> None:
        assert self.metric.kind == "gauge", self.metric.name
        self.values[self._key(tags)] = value
        self.calls += 1

    def get(self, **tags: str) -> float | None:
        return self.values.get(tuple(sorted(tags.items())))

    def by(self, label: str) -> dict[str, float]:
        """Values keyed by one label (the others ignored: use with one series per value)."""
        return {dict(k)[label]: v for k, v in self.values.items()}


class FakeMetrics:
    """A metric factory: ``factory(metric)`` makes or returns that metric's ``FakeMetric``."""

    def __init__(self) -> None:
        self.made: dict[str, FakeMetric] = {}

    def __call__(self, metric: Metric) -> FakeMetric:
        return self.made.setdefault(metric.name, FakeMetric(metric))

    def __getitem__(self, metric: Metric) -> FakeMetric:
        return self(metric)


class FakeStatusActor:
    """The status actor's log and slot methods, in process (``ray.get_actor`` stands in)."""

    def __init__(self) -> None:
        self.log = RouteLog()
        self.slots = SlotTable()
        self.down = False
        self.slots_down = False

    def __getattr__(self, name: str) -> Any:
        method = getattr(self, f"_{name}")

        class Call:
            @staticmethod
            def remote(*args: Any) -> Any:
                return method(*args)

        return Call

    async def _append_routes(
        self,
        channel: str,
        origin: str,
        batch: bytes,
        slots: tuple[int, dict[str, int]] | None = None,
    ) -> int:
        if self.down:
            raise ConnectionError("actor down")
        if slots is not None:
            self.slots.report(origin, slots[1], slots[0], time.monotonic())
        return self.log.append(channel, origin, batch)

    async def _acquire_slot(
        self, key: str, origin: str, held: int, limit: int, ver: int
    ) -> tuple[bool, int]:
        if self.down or self.slots_down:
            raise ConnectionError("actor down")
        return self.slots.acquire(key, origin, held, limit, ver, time.monotonic())

    async def _routes_since(
        self, channel: str, epoch: str, seq: int, origin: str, wait_s: float
    ) -> tuple[str, int, list[tuple[str, bytes]]]:
        if self.down:
            raise ConnectionError("actor down")
        for _ in range(int(wait_s / 0.005)):
            got = self.log.since(channel, epoch, seq, origin)
            if got[2]:
                return got
            await asyncio.sleep(0.005)
        return self.log.since(channel, epoch, seq, origin)


async def until(cond: Any, what: str = "condition") -> None:
    for _ in range(300):
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")
