"""LoadTracker: prefill-rate estimation, queue-delay prediction, TTFT P95, busy fraction,
prefill load and decode rate."""

from __future__ import annotations

import random
import statistics

import pytest

from replicas.load_stats import LoadTracker

Job = tuple[float, float, int, int, float]  # (arrival, start, prompt, cached, first token)


def _fifo_jobs(
    rates: list[float], n: int, load: float, noise: float, overhead_s: float, seed: int
) -> list[Job]:
    """Single-server FIFO prefill queue; request i is served at ``rates[i * len(rates) // n]``."""
    rng = random.Random(seed)
    t = free_at = 0.0
    jobs: list[Job] = []
    for i in range(n):
        rate = rates[i * len(rates) // n]
        t += rng.expovariate(load * rate / 700.0)  # mean uncached prompt ~700 tokens
        prompt = rng.randint(100, 1600)
        cached = rng.choice([0, 0, 0, prompt // 2])
        service = (prompt - cached) / rate * (rng.lognormvariate(0.0, noise) if noise else 1.0)
        start = max(t, free_at)
        free_at = start + service + overhead_s
        jobs.append((t, start, prompt, cached, free_at))
    return jobs


def _fifo_run(
    rates: list[float],
    *,
    n: int = 400,
    load: float = 0.85,
    noise: float = 0.0,
    overhead_s: float = 0.0,
    seed: int = 1,
    prior: float = 300.0,
) -> list[tuple[float, float]]:
    """Replay a FIFO run through a tracker; (estimated, measured) TTFT per request. The
    estimate is read right after the request is added, with the exact uncached work ahead
    of it (its own included), as an engine that knows its queue would report it."""
    jobs = _fifo_jobs(rates, n, load, noise, overhead_s, seed)
    tracker = LoadTracker(prior_prefill_tokens_per_s=prior, clock=lambda: 0.0)
    events = sorted(
        [(j[0], 1, i) for i, j in enumerate(jobs)] + [(j[4], 0, i) for i, j in enumerate(jobs)]
    )
    out: list[tuple[float, float]] = []
    for now, kind, i in events:
        arrival, _, prompt, cached, first = jobs[i]
        if kind == 0:
            tracker.on_first_token(str(i), cached_tokens=cached, now=now)
            tracker.on_finished(str(i), now=now)
            continue
        tracker.on_request_added(str(i), prompt, now=now)
        waiting = 0.0
        for _a, s, p, c, f in jobs[: i + 1]:
            if f > now:  # not yet at its first token: its remaining work is ahead
                waiting += (p - c) * (1.0 - min(1.0, max(0.0, now - s) / max(f - s, 1e-12)))
        out.append((tracker.snapshot(round(waiting), now=now).queue_delay_s, first - arrival))
    return out


def test_queue_delay_estimate_matches_measured_ttft_in_fifo_queue() -> None:
    pairs = _fifo_run([800.0])[40:]  # after the wrong prior (300 tok/s) has faded
    errors = [abs(e - m) / m for e, m in pairs]
    assert max(errors) < 0.05
    assert statistics.mean(m for _, m in pairs) > 1.0  # a real queue formed


def test_estimate_tracks_noisy_service_within_tolerance() -> None:
    pairs = [(e, m) for e, m in _fifo_run([800.0], noise=0.25, overhead_s=0.01)[40:] if m > 0.5]
    rel = [abs(e - m) / m for e, m in pairs]
    assert statistics.median(rel) < 0.15
    assert statistics.mean(rel) < 0.25


def test_estimate_adapts_when_prefill_rate_halves() -> None:
    pairs = _fifo_run([1000.0, 500.0], n=600, load=0.8)
    tail = pairs[450:]  # well after the switch at request 300
    assert statistics.median(abs(e - m) / m for e, m in tail) < 0.1


def test_cold_replica_uses_prior() -> None:
    tracker = LoadTracker(prior_prefill_tokens_per_s=2000.0, clock=lambda: 0.0)
    snap = tracker.snapshot(4000, now=0.0)
    assert snap.prefill_tokens_per_s == pytest.approx(2000.0)
    assert snap.queue_delay_s == pytest.approx(2.0)
    assert snap.ttft_p95_s == 0.0
    assert snap.decode_tokens_per_s == 0.0
    assert snap.prefill_load_tokens_per_s == 0.0
    with pytest.raises(ValueError, match=r"must be positive"):
        LoadTracker(prior_prefill_tokens_per_s=0.0)


def test_batched_first_tokens_count_all_tokens() -> None:
    tracker = LoadTracker(prior_prefill_tokens_per_s=100.0, prior_weight_s=1e-6, clock=lambda: 0.0)
    for k in range(4):
        tracker.on_request_added(f"r{k}", 300, now=0.0)
    for k in range(4):  # one engine step prefilled all four prompts (100 cached each)
        tracker.on_first_token(f"r{k}", cached_tokens=100, now=0.4)
    assert tracker.prefill_tokens_per_s == pytest.approx(800 / 0.4, rel=1e-3)


def test_idle_gap_is_not_counted_as_prefill_time() -> None:
    tracker = LoadTracker(prior_prefill_tokens_per_s=100.0, prior_weight_s=1e-6, clock=lambda: 0.0)
    tracker.on_request_added("a", 500, now=0.0)
    tracker.on_first_token("a", now=0.5)
    tracker.on_request_added("b", 500, now=10.0)  # long idle gap before b
    tracker.on_first_token("b", now=10.5)
    assert tracker.prefill_tokens_per_s == pytest.approx(1000.0, rel=1e-3)


def test_ttft_p95_uses_sliding_window() -> None:
    tracker = LoadTracker(ttft_window_s=60.0, ttft_max_samples=256, clock=lambda: 0.0)
    for k in range(100):
        tracker.on_request_added(str(k), 10, now=float(k))
        tracker.on_first_token(str(k), now=k + (5.0 if k < 50 else 0.1 + k / 1000))
    assert tracker.ttft_p95(now=100.0) == pytest.approx(5.0)  # slow ones still in window
    p95 = tracker.ttft_p95(now=130.0)  # window [70, 130]: only fast samples (k >= 70) remain
    assert 0.1 < p95 < 0.2
    assert tracker.ttft_p95(now=1000.0) == 0.0


def test_ttft_tail_counts_first_tokens_over_each_edge() -> None:
    tracker = LoadTracker(clock=lambda: 0.0)
    assert tracker.tail() == (0, (0, 0, 0, 0, 0, 0))
    # TTFTs 0.1, 0.3, 2.0 (at the 2-s edge: not over it), 2.5, 9 s; edges 0.25 ... 8 s
    for k, ttft in enumerate([0.1, 0.3, 2.0, 2.5, 9.0]):
        tracker.on_request_added(str(k), 10, now=10.0 * k)
        tracker.on_first_token(str(k), now=10.0 * k + ttft)
        tracker.on_first_token(str(k), now=10.0 * k + 50.0)  # a second call: not a first token
    tracker.on_request_added("aborted", 10, now=60.0)
    tracker.on_finished("aborted", now=99.0)  # no first token: not counted, however late
    assert tracker.tail() == (5, (4, 3, 3, 2, 1, 1))


def test_busy_fraction_from_occupancy_and_from_steps() -> None:
    tracker = LoadTracker(busy_window_s=10.0, clock=lambda: 0.0)
    tracker.on_request_added("a", 10, now=0.0)
    tracker.on_finished("a", now=3.0)
    tracker.on_request_added("b", 10, now=8.0)
    assert tracker.busy_fraction(now=10.0) == pytest.approx(0.5)  # [0,3] + [8,10]
    assert tracker.ongoing == 1
    assert tracker.busy_fraction(now=14.0) == pytest.approx(0.6)  # [4..] none + [8,14]

    stepped = LoadTracker(busy_window_s=10.0, clock=lambda: 0.0)
    stepped.on_request_added("a", 10, now=0.0)  # occupancy is ignored once steps arrive
    for k in range(10):
        stepped.on_step(0.25, now=k + 1.0)
    assert stepped.busy_fraction(now=10.0) == pytest.approx(0.25)


def test_prefill_load_and_snapshot() -> None:
    now = [0.0]
    tracker = LoadTracker(busy_window_s=10.0, clock=lambda: now[0])
    for k in range(5):
        tracker.on_request_added(str(k), 1000)
        now[0] += 1.0
        tracker.on_first_token(str(k), cached_tokens=200)
    assert tracker.prefill_load() == pytest.approx(5 * 800 / 10.0)
    snap = tracker.snapshot(1600)
    assert snap.queue_delay_s == pytest.approx(1600 / tracker.prefill_tokens_per_s)
    assert snap.prefill_load_tokens_per_s == pytest.approx(400.0)
    assert snap.ongoing == 5
    assert snap.busy_fraction == pytest.approx(0.5)


def test_decode_rate_is_per_busy_second_of_the_window() -> None:
    tracker = LoadTracker(busy_window_s=10.0, clock=lambda: 0.0)
    tracker.on_request_added("a", 10, now=0.0)
    for k in range(1, 21):  # 20 tokens of 2 each over two busy seconds
        tracker.on_output_tokens(2, now=k * 0.1)
    tracker.on_finished("a", now=2.0)
    assert tracker.decode_rate(now=5.0) == pytest.approx(40 / 2.0)
    assert tracker.snapshot(0, now=5.0).decode_tokens_per_s == pytest.approx(20.0)
    assert tracker.decode_rate(now=13.0) == 0.0  # the window holds no busy time any more


def test_unknown_and_aborted_requests_are_harmless() -> None:
    tracker = LoadTracker(clock=lambda: 0.0)
    tracker.on_first_token("ghost", now=1.0)
    tracker.on_finished("ghost", now=1.0)
    tracker.on_request_added("x", 100, now=1.0)
    tracker.on_finished("x", now=2.0)  # aborted before its first token
    tracker.on_first_token("x", now=3.0)
    assert tracker.ongoing == 0
    assert tracker.ttft_p95(now=3.0) == 0.0
