"""Metric names, in one place for the exporter, the autoscaler and the dashboards.

Ray exports metrics created with ``ray.serve.metrics`` with a ``ray_`` prefix on the node's
metrics port; ``PROM_PREFIX`` gives the names as Prometheus sees them.
"""

PROM_PREFIX = "ray_"

TTFT_SECONDS = "llmfleet_ttft_seconds"
ITL_SECONDS = "llmfleet_itl_seconds"
E2E_SECONDS = "llmfleet_e2e_seconds"
REQUESTS_TOTAL = "llmfleet_requests_total"  # tags: finish_reason
PROMPT_TOKENS_TOTAL = "llmfleet_prompt_tokens_total"
OUTPUT_TOKENS_TOTAL = "llmfleet_output_tokens_total"
QUEUE_WAITING = "llmfleet_queue_waiting"
QUEUE_RUNNING = "llmfleet_queue_running"
WAITING_PREFILL_TOKENS = "llmfleet_waiting_prefill_tokens"
QUEUE_DELAY_SECONDS = "llmfleet_queue_delay_seconds"
KV_USAGE = "llmfleet_kv_usage"
PREFIX_HIT_RATE = "llmfleet_prefix_hit_rate"
INGRESS_ERRORS_TOTAL = "llmfleet_ingress_errors_total"  # tags: status, code
ROUTER_DECISIONS = "llmfleet_router_decisions"  # tags: policy, reason
ROUTER_KV_EVENTS = "llmfleet_router_kv_events"  # tags: kind (stored, removed); prefix-precise

LATENCY_BUCKETS_S = [
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.15,
    0.2,
    0.3,
    0.5,
    0.75,
    1.0,
    1.5,
    2.0,
    3.0,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
]
