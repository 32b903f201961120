"""Circuit breaker: consecutive failures open it, time half-opens it, success closes it."""

from __future__ import annotations

from cluster.breaker import CircuitBreaker


def test_opens_after_threshold_and_half_opens() -> None:
    now = [0.0]
    b = CircuitBreaker(threshold=3, open_s=30.0, clock=lambda: now[0])
    b.failure("r1")
    b.failure("r1")
    assert b.avoid() == frozenset()
    b.failure("r1")
    assert b.avoid() == {"r1"}
    now[0] = 31.0
    assert b.avoid() == frozenset()  # half-open: may be tried again
    b.failure("r1")  # and one more failure reopens it
    assert b.avoid() == {"r1"}


def test_success_resets_and_memory_is_bounded() -> None:
    b = CircuitBreaker(threshold=2, max_replicas=10)
    b.failure("r1")
    b.success("r1")
    b.failure("r1")
    assert b.avoid() == frozenset()
    for i in range(100):
        b.failure(f"x{i}")
    assert len(b._states) <= 10
