"""A client that goes away cancels the ingress's call to the replica, wherever it waits.

``Relay.start`` cancels its replica call when its caller (the ingress handler) is cancelled,
as ``collect`` and ``stream`` already did when they end, whether or not Serve propagates
the cancellation itself. The engine side of the same path (vLLM aborting a non-streamed
request whose client left) is tested against the real engine in
``tests/e2e/test_vllm_serving.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from cluster.breaker import CircuitBreaker
from cluster.relay import Relay, RelaySettings
from contracts.http import Accepted, APIError, ReplicaFailed, ResponseHead


class _Call:
    """A streaming handle call that yields ``items`` (raises those that are exceptions) and
    then waits forever."""

    def __init__(self, items: list[Any]) -> None:
        self.items = list(items)
        self.cancelled = False

    def __aiter__(self) -> _Call:
        return self

    async def __anext__(self) -> Any:
        if self.items:
            item = self.items.pop(0)
            if isinstance(item, Exception):
                raise item
            return item
        await asyncio.Event().wait()  # the replica is still working (or the slot is busy)
        raise AssertionError("unreachable")

    def cancel(self) -> None:
        self.cancelled = True


class _Handle:
    def __init__(self, items: list[Any]) -> None:
        self.items = items
        self.calls: list[_Call] = []
        self.avoided: list[frozenset[str]] = []
        self.handle = self

    def options(self, **_: Any) -> _Handle:
        return self

    def remote(self, payload: dict[str, Any]) -> _Call:
        self.avoided.append(payload.get("avoid", frozenset()))
        call = _Call(self.items)
        self.calls.append(call)
        return call


async def _healthy() -> bool:
    return True


def _relay(handle: _Handle) -> Relay:
    return Relay(handle, RelaySettings(), CircuitBreaker(threshold=3), _healthy)


@pytest.mark.parametrize(
    ("items", "where"),
    [
        ([Accepted("r1")], "accepted, waiting for the head (a non-streamed answer)"),
        ([], "waiting for a replica slot"),
    ],
)
def test_a_cancelled_start_cancels_the_replica_call(items: list[Any], where: str) -> None:
    handle = _Handle(items)
    relay = _relay(handle)

    async def run() -> None:
        task = asyncio.create_task(relay.start({}))
        await asyncio.sleep(0.05)
        assert not task.done(), where
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run())
    assert [c.cancelled for c in handle.calls] == [True], where
    assert relay.waiting == 0


def test_a_finished_start_leaves_the_call_to_its_reader() -> None:
    """The control: an answered call is not cancelled by ``start`` (``collect`` or
    ``stream`` read it, and cancel it when they end)."""
    handle = _Handle([Accepted("r1"), ResponseHead(200, "application/json", "r1")])
    relay = _relay(handle)
    started = asyncio.run(relay.start({}))
    assert started.replica_id == "r1"
    assert started.head.status == 200
    assert [c.cancelled for c in handle.calls] == [False]


@pytest.mark.parametrize("when", ["at-first-receive", "client-already-gone"])
def test_a_stream_handed_to_starlette_always_runs_its_cleanup(when: str) -> None:
    """The ingress starts the replica call and holds a key's stream slot *before* it returns
    the ``StreamingResponse``; both are released in the body generator's ``finally``. That
    is only safe if the generator always starts, even when the client leaves between the
    handler's return and the first chunk. Starlette (over anyio) starts it before a
    cancellation reaches it; this pins that, so an upgrade that changes it fails here."""
    from starlette.responses import StreamingResponse

    ran: list[str] = []

    async def body() -> Any:
        try:
            ran.append("start")
            await asyncio.sleep(5)
            yield b"data: x\n\n"
        finally:
            ran.append("finally")

    async def main() -> None:
        response = StreamingResponse(body(), media_type="text/event-stream")

        async def receive() -> dict[str, Any]:
            if when == "at-first-receive":  # Serve cancels the handler's task right here
                task = asyncio.current_task()
                assert task is not None
                task.cancel()
                await asyncio.sleep(10)
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            pass

        with contextlib.suppress(asyncio.CancelledError):
            await response({"type": "http"}, receive, send)

    asyncio.run(main())
    assert ran == ["start", "finally"]


def test_a_request_every_replica_gives_up_gets_503_after_the_resends() -> None:
    """A replica that gives a request up (its engine stalled or died: ``ReplicaFailed``) has
    it resent; once ``migrate_attempts`` resends failed too, the client gets 503
    ``no_healthy_replica`` with Retry-After, not a 500 (found by hand: the request sent
    just after an engine core died got 500 ``engine_error``)."""
    handle = _Handle([ReplicaFailed("the engine core died")])
    relay = Relay(handle, RelaySettings(migrate_attempts=2), CircuitBreaker(threshold=3), _healthy)
    with pytest.raises(APIError) as err:
        asyncio.run(relay.start({}))
    assert (err.value.status, err.value.code) == (503, "no_healthy_replica")
    assert err.value.headers.get("retry-after") == "1"
    assert len(handle.calls) == 3
    assert relay.counters.retried == 2


def test_a_resend_avoids_the_replica_that_refused_the_request() -> None:
    """A replica that refuses a request before accepting it (its engine failed) names itself
    in ``ReplicaFailed``, as Ray re-raises it in the ingress; the resend avoids it. Found by
    hand: a stalled vLLM replica, idle once its streams had moved, drew the next request
    three times (503) while the other replica was free."""
    from ray.exceptions import RayTaskError

    try:
        raise ReplicaFailed("engine stalled", "r-dead")
    except ReplicaFailed as err:
        as_raised = RayTaskError("handle", "traceback", err).as_instanceof_cause()
    assert isinstance(as_raised, ReplicaFailed)
    handle = _Handle([as_raised])
    first = handle.remote

    def refuse_once(payload: dict[str, Any]) -> _Call:
        call = first(payload)
        handle.items = []  # the resend waits for a slot
        return call

    handle.remote = refuse_once  # type: ignore[method-assign]
    relay = _relay(handle)

    async def run() -> None:
        task = asyncio.create_task(relay.start({}))
        await asyncio.sleep(0.05)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(run())
    assert len(handle.calls) == 2
    assert "r-dead" not in handle.avoided[0]
    assert "r-dead" in handle.avoided[1]
