"""The chaos benchmark's client: closed-loop streamed requests, one outcome per request.

``drive`` keeps ``concurrency`` requests in flight (its workers start ``STAGGER_S`` apart)
until ``num_requests`` were sent or ``wall_s`` passed (then it stops sending and cancels
what is still open). A request open longer than ``hang_s`` is cancelled and counted as
hung. Each request is a streamed chat or completions call (alternating) with
``ignore_eos`` and its ``max_tokens`` spread over a range, so a whole answer is exactly
``max_tokens`` tokens and ends with ``finish_reason: length``, usage, then ``[DONE]``.

Outcomes, from what the client alone can see (a migrated stream looks whole by design):

- ``ok``: 200, one stream id, ``finish_reason: length``, no error event, ``[DONE]``;
- ``clean_error``: an error status before any 200 (429 / 503 / 500 / 504): retryable;
- ``migration_error``: 200 that ended with the ingress's in-band ``stream_error`` event
  and ``[DONE]`` (a migration that ran out of budget: the documented way a stream fails);
- ``bad_200``: 200 that ended any other way: cut off, another error, no ``[DONE]``;
- ``malformed``: 200 and ``[DONE]`` but no usage or the wrong one, the wrong finish, or
  several stream ids;
- ``transport``: no status at all (connection refused or reset before the head);
- ``hung``: open after ``hang_s``; ``unfinished``: cancelled at the wall-clock bound.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

MODEL = "smollm2-135m-instruct"
MIGRATION_ERROR_CODE = "stream_error"  # cluster/relay.py's in-band error after the budget
STAGGER_S = 0.1  # worker k sends its first request after k × this
USAGE_SLACK = 3  # migrated usage is the ingress's token estimate: a token or two off


@dataclass(slots=True)
class Record:
    i: int
    path: str
    max_tokens: int
    sent_s: float  # since the run's start
    status: int | None = None
    first_token_s: float | None = None  # first content, since the run's start
    content_events: int = 0
    end_s: float | None = None
    done: bool = False
    finish: list[str] = field(default_factory=list)
    stream_ids: set[str] = field(default_factory=set)
    error_codes: list[str] = field(default_factory=list)  # in-band error events
    error_body: str | None = None  # code (or text) of a non-200 answer
    transport_error: str | None = None
    completion_tokens: int | None = None
    replica: str | None = None
    hung: bool = False
    unfinished: bool = False

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.sent_s

    def outcome(self) -> str:
        if self.hung:
            return "hung"
        if self.unfinished:
            return "unfinished"
        if self.status is None:
            return "transport"
        if self.status != 200:
            return "clean_error"
        if self.error_codes:
            clean = self.done and set(self.error_codes) == {MIGRATION_ERROR_CODE}
            return "migration_error" if clean else "bad_200"
        if not self.done or self.transport_error:
            return "bad_200"
        return "malformed" if self.malformed() else "ok"

    def malformed(self) -> str | None:
        """Why a 200 that ended with ``[DONE]`` is not a whole answer; None if it is."""
        if self.completion_tokens is None:
            return "no usage event"
        if abs(self.completion_tokens - self.max_tokens) > USAGE_SLACK:
            return f"usage says {self.completion_tokens} tokens"
        if self.finish != ["length"]:
            return f"finish_reason {self.finish}"
        if len(self.stream_ids) != 1:
            return f"{len(self.stream_ids)} stream ids"
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "i": self.i,
            "path": self.path,
            "max_tokens": self.max_tokens,
            "sent_s": round(self.sent_s, 4),
            "ttft_s": None if self.ttft_s is None else round(self.ttft_s, 4),
            "end_s": None if self.end_s is None else round(self.end_s, 4),
            "status": self.status,
            "outcome": self.outcome(),
            "done": self.done,
            "finish": self.finish,
            "stream_ids": len(self.stream_ids),
            "malformed": self.malformed() if self.done else None,
            "error_codes": self.error_codes,
            "error_body": self.error_body,
            "transport_error": self.transport_error,
            "completion_tokens": self.completion_tokens,
            "replica": self.replica,
        }


def output_tokens(i: int, lo: int, hi: int) -> int:
    """Spread over ``lo..hi`` (deterministic): equal lengths would keep the closed loop in
    lockstep waves, with moments when no stream is mid-generation."""
    return lo + (i * 7919) % (hi - lo + 1)


def request_body(i: int, max_tokens: int) -> tuple[str, dict[str, Any]]:
    common = {
        "model": MODEL,
        "max_tokens": max_tokens,
        "stream": True,
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
    }
    if i % 2:
        return "/v1/completions", {**common, "prompt": f"chaos {i}: once upon a time there was"}
    msgs = [{"role": "user", "content": f"chaos {i}: tell me a story about a lighthouse"}]
    return "/v1/chat/completions", {**common, "messages": msgs}


def _observe(rec: Record, payload: str, now: float) -> None:
    if payload == "[DONE]":
        rec.done = True
        return
    try:
        event = json.loads(payload)
    except ValueError:
        rec.error_codes.append("unparsable_event")
        return
    if "error" in event:
        rec.error_codes.append(str((event["error"] or {}).get("code")))
        return
    if event.get("id"):
        rec.stream_ids.add(event["id"])
    if event.get("usage"):
        rec.completion_tokens = event["usage"].get("completion_tokens")
    for ch in event.get("choices") or ():
        text = (ch.get("delta") or {}).get("content") or ch.get("text")
        if text:
            rec.content_events += 1
            if rec.first_token_s is None:
                rec.first_token_s = now
        if ch.get("finish_reason"):
            rec.finish.append(ch["finish_reason"])


def _error_code(raw: bytes) -> str:
    try:
        return str(json.loads(raw)["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return "non-json: " + raw[:80].decode(errors="replace")


async def one(c: httpx.AsyncClient, rec: Record, body: dict[str, Any], t0: float) -> None:
    try:
        async with c.stream("POST", rec.path, json=body) as r:
            rec.status = r.status_code
            rec.replica = r.headers.get("x-llmfleet-replica")
            if r.status_code != 200:
                rec.error_body = _error_code(await r.aread())
                return
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    _observe(rec, line[6:], time.monotonic() - t0)
    except httpx.HTTPError as err:
        rec.transport_error = f"{type(err).__name__}: {err}"[:200]
    finally:
        rec.end_s = time.monotonic() - t0


@dataclass
class Progress:
    sent: int = 0
    records: list[Record] = field(default_factory=list)


async def drive(
    url: str,
    progress: Progress,
    t0: float,
    *,
    num_requests: int,
    concurrency: int,
    tokens: tuple[int, int],
    wall_s: float,
    hang_s: float,
) -> None:
    """Closed loop: each of ``concurrency`` workers sends the next request when its last ends."""
    limits = httpx.Limits(max_connections=concurrency * 2, max_keepalive_connections=concurrency)
    timeout = httpx.Timeout(hang_s + 5.0, connect=10.0)

    async def worker(c: httpx.AsyncClient, k: int) -> None:
        await asyncio.sleep(k * STAGGER_S)
        while progress.sent < num_requests and time.monotonic() - t0 < wall_s:
            i = progress.sent
            progress.sent += 1
            n = output_tokens(i, *tokens)
            path, body = request_body(i, n)
            rec = Record(i, path, n, time.monotonic() - t0)
            progress.records.append(rec)
            try:
                left = wall_s - (time.monotonic() - t0)
                async with asyncio.timeout(min(hang_s, max(left, 0.01))):
                    await one(c, rec, body, t0)
            except TimeoutError:
                rec.end_s = time.monotonic() - t0
                if rec.end_s - rec.sent_s >= hang_s - 0.01:
                    rec.hung = True
                else:
                    rec.unfinished = True

    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=timeout) as c:
        await asyncio.gather(*(worker(c, k) for k in range(concurrency)))
