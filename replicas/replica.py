"""``LLMReplica``: the Serve deployment that owns one engine and its OpenAI layer.

``handle(payload)`` answers one forwarded request (``contracts/http.py``): a
``ResponseHead``, then body bytes / whole SSE events, produced by the engine's OpenAI layer
— vLLM's own server application for vLLM (``vllm_openai.py``), ``openai_lite`` for the
simulated and null engines. Cancelling the stream (the client went away) aborts the engine
request.

It reports the engine's ``stats()`` (a ``ReplicaStats``, sent as ``to_wire()``) to Serve's
router (``record_routing_stats``), autoscaler (``record_autoscaling_stats``) and the status
actor, and exports per-request TTFT / E2E histograms, request and token counters and queue
gauges through Ray's metrics (raw ``prometheus_client`` metrics in a replica are not
exported). Nothing is recorded per token on the vLLM path: inter-token latency is vLLM's
own ``vllm:inter_token_latency_seconds`` (exported through Ray by vLLM's Ray stat logger);
the lite layer, which has no such metric, observes ITL per engine step. Gauges are re-set
every second because Ray drops a gauge that is not updated for ~30 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import time
from collections.abc import AsyncIterator
from typing import Any

from contracts.http import Accepted, ForwardedRequest, ReplicaFailed, ResponseHead
from contracts.stats import ReplicaStats
from replicas.factory import build_engine
from replicas.faults import InjectedFault
from replicas.metrics import ReplicaMetrics
from replicas.stall import StallWatch

GAUGE_PERIOD_S = 1.0
START_ERROR_CHARS = 1000  # of an engine's start error, kept for `llmfleet status`
PROBE_EVERY_S = 5.0  # an idle engine is pinged this often (``_maybe_probe``)
log = logging.getLogger("llmfleet.replica")


async def _report_start_failure(replica_id: str, err: BaseException) -> None:
    """Tell the status actor why this replica's start failed (``start_failure.py``). Awaited:
    Serve stops the process once the constructor raises, and a queued call would be lost."""
    from replicas.start_failure import diagnose
    from replicas.status_registry import get_status_actor

    with contextlib.suppress(Exception):
        why = diagnose(err, START_ERROR_CHARS)
        status = get_status_actor()
        if status is not None:
            await asyncio.wait_for(status.start_failed.remote(replica_id, why, os.getpid()), 5.0)


class LLMReplica:
    async def __init__(  # type: ignore[misc]  # Serve awaits an async constructor
        self, engine_spec: dict[str, Any], enable_metrics: bool = True
    ) -> None:
        from ray import serve

        self.replica_id = serve.get_replica_context().replica_id.unique_id
        try:
            await self._start(engine_spec, enable_metrics)
        except Exception as err:  # Serve retries; the fleet's readers learn why it failed
            await _report_start_failure(self.replica_id, err)
            engine = getattr(self, "engine", None)  # built, maybe started: leave nothing
            if engine is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(engine.shutdown(), 10.0)
            raise

    async def _start(self, engine_spec: dict[str, Any], enable_metrics: bool) -> None:
        settings = engine_spec.get("settings", {})
        if settings.get("kv_events_endpoint"):  # a template: one endpoint per replica
            endpoint = settings["kv_events_endpoint"].format(replica_id=self.replica_id)
            engine_spec = {**engine_spec, "settings": {**settings, "kv_events_endpoint": endpoint}}
        self.engine = build_engine(engine_spec)
        self._stall = StallWatch(float(engine_spec.get("stall_timeout_s", 30.0)))
        self._failed: str | None = None  # stalled or dead: every request fails over
        self._probe: asyncio.Task[None] | None = None
        self._probed_at = 0.0
        self._fault_injection = bool(engine_spec.get("fault_injection", False))
        self._failing = False  # inject_fault("fail")
        self._handlers: set[asyncio.Task[Any]] = set()
        await self.engine.start()
        served = str(engine_spec.get("openai", {}).get("served_name", ""))
        self._metrics = ReplicaMetrics(served) if enable_metrics else None
        self.frontend = await self._frontend(engine_spec.get("openai", {}))
        self._report_task = asyncio.get_running_loop().create_task(self._report_loop())

    async def _frontend(self, openai: dict[str, Any]) -> Any:
        from replicas.vllm_engine import VLLMEngine

        on_done = self._metrics.request_done if self._metrics else None
        if isinstance(self.engine, VLLMEngine):
            from replicas.vllm_openai import VLLMOpenAI
            from replicas.vllm_settings import on_gpu, openai_argv

            self.engine.on_request_done = on_done
            argv = openai_argv(self.engine.settings, on_gpu(), openai)
            front = VLLMOpenAI(self.engine.client, argv, self.replica_id)
            await front.start()
            return front
        from replicas.openai_lite.frontend import LiteOpenAI

        itl = self._metrics.itl if self._metrics else None
        return LiteOpenAI(
            self.engine, str(openai.get("served_name", "")), self.replica_id, on_done, itl
        )

    async def _report_loop(self) -> None:
        from replicas.status_registry import get_status_actor

        replica_id = self.replica_id
        status = None
        while True:
            with contextlib.suppress(Exception):
                self._fail(self.engine.dead())  # first: a dead engine's stats may raise
                stats = self.engine.stats()
                self._watch(stats.ongoing, stats.steps)
                self._maybe_probe(stats.ongoing)
                stats = self._stats(stats)
                if self._metrics is not None:
                    self._metrics.set_gauges(stats, healthy=self._failed is None)
                status = status or get_status_actor()
                if status is not None:
                    status.report.remote(replica_id, stats.to_wire(), os.getpid())
            await asyncio.sleep(GAUGE_PERIOD_S)

    async def handle(
        self, payload: dict[str, Any]
    ) -> AsyncIterator[Accepted | ResponseHead | bytes]:
        fwd: ForwardedRequest = payload["request"]
        why = self._failed or self.engine.dead()
        if why is not None:
            raise self._give_up(why)
        yield Accepted(self.replica_id)
        if self._failing:
            raise InjectedFault(f"injected failure on replica {self.replica_id}")
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        try:
            async for item in self.frontend.handle(fwd):
                if (why := self.engine.dead()) is not None:
                    # the engine died under this request, and its OpenAI layer answers
                    # with an error (found by hand: vLLM's streams ended "EngineCore
                    # encountered an issue"); another replica can run it: the ingress
                    # resends or migrates it
                    raise self._give_up(why)
                yield item
        except asyncio.CancelledError:
            if self._failed is not None:  # failed by the watch, not by the caller
                raise self._give_up(self._failed) from None
            raise
        finally:
            if task is not None:
                self._handlers.discard(task)

    def _give_up(self, why: str) -> ReplicaFailed:
        return ReplicaFailed(why, self.replica_id)

    def _stats(self, stats: ReplicaStats | None = None) -> ReplicaStats:
        """The engine's stats (``stats`` if already read); unhealthy once this replica fails
        its requests over, so the routers keep new ones off it while Serve still has it in
        its set (found by hand: a stalled vLLM replica, idle once its streams had moved,
        drew the next request three times and it got a 503 although the other replica was
        free)."""
        stats = self.engine.stats() if stats is None else stats
        return stats if self._failed is None else dataclasses.replace(stats, healthy=False)

    def _watch(self, ongoing: float, steps: float) -> None:
        """Past the stall timeout: fail what this replica holds and refuse new work."""
        if self._failed is None and self._stall.stalled(ongoing, steps, time.monotonic()):
            self._fail(
                f"engine stalled: {int(ongoing)} requests unfinished and no step for "
                f"{self._stall.timeout_s:.0f} s"
            )

    def _maybe_probe(self, ongoing: float) -> None:
        """Ping an idle engine every ``PROBE_EVERY_S``: the stall watch needs unfinished
        work to see a hung engine, so without this the first requests routed to an idle hung
        engine each waited the stall timeout (found by hand: a SIGSTOPped vLLM engine core
        on an idle replica passed every health check)."""
        now = time.monotonic()
        if self._failed is not None or ongoing > 0 or now - self._probed_at < PROBE_EVERY_S:
            return
        if self._probe is not None and not self._probe.done():
            return
        self._probed_at = now
        self._probe = asyncio.get_running_loop().create_task(self._ping())

    async def _ping(self) -> None:
        timeout_s = self._stall.timeout_s
        try:
            async with asyncio.timeout(timeout_s):
                await self.engine.ping()
        except TimeoutError:
            self._fail(f"engine not answering: an idle probe got no answer in {timeout_s:.0f} s")
        except Exception:  # a dead engine is `dead()`: the report loop fails it over
            pass

    def _fail(self, why: str | None) -> None:
        """The engine stalled or died: fail the requests this replica holds (the ingress
        resends or migrates them), refuse new ones, fail the health check."""
        if why is None or self._failed is not None:
            return
        self._failed = why
        log.error("%s; failing its requests and the health check", why)
        for task in list(self._handlers):
            task.cancel()

    async def inject_fault(self, kind: str) -> str:
        """Testing only (``engine.fault_injection``): ``hang`` stops the engine's steps;
        ``fail`` makes every request this replica accepts from now on fail (an engine
        error, the replica stays up and healthy: a flapping replica); ``recover`` undoes
        ``fail``; ``die`` ends the engine's loop, as an engine core process that exits
        would (the replica's process stays up). Returns this replica's id."""
        if not self._fault_injection:
            raise PermissionError("fault injection is off (engine.fault_injection)")
        engine = getattr(self.engine, "inner", self.engine)
        if kind in ("fail", "recover"):
            self._failing = kind == "fail"
        elif kind == "hang" and hasattr(engine, "hang"):
            engine.hang()
        elif kind == "die" and hasattr(engine, "die"):
            engine.die()
        else:
            raise ValueError(f"fault {kind!r} is not supported by this engine")
        return self.replica_id

    async def abort(self, request_id: str) -> None:
        await self.engine.abort(request_id)

    # Coroutines, not plain methods: Serve runs a replica's sync methods in a worker thread
    # (anyio), and calls these two every 0.5 s. Found with py-spy on a 2-core fleet of two
    # vLLM-CPU replicas: a call blocked the replica's event loop, and every stream on it, for
    # 4 s in ``Thread.start`` during one of that machine's CPU stops (docs/results/soak.md).
    # On the loop they read the engine's stats where the loop writes them, no thread hop.
    async def stats(self) -> dict[str, float]:
        return self._stats().to_wire()

    async def record_routing_stats(self) -> dict[str, float]:
        return self._stats().to_wire()

    async def record_autoscaling_stats(self) -> dict[str, float]:
        return self._stats().to_wire()

    async def check_health(self) -> None:
        await self.engine.check_health()
        stats = self.engine.stats()
        self._watch(stats.ongoing, stats.steps)
        if self._failed is not None:
            raise RuntimeError(self._failed)

    async def __del__(self) -> None:
        from replicas.status_registry import get_status_actor

        if not hasattr(self, "_report_task"):  # its start failed (and cleaned up)
            return
        self._report_task.cancel()
        if self._probe is not None:
            self._probe.cancel()
        with contextlib.suppress(Exception):  # its row would otherwise linger for STALE_S
            status = get_status_actor()
            if status is not None:
                status.forget.remote(self.replica_id)
        await self.engine.shutdown()
