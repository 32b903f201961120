"""The Python floor for ``make bench-ceiling``: one process, one event loop, no relays.

A FastAPI app answers ``/v1/completions`` and ``/v1/chat/completions`` with the very engine
and OpenAI layer an llmfleet replica runs for engines without vLLM's server (the null or
simulated engine under ``replicas.openai_lite``), streamed by uvicorn straight to the
client. What llmfleet adds on top of this (Serve's HTTP proxy, the ingress, the routing
decision and two Ray hops per streamed chunk) is what the ceiling benchmark measures.

    python -m experiments.ceiling.floor_server --port 8132 --engine null --step-s 0.007
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from contracts.http import ForwardedRequest, ResponseHead
from replicas.engine import Engine
from replicas.openai_lite.frontend import LiteOpenAI

SERVED_NAME = "smollm2-135m-instruct"


def build_engine(kind: str, step_s: float, max_num_seqs: int) -> Engine:
    if kind == "null":
        from replicas.null_engine import NullEngine

        return NullEngine(step_s=step_s, max_num_seqs=max_num_seqs, max_model_len=8192)
    if kind == "sim-h100":
        from replicas.sim.engine import SimEngine

        return SimEngine(model="llama-3-8b", hardware="h100", max_model_len=8192)
    raise ValueError(f"unknown engine {kind!r}")


def prompt_ids(body: dict[str, Any]) -> tuple[int, ...]:
    """Token ids when the client sent ids; otherwise one pseudo-id per word (engines here
    only count prompt tokens)."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], int):
        return tuple(prompt)
    if isinstance(prompt, str):
        text = prompt
    else:
        text = " ".join(str(m.get("content", "")) for m in body.get("messages") or [])
    return tuple(range(1, len(text.split()) + 1)) or (1,)


def make_app(engine: Engine) -> Any:
    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await engine.start()
        yield
        await engine.shutdown()

    app = FastAPI(lifespan=lifespan)
    front = LiteOpenAI(engine, SERVED_NAME, "floor")
    ids = itertools.count()

    @app.get("/v1/models")
    async def models() -> Any:
        return {"object": "list", "data": [{"id": SERVED_NAME, "object": "model"}]}

    async def _serve(path: str, request: Request) -> Any:
        raw = await request.body()
        body = json.loads(raw)
        fwd = ForwardedRequest(
            path=path,
            body=raw,
            request_id=f"floor-{next(ids)}",
            prompt_token_ids=prompt_ids(body),
            stream=bool(body.get("stream")),
            arrival_time=time.time(),
        )
        items = front.handle(fwd)
        head = await items.__anext__()
        assert isinstance(head, ResponseHead)
        if head.media_type.startswith("text/event-stream"):

            async def rest() -> AsyncIterator[bytes]:
                async for chunk in items:
                    yield chunk  # type: ignore[misc]

            return StreamingResponse(rest(), status_code=head.status, media_type=head.media_type)
        data = b"".join([c async for c in items])  # type: ignore[misc]
        if head.status != 200:
            return JSONResponse(json.loads(data), status_code=head.status)
        return Response(data, status_code=head.status, media_type=head.media_type)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        return await _serve("/v1/completions", request)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        return await _serve("/v1/chat/completions", request)

    return app


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--port", type=int, default=8132)
    p.add_argument("--engine", choices=("null", "sim-h100"), default="null")
    p.add_argument("--step-s", type=float, default=0.007)
    p.add_argument("--max-num-seqs", type=int, default=1024)
    args = p.parse_args(argv)
    import uvicorn

    app = make_app(build_engine(args.engine, args.step_s, args.max_num_seqs))
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
