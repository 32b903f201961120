"""Values shared by the load generator, its datasets, its reports and the virtual-time
simulator (which writes the same result JSON). Times are seconds inside, milliseconds in
the result JSON.
"""

from __future__ import annotations

from dataclasses import dataclass, field

RESULT_SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request to send. ``arrival_s`` is the offset from the start of the run when the
    dataset carries its own timestamps (trace replay); otherwise the arrival process sets it."""

    index: int
    prompt_token_ids: tuple[int, ...]
    output_tokens: int
    arrival_s: float | None = None
    session_id: str | None = None
    group: int | None = None  # shared-prefix group / conversation id


@dataclass(slots=True)
class RequestRecord:
    """What happened to one request, measured at the client (or by the simulator)."""

    index: int
    intended_send_s: float  # offset from run start when it should have been sent
    send_s: float  # offset from run start when it was sent
    prompt_tokens: int = 0  # from the server's usage
    output_tokens: int = 0  # from the server's usage
    ttft_s: float | None = None
    e2e_s: float | None = None
    token_times_s: list[float] = field(default_factory=list)  # offsets of each streamed chunk
    error: str | None = None  # None = success; else a short kind ("http_503", "timeout", ...)
    replica: str | None = None
    cached_tokens: int = 0
