"""The replica's own Ray metrics (names, units and labels in ``contracts/metrics.py``): the
engine's view of each request (TTFT split into engine queue and prefill, E2E), request and
token counters, queue and KV gauges, and a healthy gauge; ITL only where the engine has no
metric of its own (the lite layer). Created inside the replica process (Ray exports metrics
created there, not raw ``prometheus_client`` ones). Cumulative engine counts in
``ReplicaStats`` (prefix hits and queries, preemptions) become counters by their increase
since the previous report."""

from __future__ import annotations

from typing import Any

from contracts import metrics as M
from contracts.metrics import start_at_zero
from contracts.stats import ReplicaStats
from replicas.engine import RequestDone


def ray_metric(metric: M.Metric) -> Any:
    """A catalogue entry as a Ray Serve metric (Serve adds deployment/replica/application)."""
    from ray.serve import metrics

    tags: Any = metric.labels or None  # Ray annotates tag_keys as a 1-tuple
    if metric.kind == "histogram":
        return metrics.Histogram(
            metric.name, metric.description, boundaries=list(metric.buckets), tag_keys=tags
        )
    if metric.kind == "counter":
        return metrics.Counter(metric.name, metric.description, tag_keys=tags)
    return metrics.Gauge(metric.name, metric.description, tag_keys=tags)


GAUGES = {  # ReplicaStats field -> gauge
    "waiting": M.WAITING,
    "running": M.RUNNING,
    "waiting_prefill_tokens": M.WAITING_PREFILL_TOKENS,
    "queue_delay_s": M.QUEUE_DELAY,
    "kv_usage": M.KV_USAGE,
}
CUMULATIVE = {  # ReplicaStats field (cumulative) -> counter of its increase
    "prefix_hits": M.CACHED_TOKENS,
    "prefix_queries": M.PREFIX_QUERIED_TOKENS,
    "num_preemptions": M.PREEMPTIONS,
}


class ReplicaMetrics:
    def __init__(self, model: str = "", factory: Any = ray_metric) -> None:
        self.tags = {"model": model}
        self.ttft = factory(M.ENGINE_TTFT)
        self.queue = factory(M.ENGINE_QUEUE)
        self.prefill = factory(M.ENGINE_PREFILL)
        self.e2e = factory(M.ENGINE_E2E)
        self._itl = factory(M.ENGINE_ITL)
        self.requests = factory(M.ENGINE_REQUESTS)
        self.prompt_tokens = factory(M.PROMPT_TOKENS)
        self.output_tokens = factory(M.OUTPUT_TOKENS)
        self.gauges = {name: factory(m) for name, m in GAUGES.items()}
        self.counters = {name: factory(m) for name, m in CUMULATIVE.items()}
        self.healthy = factory(M.REPLICA_HEALTHY)
        self._last: dict[str, float] = {}
        for counter in self.counters.values():
            start_at_zero(counter, self.tags)

    def itl(self, seconds: float) -> None:
        self._itl.observe(seconds, tags=self.tags)

    def request_done(self, done: RequestDone) -> None:
        tags = self.tags
        if done.ttft_s is not None:
            ttft = max(0.0, done.ttft_s)
            self.ttft.observe(ttft, tags=tags)
            if done.queue_s is not None:
                queue = min(max(0.0, done.queue_s), ttft)
                self.queue.observe(queue, tags=tags)
                self.prefill.observe(ttft - queue, tags=tags)
        self.e2e.observe(max(0.0, done.e2e_s), tags=tags)
        self.requests.inc(1, tags={**tags, "finish_reason": done.finish_reason})
        if done.prompt_tokens:
            self.prompt_tokens.inc(done.prompt_tokens, tags=tags)
        if done.output_tokens:
            self.output_tokens.inc(done.output_tokens, tags=tags)

    def set_gauges(self, stats: ReplicaStats, healthy: bool = True) -> None:
        """Every report period: gauges re-set (Ray drops one not set for ~30 s), cumulative
        engine counts turned into counter increments (a restart of the count is skipped)."""
        tags = self.tags
        for key, gauge in self.gauges.items():
            gauge.set(float(getattr(stats, key)), tags=tags)
        self.healthy.set(1.0 if healthy and stats.healthy else 0.0, tags=tags)
        for key, counter in self.counters.items():
            now = float(getattr(stats, key))
            before = self._last.get(key)
            self._last[key] = now
            if before is not None and now > before:
                counter.inc(now - before, tags=tags)
