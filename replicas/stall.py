"""Stall detection: an engine with unfinished requests that takes no step is stuck.

A process can be alive, its event loop responsive and its engine core wedged (a hung
collective, a deadlocked worker): Serve's health check passes and every request on the
replica waits forever. ``StallWatch`` sees the engine's own counters (``ongoing``: requests
added and not finished; ``steps``: cumulative engine steps) and measures how long the
engine has had work without stepping. The replica polls it every second and in
``check_health``; past ``timeout_s`` it fails the requests it holds (with
``ReplicaFailed``, so the ingress resends or migrates them), refuses new ones and fails its
health check, and Serve replaces it. An idle engine has no work to stall on: the replica
pings it instead (``LLMReplica._maybe_probe``), with the same timeout.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class StallWatch:
    timeout_s: float
    _steps: float = -1.0
    _since: float | None = None  # when the engine last stepped, or got work while idle

    def observe(self, ongoing: float, steps: float, now: float) -> float:
        """Seconds the engine has had work without stepping (0 when idle or progressing)."""
        if ongoing <= 0 or steps != self._steps:
            self._steps = steps
            self._since = now if ongoing > 0 else None
            return 0.0
        if self._since is None:
            self._since = now
        return now - self._since

    def stalled(self, ongoing: float, steps: float, now: float) -> bool:
        return self.observe(ongoing, steps, now) > self.timeout_s
