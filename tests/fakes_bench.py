"""Shared fakes for the load-generator tests: a local OpenAI-shaped SSE server on
127.0.0.1 (``bench.stub_server``) and a port on which nothing listens."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from bench.stub_server import StubServer


@asynccontextmanager
async def sse_server(
    mode: str = "ok", chunks: int = 4, delay_s: float = 0.0
) -> AsyncIterator[StubServer]:
    server = StubServer(mode, chunks, delay_s)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def closed_port() -> int:
    """A port that was free a moment ago (bind, read the number, close)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
