"""A read-only client of a Prometheus server's HTTP API for the operator commands: instant and
range queries, and the scrape interval it runs with. Every failure (unreachable, a rejected
query, a non-Prometheus answer) is a ``PromError`` whose message is fit for one line.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

import httpx


class PromError(Exception):
    """A failure to report as one line."""


DEFAULT_SCRAPE_S = 15.0
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class PromAPI(Protocol):
    """What ``report.py`` reads (``PrometheusServer`` from ``prometheus.py`` fits too)."""

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]: ...

    def query_range(
        self, expr: str, start: float, end: float, step: float
    ) -> list[dict[str, Any]]: ...


class PromHTTP:
    def __init__(self, url: str, timeout_s: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def _get(self, path: str, params: dict[str, Any]) -> Any:
        try:
            resp = httpx.get(f"{self.url}{path}", params=params, timeout=self.timeout_s)
        except httpx.HTTPError as err:
            raise PromError(f"Prometheus at {self.url} is unreachable: {err!r}") from None
        try:
            body = resp.json()
        except ValueError:
            raise PromError(f"{self.url}{path} answered {resp.status_code}, not JSON") from None
        if resp.status_code != 200 or body.get("status") != "success":
            raise PromError(f"Prometheus query failed ({resp.status_code}): {body.get('error')}")
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"query": expr}
        if at is not None:
            params["time"] = at
        return list(self._get("/api/v1/query", params)["result"])

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        params = {"query": expr, "start": start, "end": end, "step": step}
        return list(self._get("/api/v1/query_range", params)["result"])

    def scrape_interval(self) -> float:
        try:
            text = self._get("/api/v1/status/config", {})["yaml"]
        except (PromError, KeyError, TypeError):
            return DEFAULT_SCRAPE_S
        found = re.search(r"^\s*scrape_interval:\s*(\S+)", text, re.MULTILINE)
        return parse_duration(found.group(1)) if found else DEFAULT_SCRAPE_S


def parse_duration(text: str) -> float:
    """``90s``, ``30m``, ``1h30m``, ``2d``, ``500ms``, or plain seconds."""
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        parts = re.findall(r"(\d+(?:\.\d+)?)(ms|[smhd])", text)
        if not parts or "".join(n + u for n, u in parts) != text:
            raise ValueError(f"not a duration: {text!r} (e.g. 90s, 30m, 2h)") from None
        value = sum(float(n) * (0.001 if u == "ms" else _UNITS[u]) for n, u in parts)
    if value <= 0:
        raise ValueError(f"duration must be positive: {text!r}")
    return value
