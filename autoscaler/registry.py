"""The one place scaling policies are registered, by name (no import side effects)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Any

from autoscaler.baselines import NoScalingPolicy, OngoingRequestsPolicy, UtilizationPolicy
from autoscaler.ttft_queue import TTFTQueueParams, TTFTQueuePolicy
from autoscaler.types import ScalingPolicy

_FACTORIES: dict[str, Callable[[], ScalingPolicy]] = {
    "ttft-queue": TTFTQueuePolicy,
    "ongoing-requests": OngoingRequestsPolicy,
    "utilization": UtilizationPolicy,
    "none": NoScalingPolicy,
}

POLICY_NAMES: tuple[str, ...] = ("ttft-queue", "ongoing-requests", "utilization", "none")


# ``params`` keys that override a ScalingConfig field of the same name (``lift_params``).
LIFTABLE_PARAMS: tuple[str, ...] = (
    "ttft_slo_s", "headroom", "upscale_cooldown_s", "downscale_cooldown_s",
    "downscale_stable_s", "target_ongoing_requests", "target_utilization",
)  # fmt: skip
_RAY_LIKE = ("upscale_delay_s", "downscale_delay_s", "upscaling_factor", "downscaling_factor")
_PARAMS: dict[str, frozenset[str]] = {
    "ttft-queue": frozenset(f.name for f in fields(TTFTQueueParams)),
    "ongoing-requests": frozenset(_RAY_LIKE),
    "utilization": frozenset((*_RAY_LIKE, "tolerance")),
    "none": frozenset(),
}


def check_params(name: str, params: Mapping[str, Any]) -> None:
    """Reject ``params`` keys the named policy does not read (a typo would otherwise be
    ignored silently and the policy run with its default)."""
    make_policy(name)  # unknown policy names fail first
    known = _PARAMS[name] | set(LIFTABLE_PARAMS)
    unknown = sorted(set(params) - known)
    if unknown:
        raise ValueError(f"unknown {name} params {unknown}; known: {', '.join(sorted(known))}")


def make_policy(name: str) -> ScalingPolicy:
    try:
        factory = _FACTORIES[name]
    except KeyError:
        raise ValueError(
            f"unknown autoscaling policy {name!r}; choose one of {', '.join(POLICY_NAMES)}"
        ) from None
    return factory()
