"""Per-request metrics at the edge (the ingress): what the client saw, and live goodput.

One ``EdgeRecord`` per request on a model route (chat, completions, responses), from its
arrival in the ingress handler to the last byte relayed:

- ``accepted_at`` — a replica took it (router queue = accepted − arrival);
- streamed answers: ``StreamMeter`` sees every relayed chunk: the first is the first token
  (TTFT), the gaps are ITL; it also reads the answer's ``usage`` event. When the client did
  not ask for usage, the ingress asks for it (``stream_options.include_usage``, see
  ``request_prep.py``) and the meter removes that usage-only event before the client sees
  it — so token counts are the engine's, not a count of chunks;
- the end: ``classify`` (``contracts/outcomes.py``) turns status, timings and output tokens
  into an outcome against ``slo``; the outcome counter is live goodput.

Recording happens once, at the end of the request (ITL gaps are kept in a list and observed
then), so the relay loop does no metric work per chunk beyond a clock read.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from contracts import metrics as M
from contracts.metrics import start_at_zero
from contracts.outcomes import OUTCOMES, classify
from replicas.metrics import ray_metric

log = logging.getLogger("llmfleet.edge")

_USAGE = b'"usage"'
_EVENT_END = b"\n\n"
_DONE = b"data: [DONE]\n\n"  # always the last event of a chat/completions stream
_RESPONSE_DONE = b'"type":"response.completed"'  # a quote inside generated text is escaped


def ends_stream(chunk: bytes) -> bool:
    """The chunk holds a stream's terminal event (chat/completions' ``[DONE]``, or the
    Responses API's ``response.completed``)."""
    return chunk.endswith(_DONE) or _RESPONSE_DONE in chunk


@dataclass(slots=True)
class EdgeRecord:
    arrival: float  # time.monotonic() when the handler started
    accepted_at: float | None = None
    first_at: float | None = None  # first streamed chunk
    last_at: float | None = None
    end: float | None = None
    status: int = 0
    streamed: bool = False
    prompt_tokens: int = 0
    output_tokens: int = 0
    chunks: int = 0
    failed: bool = False  # ended with an in-band error after a 200
    cancelled: bool = False  # the client went away before the end
    ended: bool = False  # the stream's terminal event was relayed
    gaps: list[float] = field(default_factory=list)

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_at is None else self.first_at - self.arrival

    @property
    def e2e_s(self) -> float | None:
        return None if self.end is None else self.end - self.arrival


def usage_counts(usage: Any) -> tuple[int, int] | None:
    """(prompt, completion) tokens of an OpenAI ``usage`` object (chat/completions or
    responses naming), None if it is not one."""
    if not isinstance(usage, dict):
        return None
    prompt = usage.get("prompt_tokens", usage.get("input_tokens"))
    output = usage.get("completion_tokens", usage.get("output_tokens"))
    if isinstance(prompt, int) and isinstance(output, int):
        return prompt, output
    return None


def body_usage(body: bytes) -> tuple[int, int] | None:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    found = usage_counts(data.get("usage"))
    if found is None and isinstance(data.get("response"), dict):  # responses API
        found = usage_counts(data["response"].get("usage"))
    return found


