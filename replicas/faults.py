"""Fault injection around any engine, for tests of failure paths (a replica that dies
mid-stream must leave no hung request and no leaked slot). Enabled per deployment with
``engine_spec["faults"] = {"fail_after_tokens": N}``; never on by default."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from contracts.stats import ReplicaStats
from replicas.engine import Delta, Engine, GenerateRequest


class InjectedFault(RuntimeError):
    pass


class FaultyEngine:
    def __init__(self, inner: Engine, fail_after_tokens: int) -> None:
        self.inner = inner
        self.fail_after_tokens = fail_after_tokens
        self.block_size = inner.block_size
        self.max_model_len = inner.max_model_len

    async def start(self) -> None:
        await self.inner.start()
        self.block_size = self.inner.block_size

    async def generate(self, request: GenerateRequest) -> AsyncIterator[Delta]:
        produced = 0
        stream = self.inner.generate(request)
        try:
            async for delta in stream:
                produced += len(delta.token_ids)
                if produced > self.fail_after_tokens:
                    raise InjectedFault(f"injected failure after {self.fail_after_tokens} tokens")
                yield delta
        finally:
            await stream.aclose()  # type: ignore[attr-defined]  # the inner engine aborts in its finally

    async def abort(self, request_id: str) -> None:
        await self.inner.abort(request_id)

    def stats(self) -> ReplicaStats:
        return self.inner.stats()

    async def check_health(self) -> None:
        await self.inner.check_health()

    def dead(self) -> str | None:
        return self.inner.dead()

    async def ping(self) -> None:
        await self.inner.ping()

    async def shutdown(self) -> None:
        await self.inner.shutdown()


def wrap(engine: Engine, faults: dict[str, Any] | None) -> Engine:
    if not faults:
        return engine
    return FaultyEngine(engine, int(faults["fail_after_tokens"]))
