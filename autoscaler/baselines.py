"""Baseline scaling rules, in the same pure interface as the TTFT-queue policy.

- ``ongoing-requests``: Ray Serve's default. ``raw = total ongoing / target_ongoing_requests``
  (ongoing = in flight at replicas + held at the ingress), then Ray's delays and factors
  (``common.ray_like_delay``: ``upscale_delay_s`` / ``downscale_delay_s`` in
  ``config.params``, default ``upscale_cooldown_s`` / ``downscale_cooldown_s``; factors
  ``upscaling_factor`` / ``downscaling_factor``, default 1).
- ``utilization``: the Kubernetes HPA rule on a GPU-utilisation-like signal. Per replica
  ``u = max(busy_fraction, kv_usage)``; ``raw = current * mean(u) / target_utilization``,
  ignored inside a ``tolerance`` band (default 0.1) around 1; same delays.
- ``none``: keeps the current count (within bounds; one replica if requests are held).

Why they lose on LLM traffic: ongoing requests count a 20-token and a 20k-token prompt the
same; busy fraction is ~1 with a single decode under continuous batching, and KV usage
reacts only once the cache is full.
"""

from __future__ import annotations

import math
from statistics import mean

from autoscaler.common import clamp, floor_for_pending, ongoing_of, ray_like_delay
from autoscaler.types import MetricsSnapshot, ScalingConfig, State


class OngoingRequestsPolicy:
    name = "ongoing-requests"

    def decide(
        self, snapshot: MetricsSnapshot, config: ScalingConfig, state: State
    ) -> tuple[int, State]:
        total = sum(ongoing_of(m) for m in snapshot.replicas) + snapshot.pending_requests
        raw = total / config.target_ongoing_requests
        return ray_like_delay(raw, snapshot, config, state, "ongoing")


class UtilizationPolicy:
    name = "utilization"

    def decide(
        self, snapshot: MetricsSnapshot, config: ScalingConfig, state: State
    ) -> tuple[int, State]:
        current = snapshot.current_replicas
        if not snapshot.replicas:
            raw = float(current)
        else:
            u = mean(max(m.busy_fraction, m.kv_usage) for m in snapshot.replicas)
            ratio = u / config.target_utilization
            tolerance = float(config.params.get("tolerance", 0.1))
            raw = current * ratio if abs(ratio - 1.0) > tolerance else float(current)
            raw = math.ceil(raw - 1e-9)
        return ray_like_delay(raw, snapshot, config, state, "util")


class NoScalingPolicy:
    name = "none"

    def decide(
        self, snapshot: MetricsSnapshot, config: ScalingConfig, state: State
    ) -> tuple[int, State]:
        return floor_for_pending(clamp(snapshot.current_replicas, config), snapshot), dict(state)
