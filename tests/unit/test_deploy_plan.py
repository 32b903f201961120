"""llmfleet deploy plan: node counts for TP × node shapes, refusals of impossible fleets,
version agreement (pure: hand-built configs, injected versions)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cluster.config import ConfigError, parse_config
from cluster.deploy.cli import format_plan
from cluster.deploy.plan import Plan, plan
from cluster.deploy.versions import Installed

HERE = Installed(llmfleet="0.1.0", ray_pin="2.60.0", python="311")


def node(name: str, gpus: int, accel: str = "H100", **kw: Any) -> dict[str, Any]:
    return {"name": name, "instance_type": "x", "cpus": 64, "gpus": gpus, "accelerator_type": accel, "max_workers": 100, **kw}  # fmt: skip


def fleet(
    tp: int, nodes: list[dict[str, Any]], replicas: int = 8, **cluster: Any
) -> dict[str, Any]:
    return {
        "engine": {"type": "vllm", "tensor_parallel_size": tp},
        "autoscaling": {"enabled": True, "min_replicas": 1, "max_replicas": replicas},
        "cluster": {"node_types": nodes, **cluster},
    }


def run(data: dict[str, Any]) -> Plan:
    return plan(parse_config(data), HERE)


def paths(p: Plan, error: bool = True) -> list[str]:
    return [f.path for f in (p.errors if error else p.warnings)]


# (TP, GPUs per node) -> nodes for 8 replicas; None: refused (TP would cross nodes)
NODES_FOR_8 = [
    (1, 1, 8), (2, 1, None), (4, 1, None), (8, 1, None),
    (1, 4, 2), (2, 4, 4), (4, 4, 8), (8, 4, None),
    (1, 8, 1), (2, 8, 2), (4, 8, 4), (8, 8, 8),
]  # fmt: skip


@pytest.mark.parametrize(("tp", "gpus", "nodes"), NODES_FOR_8)
def test_nodes_for_max_replicas(tp: int, gpus: int, nodes: int | None) -> None:
    p = run(fleet(tp, [node(f"gpu-{gpus}x", gpus)]))
    row = p.rows[0]
    assert row.name == "LLMReplica"
    assert row.strategy == "STRICT_PACK"
    assert [b.get("GPU", 0) for b in row.bundles] == [0] + [1.0] * tp
    if nodes is None:
        assert p.refused
        assert paths(p) == ["engine.tensor_parallel_size"]
        assert "never crosses nodes" in p.errors[0].message
        return
    assert not p.refused, p.errors
    assert dict(row.nodes) == {f"gpu-{gpus}x": nodes}
    assert row.headroom_replicas == 2  # ceil(0.2 * 8): one rolling-update batch
    per_node = gpus // tp
    assert dict(row.nodes_with_headroom) == {f"gpu-{gpus}x": -(-10 // per_node)}


def test_every_gpu_bundle_asks_the_accelerator_like_ray_does() -> None:
    row = run(fleet(2, [node("gpu-4x", 4, "A100")])).rows[0]
    assert all(b["accelerator_type:A100"] == 0.001 for b in row.bundles[1:])
    assert row.bundles[0] == {"CPU": 1.0}


def test_an_explicit_accelerator_picks_the_node_types() -> None:
    data = fleet(1, [node("l4", 1, "L4"), node("a10g", 1, "A10G")])
    data["replicas"] = {"accelerator_type": "A10G"}
    p = run(data)
    assert not p.refused
    assert dict(p.rows[0].nodes) == {"a10g": 8}
    data["replicas"] = {"accelerator_type": "H100"}
    assert paths(run(data)) == ["replicas.accelerator_type"]


def test_a_simulated_fleet_reserving_logical_gpus_is_planned_like_one() -> None:
    data = fleet(1, [node("gpu-4x", 4)])
    data["engine"] = {"type": "sim"}
    data["replicas"] = {"num_gpus": 2}
    row = run(data).rows[0]
    assert dict(row.nodes) == {"gpu-4x": 4}


def test_cpus_also_limit_replicas_per_node() -> None:
    row = run(fleet(1, [node("gpu-8x", 8, cpus=3)])).rows[0]
    assert row.fits[0].per_node == 3
    assert "CPUs" in row.fits[0].reason


def test_most_replicas_per_node_fill_first_within_max_workers() -> None:
    p = run(fleet(1, [node("small", 1, max_workers=10), node("big", 4, max_workers=1)], replicas=6))
    assert dict(p.rows[0].nodes) == {"big": 1, "small": 2}


def test_tp8_on_4_gpu_nodes_is_refused() -> None:
    p = run(fleet(8, [node("gpu-4x", 4)]))
    assert p.refused
    assert paths(p) == ["engine.tensor_parallel_size"]
    assert "gpu-4x, has 4" in p.errors[0].message


def test_fitting_node_types_with_different_accelerators_are_refused() -> None:
    p = run(fleet(1, [node("l4", 1, "L4"), node("a10g", 1, "A10G")]))
    assert p.refused
    assert paths(p) == ["cluster.node_types[1].accelerator_type"]
    assert "A10G, L4" in p.errors[0].message


def test_a_node_type_too_small_for_tp_is_a_warning_not_a_mismatch() -> None:
    p = run(fleet(2, [node("l4", 1, "L4"), node("a10g", 4, "A10G")]))
    assert not p.refused
    assert "cluster.node_types[0]" in paths(p, error=False)
    assert "accelerator_type:A10G" in p.rows[0].bundles[1]


def test_no_gpu_node_type_for_vllm_is_refused() -> None:
    cpu_node = {"name": "cpu", "instance_type": "x", "cpus": 8, "gpus": 0}
    p = run(fleet(1, [cpu_node]))
    assert paths(p) == ["cluster.node_types"]


def test_max_workers_too_small_is_refused_and_missing_headroom_warned() -> None:
    p = run(fleet(1, [node("gpu-4x", 4, max_workers=1)], replicas=5))
    assert paths(p) == ["autoscaling.max_replicas"]
    p = run(fleet(1, [node("gpu-4x", 4, max_workers=1)], replicas=4))
    assert not p.refused
    assert "autoscaling.max_replicas" in paths(p, error=False)
    assert p.rows[0].headroom_short == 1


def test_idle_gpus_are_warned() -> None:
    p = run(fleet(4, [node("gpu-6x", 6)]))
    assert "cluster.node_types[0].gpus" in paths(p, error=False)


def test_autoscaling_off_plans_num_replicas() -> None:
    data = fleet(1, [node("gpu-1x", 1)])
    data["autoscaling"] = {"enabled": False}
    data["replicas"] = {"num_replicas": 3}
    row = run(data).rows[0]
    assert (row.min_replicas, row.replicas, dict(row.nodes)) == (3, 3, {"gpu-1x": 3})


def test_a_head_with_gpus_is_refused_by_the_config() -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(
            {
                "cluster": {
                    "head": {
                        "name": "head",
                        "instance_type": "x",
                        "gpus": 1,
                        "accelerator_type": "L4",
                    }
                }
            }
        )
    assert "cluster:" in str(err.value)
    assert "head.gpus" in str(err.value)


@pytest.mark.parametrize(
    ("image", "error"),
    [
        ("rayproject/ray:2.60.0-py311-cu128", None),
        ("docker.io/rayproject/ray-ml:2.60.0-py311-gpu", None),
        ("rayproject/ray:2.59.0-py311-gpu", "Ray 2.59.0"),
        ("rayproject/ray:2.60.0-py310-gpu", "Python 3.10"),
        ("my.registry/llmfleet:0.1.0", None),
    ],
)
def test_image_ray_version_must_match_the_pin(image: str, error: str | None) -> None:
    p = run(fleet(1, [node("gpu-1x", 1)], image=image))
    errors = [f.message for f in p.errors]
    assert (errors == []) if error is None else (error in errors[0])


@pytest.mark.parametrize(
    ("requirement", "error", "warning"),
    [
        ("llmfleet[gpu]==0.1.0", False, False),
        ("llmfleet[gpu]==0.2.0", True, False),
        ("llmfleet[gpu]>=0.1,<0.2", False, False),
        ("llmfleet[gpu]", False, True),
        ("llmfleet==0.1.0", False, True),  # no [gpu] extra: no vLLM
        ("/wheels/llmfleet-0.1.0-py3-none-any.whl", False, False),
        ("/wheels/llmfleet-0.0.9-py3-none-any.whl", True, False),
        ("git+https://example.com/llmfleet.git", False, True),
    ],
)
def test_llmfleet_requirement_must_admit_this_version(
    requirement: str, error: bool, warning: bool
) -> None:
    p = run(fleet(1, [node("gpu-1x", 1)], llmfleet_requirement=requirement))
    at = "cluster.llmfleet_requirement"
    assert (at in paths(p)) is error
    assert (at in paths(p, error=False)) is warning


def test_text_and_json_outputs() -> None:
    p = run(fleet(2, [node("gpu-4x", 4)]))
    text = format_plan(p)
    assert "LLMReplica" in text
    assert "OpenAIIngress" in text
    assert text.endswith("plan: ok")
    data = json.loads(json.dumps(p.to_dict()))
    assert data["refused"] is False
    assert data["rows"][0]["nodes"] == {"gpu-4x": 4}
    assert "REFUSED" in format_plan(run(fleet(8, [node("gpu-4x", 4)])))
