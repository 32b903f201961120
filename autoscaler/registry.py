"""The one place scaling policies are registered, by name (no import side effects)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from autoscaler.baselines import (
    NoScalingPolicy,
    OngoingRequestsPolicy,
    UtilizationParams,
    UtilizationPolicy,
)
from autoscaler.common import NoParams, RayDelayParams, parse_params
from autoscaler.ttft_queue import TTFTQueuePolicy
from autoscaler.ttft_types import TTFTQueueParams
from autoscaler.types import ScalingPolicy

_FACTORIES: dict[str, Callable[[], ScalingPolicy[Any]]] = {
    "ttft-queue": TTFTQueuePolicy,
    "ongoing-requests": OngoingRequestsPolicy,
    "utilization": UtilizationPolicy,
    "none": NoScalingPolicy,
}

POLICY_NAMES: tuple[str, ...] = ("ttft-queue", "ongoing-requests", "utilization", "none")

# Each policy's knobs: the keys its ``ScalingConfig.params`` may hold.
PARAMS: dict[str, type] = {
    "ttft-queue": TTFTQueueParams,
    "ongoing-requests": RayDelayParams,
    "utilization": UtilizationParams,
    "none": NoParams,
}


def check_params(name: str, params: Mapping[str, Any]) -> None:
    """Reject ``params`` keys the named policy does not read (a typo would otherwise be
    ignored silently and the policy run with its default) and values that are not numbers."""
    make_policy(name)  # unknown policy names fail first
    parse_params(PARAMS[name], params, name)


def make_policy(name: str) -> ScalingPolicy[Any]:
    try:
        factory = _FACTORIES[name]
    except KeyError:
        raise ValueError(
            f"unknown autoscaling policy {name!r}; choose one of {', '.join(POLICY_NAMES)}"
        ) from None
    return factory()
