"""A tiny OpenAI-shaped SSE server on raw asyncio, for the generator's tests and its
ceiling benchmark (no framework, so the server is never the bottleneck we measure).

Modes: ``ok`` (min(max_tokens, chunks) text chunks, a usage chunk, ``[DONE]``),
``http500``, ``cut`` (two chunks, then the connection closes mid-stream), ``stall``
(headers, then silence), ``nousage`` (like ok without the usage chunk), ``error_event``
(an ``{"error": ...}`` SSE event). HTTP/1.1 keep-alive with chunked encoding.
Run standalone: ``python -m bench.stub_server --port 8123 --chunks 4``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
from typing import Any

MODEL_ID = "stub-model"


def _chunk(payload: bytes) -> bytes:
    return f"{len(payload):x}\r\n".encode() + payload + b"\r\n"


def _event(obj: Any) -> bytes:
    return _chunk(b"data: " + json.dumps(obj).encode() + b"\n\n")


class StubServer:
    def __init__(
        self, mode: str = "ok", chunks: int = 4, delay_s: float = 0.0, keep_bodies: int = 1000
    ) -> None:
        self.mode, self.chunks, self.delay_s = mode, chunks, delay_s
        self.bodies: list[dict[str, Any]] = []
        self.keep_bodies = keep_bodies
        self.served = 0
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.Task[None]] = set()
        self.port = 0

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        self._server = await asyncio.start_server(self._conn, host, port, backlog=4096)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._conns):  # Python 3.11 has no Server.close_clients()
                task.cancel()
            await asyncio.gather(*self._conns, return_exceptions=True)
            await self._server.wait_closed()

    async def _read_request(self, reader: asyncio.StreamReader) -> tuple[str, bytes] | None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        lines = head.decode("latin-1").split("\r\n")
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        body = await reader.readexactly(length) if length else b""
        return lines[0], body

    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._conns.add(task)
        try:
            while (req := await self._read_request(reader)) is not None:
                if not await self._respond(req[0], req[1], writer):
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            if task is not None:
                self._conns.discard(task)

    async def _respond(self, request_line: str, body: bytes, writer: asyncio.StreamWriter) -> bool:
        """Write one response; return False to close the connection."""
        if request_line.startswith("GET /v1/models"):
            data = json.dumps({"object": "list", "data": [{"id": MODEL_ID}]}).encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(data)}\r\n\r\n".encode()
                + data
            )
            await writer.drain()
            return True
        req = json.loads(body or b"{}")
        self.served += 1
        if len(self.bodies) < self.keep_bodies:
            self.bodies.append(req)
        if self.mode == "http500":
            msg = b'{"error": "boom"}'
            writer.write(
                b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json"
                + f"\r\nContent-Length: {len(msg)}\r\n\r\n".encode()
                + msg
            )
            await writer.drain()
            return True
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\nx-llmfleet-replica: stub-0\r\n\r\n"
        )
        return await self._stream(req, writer)

    async def _stream(self, req: dict[str, Any], writer: asyncio.StreamWriter) -> bool:
        if self.mode == "stall":
            await writer.drain()
            await asyncio.sleep(3600)
        if self.mode == "error_event":
            writer.write(_event({"error": {"message": "engine died"}}))
        n = min(int(req.get("max_tokens", self.chunks)), self.chunks)
        n = 2 if self.mode == "cut" else n
        chat = "messages" in req
        for i in range(n):
            choice = (
                {"index": 0, "delta": {"content": f" t{i}"}}
                if chat
                else {"index": 0, "text": f" t{i}"}
            )
            writer.write(_event({"choices": [choice]}))
            if self.delay_s:
                await writer.drain()
                await asyncio.sleep(self.delay_s)
        if self.mode == "cut":
            await writer.drain()
            return False
        prompt = req.get("prompt", "")
        n_prompt = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
        if self.mode != "nousage":
            usage = {
                "prompt_tokens": n_prompt,
                "completion_tokens": n,
                "total_tokens": n_prompt + n,
            }
            writer.write(_event({"choices": [], "usage": usage}))
        writer.write(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()
        return True


async def _serve(args: argparse.Namespace) -> None:
    server = StubServer(args.mode, args.chunks, args.delay_s, keep_bodies=0)
    port = await server.start(args.host, args.port)
    print(f"stub server on {args.host}:{port}", flush=True)
    await asyncio.sleep(args.lifetime_s)  # bounded: never outlives its caller for long
    await server.stop()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8123)
    p.add_argument("--mode", default="ok")
    p.add_argument("--chunks", type=int, default=4)
    p.add_argument("--delay-s", type=float, default=0.0)
    p.add_argument("--lifetime-s", type=float, default=600.0)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(p.parse_args()))


if __name__ == "__main__":
    main()
