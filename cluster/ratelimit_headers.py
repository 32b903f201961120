"""OpenAI's rate-limit headers and the durations in them (``cluster/quotas.py`` fills them).

- ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}`` for each limit a key has: the
  limit as configured, what remains in the bucket (floored, never negative), and the time
  until the bucket is full again as a Go ``time.Duration`` string (``1m30.5s``), as
  OpenAI sends it.
- ``retry-after`` (whole seconds, at least 1) on a refusal.
"""

from __future__ import annotations

import math

from cluster.token_bucket import EPS, TokenBucket


def format_duration(seconds: float) -> str:
    """Go ``time.Duration`` style at millisecond resolution, rounded up: 120ms, 1s, 1m30.5s."""
    ms = max(0, math.ceil(seconds * 1000.0 - 1e-6))
    if ms == 0:
        return "0s"
    if ms < 1000:
        return f"{ms}ms"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs, frac = divmod(rest, 1000)
    text = f"{secs}.{frac:03d}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{hours}h{minutes}m{text}"
    return f"{minutes}m{text}" if minutes else text


def retry_after_header(seconds: float) -> str:
    return str(max(1, math.ceil(seconds - 1e-6)))


def fmt_number(value: float) -> str:
    return f"{value:g}"


def ratelimit_headers(
    requests: tuple[int | None, TokenBucket | None], tokens: tuple[int | None, TokenBucket | None]
) -> dict[str, str]:
    """The headers for a key's (limit, bucket) of requests and of tokens per minute."""
    headers: dict[str, str] = {}
    for name, (limit, bucket) in (("requests", requests), ("tokens", tokens)):
        if limit is None or bucket is None:
            continue
        headers[f"x-ratelimit-limit-{name}"] = str(limit)
        headers[f"x-ratelimit-remaining-{name}"] = str(max(0, math.floor(bucket.level + EPS)))
        headers[f"x-ratelimit-reset-{name}"] = format_duration(bucket.reset_s())
    return headers
