"""The one place scaling policies are registered, by name (no import side effects)."""

from __future__ import annotations

from collections.abc import Callable

from autoscaler.baselines import NoScalingPolicy, OngoingRequestsPolicy, UtilizationPolicy
from autoscaler.ttft_queue import TTFTQueuePolicy
from autoscaler.types import ScalingPolicy

_FACTORIES: dict[str, Callable[[], ScalingPolicy]] = {
    "ttft-queue": TTFTQueuePolicy,
    "ongoing-requests": OngoingRequestsPolicy,
    "utilization": UtilizationPolicy,
    "none": NoScalingPolicy,
}

POLICY_NAMES: tuple[str, ...] = ("ttft-queue", "ongoing-requests", "utilization", "none")


def make_policy(name: str) -> ScalingPolicy:
    try:
        factory = _FACTORIES[name]
    except KeyError:
        raise ValueError(
            f"unknown autoscaling policy {name!r}; choose one of {', '.join(POLICY_NAMES)}"
        ) from None
    return factory()
