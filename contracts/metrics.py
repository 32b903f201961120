"""The metric catalogue: every metric llmfleet exports, in one place.

Who records what (each through Ray's metrics, created in the process that records it;
Ray exports them on each node's metrics port, ``server.metrics_export_port``):

- **edge** — the ingress replica (``cluster/edge_metrics.py``), once per request, as the
  client saw it: TTFT, TPOT, ITL, E2E, the router-queue delay, and ``requests`` by
  ``outcome`` (live goodput, judged against the config's ``slo`` section).
- **engine** — each ``LLMReplica`` (``replicas/metrics.py``): the engine's own view of a
  request (its TTFT split into engine queue and prefill), token counters, queue and KV gauges.
- **router** — the request router inside each ingress replica (``router/serve_router.py``).
- **autoscaler** — the scaling policy inside Serve's controller
  (``autoscaler/serve_autoscaling.py``).

The metric type, the naming rules and the exporting helpers: ``contracts/metric_spec.py``
(re-exported here).

Outcomes of ``REQUESTS`` (the ``outcome`` label) and how a request gets one:
``contracts/outcomes.py``.
"""

from __future__ import annotations

from contracts.metric_spec import LATENCY_BUCKETS_S as LATENCY_BUCKETS_S
from contracts.metric_spec import PROM_PREFIX as PROM_PREFIX
from contracts.metric_spec import Kind as Kind
from contracts.metric_spec import Metric as Metric
from contracts.metric_spec import Source as Source
from contracts.metric_spec import prom as prom
from contracts.metric_spec import start_at_zero as start_at_zero


def _h(name: str, source: Source, description: str, labels: tuple[str, ...] = ("model",)) -> Metric:
    return Metric(name, "histogram", source, "seconds", description, labels, LATENCY_BUCKETS_S)


# ---- edge: per request, as the client saw it (ingress) -------------------------------
TTFT = _h(
    "llmfleet_request_ttft_seconds",
    "edge",
    "Arrival at the ingress to the first streamed token leaving it (router queue + engine "
    "queue + prefill). Streamed requests only.",
)
TPOT = _h(
    "llmfleet_request_tpot_seconds",
    "edge",
    "Per request: (E2E - TTFT) / (output tokens - 1). Streamed requests with >= 2 tokens.",
)
ITL = _h(
    "llmfleet_request_itl_seconds",
    "edge",
    "Gap between consecutive streamed chunks of one request at the ingress (one token each "
    "unless the relay coalesced several).",
)
E2E = _h(
    "llmfleet_request_e2e_seconds",
    "edge",
    "Arrival at the ingress to the last byte of the answer (answered requests).",
)
ROUTER_QUEUE = _h(
    "llmfleet_router_queue_seconds",
    "edge",
    "Arrival at the ingress to a replica accepting the request (waiting at the router for "
    "a free slot; includes reading and preparing the request).",
)
REQUESTS = Metric(
    "llmfleet_requests",
    "counter",
    "edge",
    "requests",
    "Requests by outcome against the model's SLO: good, slow_ttft, slow_tpot, error, "
    "rejected, invalid, cancelled (live goodput).",
    ("model", "outcome"),
)
REQUEST_PROMPT_TOKENS = Metric(
    "llmfleet_request_prompt_tokens",
    "counter",
    "edge",
    "tokens",
    "Prompt tokens of answered requests (from the answer's usage).",
    ("model",),
)
REQUEST_OUTPUT_TOKENS = Metric(
    "llmfleet_request_output_tokens",
    "counter",
    "edge",
    "tokens",
    'Output tokens of answered requests by outcome (good tok/s = outcome="good").',
    ("model", "outcome"),
)
INGRESS_QUOTA_SHARED = Metric(
    "llmfleet_ingress_quota_shared",
    "gauge",
    "edge",
    "1",
    "Per ingress replica: 1 while it enforces each key's whole quota against the fleet's "
    "use (shared with the other ingress replicas), 0 while it falls back to its part "
    "(limit/N: clients may be refused early). Only with API keys and several ingress replicas.",
)

