from collections.abc import Iterator

import pytest

from tests.serve_fixtures import delete_app, deploy_app

MODEL = "smollm2-135m-instruct"


@pytest.fixture(scope="package")
def vllm_app(ray_session: None) -> Iterator[str]:
    deploy_app(
        {
            "replicas": {"num_replicas": 1},
            # our router in precise mode: the engine publishes KV events over ZMQ and the
            # router's index consumes them (checked in the metrics test)
            "routing": {"policy": "prefix-precise"},
            "engine": {"vllm": {"kv_cache_gib": 1, "max_num_seqs": 16}},
            # named / required / auto tool choice need a parser in this vLLM (API parity)
            "model": {"tool_call_parser": "hermes"},
        }
    )
    yield MODEL
    delete_app()
