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
