"""The ingress's FastAPI app and what it answers on its own: every error OpenAI-shaped (the
handlers below), browser origins (CORS), and the small module-level helpers the ingress
deployment (``cluster/ingress.py``) uses. Kept apart so that the deployment's module holds
the request path only."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from ray import serve
from starlette.exceptions import HTTPException

from cluster.cors import CORSGate, CORSOrigins
from cluster.health import serve_deployments
from contracts.http import APIError

log = logging.getLogger("llmfleet.ingress")
# No redirect for a trailing slash: FastAPI's 307 has an empty body, and a client that follows
# it re-sends the request; the 404 below names the route meant instead.
app = FastAPI(
    title="llmfleet", docs_url=None, redoc_url=None, openapi_url=None, redirect_slashes=False
)
CORS = CORSOrigins()  # server.cors_allowed_origins, set by the ingress replica at start
app.add_middleware(CORSGate, allowed=CORS)
REPLICA_HEADER = "x-llmfleet-replica"


def error_response(err: APIError) -> JSONResponse:
    return JSONResponse(err.body(), status_code=err.status, headers=err.headers or None)


@app.exception_handler(APIError)
async def _api_error(_: Request, err: APIError) -> JSONResponse:
    return error_response(err)


@app.exception_handler(HTTPException)
async def _http_error(request: Request, err: HTTPException) -> JSONResponse:
    """FastAPI's own 404 / 405 (no such path, wrong method), OpenAI-shaped."""
    code = {404: "not_found", 405: "method_not_allowed"}.get(err.status_code)
    headers = dict(err.headers or {})
    message = str(err.detail)
    path = request.url.path
    if err.status_code == 404 and message == "Not Found":  # the router's: no such path
        message = f"no route {request.method} {path}"
        meant = path.rstrip("/")
        if meant != path and meant in _route_paths():
            message += f": did you mean {meant} (no trailing slash)?"
    return error_response(APIError(err.status_code, message, code=code, headers=headers))


def _route_paths() -> set[str]:
    return {p for r in app.routes if isinstance(p := getattr(r, "path", None), str)}


@app.exception_handler(Exception)
async def _internal(_: Request, _err: Exception) -> JSONResponse:
    log.exception("internal error")
    return error_response(
        APIError(500, "internal server error", type="server_error", code="internal_error")
    )


def deployment_states() -> dict[str, Any]:
    return {
        name: {"status": dep["status"], "replicas": dep["replicas"]}
        for name, dep in serve_deployments().items()
    }


def replica_rank() -> int:
    """This ingress replica's rank among its deployment's (0..N-1; Serve assigns it at
    start), which picks its part of the quotas' whole-number limits; 0 outside Serve."""
    try:
        return int(serve.get_replica_context().rank.rank)
    except Exception:  # not in a replica (tests)
        return 0


async def once(data: bytes) -> AsyncIterator[bytes]:
    """A response body of one item."""
    yield data
