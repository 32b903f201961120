"""The one place policy names map to constructors (explicit, no import side effects).

``ray-prefix`` and ``ray-p2c`` are Ray Serve's own request routers; only the Serve adapter
can use them (as ``request_router_class``), so ``make_policy`` refuses them.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

from router.baselines import LeastLoadedPolicy, PowerOfTwoPolicy, RoundRobinPolicy
from router.config import RouterConfig
from router.consistent_hash import ConsistentHashPolicy
from router.prefix_policy import MODE_APPROXIMATE, MODE_ORACLE, MODE_PRECISE, PrefixAwarePolicy
from router.sglang_tree import SGLangTreePolicy
from router.types import RoutingPolicy

POLICY_NAMES: tuple[str, ...] = (
    "prefix",
    "prefix-precise",
    "round-robin",
    "least-loaded",
    "p2c",
    "consistent-hash",
    "sglang-tree",
    "oracle",
)

RAY_NATIVE_ROUTERS: dict[str, str] = {
    "ray-prefix": "ray.serve.llm.request_router.PrefixCacheAffinityRouter",
    "ray-p2c": "ray.serve._private.request_router:PowerOfTwoChoicesRequestRouter",
}


def make_policy(
    name: str,
    *,
    seed: int = 0,
    block_size: int = 16,
    clock: Callable[[], float] = time.monotonic,
    config: dict[str, Any] | None = None,
    **kwargs: Any,
) -> RoutingPolicy:
    if name in RAY_NATIVE_ROUTERS:
        raise ValueError(
            f"{name!r} is Ray Serve's own router ({RAY_NATIVE_ROUTERS[name]}); it only exists "
            "live, as the deployment's request_router_class, not as a RoutingPolicy"
        )
    if name not in POLICY_NAMES:
        raise ValueError(f"unknown routing policy {name!r}; known: {', '.join(POLICY_NAMES)}")
    cfg = RouterConfig.from_dict(config)
    rng = random.Random(seed)
    unexpected = set(kwargs) - ({"cache_lookup"} if name == "oracle" else set())
    if unexpected:
        raise TypeError(f"policy {name!r} got unexpected kwargs: {sorted(unexpected)}")
    if name in ("prefix", "prefix-precise", "oracle"):
        mode = {"prefix": MODE_APPROXIMATE, "prefix-precise": MODE_PRECISE}.get(name, MODE_ORACLE)
        return PrefixAwarePolicy(
            name=name,
            mode=mode,
            config=cfg,
            block_size=block_size,
            clock=clock,
            rng=rng,
            cache_lookup=kwargs.get("cache_lookup"),
        )
    if name == "round-robin":
        return RoundRobinPolicy()
    if name == "least-loaded":
        return LeastLoadedPolicy(rng)
    if name == "p2c":
        return PowerOfTwoPolicy(rng)
    if name == "consistent-hash":
        return ConsistentHashPolicy(cfg)
    return SGLangTreePolicy(cfg, block_size, rng)
