"""Wire the Serve application from a ``FleetConfig``: ingress → (router) → LLMReplica."""

from __future__ import annotations

from typing import Any

from ray import serve

from cluster.config import FleetConfig
from cluster.ingress import OpenAIIngress
from cluster.placement import replica_demand, replica_resources
from replicas.model_prep import resolve_model
from replicas.replica import LLMReplica
from replicas.vllm_settings import on_gpu

APP_NAME = "llmfleet"
REPLICA_DEPLOYMENT = "LLMReplica"
INGRESS_DEPLOYMENT = "OpenAIIngress"
KV_EVENTS_ENDPOINT = "ipc:///tmp/llmfleet-kv-{replica_id}"  # one ZMQ publisher per replica (binds)
CPU_BLOCK_SIZE = 128  # vLLM-CPU's default KV block
GPU_BLOCK_SIZE = 16
OBJECT_STORE_SCHEMES = ("s3://", "gs://")  # weights vLLM's runai_streamer loader streams
NULL_BLOCK_SIZE = 16  # no KV cache; the routers' prefix hashing still needs a block


def engine_block_size(cfg: FleetConfig, gpu: bool) -> int:
    if cfg.engine.type == "sim":
        return cfg.engine.sim.block_size
    if cfg.engine.type == "null":
        return NULL_BLOCK_SIZE
    return cfg.engine.vllm.block_size or (GPU_BLOCK_SIZE if gpu else CPU_BLOCK_SIZE)


def engine_spec(cfg: FleetConfig, model_dir: str) -> dict[str, Any]:
    spec = _engine_spec(cfg, model_dir)
    m = cfg.model
    spec["openai"] = {
        "served_name": m.served_name,
        "tool_call_parser": m.tool_call_parser,
        "tool_strict_level": m.tool_strict_level,
        "chat_template": m.chat_template,
    }
    spec["stall_timeout_s"] = cfg.replicas.stall_timeout_s
    spec["fault_injection"] = cfg.engine.fault_injection
    if cfg.engine.fail_after_tokens is not None:
        spec["faults"] = {"fail_after_tokens": cfg.engine.fail_after_tokens}
    return spec


def _engine_spec(cfg: FleetConfig, model_dir: str) -> dict[str, Any]:
    e = cfg.engine
    if e.type == "sim":
        s = e.sim
        return {
            "type": "sim",
            "settings": {
                "model": s.model_profile,
                "hardware": s.hardware,
                "tp": e.tensor_parallel_size,
                "block_size": s.block_size,
                "kv_capacity_tokens": s.kv_capacity_tokens,
                "max_num_seqs": s.max_num_seqs,
                "max_num_batched_tokens": s.max_num_batched_tokens,
                "max_model_len": cfg.model.max_model_len,
                "speed": s.speed,
                "batching": s.batching,
                "tokenizer_path": model_dir,
            },
        }
    if e.type == "null":
        n = e.null
        return {
            "type": "null",
            "settings": {
                "step_s": n.step_s,
                "prefill_s": n.prefill_s,
                "max_num_seqs": n.max_num_seqs,
                "max_model_len": cfg.model.max_model_len,
                "block_size": NULL_BLOCK_SIZE,
            },
        }
    v = e.vllm
    settings: dict[str, Any] = v.model_dump(exclude={"kv_events"})  # VLLMSettings fields
    settings.update(
        model_path=model_dir,
        max_model_len=cfg.model.max_model_len,
        tensor_parallel_size=e.tensor_parallel_size,
        ray_metrics=True,
        served_name=cfg.model.served_name,
    )
    if v.kv_events or cfg.routing.policy == "prefix-precise":
        settings["kv_events_endpoint"] = KV_EVENTS_ENDPOINT  # filled with the replica id
    uri = cfg.cluster.weights_uri
    if uri and uri.startswith(OBJECT_STORE_SCHEMES):  # a path needs nothing: model.path is it
        settings["weights_uri"] = uri
    return {"type": "vllm", "settings": settings}


def replica_placement(cfg: FleetConfig, gpu: bool) -> dict[str, Any]:
    """The replica's Ray resources (``cluster/placement.py``); ``gpu``: vLLM on a GPU machine."""
    r = cfg.replicas
    return replica_resources(
        cfg.engine.tensor_parallel_size,
        r.num_cpus,
        gpu,
        num_gpus=r.num_gpus,
        accelerator_type=r.accelerator_type,
    )


