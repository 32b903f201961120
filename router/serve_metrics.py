"""Ray adapter: the request router's exported counters (the ``ROUTER_*`` metrics of
``contracts.metrics``, described there) and their local mirrors, which tests and the
studies read without a metrics backend.

``RouterCounters(policy, make, kv_events)`` creates each counter once with ``make``
(``serve_counter``: Ray Serve's ``Counter``; tests pass fakes; ``None`` where no Ray worker
runs) and builds the tag dicts here, not per request. Mirrors: ``decision_counts`` (by
reason), ``prompt_tokens``, ``predicted_cached_tokens``, ``kv_event_counts`` (by kind).
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable
from typing import Any

from contracts.metrics import (
    ROUTER_DECISIONS,
    ROUTER_KV_EVENTS,
    ROUTER_PREDICTED_CACHED_TOKENS,
    ROUTER_PROMPT_TOKENS,
    Metric,
    start_at_zero,
)

log = logging.getLogger(__name__)
CounterFactory = Callable[[Metric], Any]  # a counter with Ray's inc(value, tags=), or None


def serve_counter(metric: Metric) -> Any:
    try:
        from ray.serve.metrics import Counter

        # Ray annotates tag_keys as tuple[str] (one element)
        return Counter(metric.name, description=metric.description, tag_keys=metric.labels)  # type: ignore[arg-type]
    except Exception as exc:  # metrics need a Ray worker; unit tests have none
        log.debug("router counter %s disabled: %s", metric.name, exc)
        return None


class RouterCounters:
    def __init__(self, policy: str, make: CounterFactory, kv_events: bool = False) -> None:
        self.policy = policy
        self._decisions = make(ROUTER_DECISIONS)
        self._prompt = make(ROUTER_PROMPT_TOKENS)
        self._cached = make(ROUTER_PREDICTED_CACHED_TOKENS)
        self._kv = make(ROUTER_KV_EVENTS) if kv_events else None
        self._policy_tags = {"policy": policy}
        self._reason_tags: dict[str, dict[str, str]] = {}
        for counter in (self._prompt, self._cached):
            start_at_zero(counter, self._policy_tags)
        self.decision_counts: collections.Counter[str] = collections.Counter()
        self.kv_event_counts: collections.Counter[str] = collections.Counter()
        self.prompt_tokens = 0
        self.predicted_cached_tokens = 0

    def decision(self, reason: str) -> None:
        self.decision_counts[reason] += 1
        if self._decisions is not None:
            tags = self._reason_tags.get(reason)
            if tags is None:
                tags = self._reason_tags[reason] = {"policy": self.policy, "reason": reason}
            self._decisions.inc(1, tags=tags)

    def tokens(self, prompt: int, cached: int) -> None:
        self.prompt_tokens += prompt
        self.predicted_cached_tokens += cached
        if prompt > 0 and self._prompt is not None:  # Ray refuses inc(0)
            self._prompt.inc(prompt, tags=self._policy_tags)
        if cached > 0 and self._cached is not None:
            self._cached.inc(cached, tags=self._policy_tags)

    def kv_event(self, kind: str) -> None:
        self.kv_event_counts[kind] += 1
        if self._kv is not None:
            self._kv.inc(tags={"kind": kind})
