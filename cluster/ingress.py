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

from fastapi import Request
from fastapi.responses import JSONResponse, Response
from ray import serve

from cluster.breaker import CircuitBreaker
from cluster.edge_metrics import EdgeMetrics, EdgeRecord, StreamMeter, body_usage, ends_stream
from cluster.guard import Guard, Pass
from cluster.health import fleet_health, health_verdict, shutting_down
from cluster.http_limits import check_headers, read_body
from cluster.ingress_app import (
    CORS,
    REPLICA_HEADER,
    app,
    deployment_states,
    error_response,
    once,
    replica_rank,
)
from cluster.migration import (
    CHAT,
    COMPLETIONS,
    RESUME_HEADER,
    ResumePlan,
    closing_events,
    resume_plan,
    take_resume,
)
from cluster.openapi_spec import build_openapi
from cluster.quota_sync import QuotaSync, mode_gauge
from cluster.relay import Relay, RelaySettings, Started
from cluster.request_checks import NOT_STORED
from cluster.request_prep import (
    GENERATE_PATHS,
    Limits,
    Prepared,
    check_model,
    prepare,
    resubmit,
)
from cluster.sse_response import SSEResponse
from contracts.http import JSON, SSE, APIError
from replicas.status_registry import fleet_overview, fleet_snapshot
from router.admission import ledger_for

log = logging.getLogger("llmfleet.ingress")
HEALTH_CACHE_S = 1.0


