"""The streamed answer ends its HTTP response with the terminal event, not after it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from cluster.sse_response import SSEResponse

DONE = b"data: [DONE]\n\n"
EVENT = b'data: {"choices":[{"text":"hi"}]}\n\n'
SCOPE = {"type": "http", "asgi": {"spec_version": "2.4"}}


def run(chunks: list[bytes], ran_to_end: list[bool]) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def body() -> AsyncIterator[bytes]:
        for c in chunks:
            yield c
        ran_to_end.append(True)  # the producer's own bookkeeping after its last chunk

    async def receive() -> dict[str, Any]:
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    resp = SSEResponse(body(), media_type="text/event-stream")
    asyncio.run(resp(SCOPE, receive, send))
    return sent


def bodies(sent: list[dict[str, Any]]) -> list[tuple[bytes, bool]]:
    return [(m["body"], m["more_body"]) for m in sent if m["type"] == "http.response.body"]


def test_done_chunk_ends_the_response_and_the_producer_still_finishes() -> None:
    ended: list[bool] = []
    sent = run([EVENT, EVENT + DONE], ended)
    assert sent[0]["type"] == "http.response.start"
    assert bodies(sent) == [(EVENT, True), (EVENT + DONE, False)]
    assert ended == [True]


def test_responses_api_completed_event_ends_the_response() -> None:
    last = b'event: response.completed\ndata: {"type":"response.completed"}\n\n'
    assert bodies(run([EVENT, last], [])) == [(EVENT, True), (last, False)]


def test_a_stream_without_terminal_event_is_closed_after_its_last_chunk() -> None:
    # a producer that stops early (cut upstream) still gets a well-formed end of response
    assert bodies(run([EVENT, EVENT], [])) == [(EVENT, True), (EVENT, True), (b"", False)]


def test_nothing_is_sent_after_the_response_ended() -> None:
    ended: list[bool] = []
    sent = run([DONE, EVENT], ended)
    assert bodies(sent) == [(DONE, False)]
    assert ended == [True]


def test_text_in_a_generated_token_does_not_end_the_stream() -> None:
    # "[DONE]" inside generated text is JSON-escaped in an event, never a bare data line
    tricky = b'data: {"choices":[{"text":"data: [DONE]"}]}\n\n'
    assert bodies(run([tricky, DONE], [])) == [(tricky, True), (DONE, False)]
