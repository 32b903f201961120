"""Workloads and the one asyncio driver used for both the real and the simulated engine.

- ``decode_grid`` / ``prefill_grid``: the fitting measurements. Each decode point has
  ``batch`` distinct random prompts of ``ctx = k * block + 1`` tokens. Primers (max_tokens
  1) compute and cache them; the measured runs then reuse all full blocks and compute one
  prompt token each, so decode steps run at the intended context over distinct KV (shared
  KV would sit in the CPU caches and under-price attention reads) without measuring a
  long mixed prefill. Prefill points are cold random prompts at batch 1, max_tokens 1.
- ``heldout``: Poisson arrivals, uniform prompt lengths, capped exponential output lengths,
  a share of requests opening with one of a few fixed system prefixes.
- ``drive``: sends each request at its offset, records the client receive time of every
  delta. Both engines go through this code, so TTFT/ITL mean the same thing for both:
  TTFT = first delta received - send; ITL = gap between consecutive deltas of a request
  divided by the tokens the later one carries, once per token (one delta per engine
  step; a coalesced delta spreads its gap over its tokens).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from replicas.engine import Engine, GenerateRequest

TOKEN_RANGE = (1000, 40000)


@dataclass(frozen=True, slots=True)
class CalRequest:
    request_id: str
    prompt: tuple[int, ...]
    max_tokens: int
    offset_s: float = 0.0  # send time from the start of the run
    group: int = -1  # shared-prefix group, -1 = none


@dataclass(slots=True)
class Trace:
    request_id: str
    prompt_len: int
    send: float
    times: list[float] = field(default_factory=list)  # receive time per delta
    ntok: list[int] = field(default_factory=list)  # tokens per delta
    cached_tokens: int = 0

    @property
    def ttft(self) -> float:
        return self.times[0] - self.send

    def itls(self) -> list[float]:
        out: list[float] = []
        for a, b, n in zip(self.times, self.times[1:], self.ntok[1:], strict=False):
            out.extend([(b - a) / n] * n)
        return out


def _tokens(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(*TOKEN_RANGE) for _ in range(n)]


def decode_grid(
    batch: int, ctx: int, max_tokens: int, rng: random.Random, tag: str, repeats: int = 1
) -> tuple[list[CalRequest], list[list[CalRequest]]]:
    """Primers (send first, together: they cache every prompt's full blocks), then
    ``repeats`` batches of the same prompts, each computing one prompt token per sequence."""
    prompts = [tuple(_tokens(rng, ctx)) for _ in range(batch)]
    primers = [CalRequest(f"{tag}-p{i}", p, 1) for i, p in enumerate(prompts)]
    runs = [
        [CalRequest(f"{tag}-r{r}-{i}", p, max_tokens) for i, p in enumerate(prompts)]
        for r in range(repeats)
    ]
    return primers, runs


def prefill_grid(length: int, rng: random.Random, tag: str) -> list[CalRequest]:
    return [CalRequest(tag, tuple(_tokens(rng, length)), 1)]


@dataclass(frozen=True, slots=True)
class HeldoutSpec:
    n: int = 120
    rate: float = 1.75  # Poisson arrivals per second
    input_lo: int = 64
    input_hi: int = 768
    output_mean: float = 64.0
    output_cap: int = 256
    share: float = 0.4  # fraction of requests opening with a system prefix
    prefixes: int = 4
    prefix_len: int = 512
    seed: int = 7


def heldout(spec: HeldoutSpec) -> list[CalRequest]:
    rng = random.Random(spec.seed)
    prefixes = [_tokens(rng, spec.prefix_len) for _ in range(spec.prefixes)]
    out: list[CalRequest] = []
    t = 0.0
    for i in range(spec.n):
        t += rng.expovariate(spec.rate)
        body = _tokens(rng, rng.randint(spec.input_lo, spec.input_hi))
        group = rng.randrange(spec.prefixes) if rng.random() < spec.share else -1
        prompt = (prefixes[group] if group >= 0 else []) + body
        n_out = min(spec.output_cap, max(1, round(rng.expovariate(1.0 / spec.output_mean))))
        out.append(CalRequest(f"h{i}", tuple(prompt), n_out, t, group))
    return out


async def _one(engine: Engine, req: CalRequest, start: float, clock: Callable[[], float]) -> Trace:
    await asyncio.sleep(max(0.0, start + req.offset_s - clock()))
    trace = Trace(req.request_id, len(req.prompt), clock())
    gen = GenerateRequest(
        req.request_id, list(req.prompt), req.max_tokens, ignore_eos=True, arrival_time=trace.send
    )
    async for delta in engine.generate(gen):
        if delta.token_ids:
            trace.times.append(clock())
            trace.ntok.append(len(delta.token_ids))
        trace.cached_tokens = delta.cached_tokens
    return trace


async def drive(
    engine: Engine,
    requests: list[CalRequest],
    timeout_s: float,
    clock: Callable[[], float] = time.time,
) -> list[Trace]:
    """Run ``requests`` against ``engine`` at their offsets; bounded by ``timeout_s``."""
    start = clock()
    tasks = [asyncio.create_task(_one(engine, r, start, clock)) for r in requests]
    try:
        return list(await asyncio.wait_for(asyncio.gather(*tasks), timeout_s))
    finally:
        for t in tasks:
            t.cancel()
