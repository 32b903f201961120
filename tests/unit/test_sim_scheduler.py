"""Continuous / static / dynamic batching of the simulated engine, step by step."""

from __future__ import annotations

import pytest

from contracts.hashing import block_hashes
from replicas.sim.kv_cache import BlockPool, KVCacheManager
from replicas.sim.request import SimRequest
from replicas.sim.scheduler import Scheduler, SchedulerConfig

BS = 4


def _sched(blocks: int = 64, **kw: object) -> Scheduler:
    cfg = SchedulerConfig(
        **{"max_num_batched_tokens": 8, "max_num_seqs": 4, "max_model_len": 512, **kw}
    )  # type: ignore[arg-type]
    return Scheduler(cfg, KVCacheManager(BlockPool(blocks, BS)))


def _req(rid: str, n: int, max_tokens: int = 3, base: int = 0, arrival: float = 0.0) -> SimRequest:
    tokens = [base + i for i in range(n)]
    return SimRequest(rid, n, block_hashes(tokens, BS), max_tokens, arrival=arrival)


def _step(s: Scheduler, now: float = 0.0) -> dict[str, int]:
    batch = s.schedule(now)
    if batch is None:
        return {}
    plan = {r.request_id: n for r, n in batch.items}
    s.complete(batch, now)
    return plan


def test_decodes_first_then_chunked_prefill_and_first_token_after_last_chunk() -> None:
    s = _sched()
    a = _req("a", 4, max_tokens=10)
    s.add(a)
    assert _step(s) == {"a": 4}
    assert a.num_output == 1
    b = _req("b", 20, base=100)
    s.add(b)
    assert list(_step(s)) == ["a", "b"]  # running decode scheduled before the new prompt
    plans = [_step(s) for _ in range(2)]
    assert plans == [{"a": 1, "b": 7}, {"a": 1, "b": 6}]  # 1 + 7 + 7... within budget 8
    assert b.num_output == 1
    assert b.first_token_time is not None
    assert b.num_computed == 20


def test_first_token_waits_for_last_chunk() -> None:
    s = _sched()
    r = _req("r", 20)
    s.add(r)
    outputs = []
    for _ in range(3):
        _step(s)
        outputs.append(r.num_output)
    assert outputs == [0, 0, 1]  # chunks of 8, 8, 4


def test_max_num_seqs_caps_running() -> None:
    s = _sched(max_num_seqs=2, max_num_batched_tokens=100)
    for i in range(4):
        s.add(_req(f"r{i}", 4, base=10 * i))
    assert sorted(_step(s)) == ["r0", "r1"]
    assert len(s.waiting) == 2


def test_without_chunked_prefill_long_prompt_waits_for_full_budget() -> None:
    s = _sched(enable_chunked_prefill=False)
    with pytest.raises(ValueError, match=r"chunked prefill is off"):
        s.add(_req("long", 12))  # 12 tokens could never fit a budget of 8 (vLLM rejects it)
    s2 = _sched(enable_chunked_prefill=False)
    s2.add(_req("a", 4, max_tokens=5))
    s2.add(_req("b", 6, base=50))
    assert _step(s2) == {"a": 4}  # b (6) does not fit the 4 tokens left
    assert _step(s2) == {"a": 1, "b": 6}


def test_preemption_recomputes_the_newest_request() -> None:
    s = _sched(blocks=4, max_num_batched_tokens=64)
    a, b = _req("a", 7, max_tokens=6), _req("b", 7, max_tokens=6, base=100)
    s.add(a)
    s.add(b)
    _step(s)  # both prefilled: 2 blocks each, pool full
    assert s.kv.pool.num_free == 0
    _step(s)  # both reach 8 tokens inside their blocks
    plan = _step(s)  # a needs a 3rd block: b is preempted
    assert plan == {"a": 1}
    assert b.num_preemptions == 1
    assert s.waiting[0] is b
    assert b.num_computed == 0
    assert b.blocks == []
    for _ in range(20):
        if not s.has_work():
            break
        _step(s)
    assert a.finish_reason == b.finish_reason == "length"
    assert a.num_output == b.num_output == 6
    assert s.pending_prefill == 0
    assert s.kv.pool.num_free == 4


