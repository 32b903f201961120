"""`make bench-ceiling`: the serving layer's ceiling, measured with engines that cost nothing.

Targets, each a server process tree on 127.0.0.1, started one at a time (alternating order
across rounds) and driven by ``llmfleet bench`` from this process:

- ``floor``: one process, FastAPI + uvicorn, the same null engine and OpenAI layer an
  llmfleet replica runs (``floor_server.py``) — the Python floor;
- ``llmfleet``: ``llmfleet up`` with one replica of the null engine (``engine.type: null``);
- ``rayllm``: Ray Serve LLM's default path (its ingress, ``LLMServer`` and Serve's proxy) with
  the same null engine plugged in (``rayllm.py``).

The null engine emits one token per running request every ``--step-s`` (7 ms: an 8B model's
decode step on an H100 at this batch), so ``concurrency / step`` tokens/s is offered. Per
concurrency (swept 8 → 1024) each target reports delivered output tok/s, the fraction of the
offered rate delivered, ITL P50/P99, TTFT P50, and output tokens per serving CPU-second (CPU
time of the server's whole process tree, from ``/proc``). The load generator runs on the
same cores and its CPU time is reported beside. Then one simulated Llama-3-8B / H100 replica
(``engine.type: sim``) at ``--sim-users``: the engine alone in this process (no serving layer),
the floor with that engine, and llmfleet with it.

Goals (issue 14): llmfleet ≥ 0.9× the floor's tok/s with the simulated H100 at 128 users,
≥ 20k output tokens per serving CPU-second, ≥ 3× Ray Serve LLM's default path. Every value is
the median over ``--rounds``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from bench import cli as bench_cli
from experiments import proctree, serverproc

PORTS = {"floor": 8132, "llmfleet": 8133, "rayllm": 8131}
# llmfleet variants: "llmfleet+direct" / "llmfleet+resume" (server.ingress), "llmfleet+classic"
# (server.throughput_mode: false), and for taking throughput mode apart on top of classic,
# "+grpc" and "+mainloop" (VARIANT_ENV); combinable ("llmfleet+classic+grpc");
# "rayllm+nobatch": Ray Serve LLM with its 50-ms stream batching off (one message per token)
VARIANT_ENV = {
    "grpc": {"RAY_SERVE_USE_GRPC_BY_DEFAULT": "1"},
    # user code and the handle's router on the replica's main loop (no cross-thread hop)
    "mainloop": {
        "RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD": "0",
        "RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP": "0",
    },
}
PROMPT_BODY = {"model": "smollm2-135m-instruct", "prompt": [1, 2, 3], "max_tokens": 2}


def fleet_yaml(
    path: Path, engine: str, args: argparse.Namespace, ingress: str, throughput_mode: bool
) -> None:
    if engine == "null":
        eng: dict[str, Any] = {
            "type": "null",
            "null": {"step_s": args.step_s, "max_num_seqs": args.max_num_seqs},
        }
    else:
        eng = {"type": "sim", "sim": {"hardware": "h100", "model_profile": "llama-3-8b"}}
    cfg = {
        "server": {
            "port": PORTS["llmfleet"],
            "metrics_export_port": 18133,
            "ingress": ingress,
            "throughput_mode": throughput_mode,
        },
        "model": {"max_model_len": 8192},
        "engine": eng,
        "replicas": {"num_replicas": 1, "max_ongoing_requests": args.max_num_seqs},
        "routing": {"policy": args.router},
    }
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))


def start(name: str, engine: str, args: argparse.Namespace, work: Path) -> subprocess.Popen:
    py = sys.executable
    base, *mods = name.split("+")
    if base == "llmfleet":
        tag = name.replace("+", "-")
        cfg = work / f"{tag}-{engine}.yaml"
        ingress = next((m for m in mods if m in ("direct", "resume")), args.ingress)
        fleet_yaml(cfg, engine, args, ingress, "classic" not in mods)
        env = dict(kv.split("=", 1) for kv in args.fleet_env)
        for m in mods:
            env |= VARIANT_ENV.get(m, {})
        return serverproc.start_llmfleet(cfg, work / "home", work / f"{tag}-{engine}.log", env=env)
    if name == "floor":
        cmd = [py, "-m", "experiments.ceiling.floor_server", "--engine", engine]
    elif name == "rayllm":
        cmd = [py, "-m", "experiments.ceiling.rayllm"]
    else:
        raise ValueError(name)
    cmd += ["--port", str(PORTS[base]), "--step-s", str(args.step_s)]
    cmd += ["--max-num-seqs", str(args.max_num_seqs)]
    if "nobatch" in mods:  # Ray Serve LLM without its 50-ms stream batching
        cmd += ["--stream-batching-interval-ms", "0"]
    log = (work / f"{name}-{engine}.log").open("a")
    return subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=os.environ.copy()
    )


def wait_first_token(url: str, proc: subprocess.Popen, timeout_s: float = 300.0) -> float:
    t0 = time.monotonic()
    body = PROMPT_BODY | {"stream": True}
    while time.monotonic() - t0 < timeout_s:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: server exited with {proc.returncode}")
        try:
            with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=30) as r:
                if r.status_code == 200 and any(
                    line.startswith("data: {") for line in r.iter_lines()
                ):
                    return time.monotonic() - t0
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{url}: no token after {timeout_s:.0f} s")


def drive(url: str, c: int, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    argv = [
        "--url", url, "--dataset", f"random:input={args.input},output={args.output}",
        "--concurrency", str(c), "--num-requests", str(c * 64), "--duration", str(args.duration),
        "--warmup", "4", "--timeout", "600", "--tokenizer", "none", "--seed", "0",
        "--out", str(out), "--no-progress",
    ]  # fmt: skip
    if bench_cli.main(argv) != 0:
        raise RuntimeError(f"bench against {url} at c={c} failed")
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def point(
    name: str, proc: subprocess.Popen, url: str, c: int, args: argparse.Namespace, out: Path
) -> dict[str, Any]:
    before = proctree.cpu_by_role(proc.pid)
    gen0 = time.process_time()
    res = drive(url, c, args, out)
    gen_cpu = time.process_time() - gen0
    delta = proctree.cpu_delta(before, proctree.cpu_by_role(proc.pid))
    tokens = res["tokens"]["output"]
    serving = sum(delta.values())
    tok_s = res["throughput"]["output_tok_s"]
    row = {
        "target": name,
        "concurrency": c,
        "output_tok_s": tok_s,
        "offered_tok_s": c / args.step_s,
        "delivered_fraction": tok_s / (c / args.step_s),
        "itl_p50_ms": res["itl_ms"]["p50"],
        "itl_p99_ms": res["itl_ms"]["p99"],
        "ttft_p50_ms": res["ttft_ms"]["p50"],
        "failed": res["requests"]["failed"],
        "output_tokens": tokens,
        "serving_cpu_s": round(serving, 3),
        "serving_cpu_by_role": {k: v for k, v in delta.items() if v > 0.01},
        "tokens_per_serving_cpu_s": tokens / serving if serving > 0 else None,
        "loadgen_cpu_s": round(gen_cpu, 3),
    }
    print(
        f"{name:9s} c={c:5d}: {tok_s:8.0f} tok/s ({row['delivered_fraction']:.0%} of offered), "
        f"ITL P50/P99 {row['itl_p50_ms'] or 0:.1f}/{row['itl_p99_ms'] or 0:.1f} ms, "
        f"{row['tokens_per_serving_cpu_s'] or 0:.0f} tok/serving-CPU-s, loadgen {gen_cpu:.1f} s",
        flush=True,
    )
    return row


def run_target(
    name: str, engine: str, levels: list[int], args: argparse.Namespace, work: Path, tag: str
) -> tuple[list[dict[str, Any]], float]:
    proc = start(name, engine, args, work)
    url = f"http://127.0.0.1:{PORTS[name.split('+')[0]]}"
    try:
        ready = wait_first_token(url, proc)
        rows = [point(name, proc, url, c, args, work / f"{tag}-{name}-c{c}.json") for c in levels]
    finally:
        serverproc.stop(proc)
    return rows, ready


async def _engine_alone(users: int, seconds: float, args: argparse.Namespace) -> float:
    """Output tok/s of the simulated H100 engine with no serving layer (closed loop)."""
    from replicas.engine import GenerateRequest
    from replicas.sim.engine import SimEngine

    eng = SimEngine(model="llama-3-8b", hardware="h100", max_model_len=8192)
    await eng.start()
    stop_at = time.monotonic() + seconds
    counted = 0
    ids = iter(range(10**9))

    async def user() -> None:
        nonlocal counted
        while time.monotonic() < stop_at:
            req = GenerateRequest(f"u{next(ids)}", list(range(args.input)), args.output)
            async for d in eng.generate(req):
                if time.monotonic() < stop_at:
                    counted += len(d.token_ids)

    t0 = time.monotonic()
    await asyncio.wait([asyncio.create_task(user()) for _ in range(users)], timeout=seconds + 60)
    await eng.shutdown()
    return counted / (min(time.monotonic(), stop_at) - t0)


def med(rows: list[dict[str, Any]], key: str) -> float | None:
    vals = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def summarize(
    runs: dict[str, dict[int, list[dict[str, Any]]]], step_s: float
) -> dict[str, dict[str, Any]]:
    """Per target: medians per concurrency, and the highest offered rate delivered ≥ 98 %
    with ITL P99 < 2× the step period."""
    out: dict[str, dict[str, Any]] = {}
    for name, by_c in runs.items():
        table = {}
        best = 0.0
        for c, rows in sorted(by_c.items()):
            keys = (
                "output_tok_s", "delivered_fraction", "itl_p50_ms", "itl_p99_ms", "ttft_p50_ms",
                "tokens_per_serving_cpu_s", "serving_cpu_s", "loadgen_cpu_s",
            )  # fmt: skip
            m = {k: med(rows, k) for k in keys}
            table[c] = m
            frac, p99 = m["delivered_fraction"], m["itl_p99_ms"]
            if frac is not None and p99 is not None and frac >= 0.98 and p99 < 2000 * step_s:
                best = max(best, c / step_s)
        out[name] = {"by_concurrency": table, "max_offered_tok_s_delivered": best}
    return out


def goals(summary: dict[str, Any], sim: dict[str, Any], users: int) -> dict[str, Any]:
    def at(name: str, key: str) -> float | None:
        row = summary.get(name, {}).get("by_concurrency", {}).get(users)
        return row.get(key) if row else None

    fleet_sim, floor_sim = sim.get("llmfleet"), sim.get("floor")
    fleet_null, ray_null = at("llmfleet", "output_tok_s"), at("rayllm", "output_tok_s")
    return {
        "sim_h100_llmfleet_vs_floor": fleet_sim / floor_sim if fleet_sim and floor_sim else None,
        "sim_h100_llmfleet_vs_engine_alone": (
            fleet_sim / sim["engine_alone"] if fleet_sim and sim.get("engine_alone") else None
        ),
        "llmfleet_tokens_per_serving_cpu_s": at("llmfleet", "tokens_per_serving_cpu_s"),
        "floor_tokens_per_serving_cpu_s": at("floor", "tokens_per_serving_cpu_s"),
        "llmfleet_vs_rayllm": fleet_null / ray_null if fleet_null and ray_null else None,
        "llmfleet_vs_floor_null": (
            fleet_null / f if fleet_null and (f := at("floor", "output_tok_s")) else None
        ),
        "at_users_vs_floor": {
            name: round(v / f, 3)
            for name in summary
            if (v := at(name, "output_tok_s")) and (f := at("floor", "output_tok_s"))
        },
        "goal": {"vs_floor": 0.9, "tokens_per_serving_cpu_s": 20_000, "vs_rayllm": 3.0},
    }


def plot(summary: dict[str, Any], out_png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for name, s in summary.items():
        cs = sorted(s["by_concurrency"])
        rows = [s["by_concurrency"][c] for c in cs]
        axes[0].plot(cs, [r["output_tok_s"] or 0 for r in rows], "o-", label=name)
        axes[1].plot(cs, [r["itl_p99_ms"] or 0 for r in rows], "o-", label=name)
        axes[2].plot(cs, [r["tokens_per_serving_cpu_s"] or 0 for r in rows], "o-", label=name)
    if summary:
        cs = sorted(next(iter(summary.values()))["by_concurrency"])
        step = next(iter(summary.values())).get("step_s", 0.007)
        axes[0].plot(cs, [c / step for c in cs], "k--", label="offered")
    titles = ("output tok/s", "ITL P99 (ms)", "output tokens per serving CPU-s")
    for ax, title in zip(axes, titles, strict=True):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("concurrent users")
        ax.set_title(title)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("results/ceiling.json"))
    p.add_argument("--targets", default="floor,llmfleet,rayllm")
    p.add_argument("--concurrency", default="8,32,128,512,1024")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument(
        "--duration", type=float, default=12.0, help="s per point (no new request after)"
    )
    p.add_argument("--step-s", type=float, default=0.007)
    p.add_argument("--max-num-seqs", type=int, default=1024)
    p.add_argument("--input", type=int, default=64)
    p.add_argument("--output", type=int, default=256)
    p.add_argument("--sim-users", type=int, default=128, help="0 skips the simulated-H100 rows")
    p.add_argument("--router", default="prefix")
    p.add_argument("--ingress", choices=("proxy", "direct", "resume"), default="proxy")
    p.add_argument("--fleet-env", action="append", default=[], help="KEY=VALUE for llmfleet")
    args = p.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    targets = [t for t in args.targets.split(",") if t]
    levels = [int(c) for c in args.concurrency.split(",")]
    work = Path(tempfile.mkdtemp(prefix="llmfleet-ceiling-"))
    runs: dict[str, dict[int, list[dict[str, Any]]]] = {t: {c: [] for c in levels} for t in targets}
    starts: dict[str, list[float]] = {t: [] for t in targets}
    sim_runs: dict[str, list[float]] = {"engine_alone": [], "floor": [], "llmfleet": []}
    for rnd in range(args.rounds):
        order = targets if rnd % 2 == 0 else targets[::-1]
        for name in order:
            rows, ready = run_target(name, "null", levels, args, work, f"r{rnd}")
            starts[name].append(ready)
            for row in rows:
                runs[name][row["concurrency"]].append(row)
        if args.sim_users:
            sim_runs["engine_alone"].append(
                asyncio.run(_engine_alone(args.sim_users, args.duration, args))
            )
            print(f"sim-h100 engine alone: {sim_runs['engine_alone'][-1]:.0f} tok/s", flush=True)
            for name in ("floor", "llmfleet") if rnd % 2 == 0 else ("llmfleet", "floor"):
                rows, _ = run_target(name, "sim-h100", [args.sim_users], args, work, f"sim{rnd}")
                sim_runs[name].append(rows[0]["output_tok_s"])
    summary = summarize(runs, args.step_s)
    for s in summary.values():
        s["step_s"] = args.step_s
    sim = {k: statistics.median(v) if v else None for k, v in sim_runs.items()}
    result = {
        "summary": summary,
        "sim_h100": sim | {"users": args.sim_users},
        "goals": goals(summary, sim, 128 if 128 in levels else levels[-1]),
        "ready_s": {k: statistics.median(v) for k, v in starts.items() if v},
        "runs": {t: {str(c): rows for c, rows in by.items()} for t, by in runs.items()},
        "sim_runs": sim_runs,
        "config": vars(args) | {"out": str(args.out), "cpus": os.cpu_count()},
    }
    args.out.write_text(json.dumps(result, indent=2, default=str))
    plot(summary, args.out.with_suffix(".png"))
    print(json.dumps({"goals": result["goals"], "sim_h100": result["sim_h100"]}, indent=2))
    for name, s in summary.items():
        best = s["max_offered_tok_s_delivered"]
        print(f"{name}: highest offered rate delivered (>=98 %, ITL P99 < 2x step): {best:.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
