"""Replica resources from the tensor-parallel size (pure; unit-tested without GPUs).

TP = 1 on CPU: the replica actor asks for ``num_cpus`` logical CPUs. On GPU, a replica gets
a placement group: one CPU bundle for the replica actor (vLLM's front end) and one bundle
per GPU for vLLM's Ray-executor workers, packed onto one node (STRICT_PACK) so the
tensor-parallel all-reduce stays on NVLink. When no node can hold a whole group, Ray's
cluster autoscaler sees the pending group and adds a node of a fitting type.

``num_gpus`` (``replicas.num_gpus``) overrides the GPU count: a simulated fleet reserves
logical GPUs so that placement and node autoscaling can be exercised on a (fake) cluster;
real vLLM on GPUs must reserve exactly its tensor-parallel size. ``accelerator_type`` adds
Ray's ``accelerator_type:<name>`` resource to each GPU bundle, the way Ray's own
``accelerator_type=`` option does (0.001 of it: the node advertises 1).
"""

from __future__ import annotations

from typing import Any

ACCELERATOR_PREFIX = "accelerator_type:"  # ray._common.utils.RESOURCE_CONSTRAINT_PREFIX
ACCELERATOR_SHARE = 0.001  # what Ray asks per task/actor with accelerator_type=


def replica_resources(
    tp: int,
    num_cpus: float,
    gpu: bool,
    *,
    num_gpus: int | None = None,
    accelerator_type: str | None = None,
) -> dict[str, Any]:
    if tp < 1:
        raise ValueError("tensor_parallel_size must be >= 1")
    gpus = num_gpus if num_gpus is not None else (tp if gpu else 0)
    if gpu and gpus != tp:
        raise ValueError("vLLM on GPUs reserves tensor_parallel_size GPUs (one worker each)")
    if not gpus:
        if tp > 1:
            raise ValueError("tensor_parallel_size > 1 needs GPUs")
        if accelerator_type:
            raise ValueError("accelerator_type needs GPUs")
        return {"ray_actor_options": {"num_cpus": num_cpus}}
    gpu_bundle: dict[str, float] = {"GPU": 1.0}
    if accelerator_type:
        gpu_bundle[ACCELERATOR_PREFIX + accelerator_type] = ACCELERATOR_SHARE
    bundles = [{"CPU": num_cpus}] + [dict(gpu_bundle) for _ in range(gpus)]
    return {
        "ray_actor_options": {"num_cpus": 0},
        "placement_group_bundles": bundles,
        "placement_group_strategy": "STRICT_PACK",
    }


def replica_demand(options: dict[str, Any]) -> dict[str, float]:
    """The Ray resources one replica holds, from ``replica_resources``' options."""
    need: dict[str, float] = {"CPU": float(options["ray_actor_options"].get("num_cpus", 0))}
    for bundle in options.get("placement_group_bundles", ()):
        for name, amount in bundle.items():
            need[name] = need.get(name, 0.0) + float(amount)
    return need


def shortfall(need: dict[str, float], have: dict[str, float]) -> dict[str, tuple[float, float]]:
    """Resources ``need`` asks more of than ``have`` holds: name -> (needed, held)."""
    return {
        name: (amount, have.get(name, 0.0))
        for name, amount in sorted(need.items())
        if amount > have.get(name, 0.0) + 1e-9
    }
