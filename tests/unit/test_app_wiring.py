import pytest
from ray.serve.request_router import RequestRouter

from cluster.app import KV_EVENTS_ENDPOINT, engine_spec, router_options, serve_queue_bound
from cluster.config import parse_config


def test_prefix_precise_wires_kv_events_to_engine_and_router() -> None:
    cfg = parse_config({"routing": {"policy": "prefix-precise"}})
    spec = engine_spec(cfg, "/models/x")
    assert spec["type"] == "vllm"
    assert spec["settings"]["kv_events_endpoint"] == KV_EVENTS_ENDPOINT
    rc = router_options(cfg, block_size=128)["request_router_config"]
    assert rc.request_router_kwargs["kv_events_endpoint_template"] == KV_EVENTS_ENDPOINT
    assert "{replica_id}" in KV_EVENTS_ENDPOINT


def test_default_prefix_policy_has_no_kv_events() -> None:
    cfg = parse_config({})
    assert "kv_events_endpoint" not in engine_spec(cfg, "/models/x")["settings"]
    kwargs = router_options(cfg, block_size=128)["request_router_config"].request_router_kwargs
    assert kwargs["policy"] == "prefix"
    assert "kv_events_endpoint_template" not in kwargs


def test_ray_p2c_uses_serve_default_router_and_faults_are_opt_in() -> None:
    cfg = parse_config(
        {"routing": {"policy": "ray-p2c"}, "engine": {"type": "sim", "fail_after_tokens": 3}}
    )
    assert router_options(cfg, block_size=16) == {}
    spec = engine_spec(cfg, "/models/x")
    assert spec["type"] == "sim"
    assert spec["faults"] == {"fail_after_tokens": 3}


def test_sim_batch_limits_default_to_the_hardware_profile() -> None:
    """Unset, a simulated L4 batches like vLLM's OpenAI server on a GPU under 70 GiB (2048
    tokens per step), not like the CPU engine (512): with 512, a 512-token prompt beside one
    running decode needed a second step and cache hits paid ~70 ms more under load."""
    from replicas.sim.engine import SimEngine

    def limits(sim: dict[str, object]) -> tuple[int, int]:
        cfg = parse_config({"engine": {"type": "sim", "sim": sim}})
        settings = dict(engine_spec(cfg, "/models/x")["settings"])
        settings.pop("tokenizer_path")
        sched = SimEngine(**settings).core.scheduler.config
        return sched.max_num_batched_tokens, sched.max_num_seqs

    assert limits({"hardware": "l4", "model_profile": "llama-3-8b"}) == (2048, 256)
    assert limits({"hardware": "h100", "model_profile": "llama-3-8b"}) == (8192, 256)
    assert limits({"hardware": "cpu"}) == (512, 32)
    explicit = {"hardware": "l4", "model_profile": "llama-3-8b", "max_num_batched_tokens": 512}
    assert limits({**explicit, "max_num_seqs": 8}) == (512, 8)


@pytest.mark.parametrize("policy", ["prefix", "prefix-precise", "ray-prefix"])
def test_router_class_paths_import_as_serve_request_routers(policy: str) -> None:
    """Serve imports the class path when the deployment is built; a wrong path fails here."""
    rc = router_options(parse_config({"routing": {"policy": policy}}), block_size=16)
    router_cls = rc["request_router_config"].get_request_router_class()
    assert issubclass(router_cls, RequestRouter)


def test_ray_p2c_is_serves_default_router() -> None:
    from ray.serve._private.constants import DEFAULT_REQUEST_ROUTER_PATH

    from router.registry import RAY_NATIVE_ROUTERS

    module, _, attr = RAY_NATIVE_ROUTERS["ray-p2c"].partition(":")
    assert DEFAULT_REQUEST_ROUTER_PATH.replace(":", ".") == f"{module}.{attr}"


def test_routes_are_shared_only_between_several_ingress_replicas() -> None:
    def shared(server: dict[str, object], policy: str = "prefix") -> bool:
        cfg = parse_config({"routing": {"policy": policy}, "server": server})
        kwargs = router_options(cfg, block_size=16)["request_router_config"]
        return bool(kwargs.request_router_kwargs["share_routes"])

    assert shared({"ingress_replicas": 2})
    assert not shared({"ingress_replicas": 1})
    cfg = parse_config({"server": {"ingress_replicas": 2}})
    assert not router_options(cfg, 16)["request_router_config"].request_router_kwargs[
        "single_caller"
    ]  # another router's requests are in the replicas' reports
    assert not shared({"ingress_replicas": 2}, policy="least-loaded")  # learns nothing


def test_serves_own_queue_bound_leaves_room_for_a_burst_onto_free_slots() -> None:
    """Serve counts a request as queued until it is sent, so its bound is the ingress's
    queue plus every slot of the largest fleet (the ingress sheds at the real queue)."""
    fixed = parse_config(
        {"replicas": {"num_replicas": 2, "max_ongoing_requests": 4, "max_queued_requests": 8}}
    )
    assert serve_queue_bound(fixed) == 8 + 2 * 4
    scaled = parse_config(
        {
            "replicas": {"max_ongoing_requests": 4, "max_queued_requests": 8},
            "autoscaling": {"enabled": True, "min_replicas": 1, "max_replicas": 6},
        }
    )
    assert serve_queue_bound(scaled) == 8 + 6 * 4
