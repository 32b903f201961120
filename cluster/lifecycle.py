"""What ``llmfleet up`` does around the fleet's start and stop, beyond starting it
(``runtime.py``): why replicas could not start (the status actor's records, Serve's
messages: ``start_view.py`` prints them) and the drain before a stop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from cluster.config import FleetConfig
from cluster.health import serve_deployments

log = logging.getLogger("llmfleet.lifecycle")
DRAIN_QUIET_S = 1.5  # no request in any engine for this long (reports come every second)
DRAIN_FRESH_S = 3.0  # a replica silent longer is gone (stopped or dead): its requests too


def start_failures() -> list[dict[str, Any]]:
    """The status actor's record of replicas that failed to start (none if it is gone)."""
    import ray

    from replicas.status_registry import get_status_actor

    try:
        actor = get_status_actor()
        return list(ray.get(actor.overview.remote(), timeout=5)["start_failures"]) if actor else []
    except Exception:
        return []


def failed_deployments() -> dict[str, str]:
    """Serve's message for each deployment it gave up starting (DEPLOY_FAILED)."""
    return {
        name: dep["message"]
        for name, dep in serve_deployments().items()
        if dep["status"] == "DEPLOY_FAILED"
    }


def drain(cfg: FleetConfig, timeout_s: float, now: Callable[[], bool]) -> bool:
    """Let the requests in flight finish before the fleet stops: the app is redeployed with
    its ingress draining (an in-place ``reconfigure``: new requests get 503 ``shutting_down``
    at once), then the replicas' reports are watched until no engine holds a request for
    ``DRAIN_QUIET_S``. At most ``timeout_s``, less when ``now()`` turns true; True if all
    finished. Found by hand: ``llmfleet down`` cut 4 running streams mid-answer (Serve's
    shutdown stops the proxy that holds their connections); drained, all 4 end ``[DONE]``.
    A request still queued at an ingress for a slot is not counted until a replica takes it.
    """
    import ray
    from ray import serve

    from cluster.app import APP_NAME, build_app
    from replicas.status_registry import get_status_actor

    deadline = time.monotonic() + timeout_s
    try:
        serve.run(build_app(cfg, draining=True), name=APP_NAME, route_prefix="/", blocking=False)
        actor = get_status_actor()
    except Exception as err:  # the fleet is going anyway: stop as before
        log.warning("could not drain the fleet: %r", err)
        return False
    quiet_since: float | None = None
    while time.monotonic() < deadline and not now():
        try:
            rows = ray.get(actor.snapshot.remote(), timeout=5) if actor is not None else []
        except Exception:
            rows = []
        fresh = [r for r in rows if time.time() - r.get("reported_at", 0.0) < DRAIN_FRESH_S]
        if sum(float(r.get("ongoing", 0.0)) for r in fresh) > 0:
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= DRAIN_QUIET_S:
            return True
        time.sleep(0.25)
    return False
