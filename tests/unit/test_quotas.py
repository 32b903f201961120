from __future__ import annotations

from dataclasses import dataclass

import pytest

from cluster.quotas import IDLE_FORGET_S, SWEEP_EVERY_S, Admission, QuotaLimiter
from cluster.ratelimit_headers import format_duration, retry_after_header


@dataclass(frozen=True, slots=True)
class Limits:  # shaped like the keys module's KeyLimits
    requests_per_min: int | None = None
    tokens_per_min: int | None = None
    max_streams: int | None = None


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def limiter(share: float = 1.0) -> tuple[QuotaLimiter, Clock]:
    clock = Clock()
    return QuotaLimiter(clock=clock, share=share), clock


def ok(a: Admission) -> Admission:
    assert a.ok, a.message
    assert a.ticket is not None
    assert a.retry_after_s == 0.0
    assert a.reason == ""
    assert "retry-after" not in a.headers
    return a


def test_burst_of_exactly_rpm_then_refused_with_retry_after() -> None:
    q, _ = limiter()
    rpm = Limits(requests_per_min=60)
    for _ in range(60):
        ok(q.admit("k", rpm, 10))
    a = q.admit("k", rpm, 10)
    assert not a.ok
    assert a.ticket is None
    assert a.reason == "requests"
    assert a.retry_after_s == pytest.approx(60 / 60)
    assert a.headers["retry-after"] == "1"
    assert a.message == (
        "Rate limit reached for requests per min: limit 60, used 60. Retry after 1s."
    )

    q2, _ = limiter()
    for _ in range(20):
        ok(q2.admit("k", Limits(requests_per_min=20), 1))
    a = q2.admit("k", Limits(requests_per_min=20), 1)
    assert a.retry_after_s == pytest.approx(3.0)
    assert a.headers["retry-after"] == "3"


def test_refill_is_continuous_and_capped() -> None:
    q, clock = limiter()
    rpm = Limits(requests_per_min=60)
    for _ in range(60):
        ok(q.admit("k", rpm, 0))
    clock.advance(0.5)
    assert not q.admit("k", rpm, 0).ok
    clock.advance(0.5)
    ok(q.admit("k", rpm, 0))
    assert not q.admit("k", rpm, 0).ok
    clock.advance(3600)  # an hour refills one minute's allowance, no more
    for _ in range(60):
        ok(q.admit("k", rpm, 0))
    assert not q.admit("k", rpm, 0).ok


def test_tokens_charged_at_admission_and_refunded_on_settle() -> None:
    q, clock = limiter()
    tpm = Limits(tokens_per_min=1000)
    a = ok(q.admit("k", tpm, 600))  # prompt + max_tokens
    assert a.ticket is not None
    assert a.ticket.tokens == 600
    assert a.headers["x-ratelimit-remaining-tokens"] == "400"
    q.settle(a.ticket, used_tokens=100)
    b = ok(q.admit("k", tpm, 0))
    assert b.headers["x-ratelimit-remaining-tokens"] == "900"
    # a refund never fills the bucket above its capacity
    c = ok(q.admit("k", tpm, 500))
    clock.advance(60)
    assert c.ticket is not None
    q.settle(c.ticket, used_tokens=0)
    d = ok(q.admit("k", tpm, 0))
    assert d.headers["x-ratelimit-remaining-tokens"] == "1000"


def test_token_refusal_waits_until_enough_tokens_refill() -> None:
    q, clock = limiter()
    tpm = Limits(tokens_per_min=600)  # 10 tokens/s
    ok(q.admit("k", tpm, 500))
    a = q.admit("k", tpm, 300)
    assert not a.ok
    assert a.reason == "tokens"
    assert a.retry_after_s == pytest.approx(20.0)
    assert a.headers["retry-after"] == "20"
    assert "limit 600, used 500, requested 300" in a.message
    clock.advance(19.9)
    assert not q.admit("k", tpm, 300).ok
    clock.advance(0.1)
    ok(q.admit("k", tpm, 300))


def test_request_larger_than_tokens_per_min_is_refused_distinctly() -> None:
    q, _ = limiter()
    tpm = Limits(requests_per_min=10, tokens_per_min=1000)
    a = q.admit("k", tpm, 1001)
    assert not a.ok
    assert a.reason == "tokens_exceed_limit"
    assert "request alone exceeds tokens_per_min" in a.message
    assert "limit 1000" in a.message
    assert "requested 1001" in a.message
    assert "retry-after" not in a.headers  # no wait makes it fit
    assert a.headers["x-ratelimit-remaining-tokens"] == "1000"
    assert a.headers["x-ratelimit-remaining-requests"] == "10"
    ok(q.admit("k", tpm, 1000))  # exactly the capacity fits


