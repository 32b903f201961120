"""How many replicas of one shape a node type holds, and how many nodes a replica count
needs (pure arithmetic; ``plan`` gives it the shape and says what the numbers mean).

    per node   min(gpus // tp, floor(cpus / num_cpus))        GPU engine (vLLM)
               floor(cpus / num_cpus)                         CPU engines (sim, null)
    fill       types by most replicas per node first, each up to its max_workers
    headroom   ceil(0.2 × R): one rolling-update batch of Serve 2.60 (rolling_update_percentage)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cluster.deploy.settings import NodeType

ROLLING_UPDATE_FRACTION = 0.2  # Serve 2.60's default rolling_update_percentage


@dataclass(frozen=True, slots=True)
class NodeFit:
    node_type: str
    gpus: int
    accelerator: str | None
    per_node: int  # replicas of the deployment one such node holds; 0: it does not fit
    max_workers: int
    reason: str


def headroom(replicas: int) -> int:
    return math.ceil(ROLLING_UPDATE_FRACTION * replicas) if replicas else 0


def fit(node: NodeType, tp: int, num_cpus: float, accel: str | None, gpu: bool) -> NodeFit:
    """``tp``: GPUs one replica reserves (its tensor-parallel size for vLLM); ``gpu``: it
    reserves any."""

    def row(per_node: int, reason: str) -> NodeFit:
        return NodeFit(
            node.name, node.gpus, node.accelerator_type, per_node, node.max_workers, reason
        )

    by_cpu = math.floor(node.cpus / num_cpus) if num_cpus else None
    if gpu and node.gpus < tp:
        return row(0, f"{node.gpus} GPUs < {tp} per replica")
    if gpu and node.accelerator_type != accel:
        return row(0, f"accelerator {node.accelerator_type} is not the fleet's {accel}")
    if by_cpu == 0:
        return row(0, f"{node.cpus} CPUs < num_cpus {num_cpus:g}")
    by_gpu = node.gpus // tp if gpu else None
    limits = [
        (v, why)
        for v, why in (
            (by_gpu, f"{node.gpus} GPUs // {tp} per replica"),
            (by_cpu, f"{node.cpus} CPUs // {num_cpus:g}"),
        )
        if v is not None
    ]
    if not limits:  # a CPU engine asking 0 CPUs: count one replica per CPU
        return row(node.cpus, f"{node.cpus} CPUs (num_cpus 0: one replica per CPU)")
    per_node, why = min(limits)
    return row(per_node, why)


def fill(replicas: int, fits: tuple[NodeFit, ...]) -> tuple[dict[str, int], int]:
    """Nodes per type for ``replicas``, most replicas per node first; and how many replicas
    the types' max_workers leave unplaced."""
    left, out = replicas, {}
    for f in sorted((f for f in fits if f.per_node), key=lambda f: (-f.per_node, f.node_type)):
        if left <= 0:
            break
        n = min(f.max_workers, math.ceil(left / f.per_node))
        if n:
            out[f.node_type] = n
            left -= n * f.per_node
    return out, max(left, 0)
