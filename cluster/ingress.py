"""The OpenAI ingress deployment (FastAPI behind Ray Serve).

It parses each request once (validation, chat template, token limits, prefix hashes), then
calls the ``LLMReplica`` deployment through a handle — the request router lives on that
handle, in this process — and relays the deltas as JSON or SSE. A client that goes away
cancels the handle call, which aborts the engine request and frees its slot.
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

from cluster.openai_format import SSE_DONE, Formatter, sse, usage
from cluster.openai_protocol import APIError, ChatRequest, CompletionRequest, decode_json, validate
from cluster.request_prep import Limits, prepare
from replicas.status_registry import fleet_snapshot

log = logging.getLogger("llmfleet.ingress")
app = FastAPI(title="llmfleet", docs_url=None, redoc_url=None)
HEALTH_FRESH_S = 10.0


def error_response(err: APIError) -> JSONResponse:
    return JSONResponse(err.body(), status_code=err.status)


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
        from transformers import AutoTokenizer

        self.replicas = replicas
        self.limits = Limits(**settings["limits"])
        self.timeout_s = float(settings.get("request_timeout_s", 600.0))
        self.tokenizer = AutoTokenizer.from_pretrained(settings["tokenizer_path"])

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
        return await self._serve(request, CompletionRequest, chat=False)

    @app.post("/v1/chat/completions")
    async def chat(self, request: Request) -> Response:
        return await self._serve(request, ChatRequest, chat=True)

    async def _serve(self, request: Request, model: type, chat: bool) -> Response:
        try:
            body = validate(model, decode_json(await request.body()))
            prep = prepare(body, self.tokenizer, self.limits)
        except APIError as err:
            return error_response(err)
        fmt = Formatter(prep.request_id, body.model, chat)
        stream = self.replicas.options(stream=True).generate.remote(prep.payload)
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            return StreamingResponse(
                self._sse(stream, fmt, include_usage), media_type="text/event-stream"
            )
        return await self._collect(stream, fmt)

    async def _collect(self, stream: Any, fmt: Formatter) -> Response:
        parts: list[str] = []
        last: dict[str, Any] = {}
        try:
            async with asyncio.timeout(self.timeout_s):
                async for d in stream:
                    parts.append(d["text"])
                    last = d
        except TimeoutError:
            return error_response(
                APIError(504, "request timed out", type="timeout", code="timeout")
            )
        except Exception as err:  # the replica or its engine failed: no hang, no stack trace
            log.warning("request %s failed: %r", fmt.id, err)
            return error_response(
                APIError(500, "generation failed", type="server_error", code="engine_error")
            )
        finally:
            stream.cancel()
        u = usage(
            last.get("prompt_tokens", 0),
            last.get("completion_tokens", 0),
            last.get("cached_tokens", 0),
        )
        headers = {"x-llmfleet-replica": str(last.get("replica", ""))}
        return JSONResponse(fmt.full("".join(parts), last.get("finish_reason"), u), headers=headers)

    async def _sse(self, stream: Any, fmt: Formatter, include_usage: bool) -> AsyncIterator[bytes]:
        last: dict[str, Any] = {}
        try:
            async with asyncio.timeout(self.timeout_s):
                async for d in stream:
                    last = d
                    if d["text"] or d["finish_reason"]:
                        yield sse(fmt.chunk(d["text"], d["finish_reason"]))
            if include_usage:
                u = usage(
                    last.get("prompt_tokens", 0),
                    last.get("completion_tokens", 0),
                    last.get("cached_tokens", 0),
                )
                yield sse(fmt.usage_chunk(u))
            yield SSE_DONE
        except Exception as err:  # mid-stream failure: tell the client in-band, then end
            log.warning("stream %s failed: %r", fmt.id, err)
            yield sse(
                APIError(
                    500, "generation failed mid-stream", type="server_error", code="stream_error"
                ).body()
            )
        finally:
            stream.cancel()
