"""``llmfleet up`` sizes its local Ray node for the fleet and refuses a fleet the node cannot
place. Found by hand: ``llmfleet up --replicas 10`` (1 logical CPU each, Ray advertising 8)
waited for CPUs forever, printing nothing."""

from __future__ import annotations

import pytest

from cluster.config import parse_config
from cluster.placement import replica_demand, shortfall
from cluster.runtime import check_capacity, ray_cpus


def _cfg(**sections: dict[str, object]) -> object:
    return parse_config({"engine": {"type": "sim"}, **sections})


def test_ray_is_sized_for_the_fleet_at_its_largest_unless_told() -> None:
    assert ray_cpus(_cfg()) == 8  # 1 replica: the floor
    # 10 engine replicas × 1 CPU + 2 ingress replicas × 0.5
    assert ray_cpus(_cfg(replicas={"num_replicas": 10})) == 11
    scaled = {"enabled": True, "min_replicas": 1, "max_replicas": 16}
    assert ray_cpus(_cfg(autoscaling=scaled)) == 17
    told = _cfg(replicas={"num_replicas": 10}, server={"ray_num_cpus": 4})
    assert ray_cpus(told) == 4


def test_a_fleet_the_node_cannot_place_is_refused_naming_what_is_short() -> None:
    cfg = _cfg(replicas={"num_replicas": 10}, server={"ray_num_cpus": 8})
    with pytest.raises(
        ValueError, match=r"CPU 11, the node has 8: leave server.ray_num_cpus unset"
    ):
        check_capacity(cfg, {"CPU": 8.0})
    assert check_capacity(cfg, {"CPU": 11.0}) is None


def test_an_autoscaled_fleet_that_fits_only_at_start_gets_a_warning() -> None:
    scaled = {"enabled": True, "min_replicas": 1, "max_replicas": 16}
    cfg = _cfg(autoscaling=scaled, server={"ray_num_cpus": 8})
    note = check_capacity(cfg, {"CPU": 8.0})
    assert note is not None
    assert "autoscaling.max_replicas" in note
    assert "CPU 17" in note


def test_gpu_replicas_count_their_placement_group() -> None:
    options = {
        "ray_actor_options": {"num_cpus": 0},
        "placement_group_bundles": [{"CPU": 1.0}, {"GPU": 1.0}, {"GPU": 1.0}],
    }
    assert replica_demand(options) == {"CPU": 1.0, "GPU": 2.0}
    assert shortfall({"CPU": 1.0, "GPU": 2.0}, {"CPU": 16.0, "GPU": 1.0}) == {"GPU": (2.0, 1.0)}
    assert shortfall({"CPU": 1.0}, {"CPU": 1.0}) == {}
