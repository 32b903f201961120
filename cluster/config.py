"""The one YAML config file, as pydantic v2 models (``extra="forbid"``, every field described).

Nested per component: ``model``, ``engine`` (``engine_settings.py``), ``replicas``,
``routing``, ``autoscaling``, ``server``, ``slo``, ``cluster`` (``cluster_settings.py``).
``load_config`` rejects a bad file before anything starts, naming the field path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from cluster.cluster_settings import ClusterSection
from cluster.engine_settings import EngineConfig
from cluster.settings_base import Strict as _Strict
from router.defaults import DEFAULT_POLICY


class ModelConfig(_Strict):
    path: str = Field(
        "smollm2-135m-instruct",
        description="Local HF model directory, or 'smollm2-135m-instruct' for the default model prepared from PyPI (no hub).",
    )
    served_name: str = Field(
        "smollm2-135m-instruct",
        description="Model id clients send as `model` and see in GET /v1/models.",
    )
    max_model_len: int = Field(
        2048, ge=64, le=1_048_576, description="Context length in tokens (prompt + output)."
    )
    max_tokens_cap: int = Field(
        1024, ge=1, description="Largest `max_tokens` a request may ask for."
    )
    max_choices: int = Field(
        128,
        ge=1,
        description="Most sequences one request may run: its `n` (or `best_of`), times its prompts for a completions batch. vLLM's own bound on `n` is 16,384.",
    )
    default_max_tokens: int = Field(
        256,
        ge=1,
        description="`max_tokens` used when a request gives none (capped by the context).",
    )
    tool_call_parser: str | None = Field(
        None,
        description="vLLM tool-call parser (e.g. hermes, llama3_json): tools with `tool_choice` auto, required or named use the model's call format through it.",
    )
    tool_strict_level: Literal["auto", "function", "parameter"] = Field(
        "auto",
        description="vLLM's tool-call constraint floor: auto = per request (`strict: true` tools get schema-valid arguments), function = always constrain the call envelope, parameter = every tool as if strict.",
    )
    chat_template: str | None = Field(
        None,
        description="A chat template file (Jinja) to use instead of the model's own.",
    )


class ReplicaConfig(_Strict):
    num_replicas: int = Field(
        1, ge=0, le=1024, description="Replicas when autoscaling is off (initial count when on)."
    )
    max_ongoing_requests: int = Field(
        64,
        ge=1,
        description="Most requests in flight per replica before Serve queues at the router.",
    )
    num_cpus: float = Field(
        1.0,
        ge=0,
        description="Logical Ray CPUs each replica reserves (bookkeeping; nothing is pinned).",
    )
    num_gpus: int | None = Field(
        None,
        ge=0,
        le=64,
        description="GPUs each replica reserves as a STRICT_PACK placement group; unset: engine.tensor_parallel_size when serving vLLM on a GPU machine, else 0. A simulated fleet may reserve logical GPUs to exercise placement on a cluster.",
    )
    accelerator_type: str | None = Field(
        None,
        description="GPU model each replica's GPU bundles ask for (Ray's `accelerator_type:<name>` resource, e.g. L4, A100, H100), so replicas land on that node type; needs GPUs.",
    )
    health_check_period_s: float = Field(
        5.0, gt=0, description="Serve health-check period for replicas."
    )
    max_queued_requests: int = Field(
        64,
        ge=0,
        description="Requests each ingress replica holds at the router waiting for a replica slot; beyond it a request is refused at once with 429 (load shedding; -1 is not allowed: unbounded queues are how a 200 turns into a timeout).",
    )
    drain_timeout_s: float = Field(
        300.0,
        gt=0,
        description="A replica being removed (scale-down, redeploy) gets no new requests and has this long to finish its streams before it is stopped.",
    )
    stall_timeout_s: float = Field(
        30.0,
        gt=0,
        description="A replica whose engine has unfinished requests and has taken no step for this long fails its health check and is replaced.",
    )

    @model_validator(mode="after")
    def _gpu_fields(self) -> ReplicaConfig:
        if self.accelerator_type and self.num_gpus == 0:
            raise ValueError("accelerator_type needs GPUs (num_gpus: 0 reserves none)")
        return self


class RoutingConfig(_Strict):
    policy: str = Field(
        DEFAULT_POLICY,
        description="Routing policy name: prefix|prefix-precise|round-robin|least-loaded|p2c|consistent-hash|sglang-tree|ray-prefix|ray-p2c.",
    )
    stats_period_s: float = Field(
        0.5, gt=0, description="How often Serve polls each replica's routing stats."
    )
    params: dict[str, Any] = Field(
        default_factory=dict,
        description="Policy-specific knobs (scorer weights, imbalance slack, ...).",
    )


class AutoscalingSection(_Strict):
    enabled: bool = Field(False, description="Scale replicas automatically.")
    policy: str = Field(
        "ttft-queue", description="Scaling policy: ttft-queue|ongoing-requests|utilization|none."
    )
    min_replicas: int = Field(1, ge=0, description="Lower bound (0 allows scale to zero).")
    max_replicas: int = Field(4, ge=1, description="Upper bound.")
    ttft_slo_s: float = Field(2.0, gt=0, description="Target P95 TTFT in seconds.")
    target_ongoing_requests: float = Field(
        8.0, gt=0, description="For the ongoing-requests policy."
    )
    metrics_interval_s: float = Field(
        0.5,
        gt=0,
        description="Replica metric push period (Ray 2.60 still reads this deprecated knob).",
    )
    look_back_period_s: float = Field(
        2.0, gt=0, description="Window over which pushed metrics are averaged."
    )
    params: dict[str, Any] = Field(
        default_factory=dict,
        description="Policy-specific knobs; a key the chosen policy does not read is an error.",
    )

    @model_validator(mode="after")
    def _bounds(self) -> AutoscalingSection:
        if self.min_replicas > self.max_replicas:
            raise ValueError("min_replicas must be <= max_replicas")
        from autoscaler.registry import check_params

        check_params(self.policy, self.params)
        return self


class ServerConfig(_Strict):
    host: str = Field("127.0.0.1", description="HTTP bind address.")
    port: int = Field(8000, ge=1, le=65535, description="HTTP port of the OpenAI API.")
    ray_num_cpus: int | None = Field(
        None,
        ge=1,
        description="Logical CPUs Ray advertises on the node `llmfleet up` starts (bookkeeping: nothing is pinned). Unset: enough for the fleet at its largest (engine replicas × replicas.num_cpus, ingress replicas × 0.5), at least 8. A fleet that does not fit is refused at start.",
    )
    metrics_export_port: int = Field(
        8080, ge=1, le=65535, description="Ray's Prometheus metrics export port."
    )
    include_dashboard: bool = Field(
        False, description="Start Ray's dashboard (~1.1 GiB on this machine)."
    )
    request_timeout_s: float = Field(
        600.0, gt=0, description="Upper bound on one request's life at the ingress."
    )
    ingress: Literal["proxy", "direct", "resume"] = Field(
        "proxy",
        description="proxy: Serve's HTTP proxy in front of the ingress; direct: the ingress replica serves `port` itself (one Ray hop fewer per token, measured faster; Serve's proxy moves to port + 100; an in-place redeploy that replaces the ingress fails: restart instead); resume: llmfleet's front door serves `port` in front of Serve's proxy (on 127.0.0.1, port + 100) and keeps what each stream has sent, so a stream whose ingress replica dies continues on another, and a request that died with it before any byte is resent (one more local HTTP hop per request; runs on the node `llmfleet up` runs on).",
    )
    ingress_replicas: int | None = Field(
        None,
        ge=1,
        le=64,
        description="Ingress replicas (each runs its own router; they share the keys' quota use). Unset: 2 when the fleet may have several engine replicas (prefix and sglang-tree routers share what they learn between ingress replicas), except with ray-prefix (its routers learn apart: two would split each prefix's cache hits), else 1; always 1 with ingress: direct.",
    )
    api_keys_file: str | None = Field(
        None,
        description="Key file (hashes only; `llmfleet keys add` writes it); reloaded when it changes. The env LLMFLEET_API_KEYS may hold the same content. No keys: the API is open and only a loopback host is allowed.",
    )
    cors_allowed_origins: list[str] = Field(
        default_factory=list,
        description="Browser origins that may call the API (CORS), e.g. ['https://chat.example.com'], or ['*'] for any. Empty: no CORS answers, so browser apps on other origins are refused (vLLM's own server allows any origin).",
    )
    allow_unauthenticated: bool = Field(
        False,
        description="Allow binding a non-loopback host with no API keys configured (anyone who reaches the port can use the fleet).",
    )
    max_body_bytes: int = Field(
        8 * 1024 * 1024, ge=1024, description="Largest request body; larger ones get 413."
    )
    body_timeout_s: float = Field(
        60.0,
        gt=0,
        description="Longest a client may take to send a request's body, from when the ingress starts reading it; slower gets 408 `request_timeout` (a stalled upload would otherwise hold its ingress slot for as long as the connection stays open).",
    )
    max_header_bytes: int = Field(
        64 * 1024,
        ge=1024,
        description="Largest total size of a request's headers; larger gets 431.",
    )
    admission_timeout_s: float = Field(
        10.0,
        gt=0,
        description="Longest a request waits for a replica to take it; then 429 (503 with no healthy replica) with Retry-After, before any 200.",
    )
    shutdown_timeout_s: float = Field(
        30.0,
        ge=0,
        description="`llmfleet up` stopped (Ctrl-C, `llmfleet down`): the requests in flight get this long to finish before the fleet stops (new ones are refused at once); a second Ctrl-C, or `llmfleet down --now`, stops at once.",
    )
    cold_start_timeout_s: float = Field(
        120.0,
        gt=0,
        description="While no replica is serving at all (a fleet scaling up from zero, or its only replica being replaced), a request waits for one to start, up to this long in all; then 503 with Retry-After. Raise it for models whose replicas take longer to start. Not while replicas fail to start (since one last started): then 503 after admission_timeout_s.",
    )
    migrate_attempts: int = Field(
        2,
        ge=0,
        description="Times a request whose replica dies is resumed on another replica (before its first token: resent; after it: continued from the prompt plus the text already streamed). 0: fail it with an in-band error.",
    )
    throughput_mode: bool = Field(
        True,
        description="Serve's handles stream over gRPC instead of one Ray object per streamed item, and user code runs on each replica's main event loop: 2.4x the tokens/s at the serving ceiling (docs/results/ceiling.md). Each replica's internal gRPC port listens on all interfaces, as Ray's own ports do.",
    )

    @field_validator("cors_allowed_origins")
    @classmethod
    def _origins(cls, v: list[str]) -> list[str]:
        """A browser's Origin is scheme://host[:port]: one with a path or a trailing slash
        would never match, and CORS would silently stay off for it."""
        import re

        for origin in v:
            if origin != "*" and not re.fullmatch(r"https?://[^/\s?#]+", origin):
                raise ValueError(
                    f"{origin!r} is not an origin: write scheme://host[:port], with no path or trailing slash (e.g. 'https://chat.example.com'), or '*' for any"
                )
        return v


class SLOConfig(_Strict):
    ttft_s: float = Field(
        1.0,
        gt=0,
        description="A request's time to first token limit (arrival at the ingress to first token); must be a latency bucket boundary so attainment panels are exact.",
    )
    tpot_s: float = Field(
        0.1,
        gt=0,
        description="A request's time per output token limit, (E2E - TTFT) / (tokens - 1); a bucket boundary too.",
    )
    latency_objective: float = Field(
        0.95,
        gt=0,
        lt=1,
        description="Share of requests that must meet each latency limit (TTFT and TPOT burn-rate alerts).",
    )
    availability_objective: float = Field(
        0.999,
        gt=0,
        lt=1,
        description="Share of requests that must not fail or be refused (availability burn-rate alerts).",
    )
    goodput_objective: float = Field(
        0.9,
        gt=0,
        lt=1,
        description="Share of requests that must be good (both limits met, no error): the goodput alert and the overview's target line.",
    )

    @field_validator("ttft_s", "tpot_s")
    @classmethod
    def _on_a_boundary(cls, v: float) -> float:
        from contracts.metrics import LATENCY_BUCKETS_S

        if v not in LATENCY_BUCKETS_S:
            raise ValueError(
                f"must be one of the latency bucket boundaries {list(LATENCY_BUCKETS_S)} (a threshold between boundaries cannot be measured exactly)"
            )
        return v


class FleetConfig(_Strict):
    model: ModelConfig = Field(default_factory=ModelConfig, description="What to serve.")
    engine: EngineConfig = Field(
        default_factory=EngineConfig, description="Engine choice and arguments."
    )
    replicas: ReplicaConfig = Field(
        default_factory=ReplicaConfig, description="Replica deployment settings."
    )
    routing: RoutingConfig = Field(default_factory=RoutingConfig, description="Request routing.")
    autoscaling: AutoscalingSection = Field(
        default_factory=AutoscalingSection, description="Autoscaling."
    )
    server: ServerConfig = Field(default_factory=ServerConfig, description="Ray and HTTP settings.")
    slo: SLOConfig = Field(
        default_factory=SLOConfig,
        description="Per-request service-level objectives: live goodput, dashboards and alerts.",
    )
    cluster: ClusterSection = Field(
        default_factory=ClusterSection,
        description="Where a multi-node fleet runs (llmfleet deploy render|plan|validate).",
    )

    @model_validator(mode="after")
    def _vllm_gpus(self) -> FleetConfig:
        n, tp = self.replicas.num_gpus, self.engine.tensor_parallel_size
        if self.engine.type == "vllm" and n not in (None, tp):
            raise ValueError(
                "replicas.num_gpus must be unset or engine.tensor_parallel_size with vLLM"
                " (one engine worker per GPU)"
            )
        return self

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)


class ConfigError(ValueError):
    """A config file that cannot be used; the message names each bad field path."""


def format_validation_error(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        path = ".".join(str(p) for p in e["loc"]) or "(root)"
        lines.append(f"  {path}: {e['msg']}")
    return "invalid config:\n" + "\n".join(lines)


def parse_config(data: dict[str, Any] | None) -> FleetConfig:
    try:
        return FleetConfig.model_validate(data or {})
    except ValidationError as err:
        raise ConfigError(format_validation_error(err)) from None


def load_config(path: str | Path | None) -> FleetConfig:
    if path is None:
        return FleetConfig()
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError(f"cannot read config {path}: {err}") from None
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"config {path}: top level must be a mapping")
    return parse_config(data)
