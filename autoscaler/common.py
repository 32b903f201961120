"""Small pieces shared by the scaling policies: bounds, typed knobs, Ray-like delays, signals.

``parse_params`` turns ``ScalingConfig.params`` into a policy's frozen params dataclass:
each key must name a field (else ``ValueError`` listing the known ones), each value is
coerced to the field's type (YAML gives ``3`` for ``3.0``); absent keys keep the defaults.

``ray_like_delay`` reproduces Ray Serve's default smoothing around a raw desired count:
a scale-up (down) happens only after the raw desire has pointed up (down) continuously for
``upscale_delay_s`` (``downscale_delay_s``); any change of direction restarts the timer;
then the replica delta is multiplied by the up/down factor (ceil), and a scale-down that
the factor would round away still removes one replica. Its state is a ``RayDelayState``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from statistics import median
from typing import Any, TypeVar

from autoscaler.types import MetricsSnapshot, ReplicaMetrics, ScalingConfig

P = TypeVar("P")


def parse_params(cls: type[P], params: Mapping[str, Any], policy: str) -> P:
    """``params`` as ``cls`` (a dataclass of int/float knobs), strictly."""
    types = {f.name: f.type for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(params) - set(types))
    if unknown:
        known = ", ".join(sorted(types)) or "(none)"
        raise ValueError(f"unknown {policy} params {unknown}; known: {known}")
    values: dict[str, Any] = {}
    for key, value in params.items():
        try:
            values[key] = int(value) if types[key] in ("int", int) else float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{policy} param {key}: not a number: {value!r}") from None
    return cls(**values)


@dataclass(frozen=True, slots=True)
class NoParams:
    """Knobs of a policy that has none."""


@dataclass(frozen=True, slots=True)
class NoState:
    """State of a policy that keeps none."""


@dataclass(frozen=True, slots=True)
class RayDelayParams:
    upscale_delay_s: float = 5.0  # raw desire must point up this long before a move
    downscale_delay_s: float = 30.0  # ... and down this long
    upscaling_factor: float = 1.0  # share of the replica delta applied per up-move
    downscaling_factor: float = 1.0


@dataclass(frozen=True, slots=True)
class RayDelayState:
    direction: int = 0  # +1 up, -1 down, 0 none pending
    since: float | None = None  # when the raw desire began pointing in ``direction``


def clamp(n: int, config: ScalingConfig) -> int:
    return max(config.min_replicas, min(config.max_replicas, n))


def floor_for_pending(desired: int, snapshot: MetricsSnapshot) -> int:
    """Requests held at the ingress need at least one replica."""
    return max(desired, 1) if snapshot.pending_requests > 0 else desired


def ongoing_of(m: ReplicaMetrics) -> float:
    """Ray's ongoing-requests signal: requests in flight at the replica as the caller counts
    them, the engine's waiting + running only when no such count is reported. Not the
    router's queue depth (the larger of the two): the baselines model Ray's own rule."""
    return m.ongoing if m.ongoing > 0 else m.waiting + m.running


def prefill_rate(snapshot: MetricsSnapshot, fallback: float) -> float:
    """Per-replica prefill rate: median over replicas that report one, else ``fallback``."""
    rates = [m.prefill_tokens_per_s for m in snapshot.replicas if m.prefill_tokens_per_s > 0]
    return median(rates) if rates else fallback


def scale_by_factor(raw: float, current: int, up_factor: float, down_factor: float) -> int:
    if current == 0:
        return math.ceil(raw)
    delta = raw - current
    scaled = math.ceil(current + (up_factor if delta > 0 else down_factor) * delta)
    if math.ceil(raw) < current and scaled == current:
        scaled -= 1
    return scaled


def ray_like_delay(
    raw: float,
    snapshot: MetricsSnapshot,
    config: ScalingConfig,
    p: RayDelayParams,
    state: RayDelayState,
) -> tuple[int, RayDelayState]:
    """Apply Ray Serve's delay + factor logic to ``raw`` desired replicas."""
    current = snapshot.current_replicas
    scaled = scale_by_factor(raw, current, p.upscaling_factor, p.downscaling_factor)
    desired = floor_for_pending(clamp(scaled, config), snapshot)
    if current > 1 and desired == 0:  # Ray scales to zero only from one replica
        desired = 1
    direction = (desired > current) - (desired < current)
    if direction == 0 or (current == 0 and desired > 0):  # Ray's cold-start fast path
        return desired, RayDelayState()
    since = state.since
    if state.direction != direction or since is None:
        since = snapshot.now
    delay = p.upscale_delay_s if direction > 0 else p.downscale_delay_s
    if snapshot.now - since + 1e-6 >= delay:
        return desired, RayDelayState()
    return current, RayDelayState(direction, since)
