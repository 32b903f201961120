"""What one simulated cluster is: its engines, bounds, boot time, ticks, KV-event feed and
warm pool (``ClusterSim`` runs it; ``spec.TwinSpec`` builds it from the CLI's flags)."""

from __future__ import annotations

from dataclasses import dataclass, field

from cluster.twin.warm_pool import PoolConfig
from replicas.sim.core import CoreConfig


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    replicas: int = 1
    core: CoreConfig = field(default_factory=CoreConfig)
    model_name: str = "sim"
    min_replicas: int = 1
    max_replicas: int = 1
    startup_s: float = 30.0  # virtual seconds from scale-up to a ready replica
    tick_s: float = 1.0  # metrics sampling / autoscaling period
    kv_events: bool = False  # feed KVBlocksStored/Removed to the policy
    kv_event_delay_s: float = 0.0  # engine -> router transport delay of those events
    # 0: the router reads each replica's stats at decision time and uses them as they are;
    # > 0: a replica's report is kept this long, and corrected as a live router does (FleetBook)
    stats_period_s: float = 0.0
    pool: PoolConfig = field(default_factory=PoolConfig)  # sleeping replicas kept (sleep mode)