def router_options(cfg: FleetConfig, block_size: int) -> dict[str, Any]:
    from ray.serve.config import RequestRouterConfig

    policy = cfg.routing.policy
    if policy == "ray-p2c":
        return {}
    if policy == "ray-prefix":
        from router.registry import RAY_NATIVE_ROUTERS

        cls_path = RAY_NATIVE_ROUTERS[policy]
        kwargs: dict[str, Any] = {}
    else:
        cls_path = "router.serve_router:LLMFleetRequestRouter"
        from replicas.status_registry import ACTOR_NAME

        kwargs = {
            "policy": policy,
            "config": cfg.routing.params,
            "block_size": block_size,
            "snapshot_store": ACTOR_NAME,
            "snapshot_key": f"{APP_NAME}/{policy}",
            # one ingress has no one to share with: no route log traffic in the status actor
            "share_routes": policy in SHARED_INDEX_POLICIES and ingress_replicas(cfg) > 1,
            # several ingress replicas: a replica's report holds the other routers' requests
            "single_caller": ingress_replicas(cfg) == 1,
        }
        if policy == "prefix-precise":
            kwargs["kv_events_endpoint_template"] = KV_EVENTS_ENDPOINT
    options: dict[str, Any] = {  # Ray annotates **kwargs as dict values: pass them untyped
        "request_router_class": cls_path,
        "request_router_kwargs": kwargs,
        "request_routing_stats_period_s": cfg.routing.stats_period_s,
    }
    return {"request_router_config": RequestRouterConfig(**options)}


def serve_queue_bound(cfg: FleetConfig) -> int:
    """Serve's own ``max_queued_requests`` per caller: a second line behind the ingress's
    shedding. Serve counts a request as queued until it is sent to a replica, so a burst on
    its way to free slots counts too; the bound leaves room for every slot of the largest
    fleet on top of the ingress's queue (``router/admission.py`` sheds at the real one)."""
    r, a = cfg.replicas, cfg.autoscaling
    most = max(r.num_replicas, a.max_replicas if a.enabled else 0)
    return r.max_queued_requests + most * r.max_ongoing_requests


def autoscaling_options(cfg: FleetConfig) -> dict[str, Any]:
    a = cfg.autoscaling
    if not a.enabled:
        return {"num_replicas": cfg.replicas.num_replicas}
    from autoscaler.serve_autoscaling import build_autoscaling_config
    from autoscaler.types import ScalingConfig

    scfg = ScalingConfig(
        min_replicas=a.min_replicas,
        max_replicas=a.max_replicas,
        ttft_slo_s=a.ttft_slo_s,
        target_ongoing_requests=a.target_ongoing_requests,
        params=a.params,
    )
    asc = build_autoscaling_config(
        a.policy,
        scfg,
        metrics_interval_s=a.metrics_interval_s,
        look_back_period_s=a.look_back_period_s,
    )
    return {"autoscaling_config": asc}


# Policies whose prefix index each router learns from the requests it routes itself. Ours
# share what they learn between the ingress replicas' routers (router/route_share.py), so
# every router sees the whole traffic. Ray's own ``ray-prefix`` cannot: two of its routers
# would each learn half the traffic and split a prefix's requests between two replicas'
# caches, so by default it gets one ingress replica (restarted by Serve when it fails).
SHARED_INDEX_POLICIES = frozenset({"prefix", "sglang-tree"})
UNSHARED_INDEX_POLICIES = frozenset({"ray-prefix"})


def ingress_replicas(cfg: FleetConfig) -> int:
    """``server.ingress_replicas`` when set; else 2 when the fleet may have several engine
    replicas (a second ingress survives the first one's failure and halves its load),
    unless the policy's routers would split what they learn (``UNSHARED_INDEX_POLICIES``);
    else 1."""
    if cfg.server.ingress == "direct":
        return 1  # it serves one port itself
    if cfg.server.ingress_replicas is not None:
        return cfg.server.ingress_replicas
    a = cfg.autoscaling
    several = cfg.replicas.num_replicas > 1 or (a.enabled and a.max_replicas > 1)
    if not several or cfg.routing.policy in UNSHARED_INDEX_POLICIES:
        return 1
    return 2


INGRESS_CPUS = 0.5  # logical CPUs each ingress replica reserves
# How often a stopping replica looks for its requests to end. Serve's 2 s is also the least a
# stop takes, per tier (ingress, then engines): found by hand, half of a 10-s `down`.
DRAIN_POLL_S = 0.25


def serves_on_gpu(cfg: FleetConfig) -> bool:
    """vLLM on a machine with a GPU (then each replica reserves its GPUs)."""
    return cfg.engine.type == "vllm" and on_gpu()


def fleet_demand(cfg: FleetConfig, gpu: bool, *, peak: bool) -> tuple[dict[str, float], str]:
    """The Ray resources the fleet holds at start (``peak``: at its largest, autoscaling's
    ``max_replicas``), and what they are made of, in words. At start an autoscaled fleet
    has ``min_replicas`` engine replicas."""
    r, a = cfg.replicas, cfg.autoscaling
    if peak:
        engines = max(r.num_replicas, a.max_replicas) if a.enabled else r.num_replicas
    else:
        engines = a.min_replicas if a.enabled else r.num_replicas
    n_ingress = ingress_replicas(cfg)
    one = replica_demand(replica_placement(cfg, gpu))
    need = {name: engines * amount for name, amount in one.items()}
    need["CPU"] = need.get("CPU", 0.0) + n_ingress * INGRESS_CPUS
    parts = ", ".join(f"{name} {amount:g}" for name, amount in sorted(one.items()) if amount)
    words = (
        f"{engines} engine replicas ({parts or 'nothing'} each) and {n_ingress} ingress "
        f"replicas (CPU {INGRESS_CPUS:g} each)"
    )
    return need, words