# ---- engine: per replica --------------------------------------------------------------
ENGINE_TTFT = _h(
    "llmfleet_engine_ttft_seconds",
    "engine",
    "Engine arrival to first token inside the replica (engine queue + prefill).",
)
ENGINE_QUEUE = _h(
    "llmfleet_engine_queue_seconds",
    "engine",
    "Engine arrival to the request's first scheduling (waiting in the engine).",
)
ENGINE_PREFILL = _h(
    "llmfleet_engine_prefill_seconds",
    "engine",
    "First scheduling to first token (prefill, all chunks).",
)
ENGINE_E2E = _h("llmfleet_engine_e2e_seconds", "engine", "Engine arrival to the request's end.")
ENGINE_ITL = _h(
    "llmfleet_engine_itl_seconds",
    "engine",
    "Gap between engine steps that produced a token for one request (simulated and null "
    "engines; vLLM reports its own vllm:inter_token_latency_seconds).",
)
ENGINE_REQUESTS = Metric(
    "llmfleet_engine_requests",
    "counter",
    "engine",
    "requests",
    "Requests the engine finished, by finish_reason (stop, length, abort, ...).",
    ("model", "finish_reason"),
)
PROMPT_TOKENS = Metric(
    "llmfleet_prompt_tokens",
    "counter",
    "engine",
    "tokens",
    "Prompt tokens of finished requests.",
    ("model",),
)
CACHED_TOKENS = Metric(
    "llmfleet_cached_tokens",
    "counter",
    "engine",
    "tokens",
    "Prompt tokens found in the prefix cache (engine-reported hits).",
    ("model",),
)
PREFIX_QUERIED_TOKENS = Metric(
    "llmfleet_prefix_queried_tokens",
    "counter",
    "engine",
    "tokens",
    "Prompt tokens looked up in the prefix cache (hit rate = cached / queried).",
    ("model",),
)
OUTPUT_TOKENS = Metric(
    "llmfleet_output_tokens",
    "counter",
    "engine",
    "tokens",
    "Output tokens of finished requests.",
    ("model",),
)
PREEMPTIONS = Metric(
    "llmfleet_preemptions",
    "counter",
    "engine",
    "requests",
    "Requests the engine's scheduler preempted (KV cache full).",
    ("model",),
)
WAITING = Metric(
    "llmfleet_waiting_requests",
    "gauge",
    "engine",
    "requests",
    "Requests queued in the engine.",
    ("model",),
)
RUNNING = Metric(
    "llmfleet_running_requests",
    "gauge",
    "engine",
    "requests",
    "Requests holding a batch slot.",
    ("model",),
)
WAITING_PREFILL_TOKENS = Metric(
    "llmfleet_waiting_prefill_tokens",
    "gauge",
    "engine",
    "tokens",
    "Uncached prompt tokens waiting for prefill.",
    ("model",),
)
QUEUE_DELAY = Metric(
    "llmfleet_queue_delay_seconds",
    "gauge",
    "engine",
    "seconds",
    "Estimated wait to first token for the newest waiting request.",
    ("model",),
)
KV_USAGE = Metric(
    "llmfleet_kv_usage_ratio",
    "gauge",
    "engine",
    "ratio",
    "KV-cache blocks in use, 0..1.",
    ("model",),
)
REPLICA_HEALTHY = Metric(
    "llmfleet_replica_healthy",
    "gauge",
    "engine",
    "1",
    "1 while the replica's engine is healthy and not stalled, else 0 (count them for replicas up).",
    ("model",),
)

# ---- router (inside each ingress replica) ---------------------------------------------
ROUTER_DECISIONS = Metric(
    "llmfleet_router_decisions",
    "counter",
    "router",
    "requests",
    "Routing decisions by policy and reason (affinity, balance, fallback, ...).",
    ("policy", "reason"),
)
ROUTER_PREDICTED_CACHED_TOKENS = Metric(
    "llmfleet_router_predicted_cached_tokens",
    "counter",
    "router",
    "tokens",
    "Prompt tokens the router expected the chosen replica to have cached (compare with "
    "llmfleet_cached_tokens, what the engines report).",
    ("policy",),
)
ROUTER_PROMPT_TOKENS = Metric(
    "llmfleet_router_prompt_tokens",
    "counter",
    "router",
    "tokens",
    "Prompt tokens of routed requests (the predicted hit rate's denominator).",
    ("policy",),
)
ROUTER_KV_EVENTS = Metric(
    "llmfleet_router_kv_events",
    "counter",
    "router",
    "1",
    "vLLM KV-cache events applied to the prefix index, by kind (stored, removed).",
    ("kind",),
)

# ---- autoscaler (inside Serve's controller) -------------------------------------------
AUTOSCALER_DESIRED = Metric(
    "llmfleet_autoscaler_desired_replicas",
    "gauge",
    "autoscaler",
    "replicas",
    "Replicas the scaling policy asks for.",
    ("deployment_name", "policy"),
)
AUTOSCALER_CURRENT = Metric(
    "llmfleet_autoscaler_current_replicas",
    "gauge",
    "autoscaler",
    "replicas",
    "Replicas running when the policy decided.",
    ("deployment_name", "policy"),
)
AUTOSCALER_SIGNAL = Metric(
    "llmfleet_autoscaler_signal",
    "gauge",
    "autoscaler",
    "1",
    "The policy's inputs by name (queue_delay_s, arrival_rate_rps, ...).",
    ("deployment_name", "policy", "signal"),
)
AUTOSCALER_TARGET = Metric(
    "llmfleet_autoscaler_target",
    "gauge",
    "autoscaler",
    "1",
    "The value the policy holds each signal to (same names as llmfleet_autoscaler_signal).",
    ("deployment_name", "policy", "signal"),
)
AUTOSCALER_DECISIONS = Metric(
    "llmfleet_autoscaler_decisions",
    "counter",
    "autoscaler",
    "1",
    "Changes of the desired replica count, by direction (up, down) and reason.",
    ("deployment_name", "policy", "direction", "reason"),
)

CATALOGUE: tuple[Metric, ...] = (
    TTFT,
    TPOT,
    ITL,
    E2E,
    ROUTER_QUEUE,
    REQUESTS,
    REQUEST_PROMPT_TOKENS,
    REQUEST_OUTPUT_TOKENS,
    INGRESS_QUOTA_SHARED,
    ENGINE_TTFT,
    ENGINE_QUEUE,
    ENGINE_PREFILL,
    ENGINE_E2E,
    ENGINE_ITL,
    ENGINE_REQUESTS,
    PROMPT_TOKENS,
    CACHED_TOKENS,
    PREFIX_QUERIED_TOKENS,
    OUTPUT_TOKENS,
    PREEMPTIONS,
    WAITING,
    RUNNING,
    WAITING_PREFILL_TOKENS,
    QUEUE_DELAY,
    KV_USAGE,
    REPLICA_HEALTHY,
    ROUTER_DECISIONS,
    ROUTER_PREDICTED_CACHED_TOKENS,
    ROUTER_PROMPT_TOKENS,
    ROUTER_KV_EVENTS,
    AUTOSCALER_DESIRED,
    AUTOSCALER_CURRENT,
    AUTOSCALER_SIGNAL,
    AUTOSCALER_TARGET,
    AUTOSCALER_DECISIONS,
)
BY_NAME = {m.name: m for m in CATALOGUE}
