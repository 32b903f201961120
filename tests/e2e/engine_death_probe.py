"""Run by ``test_engine_death.py`` in a process of its own (vLLM sets process-wide
threading and environment): start the real vLLM engine, stream a request, SIGKILL the
engine core process, and print as JSON what the engine then says (``dead``, the request's
end, ``check_health``)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from typing import Any

import psutil

from cluster.app import engine_spec
from cluster.config import parse_config
from replicas.engine import GenerateRequest
from replicas.factory import build_engine
from replicas.model_prep import default_model_dir


def _engine_core() -> psutil.Process:
    for p in psutil.Process().children(recursive=True):
        if "EngineCore" in p.name() or "EngineCore" in " ".join(p.cmdline()):
            return p
    raise RuntimeError("no engine core process")


async def main() -> dict[str, Any]:
    cfg = parse_config({"engine": {"vllm": {"kv_cache_gib": 0.25, "max_num_seqs": 4}}})
    eng = build_engine(engine_spec(cfg, str(default_model_dir())))
    await eng.start()
    out: dict[str, Any] = {"alive": eng.dead()}
    try:
        t0 = time.monotonic()
        await asyncio.wait_for(eng.ping(), 30)  # the replica's idle probe: answered at once
        out["ping_s"] = round(time.monotonic() - t0, 3)
        req = GenerateRequest("probe", list(range(100, 140)), 400, ignore_eos=True)
        stream = eng.generate(req)
        await anext(stream)  # streaming
        os.kill(_engine_core().pid, signal.SIGKILL)
        t0 = time.monotonic()
        try:
            async with asyncio.timeout(60):
                async for _ in stream:
                    pass
            out["request"] = "ended"
        except Exception as err:
            out["request"] = f"raised {type(err).__name__}"
        while eng.dead() is None and time.monotonic() - t0 < 30:
            await asyncio.sleep(0.1)
        out["dead"] = eng.dead()
        out["seconds"] = round(time.monotonic() - t0, 2)
        try:
            await eng.check_health()
            out["health"] = "passed"
        except Exception as err:
            out["health"] = f"raised {type(err).__name__}"
    finally:
        await eng.shutdown()
    return out


if __name__ == "__main__":
    print("RESULT " + json.dumps(asyncio.run(main())), flush=True)
