"""``VLLMOpenAI``: vLLM's own OpenAI server application, called in-process in the replica.

We do not re-implement the OpenAI API. The replica builds the FastAPI app vLLM's
``vllm serve`` builds (``build_app`` + ``init_app_state``, from the same parsed server
arguments) on its ``AsyncLLM`` and calls it as an ASGI application, in the same event loop,
once per forwarded request. So everything the pinned vLLM serves for a generative model —
chat and completions, ``n``, ``best_of``, logprobs, ``echo``, penalties, ``top_k``/``min_p``,
``stop_token_ids``, ``logit_bias``, structured outputs, tools, ``/tokenize``,
``/detokenize``, ``/v1/responses`` — is served with vLLM's validation, rendering and errors.

::

    ForwardedRequest ─► ASGI scope + receive() ─► vLLM app ─► send() ─► queue
                                                           (coalesce) ─► ResponseHead, bytes…

What we change on the way out (``conform.py``): vLLM's quirks against OpenAI's published
schema (``null`` where the schema has no null, integer error codes); streamed events pass
through as bytes unless they carry an error. A cancelled stream (client gone) cancels the
app task; vLLM's handler then aborts the engine request. The engine client the app sees is
the replica's tracked client (``VLLMEngine.client``), so load statistics see every request.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from contracts.http import JSON, SSE, ForwardedRequest, ResponseHead
from replicas.conform import conform_json_body, conform_sse

_DONE = object()
DISCONNECT_GRACE_S = 1.0  # how long the app may take to end by itself once told the client left


def server_namespace(argv: list[str]) -> Any:
    """vLLM's own server arguments, parsed by vLLM's own parser (unknown flags fail here)."""
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser())
    return parser.parse_args(argv)


class VLLMOpenAI:
    def __init__(self, engine_client: Any, argv: list[str], replica_id: str) -> None:
        self.client = engine_client
        self.argv = argv
        self.replica_id = replica_id
        self.app: Any = None

    async def start(self) -> None:
        from vllm.entrypoints.launchers.api_server.app_state import init_app_state
        from vllm.entrypoints.launchers.app import build_app

        args = server_namespace(self.argv)
        tasks = await self.client.get_supported_tasks()
        app = build_app(args, tasks, self.client.model_config)
        await init_app_state(self.client, app.state, args, tasks)
        self.app = app

    def _scope(self, fwd: ForwardedRequest) -> dict[str, Any]:
        return {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": fwd.path,
            "raw_path": fwd.path.encode(),
            "root_path": "",
            "query_string": b"",
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(fwd.body)).encode()),
                # vLLM prefixes its own "chatcmpl-"/"cmpl-": pass the ingress id's hex part
                (b"x-request-id", fwd.request_id.rsplit("-", 1)[-1].encode()),
            ],
            "client": ("127.0.0.1", 0),
            "server": ("127.0.0.1", 0),
            "state": {},
        }

    async def handle(self, fwd: ForwardedRequest) -> AsyncIterator[ResponseHead | bytes]:
        queue: asyncio.Queue[Any] = asyncio.Queue()
        gone = asyncio.Event()
        body_sent = False

        async def receive() -> dict[str, Any]:
            nonlocal body_sent
            if not body_sent:
                body_sent = True
                return {"type": "http.request", "body": fwd.body, "more_body": False}
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            queue.put_nowait(message)

        task = asyncio.get_running_loop().create_task(self.app(self._scope(fwd), receive, send))
        task.add_done_callback(lambda _: queue.put_nowait(_DONE))
        try:
            async for item in self._responses(queue, task):
                yield item
        finally:
            if not task.done():
                # Tell the app first: vLLM's handlers watch for the disconnect in a task of
                # their own and then cancel the handler, which aborts the engine request.
                # Cancelling the app at once would end only that watch (``with_cancellation``
                # awaits ``asyncio.wait``), and a non-streamed request ran on to its end.
                gone.set()
                with contextlib.suppress(BaseException):
                    await asyncio.wait({task}, timeout=DISCONNECT_GRACE_S)  # leaves it running
                if not task.done():
                    task.cancel()
                    with contextlib.suppress(BaseException):
                        await task

    async def _responses(
        self, queue: asyncio.Queue[Any], task: asyncio.Task[Any]
    ) -> AsyncIterator[ResponseHead | bytes]:
        media = JSON
        status = 500
        body: list[bytes] = []
        while True:
            msg = await queue.get()
            batch = [msg]
            while not queue.empty():  # coalesce what arrived while we were away
                batch.append(queue.get_nowait())
            chunks: list[bytes] = []
            ended = False
            for m in batch:
                if m is _DONE:
                    ended = True
                elif m["type"] == "http.response.start":
                    status = int(m["status"])
                    media = _media_type(m.get("headers", ()))
                    if media == SSE:
                        yield ResponseHead(status, SSE, self.replica_id)
                elif m["type"] == "http.response.body":
                    chunks.append(m.get("body", b""))
                    ended = ended or not m.get("more_body", False)
            if media == SSE:
                data = b"".join(chunks)
                if data:
                    yield conform_sse(data)
            else:
                body.extend(chunks)
            if ended:
                break
        if task.done() and not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]
        if media != SSE:
            yield ResponseHead(status, media, self.replica_id)
            yield conform_json_body(b"".join(body), status)


def _media_type(headers: Any) -> str:
    for key, value in headers:
        if key.lower() == b"content-type":
            return value.decode().split(";")[0].strip()
    return JSON
