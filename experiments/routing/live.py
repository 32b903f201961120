"""Router comparison, live: a local Ray Serve llmfleet app per policy and workload, over HTTP.

Per policy, under the shared live-run lock, and per workload (fresh Ray each time, so no
KV cache, prefix tree or actor leaks from one policy or workload into the next — the two
hot-prefix workloads use the same system prompts, and the second used to start warm):
start Ray, deploy, wait for /health, send a few warm-up requests with unrelated prompts,
run the workload (same specs and arrival offsets for every policy), sampling each replica's
reported engine stats once a second for the in-flight imbalance (streamed responses carry
no replica header). Rows describe requests scheduled after the workload's ``warmup_s`` (the
cold start of every prefix); the whole run's P95 TTFT is kept beside them. Ray is shut down
in ``finally``. Bounded: arrivals stop at ``duration_s``, every request at the client
timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bench.types import RequestRecord, RequestSpec
from experiments.routing.metrics import (
    PolicyRow,
    after_warmup,
    idle_arrival_bound,
    imbalance_from_samples,
    median_run,
    policy_row,
)

LOCK_PATH = "/tmp/llmfleet-live.lock"


@dataclass(frozen=True, slots=True)
class LiveWorkload:
    name: str
    dataset: str
    description: str
    rate: float | None = None  # Poisson req/s; None = the trace's own timestamps
    num_requests: int | None = None
    length_scale: float = 1.0
    time_scale: float = 1.0
    shared_prefix: bool = True
    duration_s: float = 240.0
    warmup_s: float = 10.0  # requests scheduled earlier are the cold start (not in the rows)


@dataclass(frozen=True, slots=True)
class LiveSetup:
    mode: str
    config: dict[str, Any]  # cluster.config dict without routing.policy
    workloads: tuple[LiveWorkload, ...]
    policies: tuple[str, ...]
    slo: str
    use_tokenizer: bool = False
    warmup: int = 4
    request_timeout_s: float = 120.0
    ready_timeout_s: float = 300.0
    seed: int = 0
    # More than one: every (policy, workload) runs once per seed on a fresh fleet and the
    # row is the median run (``median_run``); the same seeds for every policy (paired).
    seeds: tuple[int, ...] = ()
    router_params: dict[str, Any] = field(default_factory=dict)

    @property
    def num_replicas(self) -> int:
        return int(self.config["replicas"]["num_replicas"])

    def fleet_config(self, policy: str) -> dict[str, Any]:
        params = self.router_params if not policy.startswith("ray-") else {}
        return {**self.config, "routing": {"policy": policy, "params": dict(params)}}


@contextlib.contextmanager
def live_lock(path: str | None) -> Iterator[None]:
    if path is None:
        yield
        return
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def build_specs(
    w: LiveWorkload, tokenizer: Any, seed: int
) -> tuple[list[RequestSpec], list[float]]:
    from bench.arrivals import poisson
    from bench.datasets import build_requests

    specs = build_requests(
        w.dataset, tokenizer=tokenizer, num_requests=w.num_requests, seed=seed,
        length_scale=w.length_scale, time_scale=w.time_scale,
    )  # fmt: skip
    if w.rate is None:
        return specs, [float(s.arrival_s or 0.0) for s in specs]
    return specs, poisson(len(specs), w.rate, random.Random(seed))


Sample = tuple[float, dict[str, float]]  # (seconds since the load started, replica -> in flight)


async def _sample_stats(samples: list[Sample], since: float, stop: asyncio.Event) -> None:
    from replicas.status_registry import fleet_snapshot

    while not stop.is_set():
        snap = await fleet_snapshot(timeout_s=2.0)
        inflight = {
            str(r["replica"]): float(r.get("running", 0)) + float(r.get("waiting", 0))
            for r in snap
            if float(r.get("reported_at", 0.0)) >= since
        }
        samples.append((time.time() - since, inflight))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 1.0)


async def _drive(
    specs: list[RequestSpec],
    offsets: list[float],
    target: Any,
    duration_s: float,
    warmup: list[RequestSpec],
) -> tuple[Any, list[Sample]]:
    from bench import client
    from bench.runner import LoadPlan, run_load

    def payload(spec: RequestSpec) -> dict[str, Any]:
        return client.build_payload(target, spec, list(spec.prompt_token_ids))

    if warmup:
        await run_load(warmup, LoadPlan(concurrency=len(warmup), duration_s=60.0), target, payload)
    samples: list[Sample] = []
    stop = asyncio.Event()
    sampler = asyncio.create_task(_sample_stats(samples, time.time(), stop))
    try:
        outcome = await run_load(
            specs, LoadPlan(offsets=offsets, duration_s=duration_s), target, payload
        )
    finally:
        stop.set()
        await sampler
    return outcome, samples


def _warmup_specs(n: int, tokenizer: Any, seed: int) -> list[RequestSpec]:
    from bench.datasets import build_requests

    return build_requests(f"random:input=64,output=4,n={n}", tokenizer=tokenizer, seed=seed + 99991)


def run_workload(
    setup: LiveSetup, policy: str, w: LiveWorkload, url: str, tokenizer: Any, seed: int
) -> tuple[dict[str, Any], list[RequestRecord], PolicyRow]:
    from bench import client
    from bench.report import summarize
    from bench.slo import parse_slo

    specs, offsets = build_specs(w, tokenizer, seed)
    model = setup.config.get("model", {}).get("served_name", "smollm2-135m-instruct")
    target = client.Target(url, model, timeout_s=setup.request_timeout_s)
    warm = _warmup_specs(setup.warmup, tokenizer, setup.seed) if setup.warmup else []
    outcome, samples = asyncio.run(_drive(specs, offsets, target, w.duration_s, warm))
    config = {"mode": setup.mode, "policy": policy, "workload": w.name, "dataset": w.dataset,
              "rate": w.rate, "length_scale": w.length_scale, "time_scale": w.time_scale,
              "num_requests": len(specs), "replicas": setup.num_replicas,
              "warmup_s": w.warmup_s, "seed": seed,
              "fleet": setup.fleet_config(policy)}  # fmt: skip
    slo = parse_slo(setup.slo)
    steady = after_warmup(outcome.records, w.warmup_s)
    duration = max(outcome.duration_s - w.warmup_s, 1e-9)
    result = summarize(steady, duration_s=duration, config=config, slo=slo)
    whole = summarize(outcome.records, duration_s=outcome.duration_s, config=config, slo=slo)
    result["whole_run"] = {k: whole[k] for k in ("ttft_ms", "e2e_ms", "goodput", "requests")}
    result["inflight_samples"] = samples
    row = policy_row(policy, result, steady, setup.num_replicas)
    steady_samples = [inflight for t, inflight in samples if t >= w.warmup_s]
    row = row.with_imbalance(imbalance_from_samples(steady_samples, setup.num_replicas))
    row = replace(
        row,
        ttft_p95_whole_ms=whole["ttft_ms"]["p95"],
        ttft_min_ms=min((r.ttft_s * 1000 for r in steady if r.ttft_s is not None), default=None),
        idle_arrival_max=idle_arrival_bound(steady, setup.num_replicas),
    )
    return result, outcome.records, row


def run_policy(
    setup: LiveSetup, policy: str, tokenizer: Any, out_dir: Path, lock: str | None, log: Any
) -> dict[str, PolicyRow]:
    from bench.report import write_results
    from cluster.config import parse_config
    from cluster.runtime import deploy, start_ray, stop, wait_ready

    cfg = parse_config(setup.fleet_config(policy))
    seeds = setup.seeds or (setup.seed,)
    rows: dict[str, PolicyRow] = {}
    with live_lock(lock):
        for w in setup.workloads:
            runs = []
            for seed in seeds:
                t0 = time.monotonic()
                start_ray(cfg)
                try:
                    url = deploy(cfg)
                    wait_ready(url, timeout_s=setup.ready_timeout_s)
                    log(f"[{setup.mode}] {policy} {w.name} seed {seed}: ready in "
                        f"{time.monotonic() - t0:.0f} s")  # fmt: skip
                    result, records, row = run_workload(setup, policy, w, url, tokenizer, seed)
                finally:
                    stop()
                name = f"{policy}.json" if len(seeds) == 1 else f"{policy}-seed{seed}.json"
                write_results(result, records, out_dir / f"{setup.mode}-{w.name}" / name)
                runs.append(row)
                log(f"[{setup.mode}] {policy} {w.name} seed {seed}: p95 TTFT "
                    f"{row.ttft_p95_ms or 0:.0f} ms (whole run {row.ttft_p95_whole_ms or 0:.0f}), "
                    f"hit {row.hit_rate:.3f}, ok {row.completed}/{row.completed + row.failed}")  # fmt: skip
            rows[w.name] = median_run(runs, seeds)
    return rows


def run_live(
    setup: LiveSetup, out_dir: Path, lock: str | None = LOCK_PATH, log: Any = print
) -> dict[str, list[PolicyRow]]:
    """Every policy on every workload; returns rows per workload name."""
    tokenizer = None
    if setup.use_tokenizer:
        from transformers import AutoTokenizer

        from replicas.model_prep import default_model_dir

        tokenizer = AutoTokenizer.from_pretrained(str(default_model_dir()))
    out: dict[str, list[PolicyRow]] = {w.name: [] for w in setup.workloads}
    for policy in setup.policies:
        for name, row in run_policy(setup, policy, tokenizer, out_dir, lock, log).items():
            out[name].append(row)
    return out
