"""Live autoscaling runs: Ray Serve + simulated replicas in real time, one policy at a time.

``run_live`` deploys the app with the policy (``deploy``/``delete`` are injected so the
component test can use its session fixtures), polls Serve every ``poll_s`` for the replica
count (running + starting) and the status actor for each replica's queue delay, drives
the bench runner over the specs, keeps polling ``tail_s`` after the last request (to see
the scale-down), then deletes the app. Everything is bounded: the load by its specs and
``LoadPlan.duration_s``, each request by the client timeout, the tail by ``tail_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from bench.types import RequestSpec
from experiments.autoscaling.metrics import Sample
from experiments.autoscaling.sim import PolicyRun

COUNTED_STATES = ("RUNNING", "STARTING", "UPDATING", "RECOVERING")


@dataclass(frozen=True, slots=True)
class LiveSetup:
    port: int = 8210
    metrics_export_port: int = 18210
    hardware: str = "cpu"
    model_profile: str = "smollm2-135m"
    speed: float = 1.0
    kv_capacity_tokens: int = 46_000
    min_replicas: int = 1
    max_replicas: int = 6
    ttft_slo_s: float = 2.0
    metrics_interval_s: float = 0.5
    look_back_period_s: float = 2.0
    num_cpus: float = 0.1
    routing: str = "prefix"


def fleet_config(
    policy: str, setup: LiveSetup, params: dict[str, Any], extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The config dict for ``cluster.config.parse_config``."""
    return {
        "engine": {"type": "sim", "sim": {
            "hardware": setup.hardware, "model_profile": setup.model_profile,
            "speed": setup.speed, "block_size": 16, "kv_capacity_tokens": setup.kv_capacity_tokens,
        }},
        "replicas": {"num_replicas": setup.min_replicas, "num_cpus": setup.num_cpus},
        "routing": {"policy": setup.routing},
        "autoscaling": {
            "enabled": True, "policy": policy, "min_replicas": setup.min_replicas,
            "max_replicas": setup.max_replicas, "ttft_slo_s": setup.ttft_slo_s,
            "metrics_interval_s": setup.metrics_interval_s,
            "look_back_period_s": setup.look_back_period_s, "params": dict(params),
            **(extra or {}),
        },
        "server": {"port": setup.port, "metrics_export_port": setup.metrics_export_port,
                   "ray_num_cpus": 16},
    }  # fmt: skip


def replica_count() -> int:
    from ray import serve

    from cluster.app import APP_NAME, REPLICA_DEPLOYMENT

    app = serve.status().applications.get(APP_NAME)
    if app is None or REPLICA_DEPLOYMENT not in app.deployments:
        return 0
    states = app.deployments[REPLICA_DEPLOYMENT].replica_states
    return sum(n for s, n in states.items() if str(getattr(s, "value", s)) in COUNTED_STATES)


def worst_queue_delay() -> float:
    import ray

    from replicas.status_registry import get_status_actor

    actor = get_status_actor()
    if actor is None:
        return 0.0
    rows = ray.get(actor.snapshot.remote(), timeout=5)
    return max((float(r.get("queue_delay_s", 0.0)) for r in rows), default=0.0)


@dataclass(slots=True)
class Poller:
    """Background thread sampling the fleet; ``samples`` are offsets from ``t0``."""

    t0: float
    poll_s: float = 0.5
    clock: Callable[[], float] = time.perf_counter
    samples: list[Sample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                n, q = replica_count(), worst_queue_delay()
                self.samples.append(Sample(self.clock() - self.t0, n, q))
            except Exception:  # a transient controller hiccup must not end the run
                pass
            self._stop.wait(self.poll_s)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="autoscale-poller", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)


def first_time_at_least(samples: list[Sample], n: int, after_s: float = 0.0) -> float | None:
    return next((s.t for s in samples if s.t >= after_s and s.replicas >= n), None)


async def drive(
    specs: list[RequestSpec], url: str, model: str, duration_s: float, timeout_s: float = 120.0
) -> Any:
    from bench import client, runner

    target = client.Target(url, model, timeout_s=timeout_s)
    plan = runner.LoadPlan(
        offsets=[float(s.arrival_s or 0.0) for s in specs], duration_s=duration_s
    )
    return await runner.run_load(
        specs, plan, target, lambda s: client.build_payload(target, s, list(s.prompt_token_ids))
    )


def run_live(
    specs: list[RequestSpec],
    *,
    url: str,
    model: str,
    duration_s: float,
    tail_s: float,
    slo_ms: float,
    poll_s: float = 0.5,
    until: Callable[[list[Sample]], bool] | None = None,
) -> PolicyRun:
    """Drive load against an already deployed app and sample it (caller deploys/deletes);
    the tail ends early once ``until(samples)`` holds."""
    from bench.report import summarize

    poller = Poller(time.perf_counter(), poll_s)
    poller.start()
    try:
        outcome = asyncio.run(drive(specs, url, model, duration_s))
        end_load = time.perf_counter()
        while time.perf_counter() - end_load < tail_s:
            if until is not None and until(list(poller.samples)):
                break
            time.sleep(poll_s)
    finally:
        poller.stop()
    end_s = time.perf_counter() - poller.t0
    summary = summarize(
        outcome.records, duration_s=outcome.duration_s, config={}, slo={"ttft_ms": slo_ms}
    )
    return PolicyRun(summary, list(poller.samples), outcome.records, end_s)


def split_overrides(
    setup: LiveSetup, overrides: dict[str, Any]
) -> tuple[LiveSetup, dict[str, Any], dict[str, Any]]:
    """A variant's overrides → (setup with its floor, policy params, autoscaling fields).
    ``min_replicas`` is the deployment's floor (``autoscaling.min_replicas`` and the
    initial count), ``target_ongoing_requests`` a section field; the rest are params."""
    params = dict(overrides)
    top = {k: params.pop(k) for k in ("target_ongoing_requests",) if k in params}
    floor = int(params.pop("min_replicas", setup.min_replicas))
    return replace(setup, min_replicas=floor), params, top


@contextlib.contextmanager
def live_session(setup: LiveSetup | None = None) -> Iterator[Callable[..., PolicyRun]]:
    """Start Ray once; yield ``run_one(specs, variant, tail_s)`` which deploys the variant,
    drives the load and deletes the app. Ray is shut down on the way out, also on error."""
    from ray import serve

    from cluster.app import APP_NAME
    from cluster.config import parse_config
    from cluster.runtime import deploy, start_ray, stop, wait_ready

    setup = setup or LiveSetup()
    start_ray(parse_config(fleet_config("none", setup, {})))

    def run_one(specs: list[RequestSpec], variant: Any, tail_s: float) -> PolicyRun:
        run_setup, params, top = split_overrides(setup, variant.overrides)
        cfg = parse_config(fleet_config(variant.policy, run_setup, params, top))
        url = deploy(cfg)
        try:
            wait_ready(url, timeout_s=120)
            _wait_for_count(run_setup.min_replicas, 60.0)
            duration = max(float(s.arrival_s or 0.0) for s in specs) + 1.0
            return run_live(
                specs, url=url, model=cfg.model.served_name, duration_s=duration,
                tail_s=tail_s, slo_ms=setup.ttft_slo_s * 1000.0,
            )  # fmt: skip
        finally:
            serve.delete(APP_NAME)

    try:
        yield run_one
    finally:
        stop()


def _wait_for_count(n: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while replica_count() != n and time.monotonic() < deadline:
        time.sleep(0.5)
