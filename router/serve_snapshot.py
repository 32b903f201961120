"""Ray adapter: the router's prefix index survives an ingress restart.

Each router (one per ingress replica) stores ``PrefixIndex.export()`` in a named actor (the
fleet's status actor, passed as ``snapshot_store``) every ``period_s`` while it routes, and
a new router restores it before its first decision, so a restarted ingress routes as the
old one did instead of starting cold (hit rate back within a few requests, not after
re-learning every prefix). Best effort: no store, a slow store (``timeout_s``) or a bad
snapshot leave the index as it is; saving is fire-and-forget and never waits on the
routing path. With several ingress replicas the last writer wins: any router's index is a
good start for another. Snapshots are JSON (block hashes are ints).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

from router.index import PrefixIndex

log = logging.getLogger(__name__)


class IndexSnapshots:
    def __init__(
        self,
        store: str | None,
        key: str,
        namespace: str = "llmfleet",
        period_s: float = 5.0,
        timeout_s: float = 2.0,
    ) -> None:
        self.store = store
        self.key = key
        self.namespace = namespace
        self.period_s = period_s
        self.timeout_s = timeout_s
        self.restored = store is None
        self._last_save = 0.0
        self.saves = 0

    def _actor(self) -> Any:
        import ray

        if self.store is None:
            return None
        try:
            return ray.get_actor(self.store, namespace=self.namespace)
        except ValueError:
            return None

    async def restore(self, policy: Any) -> bool:
        """Load the stored index into ``policy.index`` (once); True when it did."""
        if self.restored:
            return False
        self.restored = True
        if getattr(policy, "index", None) is None:
            return False
        try:
            actor = self._actor()
            data = (
                None
                if actor is None
                else await asyncio.wait_for(actor.get_snapshot.remote(self.key), self.timeout_s)
            )
            if not data:
                return False
            policy.index = PrefixIndex.from_export(json.loads(data))
        except Exception as err:  # a missing or bad snapshot: start cold
            log.warning("prefix index snapshot not restored: %r", err)
            return False
        log.info("prefix index restored: %d block hashes", policy.index.num_hashes())
        return True

    def maybe_save(self, policy: Any, now: float, clock: Callable[[], float] | None = None) -> None:
        if self.store is None or now - self._last_save < self.period_s:
            return
        index = getattr(policy, "index", None)
        if index is None:
            return
        self._last_save = now if clock is None else clock()
        try:
            actor = self._actor()
            if actor is not None:
                actor.put_snapshot.remote(self.key, json.dumps(index.export()).encode())
                self.saves += 1
        except Exception as err:
            log.debug("prefix index snapshot not saved: %r", err)
