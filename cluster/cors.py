"""Browser access to the API (CORS), off unless ``server.cors_allowed_origins`` lists origins.

A web app served from another origin (a chat UI at ``https://chat.example.com`` calling the
fleet with the OpenAI JS client) needs the server's CORS answers: the preflight ``OPTIONS``
before each POST with an ``Authorization`` header, and ``Access-Control-Allow-Origin`` on
every answer, the 401s and 429s included, or the browser hides them from the app. vLLM's own
server allows every origin by default; ours allows none until configured (keys in a
browser are the operator's decision).

Starlette's ``CORSMiddleware`` does the work. The ingress app is built at import, before its
settings arrive in the ingress replica, so ``CORSGate`` is installed then and delegates to a
``CORSMiddleware`` once ``configure`` is called; until then it passes requests through.
"""

from __future__ import annotations

from typing import Any

from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

# Response headers a browser app may read: OpenAI's rate-limit headers, the refusal's
# Retry-After, the request id and the replica that served it.
EXPOSED = (
    "retry-after",
    "x-request-id",
    "x-llmfleet-replica",
    *(
        f"x-ratelimit-{w}-{k}"
        for w in ("limit", "remaining", "reset")
        for k in ("requests", "tokens")
    ),
)
METHODS = ("GET", "HEAD", "POST", "DELETE")


class CORSOrigins:
    """The origins allowed, set by the ingress replica at start (empty: CORS off)."""

    def __init__(self) -> None:
        self.origins: tuple[str, ...] = ()

    def configure(self, origins: list[str] | tuple[str, ...]) -> None:
        self.origins = tuple(origins)


class CORSGate:
    """ASGI middleware: Starlette's ``CORSMiddleware`` for the configured origins, else the
    app untouched."""

    def __init__(self, app: ASGIApp, allowed: CORSOrigins) -> None:
        self.app = app
        self.allowed = allowed
        self._inner: tuple[tuple[str, ...], Any] = ((), None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        origins = self.allowed.origins
        if not origins or scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self._inner[0] is not origins:  # configure() sets a new tuple
            cors = CORSMiddleware(
                self.app,
                allow_origins=list(origins),
                allow_methods=list(METHODS),
                allow_headers=["*"],
                expose_headers=list(EXPOSED),
                max_age=600,
            )
            self._inner = (origins, cors)
        await self._inner[1](scope, receive, send)
