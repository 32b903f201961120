"""The ingress's door: API keys (``keys.py``) and per-key quotas (``quotas.py``).

- With keys configured, every route but ``/health`` needs ``Authorization: Bearer <key>``:
  none or an unknown key is 401 ``invalid_api_key``; a user key on an admin route
  (``/fleet/status``) is 403 ``insufficient_permissions``. With no keys the API is open —
  ``check_exposure`` then allows only a loopback host unless the config says otherwise.
- A request that passes is charged to its key's quotas before it is routed (its prompt
  tokens + the output tokens it may produce); a refusal is 429 with ``Retry-After`` and
  OpenAI's ``x-ratelimit-*`` headers, which successful answers carry too. The ticket is
  settled when the request ends (unused output tokens refunded).
- With N ingress replicas each enforces the whole limit against the fleet's use, shared by
  ``quota_sync.py``, or 1/N of it while the sharing is down (``quotas.py`` states the
  tolerance); a concurrency slot is granted by the status actor, so ``max_streams`` holds
  exactly fleet-wide.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cluster.edge_metrics import body_usage
from cluster.keys import ApiKey, KeyStore, bearer_token
from cluster.quota_types import Ticket
from cluster.quotas import QuotaLimiter
from contracts.http import APIError

if TYPE_CHECKING:
    from cluster.quota_sync import QuotaSync

ADMIN_ROUTES = frozenset({"/fleet/status"})


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, keys_configured: bool, allow_unauthenticated: bool) -> None:
    """Secure by default: an open API (no keys) binds only to loopback."""
    if keys_configured or allow_unauthenticated or is_loopback(host):
        return
    raise ValueError(
        f"server.host {host} is not loopback and no API keys are configured: anyone who "
        "reaches the port could use the fleet. Add keys (`llmfleet keys add NAME`, then "
        "server.api_keys_file) or set server.allow_unauthenticated: true."
    )


@dataclass(frozen=True, slots=True)
class Pass:
    key: ApiKey | None
    ticket: Ticket | None = None
    headers: dict[str, str] | None = None


class Guard:
    def __init__(self, keys_file: str | None, share: float = 1.0, rank: int = 0) -> None:
        self.keys = KeyStore.from_config(keys_file)
        self.on = self.keys.configured()
        self.quotas = QuotaLimiter(share=share, rank=rank)

    def authenticate(self, authorization: str | None, path: str) -> ApiKey | None:
        if not self.on:
            return None
        key = self.keys.lookup(bearer_token(authorization))
        if key is None:
            raise APIError(
                401,
                "Incorrect API key provided. Send it as 'Authorization: Bearer <key>'.",
                type="invalid_request_error",
                code="invalid_api_key",
            )
        if path in ADMIN_ROUTES and not key.admin:
            raise APIError(
                403,
                f"{path} needs an admin key",
                type="invalid_request_error",
                code="insufficient_permissions",
            )
        return key

    async def admit(self, key: ApiKey | None, tokens: int, sync: QuotaSync | None = None) -> Pass:
        if key is None:
            return Pass(None)
        slot = None
        limits = key.limits
        if (
            sync is not None
            and self.quotas.wants_slot(limits)
            and not self.quotas.buckets_refuse(key.key_id, limits, tokens)
        ):
            assert limits.max_streams is not None
            slot = await sync.acquire(key.key_id, limits.max_streams)
        adm = self.quotas.admit(key.key_id, key.limits, tokens, slot)  # no await since acquire
        if not adm.ok:
            raise APIError(
                429,
                adm.message,
                type="tokens" if adm.reason.startswith("tokens") else "requests",
                code="rate_limit_exceeded",
                headers=adm.headers,
            )
        return Pass(key, adm.ticket, adm.headers)

    async def settle_seen(
        self, grant: Pass, used_tokens: int | None, sync: QuotaSync | None
    ) -> None:
        """``settle``, then, when it changed what the fleet shares (a slot the fleet's table
        granted, or a tokens refund), wait until it has reached the status actor, before
        the caller lets the client see its answer end: a client that sends its next request
        at once is not refused for this one (found by hand: 1 of 400 requests sent one
        after another on a 1-stream key got a 429 while the fleet was busy). The table is
        then exact; the peers' buckets hear of the refund by their long poll, which the
        batch's arrival answers at once."""
        self.settle(grant, used_tokens)
        ticket = grant.ticket
        if sync is not None and ticket is not None and (ticket.slot or ticket.tokens > 0):
            await sync.flush()

    def settle(self, grant: Pass, used_tokens: int | None) -> None:
        if grant.ticket is not None:
            used = grant.ticket.tokens if used_tokens is None else used_tokens
            self.quotas.settle(grant.ticket, used)


def usage_tokens(body: bytes) -> int | None:
    """prompt + completion tokens of a JSON answer's ``usage`` (None when absent)."""
    found = body_usage(body)
    return None if found is None else sum(found)
