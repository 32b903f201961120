"""--target serve: the rendered file is a Serve 2.60 ServeDeploySchema, carries the GPU
placement and keeps the live fields out of args (so changing them is an in-place update);
the builder builds from those args and refuses another llmfleet version."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from ray.serve.schema import ServeDeploySchema

from cluster.config import load_config, parse_config
from cluster.deploy.render import EXAMPLES
from cluster.deploy.serve_config import FILE, IMPORT_PATH, render_files, validate_serve


def rendered(cfg_path: Path, version: str = "0.1.0") -> dict[str, Any]:
    text = render_files(load_config(cfg_path), version)[FILE]
    return yaml.safe_load(text)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_examples_render_to_a_valid_serve_config(example: Path, tmp_path: Path) -> None:
    data = rendered(example)
    ServeDeploySchema.model_validate(data)
    path = tmp_path / "serve-config.yaml"
    path.write_text(render_files(load_config(example), "0.1.0")[FILE])
    assert validate_serve(path) == []


def test_gpu_placement_and_live_fields() -> None:
    data = rendered(EXAMPLES[1])  # GCP: TP 2 on A100, autoscaling 2..6
    (app,) = data["applications"]
    assert app["import_path"] == IMPORT_PATH
    replica, ingress = app["deployments"]
    assert replica["placement_group_strategy"] == "STRICT_PACK"
    assert [b.get("GPU", 0) for b in replica["placement_group_bundles"]] == [0, 1.0, 1.0]
    assert replica["ray_actor_options"] == {"num_cpus": 0}
    asc = replica["autoscaling_config"]
    assert (asc["min_replicas"], asc["max_replicas"]) == (2, 6)
    assert "max_replicas" not in asc["policy"]["policy_kwargs"]["config"]
    assert ingress == {"name": "OpenAIIngress", "num_replicas": 2}  # prefix routers share
    config = app["args"]["config"]
    assert config["cluster"] == {"weights_uri": "gs://my-models/qwen3-32b"}  # read by replicas
    assert "max_replicas" not in config["autoscaling"]
    assert "num_replicas" not in config["replicas"]
    assert config["engine"]["vllm"]["block_size"] == 16  # the GPU block, not the build node's


def test_a_bound_change_leaves_the_code_version_alone() -> None:
    """Serve restarts every replica when import_path, runtime_env, args or the autoscaling
    policy change (its code version); a new max_replicas must change none of them."""
    from ray.serve._private.deploy_utils import get_app_code_version
    from ray.serve.schema import ServeApplicationSchema

    def version(max_replicas: int) -> str:
        cfg = load_config(EXAMPLES[0]).model_copy(deep=True)
        cfg.autoscaling.max_replicas = max_replicas
        (app,) = yaml.safe_load(render_files(cfg, "0.1.0")[FILE])["applications"]
        return get_app_code_version(ServeApplicationSchema.model_validate(app))

    assert version(8) == version(12)


def test_validate_serve_reports_schema_and_llmfleet_problems(tmp_path: Path) -> None:
    data = rendered(EXAMPLES[0])
    data["applications"][0]["deployments"][0]["name"] = "Nope"
    data["applications"][0]["args"]["config"]["engine"]["type"] = "quantum"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    problems = validate_serve(path)
    assert any("no such llmfleet deployment" in p for p in problems)
    assert any("args.config" in p and "engine.type" in p for p in problems)
    path.write_text("applications: 3\n")
    assert validate_serve(path)


def test_builder_builds_from_the_args_and_checks_the_version(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import cluster.app
    from cluster import serve_entry

    monkeypatch.setattr(cluster.app, "resolve_model", lambda _path: tmp_path)
    cfg = parse_config({"engine": {"type": "null"}})
    (app,) = yaml.safe_load(render_files(cfg)[FILE])["applications"]
    built = serve_entry.app(app["args"])
    assert type(built).__name__ == "Application"
    with pytest.raises(ValueError, match=r"rendered by llmfleet 0\.0\.1"):
        serve_entry.app({**app["args"], "llmfleet_version": "0.0.1"})