def keys_runtime_env() -> dict[str, Any]:
    """Keys given in the environment (``LLMFLEET_API_KEYS``, hashes) reach the ingress
    replicas wherever they are placed."""
    import os

    text = os.environ.get("LLMFLEET_API_KEYS")
    return {"runtime_env": {"env_vars": {"LLMFLEET_API_KEYS": text}}} if text else {}


def code_digest() -> str:
    """A digest of llmfleet's own source: an upgrade is a new version even with the same
    config."""
    import hashlib
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for pkg in ("contracts", "replicas", "router", "autoscaler", "cluster"):
        for f in sorted((root / pkg).rglob("*.py")):
            h.update(f.read_bytes())
    return h.hexdigest()


def deployment_version(*parts: Any) -> str:
    """Serve replaces a deployment's replicas only when its code version changes; without
    one, every ``serve.run`` is a new random version and a mere replica-count change would roll
    every replica (ingress included) and cut its streams. The version is what the replicas
    are built from: their constructor arguments and the code."""
    import hashlib
    import json

    text = json.dumps(parts, sort_keys=True, default=str) + code_digest()
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# Ray annotates serve.deployment(cls, ...) as returning a decorator; it returns a Deployment.
def build_app(cfg: FleetConfig, *, enable_metrics: bool = True, draining: bool = False) -> Any:
    """The Serve app. ``draining``: the ingress refuses new requests (503 ``shutting_down``)
    while those in flight finish; only its user_config differs, so redeploying with it is an
    in-place ``reconfigure`` (``lifecycle.drain``)."""
    model_dir = str(resolve_model(cfg.model.path))
    gpu = serves_on_gpu(cfg)
    block = engine_block_size(cfg, gpu)
    r = cfg.replicas
    spec = engine_spec(cfg, model_dir)
    replica = serve.deployment(LLMReplica, name=REPLICA_DEPLOYMENT).options(  # type: ignore[attr-defined]
        max_ongoing_requests=r.max_ongoing_requests,
        health_check_period_s=r.health_check_period_s,
        health_check_timeout_s=max(30.0, 4 * r.health_check_period_s),
        graceful_shutdown_timeout_s=r.drain_timeout_s,
        graceful_shutdown_wait_loop_s=DRAIN_POLL_S,
        max_queued_requests=serve_queue_bound(cfg),
        **replica_placement(cfg, gpu),
        **router_options(cfg, block),
        **autoscaling_options(cfg),
    )
    n_ingress = ingress_replicas(cfg)
    srv = cfg.server
    settings = {
        "tokenizer_path": model_dir,
        "request_timeout_s": srv.request_timeout_s,
        "admission_timeout_s": srv.admission_timeout_s,
        "cold_start_timeout_s": srv.cold_start_timeout_s,
        "migrate_attempts": srv.migrate_attempts,
        "max_queued_requests": r.max_queued_requests,
        "max_body_bytes": srv.max_body_bytes,
        "body_timeout_s": srv.body_timeout_s,
        "max_header_bytes": srv.max_header_bytes,
        "cors_allowed_origins": list(srv.cors_allowed_origins),
        "api_keys_file": srv.api_keys_file,
        "quota_share": 1.0 / n_ingress,
        "slo": {"ttft_s": cfg.slo.ttft_s, "tpot_s": cfg.slo.tpot_s},
        "edge_metrics": enable_metrics,
        "limits": {
            "served_name": cfg.model.served_name,
            "max_model_len": cfg.model.max_model_len,
            "max_tokens_cap": cfg.model.max_tokens_cap,
            "max_choices": cfg.model.max_choices,
            "default_max_tokens": cfg.model.default_max_tokens,
            "block_size": block,
        },
    }
    ingress = serve.deployment(OpenAIIngress, name=INGRESS_DEPLOYMENT).options(  # type: ignore[attr-defined]
        graceful_shutdown_timeout_s=r.drain_timeout_s,
        graceful_shutdown_wait_loop_s=DRAIN_POLL_S,
        num_replicas=n_ingress,
        max_ongoing_requests=1000,
        ray_actor_options={"num_cpus": INGRESS_CPUS, **keys_runtime_env()},
        user_config={"draining": draining},
    )
    # Serve 2.60 refuses `version` in options() but still reads the attribute serve.run uses
    # (a random string when unset): set it so a replica-count change is an in-place update.
    replica._version = deployment_version(spec, enable_metrics, cfg.routing.model_dump())
    ingress._version = deployment_version(settings, cfg.routing.model_dump())
    return ingress.bind(replica.bind(spec, enable_metrics), settings)