class StreamMeter:
    """Times a relayed SSE stream and reads its usage; with ``strip_usage`` it removes the
    usage-only event (``"choices": []``) that the ingress asked for on the client's behalf."""

    __slots__ = ("clock", "rec", "strip_usage")

    def __init__(
        self, rec: EdgeRecord, strip_usage: bool, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rec = rec
        self.strip_usage = strip_usage
        self.clock = clock

    def feed(self, chunk: bytes) -> bytes:
        rec = self.rec
        now = self.clock()
        if rec.first_at is None:
            rec.first_at = now
        elif rec.last_at is not None:
            rec.gaps.append(now - rec.last_at)
        rec.last_at = now
        rec.chunks += 1
        if not rec.ended and ends_stream(chunk):
            rec.ended = True  # a client that hangs up after this one did not cancel anything
        if _USAGE in chunk:  # JSON escapes quotes inside strings: only a real key matches
            chunk = self._usage(chunk)
        return chunk

    def _usage(self, chunk: bytes) -> bytes:
        kept: list[bytes] = []
        for event in chunk.split(_EVENT_END):
            if not event:
                continue
            if _USAGE in event and event.startswith(b"data: {"):
                try:
                    data = json.loads(event[6:])
                except ValueError:
                    data = None
                if isinstance(data, dict):
                    found = usage_counts(data.get("usage"))
                    if found is None and isinstance(data.get("response"), dict):
                        found = usage_counts(data["response"].get("usage"))
                    if found is not None:
                        self.rec.prompt_tokens, self.rec.output_tokens = found
                        if self.strip_usage and data.get("choices") == []:
                            continue
            kept.append(event + _EVENT_END)
        return b"".join(kept)


MetricFactory = Callable[[M.Metric], Any]


class EdgeMetrics:
    def __init__(
        self,
        model: str,
        ttft_slo_s: float,
        tpot_slo_s: float,
        factory: MetricFactory = ray_metric,
    ) -> None:
        self.model = model
        self.ttft_slo_s = ttft_slo_s
        self.tpot_slo_s = tpot_slo_s
        self.tags = {"model": model}
        self.ttft = factory(M.TTFT)
        self.tpot = factory(M.TPOT)
        self.itl = factory(M.ITL)
        self.e2e = factory(M.E2E)
        self.router_queue = factory(M.ROUTER_QUEUE)
        self.requests = factory(M.REQUESTS)
        self.prompt_tokens = factory(M.REQUEST_PROMPT_TOKENS)
        self.output_tokens = factory(M.REQUEST_OUTPUT_TOKENS)
        # every outcome's series exists from the start: a series that first appears with
        # a value N loses those N events to increase() and rate()
        for outcome in OUTCOMES:
            start_at_zero(self.requests, {**self.tags, "outcome": outcome})
            start_at_zero(self.output_tokens, {**self.tags, "outcome": outcome})
        start_at_zero(self.prompt_tokens, self.tags)

    def finish(self, rec: EdgeRecord, clock: Callable[[], float] = time.monotonic) -> str:
        """Record one finished request; returns its outcome. Never raises."""
        if rec.end is None:
            rec.end = rec.last_at if rec.streamed and rec.last_at is not None else clock()
        if rec.streamed and not rec.output_tokens:
            rec.output_tokens = rec.chunks  # no usage event: a chunk per token, at least
        outcome = classify(
            status=rec.status,
            ttft_s=rec.ttft_s if rec.streamed else None,
            e2e_s=rec.e2e_s,
            output_tokens=rec.output_tokens,
            ttft_slo_s=self.ttft_slo_s,
            tpot_slo_s=self.tpot_slo_s,
            failed=rec.failed,
            cancelled=rec.cancelled,
        )
        try:
            self._record(rec, outcome)
        except Exception:  # metrics never fail a request
            log.debug("edge metrics failed", exc_info=True)
        return outcome

    def _record(self, rec: EdgeRecord, outcome: str) -> None:
        tags = self.tags
        self.requests.inc(1, tags={**tags, "outcome": outcome})
        if rec.accepted_at is not None:
            self.router_queue.observe(max(0.0, rec.accepted_at - rec.arrival), tags=tags)
        if outcome in ("invalid", "rejected") or rec.status >= 400:
            return
        if rec.prompt_tokens:
            self.prompt_tokens.inc(rec.prompt_tokens, tags=tags)
        if rec.output_tokens:
            self.output_tokens.inc(rec.output_tokens, tags={**tags, "outcome": outcome})
        if outcome in ("error", "cancelled"):
            return
        e2e = rec.e2e_s
        if e2e is not None:
            self.e2e.observe(max(0.0, e2e), tags=tags)
        ttft = rec.ttft_s
        if rec.streamed and ttft is not None:
            self.ttft.observe(max(0.0, ttft), tags=tags)
            if e2e is not None and rec.output_tokens >= 2:
                self.tpot.observe(max(0.0, (e2e - ttft) / (rec.output_tokens - 1)), tags=tags)
            for gap in rec.gaps:
                self.itl.observe(gap, tags=tags)
