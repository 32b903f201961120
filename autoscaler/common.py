"""Small pieces shared by the scaling policies: bounds, Ray-like delays, signal helpers.

``ray_like_delay`` reproduces Ray Serve's default smoothing around a raw desired count:
a scale-up (down) happens only after the raw desire has pointed up (down) continuously for
``upscale_delay_s`` (``downscale_delay_s``); any change of direction restarts the timer;
then the replica delta is multiplied by the up/down factor (ceil), and a scale-down that
the factor would round away still removes one replica. State lives under ``prefix`` keys.
"""

from __future__ import annotations

import math
from statistics import median

from autoscaler.types import MetricsSnapshot, ReplicaMetrics, ScalingConfig, State


def clamp(n: int, config: ScalingConfig) -> int:
    return max(config.min_replicas, min(config.max_replicas, n))


def floor_for_pending(desired: int, snapshot: MetricsSnapshot) -> int:
    """Requests held at the ingress need at least one replica."""
    return max(desired, 1) if snapshot.pending_requests > 0 else desired


def ongoing_of(m: ReplicaMetrics) -> float:
    """Requests in flight at a replica; engines that do not report ``ongoing`` count queues."""
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
    state: State,
    prefix: str,
) -> tuple[int, State]:
    """Apply Ray Serve's delay + factor logic to ``raw`` desired replicas."""
    p = config.params
    up_delay = float(p.get("upscale_delay_s", config.upscale_cooldown_s))
    down_delay = float(p.get("downscale_delay_s", config.downscale_cooldown_s))
    current = snapshot.current_replicas
    desired = clamp(
        scale_by_factor(
            raw,
            current,
            float(p.get("upscaling_factor", 1.0)),
            float(p.get("downscaling_factor", 1.0)),
        ),
        config,
    )
    desired = floor_for_pending(desired, snapshot)
    if current > 1 and desired == 0:  # Ray scales to zero only from one replica
        desired = 1
    new = dict(state)
    key_dir, key_since = f"{prefix}.direction", f"{prefix}.since"
    direction = (desired > current) - (desired < current)
    if direction == 0 or (current == 0 and desired > 0):  # Ray's cold-start fast path
        new[key_dir], new[key_since] = 0, None
        return desired, new
    if new.get(key_dir) != direction or new.get(key_since) is None:
        new[key_dir], new[key_since] = direction, snapshot.now
    delay = up_delay if direction > 0 else down_delay
    if snapshot.now - float(new[key_since]) + 1e-6 >= delay:
        new[key_dir], new[key_since] = 0, None
        return desired, new
    return current, new
