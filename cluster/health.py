"""The fleet's health as the ingress judges it, from the replicas' reports to the status
actor: ``GET /health`` (``health_verdict``), the relay's wait for a replica
(``fleet_health``: healthy, unstartable, failing, empty, or unknown) and the answer while the
fleet is stopping (``shutting_down``); and Serve's own view of the deployments
(``serve_deployments``)."""

from __future__ import annotations

from typing import Any

from contracts.http import APIError

HEALTH_FRESH_S = 10.0


def shutting_down() -> APIError:
    return APIError(
        503,
        "the server is shutting down; retry later",
        type="service_unavailable",
        code="shutting_down",
        headers={"retry-after": "1"},
    )


def health_verdict(rows: list[dict[str, Any]], now: float) -> tuple[int, dict[str, Any]]:
    """200 if any replica's engine reported healthy within ``HEALTH_FRESH_S``, else 503."""
    healthy = [
        r for r in rows if r.get("healthy") and now - r.get("reported_at", 0.0) < HEALTH_FRESH_S
    ]
    if healthy:
        return 200, {"status": "ok", "healthy_replicas": len(healthy)}
    err = APIError(503, "no healthy replica", type="service_unavailable", code="no_healthy_replica")
    return 503, err.body()


def fleet_health(
    rows: list[dict[str, Any]] | None, now: float, start_failures: list[Any] | None = None
) -> str | None:
    """``"healthy"``: a replica reported healthy within ``HEALTH_FRESH_S``; ``"unstartable"``:
    none did, and replicas failed to start since one last started (waiting for a start that
    keeps failing is pointless); ``"failing"``: replicas report, none healthy; ``"empty"``:
    none reported lately (none started yet, or every one gone: a killed replica's last row
    stays until it is stale); None: the status actor did not answer, so nothing is known."""
    if rows is None:
        return None
    fresh = [r for r in rows if now - r.get("reported_at", 0.0) < HEALTH_FRESH_S]
    if any(r.get("healthy") for r in fresh):
        return "healthy"
    if start_failures:
        return "unstartable"
    return "failing" if fresh else "empty"


def serve_deployments() -> dict[str, dict[str, Any]]:
    """Each Serve deployment's status, message and replicas by state (none if Serve is
    unreachable): ``/fleet/status`` shows them, ``up`` names the ones that failed."""
    from ray import serve

    try:
        apps = serve.status().applications
    except Exception:
        return {}
    return {
        name: {
            "status": str(getattr(dep.status, "value", dep.status)),
            "message": str(dep.message or ""),
            "replicas": {str(getattr(k, "value", k)): n for k, n in dep.replica_states.items()},
        }
        for app in apps.values()
        for name, dep in app.deployments.items()
    }