def test_max_streams_then_released_on_settle_idempotently() -> None:
    q, _ = limiter()
    lim = Limits(max_streams=2)
    a = ok(q.admit("k", lim, 1))
    ok(q.admit("k", lim, 1))
    refused = q.admit("k", lim, 1)
    assert not refused.ok
    assert refused.reason == "streams"
    assert refused.retry_after_s == 1.0
    assert refused.headers == {"retry-after": "1"}
    assert "concurrent requests: limit 2, in flight 2" in refused.message
    assert a.ticket is not None
    q.settle(a.ticket, 1)
    q.settle(a.ticket, 1)  # a second settle frees nothing more
    assert q.in_flight("k") == 1
    ok(q.admit("k", lim, 1))
    assert not q.admit("k", lim, 1).ok


def test_another_key_is_unaffected() -> None:
    q, _ = limiter()
    lim = Limits(requests_per_min=2, tokens_per_min=100, max_streams=1)
    ok(q.admit("a", lim, 100))
    assert not q.admit("a", lim, 1).ok
    b = ok(q.admit("b", lim, 100))
    assert b.headers["x-ratelimit-remaining-requests"] == "1"


def test_share_scales_capacity_but_headers_report_the_configured_limit() -> None:
    q, _ = limiter(share=0.5)
    lim = Limits(requests_per_min=60, tokens_per_min=1000, max_streams=4)
    tickets = [ok(q.admit("k", lim, 10)) for _ in range(2)]
    assert not q.admit("k", lim, 10).ok  # streams: 4 × 0.5
    for t in tickets:
        assert t.ticket is not None
        q.settle(t.ticket, 10)
    for _ in range(28):
        a = ok(q.admit("k", lim, 0))
        assert a.ticket is not None
        q.settle(a.ticket, 0)
    refused = q.admit("k", lim, 0)
    assert refused.reason == "requests"
    assert refused.headers["x-ratelimit-limit-requests"] == "60"
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    assert refused.retry_after_s == pytest.approx(2.0)  # 30 per minute here
    assert "limit 60 (30 per ingress), used 30" in refused.message
    too_big = q.admit("other", lim, 501)  # fits the key's 1000, not this ingress's 500
    assert too_big.reason == "tokens_exceed_limit"


def test_share_keeps_at_least_one_per_bucket() -> None:
    q, _ = limiter(share=0.25)
    streams = Limits(max_streams=1)
    ok(q.admit("s", streams, 0))
    assert q.admit("s", streams, 0).reason == "streams"
    rpm = Limits(requests_per_min=2)
    ok(q.admit("r", rpm, 0))
    refused = q.admit("r", rpm, 0)
    assert refused.reason == "requests"
    assert refused.retry_after_s == pytest.approx(60.0)  # a bucket of 1 refilled per minute


def test_share_must_be_a_fraction() -> None:
    for bad in (0.0, -1.0, 1.5):
        with pytest.raises(ValueError, match="share"):
            QuotaLimiter(share=bad)


def test_headers_present_and_well_formatted() -> None:
    q, _ = limiter()
    a = ok(q.admit("k", Limits(requests_per_min=60, tokens_per_min=6000), 150))
    assert a.headers == {
        "x-ratelimit-limit-requests": "60",
        "x-ratelimit-remaining-requests": "59",
        "x-ratelimit-reset-requests": "1s",
        "x-ratelimit-limit-tokens": "6000",
        "x-ratelimit-remaining-tokens": "5850",
        "x-ratelimit-reset-tokens": "1.5s",
    }
    b = ok(q.admit("k", Limits(tokens_per_min=6000), 4500))
    assert set(b.headers) == {
        "x-ratelimit-limit-tokens",
        "x-ratelimit-remaining-tokens",
        "x-ratelimit-reset-tokens",
    }
    assert b.headers["x-ratelimit-reset-tokens"] == "46.5s"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.0, "0s"),
        (-3.0, "0s"),
        (0.0004, "1ms"),
        (0.12, "120ms"),
        (0.999, "999ms"),
        (1.0, "1s"),
        (1.5, "1.5s"),
        (6.25, "6.25s"),
        (59.9999, "1m0s"),
        (90.5, "1m30.5s"),
        (360.0, "6m0s"),
        (3723.0, "1h2m3s"),
        (3600.0, "1h0m0s"),
    ],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize(("seconds", "text"), [(0.0, "1"), (0.2, "1"), (1.0, "1"), (1.01, "2")])