def test_prefix_hit_skips_cached_tokens() -> None:
    s = _sched(max_num_batched_tokens=64)
    s.add(_req("a", 16, max_tokens=1))
    _step(s)
    b = _req("b", 18, max_tokens=1)  # same first 16 tokens
    s.add(b)
    assert _step(s) == {"b": 2}
    assert b.cached_tokens == 16
    assert s.pending_prefill == 0


def test_static_batching_waits_for_a_full_batch() -> None:
    s = _sched(batching="static", batch_size=3, max_num_batched_tokens=64)
    s.add(_req("a", 4, max_tokens=2))
    s.add(_req("b", 4, max_tokens=5, base=10))
    assert s.schedule(10.0) is None  # not full, no timeout in static mode
    s.add(_req("c", 4, max_tokens=2, base=20))
    assert sorted(_step(s)) == ["a", "b", "c"]
    s.add(_req("d", 4, base=30))
    while any(r.request_id == "b" for r in s.running):
        assert "d" not in _step(s)  # no admission until the whole batch finished
    s.flush()
    assert "d" in _step(s)


def test_dynamic_batching_admits_partial_batch_after_timeout() -> None:
    s = _sched(batching="dynamic", batch_size=4, batch_timeout_s=0.5, max_num_batched_tokens=64)
    s.add(_req("a", 4, arrival=1.0))
    assert s.next_wakeup() == 1.5
    assert s.schedule(1.2) is None
    assert _step(s, 1.5) == {"a": 4}


def test_abort_frees_blocks_and_pending_tokens() -> None:
    s = _sched()
    r = _req("r", 20)
    s.add(r)
    _step(s)
    s.abort(r)
    assert r.finish_reason == "abort"
    assert not s.has_work()
    assert s.pending_prefill == 0
    assert s.kv.pool.num_free == 64


def _check_invariants(s: Scheduler, live: list[SimRequest]) -> None:
    pool = s.kv.pool
    held = [b for r in live for b in r.blocks]
    refs = [0] * pool.num_blocks
    for b in held:
        refs[b] += 1
    assert refs == pool.ref
    in_use = sum(1 for n in refs if n)
    assert pool.num_free == pool.num_blocks - in_use
    assert all(pool.block_hash[b] == h for h, b in pool.cached.items())
    assert s.pending_prefill == sum(max(0, r.prompt_len - r.num_computed) for r in live)
    for r in s.running:
        assert len(r.blocks) * BS >= r.num_computed  # at most one partly filled block
        assert len(r.blocks) * BS - r.num_computed < BS + r.num_tokens - r.num_computed


@pytest.mark.parametrize("seed", range(6))
def test_random_workload_keeps_invariants_and_finishes(seed: int) -> None:
    import random

    rng = random.Random(seed)
    s = _sched(blocks=24, max_num_batched_tokens=16, max_num_seqs=5)
    reqs = []
    for i in range(30):
        prefix = [7] * rng.choice((0, 8, 16))  # some shared prefixes
        tokens = prefix + [100 * i + j for j in range(rng.randrange(1, 30))]
        req = SimRequest(f"r{i}", len(tokens), block_hashes(tokens, BS), rng.randrange(1, 12))
        reqs.append(req)
    pending, now, aborted = list(reqs), 0.0, set()
    for _ in range(2000):
        if pending and rng.random() < 0.3:
            s.add(pending.pop(0))
        if rng.random() < 0.02 and s.running:
            victim = rng.choice(s.running)
            s.abort(victim)
            aborted.add(victim.request_id)
        now += 0.01
        _step(s, now)
        live = list(s.running) + list(s.waiting)
        _check_invariants(s, live)
        if not pending and not s.has_work():
            break
    assert not s.has_work()
    assert not pending
    for r in reqs:
        if r.request_id not in aborted:
            assert r.finish_reason == "length"
            assert r.num_output == r.max_tokens
    assert s.kv.pool.num_free == 24
    if seed == 0:
        assert s.num_preemptions > 0
        assert s.kv.hit_tokens > 0
