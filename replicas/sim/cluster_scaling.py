"""Per-tick work of the cluster simulator: imbalance sampling and autoscaling.

Scale-up launches replicas that become routable after ``startup_s``; scale-down first
cancels replicas still starting, then drains the routable ones with the fewest requests in
flight (they leave once empty). Replica-seconds count from launch to retirement.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from autoscaler.types import MetricsSnapshot

if TYPE_CHECKING:
    from replicas.sim.cluster import ClusterSim


def sample_imbalance(sim: ClusterSim) -> None:
    loads = [r.ongoing for r in sim.replicas.values() if r.routable]
    total = sum(loads)
    if loads and total > 0:
        sim.imbalance_samples.append(max(loads) / (total / len(loads)))


def scale(sim: ClusterSim) -> None:
    assert sim.scaler is not None
    cfg = sim.scaling
    live = [r for r in sim.replicas.values() if not r.draining]
    ready = [r for r in live if r.ready]
    snapshot = MetricsSnapshot(
        now=sim.now,
        current_replicas=len(live),
        replicas=tuple(r.metrics(sim.now) for r in ready),
        pending_requests=float(len(sim.ingress)),
    )
    desired, sim.scale_state = sim.scaler.decide(snapshot, cfg, sim.scale_state)
    desired = max(cfg.min_replicas, min(cfg.max_replicas, int(desired)))
    if desired == len(live):
        return
    sim.scale_log.append((sim.now, desired))
    if desired > len(live):
        for _ in range(desired - len(live)):
            sim._launch(ready_at=sim.now + sim.config.startup_s)
        return
    excess = len(live) - desired
    starting = [r for r in live if not r.ready]
    for rep in starting[:excess]:
        rep.draining = True
        sim._retire(rep)
    excess -= min(excess, len(starting))
    for rep in sorted(ready, key=lambda r: (r.ongoing, r.replica_id))[:excess]:
        rep.draining = True
        if rep.ongoing == 0 and rep.batch is None:
            sim._retire(rep)
