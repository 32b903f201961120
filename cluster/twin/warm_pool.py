"""A warm pool of sleeping replicas in the twin: vLLM's sleep mode, level 1, modelled.

A sleeping replica keeps its process, its CUDA graphs and compiled kernels, and a copy of
its weights in host memory; its GPU memory is free (weights offloaded, KV cache dropped),
so the GPU can do other work. Waking it copies the weights back (``wake_s``) instead of
booting a new replica (``startup_s``: scheduling, image, weight load, graph capture).

The pool's rules (``ClusterSim`` applies them; the scaling policy only sets how many
replicas are awake and sees how many are asleep, ``MetricsSnapshot.warm_replicas``):
- A scale-up wakes sleepers first (serving after ``wake_s``), then takes over replicas
  booting into the pool, then boots new ones.
- A replica leaving the fleet goes to sleep while the pool is short of ``size`` (after
  ``sleep_s`` of copying its weights out, counted awake); otherwise it is retired.
- The pool refills itself: while it is short, new replicas boot into it (counted awake
  while they boot, then asleep).
- The pool starts full, as the fleet's first replicas do.

Cost: awake replica-seconds (GPU held, booting included) are the fleet's cost as before;
each sleeping replica-second costs ``cost_fraction`` of one: the host memory its weights
occupy, as a share of the host memory that comes with its GPUs (``cost_fraction``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from replicas.sim import profiles

# Host-to-device copy rates reached with pinned memory (PCIe Gen5 x16 on H100/H200 nodes,
# Gen4 on A100/L4), bytes/s per GPU, and host memory per GPU (DGX H100 / DGX A100 80 GB:
# 2 TB for 8 GPUs). A spec-sheet model, stated so it can be checked, not a measurement.
HOST_TO_DEVICE_BPS = {"h100": 50e9, "h200": 50e9, "a100": 25e9, "l4": 25e9}
HOST_MEMORY_PER_GPU = {"h100": 256e9, "h200": 256e9, "a100": 256e9, "l4": 128e9}
WAKE_OVERHEAD_S = 1.0  # reallocating the KV cache and a warm-up step after the copy


@dataclass(frozen=True, slots=True)
class PoolConfig:
    size: int = 0  # sleeping replicas to keep (0: no pool)
    wake_s: float = 0.0  # asleep -> serving
    sleep_s: float = 0.0  # drained -> asleep (weights copied to host), counted awake
    cost_fraction: float = 0.0  # one sleeping replica-second, in awake replica-seconds


def pool_config(
    size: int, hardware: str, model: str, tp: int, wake_s: float | None = None
) -> PoolConfig:
    """The pool of ``size`` sleepers of ``model`` on ``tp`` GPUs of ``hardware``: the copy
    time of one GPU's share of the weights (plus ``WAKE_OVERHEAD_S``) to wake, the copy
    alone to sleep, and the weights' share of the host memory as the cost fraction."""
    if size < 0:
        raise ValueError(f"a warm pool of {size} replicas")
    if size == 0:
        return PoolConfig()
    if hardware not in HOST_TO_DEVICE_BPS:
        raise ValueError(f"no sleep mode on {hardware!r} (vLLM's is CUDA/ROCm only)")
    weights = profiles.model(model).weight_bytes
    copy_s = weights / tp / HOST_TO_DEVICE_BPS[hardware]
    fraction = min(1.0, weights / (tp * HOST_MEMORY_PER_GPU[hardware]))
    wake = copy_s + WAKE_OVERHEAD_S if wake_s is None else wake_s
    return PoolConfig(size=size, wake_s=wake, sleep_s=copy_s, cost_fraction=fraction)


@dataclass(slots=True)
class WarmPool:
    """Sleepers (each by the time it fell asleep) and the replicas booting into the pool."""

    config: PoolConfig
    asleep: list[float] = field(default_factory=list)
    filling: int = 0  # replicas booting into the pool
    asleep_s: float = 0.0  # sleeping replica-seconds of sleepers already woken

    @classmethod
    def full(cls, config: PoolConfig, now: float = 0.0) -> WarmPool:
        return cls(config, [now] * config.size)

    def take(self, now: float) -> bool:
        """Wake one sleeper (the longest asleep); False when none sleeps."""
        if not self.asleep:
            return False
        self.asleep_s += max(0.0, now - self.asleep.pop(0))
        return True

    def shortfall(self) -> int:
        return max(0, self.config.size - len(self.asleep) - self.filling)

    def put(self, since: float) -> None:
        self.asleep.append(since)

    def sleeping_seconds(self, end: float) -> float:
        return self.asleep_s + sum(max(0.0, end - t) for t in self.asleep)
