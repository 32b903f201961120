from ray.autoscaler._private.util import validate_config

from cluster.config import FleetConfig, parse_config
from cluster.deploy.fake_cluster import HEAD_TYPE, fake_autoscaling_config, free_ports


def _cfg() -> FleetConfig:
    gpu = {"name": "gpu-2x", "cpus": 4, "gpus": 2, "accelerator_type": "L4", "max_workers": 3}
    cpu = {"name": "cpu-8", "cpus": 8, "max_workers": 2, "min_workers": 1}
    cluster = {"provider": "ssh", "head_ip": "127.0.0.1", "head": {"name": "head", "cpus": 4}}
    return parse_config({"cluster": {**cluster, "node_types": [gpu, cpu]}})


def test_fake_config_carries_the_rendered_node_types_and_passes_rays_schema() -> None:
    cfg = fake_autoscaling_config(_cfg(), gcs_address="127.0.0.1:6390")
    validate_config(cfg)  # Ray's ray-schema.json (draft-07), as the autoscaler checks it
    types = cfg["available_node_types"]
    assert cfg["head_node_type"] == HEAD_TYPE
    assert set(types) == {HEAD_TYPE, "gpu-2x", "cpu-8"}
    assert types[HEAD_TYPE]["resources"] == {"CPU": 4, "GPU": 0}
    assert types[HEAD_TYPE]["max_workers"] == 0
    gpu = types["gpu-2x"]
    assert {k: v for k, v in gpu["resources"].items() if k != "object_store_memory"} == {
        "CPU": 4,
        "GPU": 2,
        "accelerator_type:L4": 1,
    }
    assert gpu["node_config"] == {}  # a fake node is a raylet: no machine to describe
    assert (gpu["min_workers"], gpu["max_workers"]) == (0, 3)
    assert (types["cpu-8"]["min_workers"], types["cpu-8"]["max_workers"]) == (1, 2)
    assert cfg["max_workers"] == 5
    assert cfg["provider"]["gcs_address"] == "127.0.0.1:6390"
    assert cfg["idle_timeout_minutes"] == 5


def test_idle_timeout_may_be_shortened_to_fractions_of_a_minute() -> None:
    cfg = fake_autoscaling_config(_cfg(), gcs_address="x:1", idle_timeout_minutes=0.25)
    validate_config(cfg)
    assert cfg["idle_timeout_minutes"] == 0.25


def test_free_ports_are_distinct_bindable_and_avoid_the_given_ones() -> None:
    import socket

    first = free_ports(20)
    ports = free_ports(40, avoid=first)
    assert len(set(ports)) == 40  # ray start refuses a port given to two components
    assert not set(ports) & set(first)
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[0]))  # free once picked
