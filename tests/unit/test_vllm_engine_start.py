"""``VLLMEngine.start`` leaves the replica's event loop free while vLLM builds its engine:
the build blocks until the engine core has loaded the model, and a replica whose loop it
held could not be stopped by Serve (its destructor waited), so `llmfleet down` during a
start took up to a minute (found by a failed CI run)."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import pytest

from replicas import vllm_engine
from replicas.vllm_engine import VLLMEngine
from replicas.vllm_settings import VLLMSettings


async def test_the_loop_runs_while_vllm_builds_the_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm.v1.engine.async_llm import AsyncLLM

    built: dict[str, Any] = {}

    def slow_build(engine_args: Any, stat_loggers: Any) -> Any:
        built["args"] = engine_args
        time.sleep(1.0)  # what vLLM does: wait for the engine core's handshake
        cache = SimpleNamespace(block_size=16, num_gpu_blocks=64)
        return SimpleNamespace(vllm_config=SimpleNamespace(cache_config=cache))

    monkeypatch.setattr(AsyncLLM, "from_engine_args", staticmethod(slow_build))
    monkeypatch.setattr(vllm_engine, "set_cpu_env", lambda _settings: None)
    monkeypatch.setattr(vllm_engine, "on_gpu", lambda: False)
    engine = VLLMEngine(VLLMSettings(model_path="/models/m"))
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.05)
            ticks += 1

    task = asyncio.create_task(ticker())
    try:
        await engine.start()
    finally:
        task.cancel()
    assert ticks >= 10, ticks  # ~20 in the second the build took; 0 with it on the loop
    assert built["args"].model == "/models/m"
    assert engine.block_size == 16
