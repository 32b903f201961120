from collections.abc import Iterator

import pytest

from tests.serve_fixtures import delete_app, deploy_app

MODEL = "smollm2-135m-instruct"


@pytest.fixture(scope="package")
def vllm_app(ray_session: None) -> Iterator[str]:
    deploy_app(
        {
            "replicas": {"num_replicas": 1},
            "routing": {"policy": "ray-p2c"},
            "engine": {"vllm": {"kv_cache_gib": 1, "max_num_seqs": 16}},
        }
    )
    yield MODEL
    delete_app()
