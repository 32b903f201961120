"""``LLMReplica``: the Serve deployment that owns one engine.

It streams the engine's deltas to the ingress as plain dicts, reports the engine's
``stats()`` (a ``ReplicaStats``, sent as ``to_wire()``: all floats plus its version, as
Serve's autoscaling metrics must be) to Serve's router (``record_routing_stats``), autoscaler
(``record_autoscaling_stats``) and the status actor, and exports TTFT / ITL / E2E histograms and queue gauges
through Ray's metrics (raw ``prometheus_client`` metrics in a replica are not exported).
Gauges are re-set every second because Ray drops a gauge that is not updated for ~30 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import asdict
from typing import Any

from contracts.stats import ReplicaStats
from replicas import metric_names as M
from replicas.engine import GenerateRequest
from replicas.factory import build_engine

GAUGE_PERIOD_S = 1.0


class _Metrics:
    def __init__(self) -> None:
        from ray.serve import metrics

        b = M.LATENCY_BUCKETS_S
        self.ttft = metrics.Histogram(
            M.TTFT_SECONDS,
            description="Time to first token (engine arrival to first token).",
            boundaries=b,
        )
        self.itl = metrics.Histogram(
            M.ITL_SECONDS, description="Inter-token latency.", boundaries=b
        )
        self.e2e = metrics.Histogram(
            M.E2E_SECONDS, description="End-to-end request latency.", boundaries=b
        )
        self.requests = metrics.Counter(
            M.REQUESTS_TOTAL, description="Finished requests.", tag_keys=("finish_reason",)
        )
        self.prompt_tokens = metrics.Counter(M.PROMPT_TOKENS_TOTAL, description="Prompt tokens.")
        self.output_tokens = metrics.Counter(M.OUTPUT_TOKENS_TOTAL, description="Output tokens.")
        self.gauges = {
            "waiting": metrics.Gauge(
                M.QUEUE_WAITING, description="Requests waiting in the engine."
            ),
            "running": metrics.Gauge(
                M.QUEUE_RUNNING, description="Requests running in the engine."
            ),
            "waiting_prefill_tokens": metrics.Gauge(
                M.WAITING_PREFILL_TOKENS, description="Prompt tokens waiting for prefill."
            ),
            "queue_delay_s": metrics.Gauge(
                M.QUEUE_DELAY_SECONDS, description="Estimated wait to first token."
            ),
            "kv_usage": metrics.Gauge(M.KV_USAGE, description="KV-cache usage fraction."),
        }
        self.hit_rate = metrics.Gauge(
            M.PREFIX_HIT_RATE, description="Prefix-cache hit rate (tokens)."
        )


class LLMReplica:
    async def __init__(  # type: ignore[misc]  # Serve awaits an async constructor
        self, engine_spec: dict[str, Any], enable_metrics: bool = True
    ) -> None:
        from ray import serve

        self.replica_id = serve.get_replica_context().replica_id.unique_id
        settings = engine_spec.get("settings", {})
        if settings.get("kv_events_endpoint"):  # a template: one endpoint per replica
            endpoint = settings["kv_events_endpoint"].format(replica_id=self.replica_id)
            engine_spec = {**engine_spec, "settings": {**settings, "kv_events_endpoint": endpoint}}
        self.engine = build_engine(engine_spec)
        await self.engine.start()
        self._metrics = _Metrics() if enable_metrics else None
        self._report_task = asyncio.get_running_loop().create_task(self._report_loop())

    async def _report_loop(self) -> None:
        from replicas.status_registry import get_status_actor

        replica_id = self.replica_id
        status = None
        while True:
            with contextlib.suppress(Exception):
                stats = self.engine.stats()
                if self._metrics is not None:
                    self._set_gauges(stats)
                status = status or get_status_actor()
                if status is not None:
                    status.report.remote(replica_id, stats.to_wire())
            await asyncio.sleep(GAUGE_PERIOD_S)

    def _set_gauges(self, stats: ReplicaStats) -> None:
        assert self._metrics is not None
        for key, gauge in self._metrics.gauges.items():
            gauge.set(float(getattr(stats, key)))
        if stats.prefix_queries > 0:
            self._metrics.hit_rate.set(stats.prefix_hits / stats.prefix_queries)

    async def generate(self, payload: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        req = GenerateRequest(**payload["request"])
        arrival = req.arrival_time or time.time()
        last_t: float | None = None
        first_t: float | None = None
        final: dict[str, Any] | None = None
        stream_of = self.engine.generate(req)  # an async generator: aclose() ends it
        async with contextlib.aclosing(stream_of) as stream:  # type: ignore[type-var]
            async for delta in stream:
                out = asdict(delta)
                out["replica"] = self.replica_id
                if self._metrics is not None and delta.token_times:
                    for t in delta.token_times:
                        if first_t is None:
                            first_t = t
                            self._metrics.ttft.observe(max(0.0, t - arrival))
                        elif last_t is not None:
                            self._metrics.itl.observe(max(0.0, t - last_t))
                        last_t = t
                final = out
                yield out
        if self._metrics is not None and final is not None:
            self._metrics.e2e.observe(max(0.0, time.time() - arrival))
            self._metrics.requests.inc(tags={"finish_reason": str(final.get("finish_reason"))})
            self._metrics.prompt_tokens.inc(final["prompt_tokens"])
            if final["completion_tokens"]:
                self._metrics.output_tokens.inc(final["completion_tokens"])

    async def abort(self, request_id: str) -> None:
        await self.engine.abort(request_id)

    def stats(self) -> dict[str, float]:
        return self.engine.stats().to_wire()

    def record_routing_stats(self) -> dict[str, float]:
        return self.engine.stats().to_wire()

    def record_autoscaling_stats(self) -> dict[str, float]:
        return self.engine.stats().to_wire()

    async def check_health(self) -> None:
        await self.engine.check_health()

    async def __del__(self) -> None:
        self._report_task.cancel()
        await self.engine.shutdown()
