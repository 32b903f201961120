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
import time
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


async def _healthy() -> str:
    return "healthy"


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


@pytest.mark.parametrize(
    ("fleet", "status", "code"),
    [
        ("healthy", 429, "fleet_at_capacity"),  # replicas serve, all busy
        (None, 429, "fleet_at_capacity"),  # the status actor did not answer: nothing known
        ("failing", 503, "no_healthy_replica"),
        ("empty", 503, "no_healthy_replica"),  # no replica reports at all
    ],
)
def test_a_request_no_replica_takes_in_time_is_429_or_503_by_the_fleets_health(
    fleet: str | None, status: int, code: str
) -> None:
    """Found by reading the path a lone replica's replacement takes: once its dead row aged
    out of the status actor, no replica reported at all and a waiting request got 429
    ``fleet_at_capacity`` (as if replicas were busy) while ``/health`` said 503."""

    async def health() -> str | None:
        return fleet

    handle = _Handle([])  # no replica ever accepts
    settings = RelaySettings(admission_timeout_s=0.05, cold_start_timeout_s=0.05)
    relay = Relay(handle, settings, CircuitBreaker(3), health)
    with pytest.raises(APIError) as err:
        asyncio.run(relay.start({}))
    assert (err.value.status, err.value.code) == (status, code)
    assert err.value.headers.get("retry-after") == "1"
    assert handle.calls[0].cancelled


class _LateHandle(_Handle):
    """Every call is accepted by replica ``r1`` after ``delay_s``, then answers its head."""

    def __init__(self, delay_s: float) -> None:
        super().__init__([])
        self.delay_s = delay_s

    def remote(self, payload: dict[str, Any]) -> Any:  # noqa: ARG002
        delay_s = self.delay_s

        class _Late(_Call):
            async def __anext__(self) -> Any:
                if self.items:
                    return await super().__anext__()
                await asyncio.sleep(delay_s)
                self.items.append(ResponseHead(200, "application/json"))
                return Accepted("r1")

        call = _Late([])
        self.calls.append(call)
        return call


def _timed_start(
    handle: _Handle, fleet: list[str | None], cold_start_s: float, ledger: Any = None
) -> Any:
    """``relay.start`` with a 0.2-s admission window; the fleet's health is read from
    ``fleet`` (one item per poll, the last one repeated). (accepted replica or APIError,
    seconds taken)."""

    async def health() -> str | None:
        return fleet.pop(0) if len(fleet) > 1 else fleet[0]

    settings = RelaySettings(admission_timeout_s=0.2, cold_start_timeout_s=cold_start_s)
    relay = Relay(handle, settings, CircuitBreaker(3), health, ledger)

    async def main() -> tuple[Any, float]:
        t0 = time.monotonic()
        try:
            return (await relay.start({})).replica_id, time.monotonic() - t0
        except APIError as err:
            return err, time.monotonic() - t0

    return asyncio.run(main())


@pytest.fixture
def fast_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    import cluster.relay

    monkeypatch.setattr(cluster.relay, "HEALTH_POLL_S", 0.02)


def test_a_request_waits_for_a_replica_to_start_while_none_reports(fast_polls: None) -> None:
    """Found by hand: a vLLM fleet scaled to zero took 22 s to start its first replica, and
    the request that started it got 429 ``fleet_at_capacity`` after the 10-s admission
    timeout (then Serve stopped the half-started replica). While no replica reports at all,
    the wait is a replica's start: the request is held up to ``cold_start_timeout_s``."""
    handle = _LateHandle(delay_s=0.6)  # three admission windows
    got, took = _timed_start(handle, ["empty"], cold_start_s=5.0)
    assert got == "r1"
    assert 0.55 < took < 2.0, took


def test_the_cold_start_wait_is_bounded_and_then_503(fast_polls: None) -> None:
    got, took = _timed_start(_Handle([]), ["empty"], cold_start_s=0.6)
    assert isinstance(got, APIError)
    assert (got.status, got.code) == (503, "no_healthy_replica")
    assert 0.55 < took < 1.5, took


def test_a_start_that_keeps_failing_is_not_waited_for(fast_polls: None) -> None:
    """A replacement was starting (no replica reports), then its start failed: the request
    is not held for the cold-start bound but gets 503 one admission window later, saying
    that no replica could start."""
    got, took = _timed_start(_Handle([]), ["empty"] * 10 + ["unstartable"], cold_start_s=5.0)
    assert isinstance(got, APIError)
    assert (got.status, got.code) == (503, "no_healthy_replica")
    assert "could start" in got.message
    assert 0.3 < took < 1.0, took  # ~0.2 s of "empty" polls, then one 0.2-s window


def test_a_busy_fleet_still_refuses_after_the_admission_window(fast_polls: None) -> None:
    got, took = _timed_start(_Handle([]), ["healthy"], cold_start_s=5.0)
    assert isinstance(got, APIError)
    assert (got.status, got.code) == (429, "fleet_at_capacity")
    assert took < 0.6, took


def test_a_replica_that_just_started_gets_a_whole_admission_window(fast_polls: None) -> None:
    """Once a replica reports, Serve's router may learn of it a little later: the request
    keeps a whole admission window from the last poll that saw no replica."""
    handle = _LateHandle(delay_s=0.45)
    got, took = _timed_start(handle, ["empty"] * 15 + ["healthy"], cold_start_s=5.0)
    assert got == "r1", (got, took)


def test_a_replica_seen_at_the_end_of_a_window_still_gets_a_whole_window() -> None:
    """Polls come once per window when the window is shorter than ``HEALTH_POLL_S``: at 0.2,
    0.4 (no replica) and 0.6 s (one is back). The request is given a window from 0.6 s, not
    refused there (found in the suite: the lone-replica component test, admission 0.5 s,
    got 429s for 1 run in ~10 when the replacement appeared just before a poll)."""
    handle = _LateHandle(delay_s=0.7)
    got, took = _timed_start(handle, ["empty", "empty", "healthy"], cold_start_s=5.0)
    assert got == "r1", (got, took)


def test_a_router_with_no_replica_holds_the_request_before_the_reports_go_stale(
    fast_polls: None,
) -> None:
    """Found by hand: SIGKILL of a lone vLLM replica; the request sent at once got 429 after
    10 s while the replacement started (the dead replica's last report was still fresh)."""
    from router.admission import AdmissionLedger

    ledger = AdmissionLedger()
    ledger.attach(lambda: (0, 0), lambda: 0)  # the router dropped the dead replica
    got, took = _timed_start(_LateHandle(delay_s=0.6), ["healthy"], 5.0, ledger)
    assert got == "r1"
    assert 0.55 < took < 2.0, took
    got, _ = _timed_start(_Handle([]), ["healthy"], 0.6, ledger)
    assert isinstance(got, APIError)
    assert got.status == 503
