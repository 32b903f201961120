"""Baseline scaling rules, in the same pure interface as the TTFT-queue policy.

- ``ongoing-requests``: Ray Serve's default. ``raw = total ongoing / target_ongoing_requests``
  (ongoing = in flight at replicas + held at the ingress; the target is a ``ScalingConfig``
  field, as in Ray's own config), then Ray's delays and factors (``common.ray_like_delay``,
  knobs in ``RayDelayParams``: delays 5 s up / 30 s down, factors 1).
- ``utilization``: the Kubernetes HPA rule on a GPU-utilisation-like signal. Per replica
  ``u = max(busy_fraction, kv_usage)``; ``raw = current * mean(u) / target_utilization``
  (default 0.7), ignored inside a ``tolerance`` band (default 0.1) around 1; same delays.
- ``none``: keeps the current count (within bounds; one replica if requests are held).

Why they lose on LLM traffic: ongoing requests count a 20-token and a 20k-token prompt the
same; busy fraction is ~1 with a single decode under continuous batching, and KV usage
reacts only once the cache is full.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import mean

from autoscaler.common import (
    NoParams,
    NoState,
    RayDelayParams,
    RayDelayState,
    clamp,
    floor_for_pending,
    ongoing_of,
    parse_params,
    ray_like_delay,
)
from autoscaler.explain import move_reason
from autoscaler.types import Explanation, MetricsSnapshot, ScalingConfig


@dataclass(frozen=True, slots=True)
class UtilizationParams(RayDelayParams):
    target_utilization: float = 0.7  # mean max(busy fraction, KV usage) to hold
    tolerance: float = 0.1  # no move while the ratio to the target is within 1 ± this


class OngoingRequestsPolicy:
    name = "ongoing-requests"

    def initial_state(self) -> RayDelayState:
        return RayDelayState()

    def decide(
        self, snapshot: MetricsSnapshot, config: ScalingConfig, state: RayDelayState
    ) -> tuple[int, RayDelayState]:
        p = parse_params(RayDelayParams, config.params, self.name)
        total = sum(ongoing_of(m) for m in snapshot.replicas) + snapshot.pending_requests
        raw = total / config.target_ongoing_requests
        return ray_like_delay(raw, snapshot, config, p, state)

    def explain(
        self,
        snapshot: MetricsSnapshot,
        config: ScalingConfig,
        state: RayDelayState,  # noqa: ARG002 (the protocol's signature)
        desired: int,
    ) -> Explanation:
        """Holds ongoing requests per replica (the generic signal) to the configured target."""
        targets = {"ongoing_requests_per_replica": config.target_ongoing_requests}
        reason = move_reason(snapshot, config, desired, "ongoing_requests")
        return Explanation({}, targets, reason)


class UtilizationPolicy:
    name = "utilization"

    def initial_state(self) -> RayDelayState:
        return RayDelayState()

    def decide(
        self, snapshot: MetricsSnapshot, config: ScalingConfig, state: RayDelayState
    ) -> tuple[int, RayDelayState]:
        p = parse_params(UtilizationParams, config.params, self.name)
        current = snapshot.current_replicas
        if not snapshot.replicas:
            raw = float(current)
        else:
            u = mean(max(m.busy_fraction, m.kv_usage) for m in snapshot.replicas)
            ratio = u / p.target_utilization
            raw = current * ratio if abs(ratio - 1.0) > p.tolerance else float(current)
            raw = math.ceil(raw - 1e-9)
        return ray_like_delay(raw, snapshot, config, p, state)

    def explain(
        self,
        snapshot: MetricsSnapshot,
        config: ScalingConfig,
        state: RayDelayState,  # noqa: ARG002 (the protocol's signature)
        desired: int,
    ) -> Explanation:
        p = parse_params(UtilizationParams, config.params, self.name)
        reps = snapshot.replicas
        u = mean(max(m.busy_fraction, m.kv_usage) for m in reps) if reps else 0.0
        reason = move_reason(snapshot, config, desired, "utilization")
        return Explanation(
            {"utilization_ratio": u}, {"utilization_ratio": p.target_utilization}, reason
        )


class NoScalingPolicy:
    name = "none"

    def initial_state(self) -> NoState:
        return NoState()

    def decide(
        self, snapshot: MetricsSnapshot, config: ScalingConfig, state: NoState
    ) -> tuple[int, NoState]:
        parse_params(NoParams, config.params, self.name)
        return floor_for_pending(clamp(snapshot.current_replicas, config), snapshot), state

    def explain(
        self,
        snapshot: MetricsSnapshot,
        config: ScalingConfig,
        state: NoState,  # noqa: ARG002 (the protocol's signature)
        desired: int,
    ) -> Explanation:
        return Explanation({}, {}, move_reason(snapshot, config, desired, "bounds"))
