"""What the twin does on a scaling tick, as pure functions of the replicas it holds.

``plan_scaling``: to grow, launch replicas that become routable after ``startup_s``; to
shrink, first cancel replicas still starting, then drain the routable ones with the fewest
requests in flight (they leave once empty). Replica-seconds count from launch to retirement.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from cluster.twin.replica import SimReplica


@dataclass(slots=True)
class ScalePlan:
    launch: int = 0
    cancel: list[SimReplica] = field(default_factory=list)  # starting: retire at once
    drain: list[SimReplica] = field(default_factory=list)  # ready: retire when empty


def plan_scaling(desired: int, live: Sequence[SimReplica]) -> ScalePlan:
    """``live``: replicas not draining (starting or ready)."""
    if desired >= len(live):
        return ScalePlan(launch=desired - len(live))
    excess = len(live) - desired
    starting = [r for r in live if not r.ready]
    ready = [r for r in live if r.ready]
    cancel = starting[:excess]
    excess -= len(cancel)
    drain = sorted(ready, key=lambda r: (r.ongoing, r.replica_id))[:excess]
    return ScalePlan(cancel=cancel, drain=drain)


def imbalance(loads: Sequence[int]) -> float | None:
    """Max over mean of in-flight requests across routable replicas; None when all idle."""
    total = sum(loads)
    return max(loads) / (total / len(loads)) if loads and total > 0 else None
