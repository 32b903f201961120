"""The values crossing the quota limiter's boundary (``cluster/quotas.py``): the limits it
reads from a key, the ticket an admitted request holds until it is settled, and the answer
to an admission."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class LimitsLike(Protocol):
    @property
    def requests_per_min(self) -> int | None: ...
    @property
    def tokens_per_min(self) -> int | None: ...
    @property
    def max_streams(self) -> int | None: ...


@dataclass(frozen=True, slots=True)
class Ticket:
    id: int
    key_id: str
    tokens: int  # charged to the tokens bucket at admission (0 when the key has no TPM)
    limited: bool = True  # the key has a limit: its use is shared with the peers
    slot: bool = False  # its concurrency slot was granted by the fleet's slot table


@dataclass(frozen=True, slots=True)
class Admission:
    ok: bool
    ticket: Ticket | None
    retry_after_s: float  # 0 when ok
    reason: str  # "requests" | "tokens" | "streams" | "tokens_exceed_limit" | ""
    message: str
    headers: dict[str, str]
