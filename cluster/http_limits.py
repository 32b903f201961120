"""Limits on a request's HTTP envelope, checked by the ingress before anything else reads it:
the headers' total size (431), the body's size (413), its encoding (415) and how long it
may take to arrive (408). Each answer is OpenAI-shaped (``contracts/http.py``)."""

from __future__ import annotations

import asyncio

from starlette.requests import Request

from contracts.http import APIError


def check_headers(request: Request, cap: int) -> None:
    """431 when the headers' names and values together exceed ``cap`` bytes."""
    size = sum(len(k) + len(v) for k, v in request.headers.raw)
    if size > cap:
        raise APIError(
            431,
            f"request headers are larger than {cap} bytes",
            code="request_header_fields_too_large",
        )


async def read_body(request: Request, cap: int, timeout_s: float = 60.0) -> bytes:
    """The body, or 413 as soon as it is known to be larger than ``cap`` (by its
    Content-Length before reading anything, else while reading); 415 for a compressed body
    (found by hand: a gzip body got 400 "not valid JSON: 'utf-8' codec can't decode"); 408
    when it has not all arrived within ``timeout_s`` (found by hand: a client that declared
    more than it sent held its request, and the ingress slot, until it hung up)."""
    coding = request.headers.get("content-encoding", "").strip().lower()
    if coding not in ("", "identity"):
        raise APIError(
            415,
            f"Content-Encoding {coding!r} is not supported: send the JSON body uncompressed",
            code="unsupported_content_encoding",
        )
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > cap:
        raise too_large(cap)
    buf = bytearray()
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                buf += chunk
                if len(buf) > cap:
                    raise too_large(cap)
    except TimeoutError:
        raise too_slow(timeout_s, len(buf)) from None
    return bytes(buf)


def too_large(cap: int) -> APIError:
    return APIError(413, f"request body is larger than {cap} bytes", code="request_too_large")


def too_slow(timeout_s: float, received: int) -> APIError:
    return APIError(
        408,
        f"the request body did not arrive within {timeout_s:g} s ({received} bytes received)",
        code="request_timeout",
        headers={"connection": "close"},
    )
