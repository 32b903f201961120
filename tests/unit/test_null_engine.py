import asyncio
import itertools
import time

import pytest

from cluster.app import engine_spec
from cluster.config import parse_config
from replicas.engine import FINISH_ABORT, FINISH_LENGTH, GenerateRequest
from replicas.factory import build_engine
from replicas.null_engine import NullEngine


def _req(rid: str, max_tokens: int, prompt: int = 8) -> GenerateRequest:
    return GenerateRequest(rid, list(range(prompt)), max_tokens)


async def _collect(eng: NullEngine, req: GenerateRequest) -> list:
    return [d async for d in eng.generate(req)]


def test_one_token_per_step_at_the_period() -> None:
    async def run() -> list:
        eng = NullEngine(step_s=0.01)
        await eng.start()
        out = await _collect(eng, _req("a", 20))
        await eng.shutdown()
        return out

    deltas = asyncio.run(run())
    assert [len(d.token_ids) for d in deltas] == [1] * 20
    assert deltas[-1].finish_reason == FINISH_LENGTH
    assert deltas[-1].completion_tokens == 20
    assert all(d.finish_reason is None for d in deltas[:-1])
    times = [d.token_times[0] for d in deltas]
    gaps = sorted(b - a for a, b in itertools.pairwise(times))
    assert 0.005 < gaps[len(gaps) // 2] < 0.02  # median gap is the period, not drifting
    assert times[-1] - times[0] < 19 * 0.01 * 1.5


def test_batch_limit_and_prefill_delay() -> None:
    async def run() -> tuple[list[float], dict]:
        eng = NullEngine(step_s=0.01, prefill_s=0.05, max_num_seqs=2)
        await eng.start()
        t0 = time.time()
        tasks = [asyncio.create_task(_collect(eng, _req(f"r{i}", 5))) for i in range(4)]
        await asyncio.sleep(0.08)
        mid = eng.stats()
        outs = await asyncio.gather(*tasks)
        await eng.shutdown()
        firsts = [o[0].token_times[0] - t0 for o in outs]
        return firsts, {"running": mid.running, "waiting": mid.waiting, "steps": eng.stats().steps}

    firsts, mid = asyncio.run(run())
    assert min(firsts) >= 0.05  # the prefill delay
    assert mid["running"] == 2
    assert mid["waiting"] == 2
    assert sorted(firsts)[2] > sorted(firsts)[1] + 0.03  # the 3rd starts after a slot frees
    assert mid["steps"] >= 10


def test_abort_and_cancel_free_the_slot() -> None:
    async def run() -> tuple[str | None, float, float]:
        eng = NullEngine(step_s=0.005, max_num_seqs=1)
        await eng.start()
        gen = eng.generate(_req("a", 1000))
        first = await gen.__anext__()
        assert first.token_ids
        await eng.abort("a")
        reason = None
        async for d in gen:
            reason = d.finish_reason
        # a consumer that goes away (cancel) must free the slot too
        task = asyncio.create_task(_collect(eng, _req("b", 1000)))
        await asyncio.sleep(0.03)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        after = eng.stats()
        out = await _collect(eng, _req("c", 3))  # the single slot is free again
        await eng.shutdown()
        return reason, after.ongoing, float(len(out))

    reason, ongoing, n = asyncio.run(run())
    assert reason == FINISH_ABORT
    assert ongoing == 0
    assert n == 3


def test_config_builds_a_null_engine() -> None:
    cfg = parse_config({"engine": {"type": "null", "null": {"step_s": 0.002, "max_num_seqs": 8}}})
    spec = engine_spec(cfg, "/nonexistent")
    eng = build_engine(spec)
    assert isinstance(eng, NullEngine)
    assert eng.step_s == 0.002
    assert eng.max_num_seqs == 8
    assert eng.max_model_len == cfg.model.max_model_len


def test_rejects_bad_settings_and_long_requests() -> None:
    with pytest.raises(ValueError, match="step_s"):
        NullEngine(step_s=0)

    async def run() -> None:
        eng = NullEngine(max_model_len=64)
        await _collect(eng, _req("x", 60, prompt=8))

    with pytest.raises(ValueError, match="max_model_len"):
        asyncio.run(run())


def test_a_consumer_that_falls_behind_gets_merged_deltas() -> None:
    """vLLM's DELTA semantics: tokens produced while the consumer was busy arrive as one
    delta, nothing lost, finish on the last."""

    async def run() -> list:
        eng = NullEngine(step_s=0.002)
        await eng.start()
        out = []
        async for d in eng.generate(_req("slow", 60)):
            out.append(d)
            await asyncio.sleep(0.02)  # ~10 steps per read
        await eng.shutdown()
        return out

    deltas = asyncio.run(run())
    assert sum(len(d.token_ids) for d in deltas) == 60
    assert len(deltas) < 20
    assert max(len(d.token_ids) for d in deltas) > 3
    assert all(len(d.token_ids) == len(d.token_times) for d in deltas)
    assert all(d.text == " x" * len(d.token_ids) for d in deltas)
    assert deltas[-1].finish_reason == FINISH_LENGTH
    assert deltas[-1].completion_tokens == 60


def test_a_died_engine_says_why_and_fails_its_health_check() -> None:
    """``die`` (fault injection) ends the loop as an engine core that exits would: ``dead``
    says why (the replica fails its requests over on it) and the health check fails; a
    shut-down engine is not dead, and a loop that crashed is."""

    async def run() -> tuple[str | None, str | None, str | None, str | None]:
        eng = NullEngine(step_s=0.01)
        await eng.start()
        alive = eng.dead()
        eng.die()
        await asyncio.sleep(0.05)
        died = eng.dead()
        with pytest.raises(RuntimeError, match="engine core died"):
            await eng.check_health()
        await eng.shutdown()
        closed = eng.dead()
        crashed = NullEngine(step_s=0.01)

        async def boom() -> None:
            raise ValueError("boom")

        crashed._loop = boom  # type: ignore[method-assign]
        await crashed.start()
        await asyncio.sleep(0.01)
        return alive, died, closed, crashed.dead()

    alive, died, closed, crashed = asyncio.run(run())
    assert alive is None
    assert died is not None
    assert "engine core died" in died
    assert closed is None
    assert crashed is not None
    assert "boom" in crashed
