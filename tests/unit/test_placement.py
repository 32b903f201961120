import pytest

from cluster.placement import replica_resources


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_gpu_replica_gets_one_bundle_per_gpu_strict_pack(tp: int) -> None:
    res = replica_resources(tp, num_cpus=1.0, gpu=True)
    bundles = res["placement_group_bundles"]
    assert res["placement_group_strategy"] == "STRICT_PACK"
    assert bundles[0] == {"CPU": 1.0}
    assert bundles[1:] == [{"GPU": 1.0}] * tp
    assert sum(b.get("GPU", 0) for b in bundles) == tp
    assert res["ray_actor_options"] == {"num_cpus": 0}


def test_cpu_replica_has_no_placement_group() -> None:
    res = replica_resources(1, num_cpus=2.0, gpu=False)
    assert res == {"ray_actor_options": {"num_cpus": 2.0}}


def test_tp_needs_gpus_and_is_positive() -> None:
    with pytest.raises(ValueError, match="needs GPUs"):
        replica_resources(2, num_cpus=1.0, gpu=False)
    with pytest.raises(ValueError, match=r"tensor_parallel_size must be >= 1"):
        replica_resources(0, num_cpus=1.0, gpu=True)


def test_num_gpus_lets_a_simulated_replica_reserve_logical_gpus_of_a_type() -> None:
    res = replica_resources(1, num_cpus=0.1, gpu=False, num_gpus=2, accelerator_type="L4")
    assert res["placement_group_strategy"] == "STRICT_PACK"
    gpu_bundle = {"GPU": 1.0, "accelerator_type:L4": 0.001}  # as Ray's accelerator_type=
    assert res["placement_group_bundles"] == [{"CPU": 0.1}, gpu_bundle, gpu_bundle]
    assert replica_resources(1, 0.1, gpu=False, num_gpus=0) == {
        "ray_actor_options": {"num_cpus": 0.1}
    }


def test_vllm_on_gpus_reserves_its_tp_and_accelerator_type_needs_gpus() -> None:
    res = replica_resources(2, 1.0, gpu=True, accelerator_type="A100")
    assert res["placement_group_bundles"][1:] == [{"GPU": 1.0, "accelerator_type:A100": 0.001}] * 2
    with pytest.raises(ValueError, match="reserves tensor_parallel_size GPUs"):
        replica_resources(2, 1.0, gpu=True, num_gpus=1)
    with pytest.raises(ValueError, match="accelerator_type needs GPUs"):
        replica_resources(1, 1.0, gpu=False, accelerator_type="L4")


def test_config_knobs_reach_the_replica_placement() -> None:
    from cluster.app import replica_placement
    from cluster.config import ConfigError, parse_config

    sim = {"type": "sim"}
    cfg = parse_config({"engine": sim, "replicas": {"num_gpus": 2, "accelerator_type": "L4"}})
    bundles = replica_placement(cfg, gpu=False)["placement_group_bundles"]
    assert [b.get("GPU", 0) for b in bundles] == [0, 1.0, 1.0]
    assert all(b["accelerator_type:L4"] == 0.001 for b in bundles[1:])
    default = parse_config({"engine": {"tensor_parallel_size": 2}})  # vLLM keeps its TP rule
    assert len(replica_placement(default, gpu=True)["placement_group_bundles"]) == 3
    with pytest.raises(
        ConfigError, match=r"num_gpus must be unset or engine\.tensor_parallel_size"
    ):
        parse_config({"engine": {"tensor_parallel_size": 2}, "replicas": {"num_gpus": 1}})
    with pytest.raises(ConfigError, match="accelerator_type needs GPUs"):
        parse_config({"engine": sim, "replicas": {"num_gpus": 0, "accelerator_type": "L4"}})
