"""`make bench-chaos`: replica and ingress deaths and a scale-down under streamed load.

A fleet of 4 simulated replicas (``engine.type: sim``) behind the real Serve stack — the
front door (``server.ingress: resume``; ``--ingress proxy`` leaves it out), Serve's HTTP
proxy, 2 ``OpenAIIngress`` replicas routing with ``p2c``, ``LLMReplica`` — started in this
process. 1,000 streamed requests (chat and completions alternating, ``max_tokens`` 32–64,
``ignore_eos``) at concurrency 16, bounded by ``--wall-s``; a request open ``--hang-s`` is
cancelled and counted as hung. Faults, each once the previous one has recovered and a share
of the requests has been sent (``faults.py`` says how each is made and when it is
recovered):

    15 %  kill an LLMReplica (SIGKILL)         35 %  kill another
    55 %  kill an OpenAIIngress replica         70 %  scale 4 → 3 (sets up the next)
    80 %  scale 3 → 1 under load

Per fault it prints requests alive in the window that succeeded / were sent, migrated,
resumed and retried (from the ingresses), failed with a clean error, ended in a migration
error, bad 200s, hung, P95 TTFT and seconds to recover (``report.py`` defines the window).
Goals (the issue's): ≥ 998 of 1,000 succeed (NVIDIA Dynamo publishes 796 of 800 with one of
four workers killed), 0 hung, 0 responses that start 200 and end in an error other than a
migration failure. ``--quick``: 120 requests, one replica kill (a smoke run); ``--faults``
picks faults. Writes JSON (every request, the Serve timeline, the front door's counters)
and a PNG of TTFT over time with the faults marked."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from cluster.app import INGRESS_DEPLOYMENT, REPLICA_DEPLOYMENT
from experiments.chaos import faults, load, report
from experiments.chaos.report import FaultRun

REPLICAS = 4
FAULTS = ("kill1", "kill2", "ingress", "scale")
INGRESSES = 2
POLL_S = 0.25
SAMPLE_S = 0.5
PICK_WAIT_S = 3.0  # a replica kill waits at most this for a replica with streams to cut
SETTLE_S = 1.0  # after a recovery, before the next fault may start
INGRESS_LOGS = "serve/replica_*_OpenAIIngress_*.log"  # Serve captures the relay's warnings


def plan(keys: list[str]) -> list[tuple[float, FaultRun]]:
    """The faults named in ``keys`` (of ``FAULTS``), each with its share of requests sent."""
    kill = lambda name: FaultRun(name, "kill-replica", REPLICA_DEPLOYMENT, REPLICAS)  # noqa: E731
    steps = {
        "kill1": [(0.15, kill("kill replica 1"))],
        "kill2": [(0.35, kill("kill replica 2"))],
        "ingress": [
            (0.55, FaultRun("kill ingress", "kill-ingress", INGRESS_DEPLOYMENT, INGRESSES))
        ],
        "scale": [
            (0.70, FaultRun("scale 4 → 3 (setup)", "scale", REPLICA_DEPLOYMENT, 3)),
            (0.80, FaultRun("scale 3 → 1", "scale", REPLICA_DEPLOYMENT, 1)),
        ],
    }
    return [step for k in keys for step in steps[k]]


def fleet_config(args: argparse.Namespace, replicas: int = REPLICAS) -> dict[str, Any]:
    return {
        "engine": {"type": "sim", "sim": {"speed": args.speed}},
        "replicas": {"num_replicas": replicas, "num_cpus": 0.1, "max_ongoing_requests": 32},
        "routing": {"policy": "p2c", "stats_period_s": 0.2},
        "server": {
            "port": args.port,
            "metrics_export_port": args.metrics_port,
            "ingress_replicas": INGRESSES,
            "ingress": args.ingress,
        },
    }


def wait_full(timeout_s: float) -> None:
    want = {REPLICA_DEPLOYMENT: REPLICAS, INGRESS_DEPLOYMENT: INGRESSES}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        states = faults.deployment_states()
        if all(states[d].recovered(n) for d, n in want.items()):
            return
        time.sleep(0.5)
    raise TimeoutError(f"fleet not at full strength after {timeout_s:.0f} s: {states}")


def warm_up(url: str, n: int) -> None:
    for i in range(n):
        path, body = load.request_body(-1 - i, 16)
        with httpx.stream("POST", f"{url}{path}", json=body, timeout=60) as r:
            r.read()
            if r.status_code != 200:
                raise RuntimeError(f"warm-up request answered {r.status_code}: {r.text[:200]}")


def busiest_replica(records: list[load.Record]) -> tuple[str | None, int]:
    """The replica with the most open streams that are less than half through (by what
    this client has received), so the kill cuts streams the engine is still generating."""
    young = Counter(
        r.replica
        for r in records
        if r.end_s is None and r.replica and r.content_events < r.max_tokens // 2
    )
    return young.most_common(1)[0] if young else (None, 0)


def pids() -> dict[str, set[int]]:
    return {
        d: {p.pid for p in faults.node_processes(d)}
        for d in (REPLICA_DEPLOYMENT, INGRESS_DEPLOYMENT)
    }


def redeploy(args: argparse.Namespace, replicas: int) -> None:
    """``cluster.runtime.deploy`` of the same config with another replica count: Serve
    updates it in place (the deployment versions do not change) and drains the removed."""
    from cluster.config import parse_config
    from cluster.runtime import deploy

    deploy(parse_config(fleet_config(args, replicas)))


async def inject(
    f: FaultRun, rng: random.Random, records: list[load.Record], args: argparse.Namespace
) -> float:
    """Makes the fault; returns its ``time.monotonic()``."""
    if f.kind == "scale":
        before = await asyncio.to_thread(pids)
        at = time.monotonic()
        await asyncio.to_thread(redeploy, args, f.target)
        new = {d: len(p - before[d]) for d, p in (await asyncio.to_thread(pids)).items()}
        f.detail = f"redeployed with num_replicas {f.target}; processes started: {new}"
        return at
    prefer = None
    if f.kind == "kill-replica":
        rid, streams = busiest_replica(records)
        for _ in range(int(PICK_WAIT_S / 0.05)):  # a moment with streams to cut
            if streams >= 2:
                break
            await asyncio.sleep(0.05)
            rid, streams = busiest_replica(records)
        prefer = (await asyncio.to_thread(faults.replica_pids)).get(rid or "")
        f.detail = f"replica {rid} with {streams} streams < half through, "
    pid, at = await asyncio.to_thread(faults.kill_one, f.deployment, rng, prefer)
    f.detail += f"SIGKILL pid {pid}"
    return at


async def await_recovery(f: FaultRun, t0: float, cap_s: float) -> float | None:
    assert f.at_s is not None
    while time.monotonic() - t0 - f.at_s < cap_s:
        states = await asyncio.to_thread(faults.deployment_states)
        if states[f.deployment].recovered(f.target):
            return time.monotonic() - t0 - f.at_s
        await asyncio.sleep(POLL_S)
    return None


async def run_faults(
    steps: list[tuple[float, FaultRun]],
    progress: load.Progress,
    loading: asyncio.Task[None],
    t0: float,
    args: argparse.Namespace,
) -> None:
    rng = random.Random(args.seed)
    for share, f in steps:
        while progress.sent < share * args.requests and not loading.done():
            await asyncio.sleep(0.05)
        if loading.done():
            continue  # not run: the load ended first
        f.at_s = await inject(f, rng, progress.records, args) - t0
        print(f"[{f.at_s:6.1f} s] {f.name}: {f.detail}", flush=True)
        f.serve_recover_s = await await_recovery(f, t0, args.recover_cap_s)
        print(f"[{time.monotonic() - t0:6.1f} s] {f.name}: Serve recovered after "
              f"{f.serve_recover_s} s (sent {progress.sent})", flush=True)  # fmt: skip
        await asyncio.sleep(SETTLE_S)


async def monitor(t0: float, timeline: list[dict[str, Any]], stop: asyncio.Event) -> None:
    tail = faults.LogTail(faults.session_logs_dir(), INGRESS_LOGS)
    await asyncio.to_thread(tail.read_new)  # skip what start-up logged
    while True:
        states = await asyncio.to_thread(faults.deployment_states)
        events = await asyncio.to_thread(tail.read_new)
        timeline.append({
            "t_s": round(time.monotonic() - t0, 2),
            "deployments": {k: v.to_json() for k, v in states.items()},
            "events": {k: v for k, v in events.items() if v},
        })  # fmt: skip
        if stop.is_set():
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), SAMPLE_S)


async def run(args: argparse.Namespace, url: str, steps: list[tuple[float, FaultRun]]) -> Any:
    progress = load.Progress()
    timeline: list[dict[str, Any]] = []
    stop = asyncio.Event()
    t0 = time.monotonic()
    watcher = asyncio.create_task(monitor(t0, timeline, stop))
    drive = load.drive(
        url, progress, t0, num_requests=args.requests, concurrency=args.concurrency,
        tokens=(args.min_tokens, args.max_tokens), wall_s=args.wall_s, hang_s=args.hang_s,
    )  # fmt: skip
    loading = asyncio.create_task(drive)
    await run_faults(steps, progress, loading, t0, args)
    await loading
    stop.set()
    await watcher
    return progress.records, timeline, time.monotonic() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("results/chaos.json"))
    p.add_argument("--quick", action="store_true", help="120 requests, one replica kill")
    p.add_argument("--faults", default=None, help=f"comma list of {','.join(FAULTS)} (default all)")
    p.add_argument("--requests", type=int, default=None, help="default 1000 (120 with --quick)")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--min-tokens", type=int, default=32, help="max_tokens spread over min..max")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--speed", type=float, default=1.0, help="simulated engine speed factor")
    p.add_argument("--wall-s", type=float, default=600.0, help="no request sent after this")
    p.add_argument("--hang-s", type=float, default=60.0, help="a request open this long hung")
    p.add_argument("--recover-cap-s", type=float, default=120.0)
    p.add_argument("--port", type=int, default=8150)
    p.add_argument("--metrics-port", type=int, default=18150)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ingress", choices=("resume", "proxy"), default="resume",
                   help="server.ingress: resume (the front door continues streams a dead "
                   "ingress was relaying) or proxy (Serve's proxy alone)")  # fmt: skip
    args = p.parse_args(argv)
    args.requests = args.requests or (120 if args.quick else 1000)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.faults = args.faults or ("kill1" if args.quick else ",".join(FAULTS))
    steps = plan([k for k in args.faults.split(",") if k])
    from cluster.config import parse_config
    from cluster.runtime import deploy, start_ray, stop, wait_ready
    from cluster.serve_front_door import front_door_counters

    cfg = parse_config(fleet_config(args))
    started = time.monotonic()
    load_before = os.getloadavg()
    start_ray(cfg)
    try:
        url = deploy(cfg)
        wait_ready(url, timeout_s=300)
        wait_full(180)
        warm_up(url, 4)
        ready_s = time.monotonic() - started
        print(f"fleet ready in {ready_s:.0f} s; {args.requests} requests", flush=True)
        records, timeline, run_s = asyncio.run(run(args, url, steps))
        cross_check = faults.ingress_counters(url)
        door = front_door_counters()
    finally:
        stop()
    faults_run = [f for _, f in steps]
    before = report.attribute(faults_run, timeline)
    write(args, records, faults_run, timeline, before, cross_check,
          {"ready_s": ready_s, "run_s": run_s, "load_before": load_before,
           "load_after": os.getloadavg(), "front_door": door})  # fmt: skip
    if door is not None:
        print(f"front door: {door}")
    return 0


def write(
    args: argparse.Namespace,
    records: list[load.Record],
    steps: list[FaultRun],
    timeline: list[dict[str, Any]],
    before: dict[str, int],
    cross_check: list[dict[str, int]],
    meta: dict[str, Any],
) -> None:
    first = min((f.at_s for f in steps if f.at_s is not None), default=float("inf"))
    base = report.baseline_p95(records, first)
    end_s = max((r.end_s or r.sent_s for r in records), default=0.0)
    rows = [report.window_row(f, records, base, end_s) for f in steps]
    total = report.totals(records, steps)
    goals = report.goals(total, args.requests)
    result = {
        "rows": rows,
        "total": total,
        "goals": goals,
        "baseline_ttft_p95_s": base,
        "relay_events_before_faults": before,
        "fleet_status_ingress_counters": cross_check,
        "meta": meta,
        "config": vars(args) | {"out": str(args.out), "fleet": fleet_config(args)},
        "records": [r.to_json() for r in records],
        "timeline": timeline,
    }
    args.out.write_text(json.dumps(result, indent=2, default=str))
    report.plot(records, rows, args.out.with_suffix(".png"))
    print()
    print(report.table(rows, total, base))
    print()
    print(json.dumps(goals, ensure_ascii=False))
    print(f"/fleet/status ingress counters at the end (one row per ingress seen): {cross_check}")
    print(f"run {meta['run_s']:.0f} s (fleet ready in {meta['ready_s']:.0f} s); wrote {args.out}")


if __name__ == "__main__":
    raise SystemExit(main())
