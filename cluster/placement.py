"""Replica resources from the tensor-parallel size (pure; unit-tested without GPUs).

TP = 1 on CPU: the replica actor asks for ``num_cpus`` logical CPUs. On GPU, a replica gets
a placement group: one CPU bundle for the replica actor (vLLM's front end) and one bundle
per GPU for vLLM's Ray-executor workers, packed onto one node (STRICT_PACK) so the
tensor-parallel all-reduce stays on NVLink. When no node can hold a whole group, Ray's
cluster autoscaler sees the pending group and adds a node of a fitting type.
"""

from __future__ import annotations

from typing import Any


def replica_resources(tp: int, num_cpus: float, gpu: bool) -> dict[str, Any]:
    if tp < 1:
        raise ValueError("tensor_parallel_size must be >= 1")
    if not gpu:
        if tp > 1:
            raise ValueError("tensor_parallel_size > 1 needs GPUs")
        return {"ray_actor_options": {"num_cpus": num_cpus}}
    bundles = [{"CPU": num_cpus}] + [{"GPU": 1.0} for _ in range(tp)]
    return {
        "ray_actor_options": {"num_cpus": 0},
        "placement_group_bundles": bundles,
        "placement_group_strategy": "STRICT_PACK",
    }
