"""SimEngine in real-time mode (speed-up factor keeps these tests short)."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from contracts.hashing import block_hashes
from contracts.stats import ttft_tail
from replicas.engine import Engine, GenerateRequest
from replicas.sim.engine import SimEngine

PROMPT = list(range(1, 70))


def _engine(**kw: object) -> SimEngine:
    args: dict[str, object] = {"speed": 100.0, "block_size": 16, "seed": 7}
    args.update(kw)
    return SimEngine(**args)  # type: ignore[arg-type]


async def _collect(engine: SimEngine, rid: str, prompt: list[int], max_tokens: int) -> list:
    req = GenerateRequest(rid, prompt, max_tokens)
    return [d async for d in engine.generate(req)]


async def test_streams_max_tokens_then_length_and_is_deterministic() -> None:
    e1, e2 = _engine(), _engine()
    assert isinstance(e1, Engine)
    d1 = await _collect(e1, "r", PROMPT, 5)
    d2 = await _collect(e2, "r", PROMPT, 5)
    ids1 = [t for d in d1 for t in d.token_ids]
    assert len(ids1) == 5
    assert ids1 == [t for d in d2 for t in d.token_ids]
    assert d1[-1].finish_reason == "length"
    assert d1[-1].completion_tokens == 5
    assert d1[-1].prompt_tokens == len(PROMPT)
    assert d1[0].text == f" tok{ids1[0]}"
    times = [t for d in d1 for t in d.token_times]
    assert times == sorted(times)
    await e1.shutdown()
    await e2.shutdown()


async def test_prefix_cache_hits_and_kv_events_match_router_hashes() -> None:
    events: list[tuple[str, tuple[int, ...]]] = []
    e = _engine(
        on_kv_event=lambda kind, hs: events.append((kind, hs)),
        detokenize=lambda ids: "x" * len(ids),
    )
    await _collect(e, "a", PROMPT, 2)
    second = await _collect(e, "b", PROMPT, 2)
    expected = block_hashes(PROMPT, 16)
    stored = [h for kind, hs in events if kind == "stored" for h in hs]
    assert stored == list(expected)
    assert second[-1].cached_tokens == 64
    assert second[0].text == "x"
    s = e.stats()
    assert (s.prefix_hits, s.prefix_queries) == (64, 2 * len(PROMPT))
    assert s.first_tokens == 2  # both requests, each TTFT far under the first tail edge
    assert ttft_tail(s) == (0.0,) * 6
    assert s.kv_usage == 0.0
    assert s.running == 0
    assert s.waiting == 0
    await e.shutdown()


async def test_abort_mid_stream_frees_blocks() -> None:
    e = _engine(speed=20.0)
    gen = e.generate(GenerateRequest("r", PROMPT, 1000))
    first = await gen.__anext__()
    assert first.token_ids
    assert e.stats().kv_usage > 0
    await e.abort("r")
    rest = [d async for d in gen]
    assert rest[-1].finish_reason == "abort"
    assert e.stats().kv_usage == 0.0
    assert e.stats().running == 0
    await e.shutdown()


async def test_consumer_cancellation_aborts() -> None:
    e = _engine(speed=20.0)

    async def consume() -> None:
        async for _ in e.generate(GenerateRequest("r", PROMPT, 1000)):
            pass

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.05)
    assert e.stats().running == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert e.stats().running == 0
    assert e.stats().kv_usage == 0.0
    await e.shutdown()


async def test_step_times_follow_cost_model() -> None:
    e = _engine(speed=10.0)
    deltas = await _collect(e, "r", PROMPT, 30)
    times = [t for d in deltas for t in d.token_times]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    step = e.core.cost.decode_step(1, len(PROMPT)) / 10.0  # ~2.7 ms
    mean = sum(gaps) / len(gaps)
    assert 0.9 * step <= mean < step + 0.005  # sleep overshoot is caught up, not accumulated
    assert min(gaps) > 0
    await e.shutdown()


async def test_many_engines_concurrently_and_prompt_too_long() -> None:
    engines = [_engine(seed=i) for i in range(24)]
    results = await asyncio.gather(
        *(_collect(e, f"r{i}", PROMPT, 3) for i, e in enumerate(engines))
    )
    assert all(r[-1].finish_reason == "length" for r in results)
    with pytest.raises(ValueError, match=r"exceeds max_model_len"):
        await _collect(engines[0], "big", list(range(9000)), 1)
    for e in engines:
        await e.check_health()
        await e.shutdown()
    with pytest.raises(RuntimeError):
        await engines[0].check_health()


async def test_stats_report_rates_ttft_and_queue() -> None:
    e = _engine(speed=10.0, max_num_seqs=1)  # slow enough for any CPU profile
    first = asyncio.create_task(_collect(e, "a", PROMPT, 40))
    await asyncio.sleep(0.01)
    second = asyncio.create_task(_collect(e, "b", list(range(500, 900)), 2))
    await asyncio.sleep(0.01)
    s = e.stats()
    assert s.running == 1
    assert s.waiting == 1
    assert s.waiting_prefill_tokens == 400
    assert s.queue_delay_s > 0
    await asyncio.gather(first, second)
    s = e.stats()
    assert s.ttft_p95_s > 0
    assert s.prefill_tokens_per_s > 0
    assert s.decode_tokens_per_s > 0
    assert s.block_size == 16
    assert s.kv_capacity_tokens > 0
    await e.shutdown()


async def test_generated_blocks_are_cached_for_the_next_turn() -> None:
    events: list[tuple[str, tuple[int, ...]]] = []
    e = _engine(on_kv_event=lambda kind, hs: events.append((kind, hs)))
    first = await _collect(e, "t1", PROMPT, 40)  # 69 + 40 tokens -> 6 full blocks
    answer = [t for d in first for t in d.token_ids]
    convo = PROMPT + answer
    stored = [h for kind, hs in events if kind == "stored" for h in hs]
    assert stored == list(block_hashes(convo, 16)[:6])
    second = await _collect(e, "t2", [*convo, 5, 6, 7], 1)
    assert second[-1].cached_tokens == 6 * 16  # the answer's full blocks were reused
    await e.shutdown()
