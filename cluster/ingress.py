"""The OpenAI ingress deployment (FastAPI behind Ray Serve): decide, then relay bytes.

Per request it does only what the fleet owns (``cluster/request_prep.py``: model name, the
``max_tokens`` cap and default, the prompt's token ids for the prefix-aware router), in a
worker thread so a long prompt never stalls the streams this loop relays; then it calls
the ``LLMReplica`` deployment through a handle (the request router lives on that handle,
in this process) and passes the replica's answer through: a ``ResponseHead``, then bytes
that are already the response body or whole SSE events (``contracts/http.py``). The
OpenAI semantics — validation, rendering, sampling options, tools, structured output,
logprobs, errors — are the replica's OpenAI layer's (vLLM's own for vLLM replicas).
A client that goes away cancels the handle call, which aborts the engine request and frees
its slot.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from ray import serve

from cluster.request_prep import Limits, prepare
from contracts.http import JSON, SSE, APIError, ResponseHead
from replicas.status_registry import fleet_snapshot

log = logging.getLogger("llmfleet.ingress")
app = FastAPI(title="llmfleet", docs_url=None, redoc_url=None)
HEALTH_FRESH_S = 10.0
REPLICA_HEADER = "x-llmfleet-replica"
FORWARDED = ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/tokenize", "/detokenize")


def error_response(err: APIError) -> JSONResponse:
    return JSONResponse(err.body(), status_code=err.status)


def _sse_error(message: str, code: str) -> bytes:
    import json

    body = APIError(500, message, type="server_error", code=code).body()
    return f"data: {json.dumps(body)}\n\n".encode()


@app.exception_handler(APIError)
async def _api_error(_: Request, err: APIError) -> JSONResponse:
    return error_response(err)


@app.exception_handler(Exception)
async def _internal(_: Request, _err: Exception) -> JSONResponse:
    log.exception("internal error")
    return error_response(
        APIError(500, "internal server error", type="server_error", code="internal_error")
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


def _deployments() -> dict[str, Any]:
    try:
        apps = serve.status().applications
    except Exception:
        return {}
    out: dict[str, Any] = {}
    for app_status in apps.values():
        for name, dep in app_status.deployments.items():
            states = {str(getattr(k, "value", k)): n for k, n in dep.replica_states.items()}
            out[name] = {
                "status": str(getattr(dep.status, "value", dep.status)),
                "replicas": states,
            }
    return out


@serve.ingress(app)
class OpenAIIngress:
    def __init__(self, replicas: Any, settings: dict[str, Any]) -> None:
        from cluster.light_tokenizer import load_tokenizer

        self.replicas = replicas
        self.limits = Limits(**settings["limits"])
        self.timeout_s = float(settings.get("request_timeout_s", 600.0))
        self.tokenizer = load_tokenizer(settings["tokenizer_path"])

    @app.get("/v1/models")
    async def models(self) -> dict[str, Any]:
        card = {
            "id": self.limits.served_name,
            "object": "model",
            "created": 0,
            "owned_by": "llmfleet",
            "max_model_len": self.limits.max_model_len,
        }
        return {"object": "list", "data": [card]}

    @app.get("/health")
    async def health(self) -> Response:
        status, body = health_verdict(await fleet_snapshot(timeout_s=2.0), time.time())
        return JSONResponse(body, status_code=status)

    @app.get("/fleet/status")
    async def status(self) -> dict[str, Any]:
        return {
            "replicas": await fleet_snapshot(timeout_s=2.0),
            "deployments": await asyncio.to_thread(_deployments),
        }

    @app.post("/v1/completions")
    async def completions(self, request: Request) -> Response:
        return await self._forward(request, "/v1/completions")

    @app.post("/v1/chat/completions")
    async def chat(self, request: Request) -> Response:
        return await self._forward(request, "/v1/chat/completions")

    @app.post("/v1/responses")
    async def responses(self, request: Request) -> Response:
        return await self._forward(request, "/v1/responses")

    @app.post("/tokenize")
    async def tokenize(self, request: Request) -> Response:
        return await self._forward(request, "/tokenize")

    @app.post("/detokenize")
    async def detokenize(self, request: Request) -> Response:
        return await self._forward(request, "/detokenize")

    async def _forward(self, request: Request, path: str) -> Response:
        raw = await request.body()
        try:
            prep = await asyncio.to_thread(prepare, path, raw, self.tokenizer, self.limits)
        except APIError as err:
            return error_response(err)
        stream = self.replicas.options(stream=True).handle.remote(prep.payload)
        try:
            async with asyncio.timeout(self.timeout_s):
                head = await stream.__anext__()
        except TimeoutError:
            stream.cancel()
            return error_response(
                APIError(504, "request timed out", type="timeout", code="timeout")
            )
        except Exception as err:  # the replica or its engine failed before answering
            stream.cancel()
            log.warning("request %s failed: %r", prep.request_id, err)
            return error_response(
                APIError(500, "generation failed", type="server_error", code="engine_error")
            )
        assert isinstance(head, ResponseHead)
        headers = {REPLICA_HEADER: head.replica_id}
        if head.media_type == SSE:
            return StreamingResponse(
                self._relay(stream, prep.request_id),
                status_code=head.status,
                media_type=SSE,
                headers=headers,
            )
        return await self._collect(stream, head, headers, prep.request_id)

    async def _collect(
        self, stream: Any, head: ResponseHead, headers: dict[str, str], rid: str
    ) -> Response:
        parts: list[bytes] = []
        try:
            async with asyncio.timeout(self.timeout_s):
                async for chunk in stream:
                    parts.append(chunk)
        except TimeoutError:
            return error_response(
                APIError(504, "request timed out", type="timeout", code="timeout")
            )
        except Exception as err:  # the replica or its engine failed: no hang, no stack trace
            log.warning("request %s failed: %r", rid, err)
            return error_response(
                APIError(500, "generation failed", type="server_error", code="engine_error")
            )
        finally:
            stream.cancel()
        return Response(
            b"".join(parts),
            status_code=head.status,
            media_type=head.media_type or JSON,
            headers=headers,
        )

    async def _relay(self, stream: Any, rid: str) -> AsyncIterator[bytes]:
        try:
            async with asyncio.timeout(self.timeout_s):
                async for chunk in stream:
                    yield chunk
        except Exception as err:  # mid-stream failure: tell the client in-band, then end
            log.warning("stream %s failed: %r", rid, err)
            yield _sse_error("generation failed mid-stream", "stream_error")
        finally:
            stream.cancel()
