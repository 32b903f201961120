"""One local Ray cluster per test session; apps are deployed per module and deleted after."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

TEST_PORT = int(os.environ.get("LLMFLEET_TEST_PORT", "8123"))
TEST_URL = f"http://127.0.0.1:{TEST_PORT}"
TEST_METRICS_PORT = int(os.environ.get("LLMFLEET_TEST_METRICS_PORT", "18080"))


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    import ray
    from ray import serve

    from cluster.config import FleetConfig
    from cluster.runtime import http_options, start_ray

    if ray.is_initialized():  # a module imported this fixture again: reuse the cluster
        yield
        return
    cfg = FleetConfig.model_validate(
        {"server": {"port": TEST_PORT, "metrics_export_port": TEST_METRICS_PORT}}
    )
    start_ray(cfg)
    serve.start(http_options=http_options(cfg))  # as `llmfleet up` starts it
    yield
    serve.shutdown()
    ray.shutdown()


def sim_fleet(replicas: int, *, speed: float, kv_capacity_tokens: int) -> dict[str, Any]:
    """Config of a fleet of simulated SmolLM2/CPU replicas (block 16) behind the prefix
    router, its stats polled every 0.2 s."""
    return {
        "engine": {
            "type": "sim",
            "sim": {
                "hardware": "cpu",
                "model_profile": "smollm2-135m",
                "speed": speed,
                "block_size": 16,
                "kv_capacity_tokens": kv_capacity_tokens,
            },
        },
        "replicas": {"num_replicas": replicas, "num_cpus": 0.1, "max_ongoing_requests": 64},
        "routing": {"policy": "prefix", "stats_period_s": 0.2},
    }


def deploy_app(cfg_dict: dict[str, Any], timeout_s: float = 300.0) -> Any:
    from cluster.config import parse_config
    from cluster.runtime import deploy, wait_ready

    cfg_dict = {**cfg_dict, "server": {**cfg_dict.get("server", {}), "port": TEST_PORT}}
    cfg = parse_config(cfg_dict)
    deploy(cfg)
    wait_ready(TEST_URL, timeout_s=timeout_s)
    return cfg


def delete_app() -> None:
    from ray import serve

    from cluster.app import APP_NAME

    serve.delete(APP_NAME)


def replica_stats() -> list[dict[str, float]]:
    """Live engine stats straight from the replicas (not the 1 s status reports)."""
    from ray import serve

    from cluster.app import APP_NAME, REPLICA_DEPLOYMENT

    h = serve.get_deployment_handle(REPLICA_DEPLOYMENT, APP_NAME)
    return [h.stats.remote().result(timeout_s=10)]


def post(path: str, body: Any, **kw: Any) -> httpx.Response:
    return httpx.post(f"{TEST_URL}{path}", json=body, timeout=120, **kw)


def session_processes(name_part: str) -> list[Any]:
    """Processes of this test session's Ray node whose name contains ``name_part``."""
    from cluster.local_state import node_processes

    return node_processes(name_part)