def test_retry_after_header_is_ceil_seconds_at_least_one(seconds: float, text: str) -> None:
    assert retry_after_header(seconds) == text


def test_refusal_consumes_nothing() -> None:
    q, _ = limiter()
    lim = Limits(requests_per_min=10, tokens_per_min=100, max_streams=1)
    a = ok(q.admit("k", lim, 90))
    for tokens in (20, 5):  # tokens refusal, then streams refusal
        refused = q.admit("k", lim, tokens)
        assert not refused.ok
        assert refused.headers["x-ratelimit-remaining-requests"] == "9"
        assert refused.headers["x-ratelimit-remaining-tokens"] == "10"
    assert q.in_flight("k") == 1
    assert a.ticket is not None
    q.settle(a.ticket, 90)
    b = ok(q.admit("k", lim, 10))
    assert b.headers["x-ratelimit-remaining-requests"] == "8"
    assert b.headers["x-ratelimit-remaining-tokens"] == "0"


def test_longest_wait_wins_when_several_limits_refuse() -> None:
    q, _ = limiter()
    lim = Limits(requests_per_min=1, tokens_per_min=60, max_streams=1)
    ok(q.admit("k", lim, 60))
    refused = q.admit("k", lim, 60)
    assert refused.reason == "requests"  # 60 s for a request and for 60 tokens; 1 s streams
    assert refused.retry_after_s == pytest.approx(60.0)
    assert refused.headers["retry-after"] == "60"


def test_idle_keys_are_forgotten_so_memory_stays_bounded() -> None:
    q, clock = limiter()
    lim = Limits(requests_per_min=60, tokens_per_min=10_000, max_streams=4)
    held = ok(q.admit("streaming", lim, 100))
    for i in range(10_000):
        a = ok(q.admit(f"key-{i}", lim, 100))
        assert a.ticket is not None
        q.settle(a.ticket, 50)
    assert len(q) == 10_001
    clock.advance(IDLE_FORGET_S + SWEEP_EVERY_S)
    ok(q.admit("fresh", lim, 1))
    assert len(q) == 2  # the key with a request in flight, and the new one
    assert q.in_flight("streaming") == 1
    assert held.ticket is not None
    q.settle(held.ticket, 100)
    clock.advance(IDLE_FORGET_S + SWEEP_EVERY_S)
    ok(q.admit("fresh", lim, 1))
    assert len(q) == 1


def test_recently_used_keys_are_kept() -> None:
    q, clock = limiter()
    lim = Limits(requests_per_min=60)
    ok(q.admit("k", lim, 0))
    clock.advance(IDLE_FORGET_S - 1)
    ok(q.admit("other", lim, 0))  # sweeps: "k" has been idle for less than the limit
    assert len(q) == 2


def test_no_limits_is_always_ok_without_headers() -> None:
    q, _ = limiter()
    unlimited = Limits()
    for _ in range(1000):
        a = ok(q.admit("k", unlimited, 1_000_000))
        assert a.headers == {}


def test_changed_limits_apply_to_the_existing_bucket() -> None:
    q, _ = limiter()
    for _ in range(10):
        ok(q.admit("k", Limits(requests_per_min=100), 0))
    a = ok(q.admit("k", Limits(requests_per_min=20), 0))
    assert a.headers["x-ratelimit-remaining-requests"] == "19"
    assert a.headers["x-ratelimit-limit-requests"] == "20"


@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("limit", [1, 2, 3, 5, 7, 8])
def test_stream_limits_split_into_whole_parts_that_add_up(n: int, limit: int) -> None:
    caps = [QuotaLimiter(share=1.0 / n, rank=r).stream_cap(limit) for r in range(n)]
    if limit >= n:  # 3 over 2: 2 + 1 (it was 1 + 1: a key could never reach its limit)
        assert sum(caps) == limit
        assert max(caps) - min(caps) <= 1
    else:  # fewer than the ingresses: one each, up to n fleet-wide (the stated tolerance)
        assert caps == [1] * n
    # a rank beyond N (a replacement before Serve compacts ranks) still gets a part
    assert QuotaLimiter(share=1.0 / n, rank=n + 1).stream_cap(limit) in caps


def test_an_ingress_admits_its_part_of_the_streams() -> None:
    lim = Limits(max_streams=3)
    first, second = QuotaLimiter(share=0.5, rank=0), QuotaLimiter(share=0.5, rank=1)
    assert [first.admit("k", lim, 0).ok for _ in range(3)] == [True, True, False]
    assert [second.admit("k", lim, 0).ok for _ in range(2)] == [True, False]
    refused = second.admit("k", lim, 0)
    assert "limit 3 (1 per ingress)" in refused.message
