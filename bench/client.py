"""One streamed OpenAI request → one ``RequestRecord``.

Sends ``/v1/completions`` or ``/v1/chat/completions`` with ``stream=True`` and
``stream_options.include_usage`` and parses the SSE stream line by line. Timing: TTFT is the
first chunk that carries output text; every later text chunk adds a token time (ITL gaps
come from these). Token counts come from the server's ``usage`` chunk; only if the server
sends none do we fall back to the number of text chunks. Failures never raise: they become
``record.error`` kinds — ``connect_error``, ``http_<status>``, ``timeout`` (the whole request
is bounded by ``timeout_s``), ``stream_cut`` (connection closed before ``[DONE]``),
``server_error`` (an error object inside the stream), ``bad_response``, ``cancelled``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from bench.types import RequestRecord, RequestSpec

REPLICA_HEADER = "x-llmfleet-replica"


@dataclass(frozen=True, slots=True)
class Target:
    base_url: str
    model: str
    endpoint: str = "completions"  # or "chat"
    api_key: str | None = None
    timeout_s: float = 300.0
    ignore_eos: bool = True

    @property
    def url(self) -> str:
        path = "/v1/chat/completions" if self.endpoint == "chat" else "/v1/completions"
        return self.base_url.rstrip("/") + path

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


def build_payload(target: Target, spec: RequestSpec, prompt: str | list[int]) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": target.model,
        "max_tokens": spec.output_tokens,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if target.ignore_eos:
        body["ignore_eos"] = True
    if target.endpoint == "chat":
        text = prompt if isinstance(prompt, str) else " ".join(map(str, prompt))
        body["messages"] = [{"role": "user", "content": text}]
    else:
        body["prompt"] = prompt
    return body


def _chunk_text(chunk: dict[str, Any]) -> str:
    choices = chunk.get("choices") or []
    if not choices:
        return ""
    first = choices[0]
    if "delta" in first:
        return first["delta"].get("content") or ""
    return first.get("text") or ""


class _StreamState:
    def __init__(self) -> None:
        self.done = False
        self.usage: dict[str, Any] | None = None
        self.chunks = 0


def _handle_line(raw: bytes, state: _StreamState, rec: RequestRecord, now: float) -> None:
    line = raw.strip()
    if not line.startswith(b"data:"):
        return
    data = line[5:].strip()
    if data == b"[DONE]":
        state.done = True
        return
    chunk = json.loads(data)
    if "error" in chunk:
        raise _ServerError()
    if chunk.get("usage"):
        state.usage = chunk["usage"]
    if _chunk_text(chunk):
        state.chunks += 1
        if rec.ttft_s is None:
            rec.ttft_s = now - rec.send_s
        rec.token_times_s.append(now)


class _ServerError(Exception):
    pass


def _apply_usage(rec: RequestRecord, state: _StreamState) -> None:
    usage = state.usage or {}
    rec.prompt_tokens = int(usage.get("prompt_tokens") or 0)
    rec.output_tokens = int(usage.get("completion_tokens") or state.chunks)
    details = usage.get("prompt_tokens_details") or {}
    rec.cached_tokens = int(details.get("cached_tokens") or 0)


async def _stream(
    session: aiohttp.ClientSession,
    target: Target,
    body: dict[str, Any],
    rec: RequestRecord,
    clock: Callable[[], float],
    t0: float,
) -> None:
    state = _StreamState()
    async with session.post(target.url, json=body, headers=target.headers()) as resp:
        rec.replica = resp.headers.get(REPLICA_HEADER)
        if resp.status >= 400:
            rec.error = f"http_{resp.status}"
            return
        async for raw in resp.content:
            _handle_line(raw, state, rec, clock() - t0)
            if state.done:
                break
    if not state.done:
        rec.error = "stream_cut"
        return
    rec.e2e_s = clock() - t0 - rec.send_s
    _apply_usage(rec, state)
    if rec.ttft_s is None and rec.output_tokens > 0:
        rec.ttft_s = rec.e2e_s


async def send(
    session: aiohttp.ClientSession,
    target: Target,
    spec: RequestSpec,
    body: dict[str, Any],
    *,
    intended_s: float,
    t0: float,
    clock: Callable[[], float] = time.perf_counter,
) -> RequestRecord:
    """Send one request; ``t0`` is the run start on ``clock``. Never raises; cancellation
    returns the record marked ``cancelled`` so an interrupted run keeps what it measured."""
    rec = RequestRecord(index=spec.index, intended_send_s=intended_s, send_s=clock() - t0)
    try:
        async with asyncio.timeout(target.timeout_s):
            await _stream(session, target, body, rec, clock, t0)
    except TimeoutError:
        rec.error = "timeout"
    except aiohttp.ClientConnectorError:
        rec.error = "connect_error"
    except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError):
        rec.error = "stream_cut"
    except _ServerError:
        rec.error = "server_error"
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError):
        rec.error = "bad_response"
    except aiohttp.ClientError as exc:
        rec.error = f"client_{type(exc).__name__}"
    except asyncio.CancelledError:  # the runner cancels in-flight requests on stop / Ctrl-C
        rec.error = "cancelled"
    return rec


async def first_model(base_url: str, api_key: str | None = None, timeout_s: float = 10.0) -> str:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    url = base_url.rstrip("/") + "/v1/models"
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(url, headers=headers) as resp,
    ):
        resp.raise_for_status()
        data = await resp.json()
    return str(data["data"][0]["id"])