# (what the class uses is imported or defined above it: serve.ingress copies the module's
# globals as they are when it wraps the class, so a later one is a NameError in a replica)
@serve.ingress(app)
class OpenAIIngress:
    def __init__(self, replicas: Any, settings: dict[str, Any]) -> None:
        from cluster.light_tokenizer import load_tokenizer

        self.draining = False  # the fleet is stopping (``reconfigure``)

        CORS.configure(settings.get("cors_allowed_origins", []))
        self.limits = Limits(**settings["limits"])
        self.max_body = int(settings.get("max_body_bytes", 8 << 20))
        self.body_timeout_s = float(settings.get("body_timeout_s", 60.0))
        self.max_headers = int(settings.get("max_header_bytes", 64 << 10))
        self.tokenizer = load_tokenizer(settings["tokenizer_path"])
        self.guard = Guard(
            settings.get("api_keys_file"),
            share=settings.get("quota_share", 1.0),
            rank=replica_rank(),
        )
        # several ingress replicas: each counts the others' quota use (cluster/quota_sync.py)
        self.quota_sync = (
            QuotaSync(self.guard.quotas, report=mode_gauge())
            if self.guard.on and settings.get("quota_share", 1.0) < 1.0
            else None
        )
        relay = RelaySettings(
            admission_timeout_s=float(settings.get("admission_timeout_s", 10.0)),
            cold_start_timeout_s=float(settings.get("cold_start_timeout_s", 120.0)),
            request_timeout_s=float(settings.get("request_timeout_s", 600.0)),
            migrate_attempts=int(settings.get("migrate_attempts", 2)),
            max_queued=int(settings.get("max_queued_requests", 64)),
        )
        self.relay = Relay(
            replicas,
            relay,
            CircuitBreaker(),
            self._fleet_health,
            ledger_for(replicas.deployment_name),  # shared with the router in this process
        )
        slo = settings.get("slo", {"ttft_s": 1.0, "tpot_s": 0.1})
        self.edge = (
            EdgeMetrics(self.limits.served_name, slo["ttft_s"], slo["tpot_s"])
            if settings.get("edge_metrics", True)
            else None
        )
        self._health: tuple[float, str | None] = (0.0, None)

    async def _fleet_health(self) -> str | None:
        """``fleet_health`` of the status reports, cached for ``HEALTH_CACHE_S``."""
        now = time.monotonic()
        if now - self._health[0] > HEALTH_CACHE_S:
            seen = await fleet_overview(timeout_s=0.5)
            rows = None if seen is None else seen["replicas"]
            failed = None if seen is None else seen["start_failures"]
            self._health = (now, fleet_health(rows, time.time(), failed))
        return self._health[1]

    def _auth(self, request: Request) -> Any:
        check_headers(request, self.max_headers)
        return self.guard.authenticate(request.headers.get("authorization"), request.url.path)

    @app.get("/openapi.json", include_in_schema=False)
    async def openapi(self, request: Request) -> dict[str, Any]:
        self._auth(request)
        return await asyncio.to_thread(build_openapi, app, self.limits.served_name)

    def _card(self) -> dict[str, Any]:
        return {
            "id": self.limits.served_name,
            "object": "model",
            "created": 0,
            "owned_by": "llmfleet",
            "max_model_len": self.limits.max_model_len,
        }

    @app.get("/v1/models")
    async def models(self, request: Request) -> dict[str, Any]:
        self._auth(request)
        return {"object": "list", "data": [self._card()]}

    @app.get("/v1/models/{model_id:path}")
    async def model(self, model_id: str, request: Request) -> dict[str, Any]:
        """OpenAI's "retrieve model" (``client.models.retrieve``), which vLLM lacks."""
        self._auth(request)
        check_model({"model": model_id}, "", self.limits)
        return self._card()

    # HEAD too: load balancers' health checks may use it
    @app.api_route("/health", methods=["GET", "HEAD"])
    async def health(self) -> Response:
        if self.draining:
            return error_response(shutting_down())
        status, body = health_verdict(await fleet_snapshot(timeout_s=2.0), time.time())
        return JSONResponse(body, status_code=status)

    def reconfigure(self, config: dict[str, Any]) -> None:
        """Serve's user_config: ``draining`` (``app.build_app``)."""
        self.draining = bool(config.get("draining", False))

    @app.get("/fleet/status")
    async def status(self, request: Request) -> dict[str, Any]:
        self._auth(request)
        if self.quota_sync is not None:
            await self.quota_sync.ready()  # (a replica that has served nothing yet)
        c = self.relay.counters
        seen = await fleet_overview(timeout_s=2.0) or {}
        return {
            "replicas": seen.get("replicas", []),
            "start_failures": seen.get("start_failures", []),
            "deployments": await asyncio.to_thread(deployment_states),
            "ingress": {
                "retried": c.retried,
                "migrated": c.migrated,
                "failed": c.failed,
                "resumed": c.resumed,
                # sent to the engine deployment, no replica has taken them yet (held for a
                # slot or for a replica to start); one that stays after its client left leaks
                "waiting": None if self.relay.ledger is None else self.relay.ledger.unrouted,
                "quotas": self._quota_state(),
            },
        }

    def _quota_state(self) -> dict[str, Any]:
        """This ingress replica's quota mode: "shared" (whole limits, the fleet's use),
        "split" (its part: sharing not up yet, or failing), "local" (the only ingress), or
        "off" (no keys)."""
        if not self.guard.on:
            return {"mode": "off"}
        sync = self.quota_sync
        if sync is None:
            return {"mode": "local"}
        mode = "shared" if self.guard.quotas.shared else "split"
        return {
            "mode": mode,
            "sync_errors": sync.errors,
            "bad_batches": sync.bad,
            "slot_errors": sync.slot_errors,
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

    # OpenAI's stored-response routes: answered here, clearly (FastAPI's 404 said only
    # "Not Found"); request_checks.NOT_STORED says why
    @app.api_route(
        "/v1/responses/{response_id}", methods=["GET", "DELETE"], include_in_schema=False
    )
    @app.api_route(
        "/v1/responses/{response_id}/{action}", methods=["GET", "POST"], include_in_schema=False
    )
    async def stored_response(self, request: Request, response_id: str) -> Response:
        self._auth(request)
        raise APIError(
            404, f"response {response_id!r}: {NOT_STORED}", param="response_id", code="not_found"
        )

    @app.post("/tokenize")
    async def tokenize(self, request: Request) -> Response:
        return await self._forward(request, "/tokenize")

    @app.post("/detokenize")
    async def detokenize(self, request: Request) -> Response:
        return await self._forward(request, "/detokenize")

    async def _forward(self, request: Request, path: str) -> Response:
        """One request on a forwarded route; model routes are measured (``edge_metrics.py``):
        a refusal or failure here is recorded now, an answer when its last byte is sent."""
        if self.edge is None or path not in GENERATE_PATHS:
            return await self._relay(request, path, None)
        rec = EdgeRecord(time.monotonic())
        try:
            return await self._relay(request, path, rec)
        except APIError as err:
            rec.status = err.status
            self.edge.finish(rec)
            raise
        except BaseException as err:
            rec.status = 500
            rec.cancelled = isinstance(err, asyncio.CancelledError)
            self.edge.finish(rec)
            raise

    async def _relay(self, request: Request, path: str, rec: EdgeRecord | None) -> Response:
        key = self._auth(request)
        if self.draining:  # the fleet is stopping: the requests in flight finish, no new ones
            raise shutting_down()
        self.relay.check_room()  # shed before reading or tokenizing anything
        prep, plan = await self._prepare(request, path)
        if plan is not None and plan.body is None:  # the stream had ended: only its close
            return SSEResponse(once(self._closing(prep, plan)), media_type=SSE)
        # only replicas that report and fail: with none reporting, the request waits for one
        # (a fleet scaling up from zero, or a replica being replaced)
        if await self._fleet_health() == "failing":
            from cluster.relay import unavailable

            raise unavailable()
        if self.quota_sync is not None:
            await self.quota_sync.ready()  # started once, on this replica's event loop
        tokens = prep.prompt_tokens + prep.view.expected_output_tokens
        grant = await self.guard.admit(key, tokens, self.quota_sync)
        payload = prep.payload
        if plan is not None and plan.body is not None:
            payload = resubmit(prep, plan.body, plan.more_ids, self.limits)
        try:
            started = await self.relay.start(payload)
        except BaseException:
            self.guard.settle(grant, 0)
            raise
        headers = {REPLICA_HEADER: started.replica_id, **(grant.headers or {})}
        if rec is not None:
            rec.accepted_at = started.accepted_at
            rec.status = started.head.status
        if started.head.media_type == SSE:
            return SSEResponse(
                self._stream(started, prep, grant, rec, plan),
                status_code=started.head.status,
                media_type=SSE,
                headers=headers,
            )
        try:
            data = await self.relay.collect(started)
        except BaseException:
            self.guard.settle(grant, None)  # charged in full: the work may have been done
            raise
        usage = body_usage(data)  # parsed once: quotas and the edge metrics
        # refused or failed: no tokens charged (the request still counts against requests
        # per minute); else the unused output tokens are refunded
        used = 0 if started.head.status >= 400 else (None if usage is None else sum(usage))
        await self.guard.settle_seen(grant, used, self.quota_sync)
        if rec is not None and self.edge is not None:
            rec.prompt_tokens, rec.output_tokens = usage or (0, 0)
            self.edge.finish(rec)
        return Response(
            data,
            status_code=started.head.status,
            media_type=started.head.media_type or JSON,
            headers=headers,
        )

    async def _prepare(self, request: Request, path: str) -> tuple[Prepared, ResumePlan | None]:
        """The request read and prepared, off this loop; and, when the front door resumes a
        stream with it, how."""
        raw = await read_body(request, self.max_body, self.body_timeout_s)
        mark = None
        if request.headers.get(RESUME_HEADER) and path in (CHAT, COMPLETIONS):
            raw, mark = await asyncio.to_thread(take_resume, raw)
        prep = await asyncio.to_thread(prepare, path, raw, self.tokenizer, self.limits)
        if mark is None:
            return prep, None
        return prep, await asyncio.to_thread(self._resume_plan, prep, mark)

    def _resume_plan(self, prep: Prepared, mark: dict[str, Any]) -> ResumePlan:
        """A stream another ingress was relaying when it died (``cluster/front_door.py``)."""
        import json

        fwd = prep.payload["request"]
        plan = resume_plan(fwd.path, json.loads(fwd.body), mark, self._encode)
        self.relay.counters.resumed += 1
        log.warning("resuming a stream for the front door: %s", plan.log.id)
        return plan

    def _closing(self, prep: Prepared, plan: ResumePlan) -> bytes:
        import json

        fwd = prep.payload["request"]
        body = json.loads(fwd.body)
        if prep.usage_injected:  # the client did not ask for the usage event
            body["stream_options"] = None
        n = len(fwd.prompt_token_ids)
        return closing_events(fwd.path, body, plan.log, n, len(plan.more_ids))

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    async def _stream(
        self,
        started: Started,
        prep: Prepared,
        grant: Pass,
        rec: EdgeRecord | None,
        plan: ResumePlan | None = None,
    ) -> AsyncIterator[bytes]:
        import json

        fwd = prep.payload["request"]
        body = json.loads(fwd.body) if self.relay.s.migrate_attempts else None
        meter = StreamMeter(rec, prep.usage_injected) if rec is not None else None
        done = False

        def used() -> int | None:
            return rec.prompt_tokens + rec.output_tokens if rec and rec.output_tokens else None

        try:
            async for chunk in self.relay.stream(
                started,
                fwd.path,
                body,
                self._encode,
                lambda cont, ids, _n: resubmit(prep, cont, ids, self.limits),
                len(fwd.prompt_token_ids),
                plan,
            ):
                if meter is not None:
                    chunk = meter.feed(chunk)
                    if not chunk:
                        continue
                if grant.ticket is not None and grant.ticket.slot and ends_stream(chunk):
                    await self.guard.settle_seen(grant, used(), self.quota_sync)
                yield chunk
            done = True
        finally:
            self.guard.settle(grant, used())  # streams too: unused output tokens refunded
            if rec is not None and self.edge is not None:
                rec.streamed = True
                rec.failed = started.failed
                rec.cancelled = not (done or rec.ended)
                self.edge.finish(rec)
