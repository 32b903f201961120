"""The replica's own Ray metrics (names in ``metric_names.py``): per-request TTFT and E2E
histograms, request and token counters, queue gauges; ITL only where the engine has no
metric of its own (the lite layer). Created inside the replica process (Ray exports
metrics created there, not raw ``prometheus_client`` ones)."""

from __future__ import annotations

from contracts.stats import ReplicaStats
from replicas import metric_names as M
from replicas.engine import RequestDone


class ReplicaMetrics:
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

    def request_done(self, done: RequestDone) -> None:
        if done.ttft_s is not None:
            self.ttft.observe(max(0.0, done.ttft_s))
        self.e2e.observe(max(0.0, done.e2e_s))
        self.requests.inc(tags={"finish_reason": done.finish_reason})
        if done.prompt_tokens:
            self.prompt_tokens.inc(done.prompt_tokens)
        if done.output_tokens:
            self.output_tokens.inc(done.output_tokens)

    def set_gauges(self, stats: ReplicaStats) -> None:
        for key, gauge in self.gauges.items():
            gauge.set(float(getattr(stats, key)))
        if stats.prefix_queries > 0:
            self.hit_rate.set(stats.prefix_hits / stats.prefix_queries)
