"""Memory under sustained load: does any process of a fleet keep growing?

Starts ``llmfleet up`` on 127.0.0.1 (``--engine null`` or ``vllm``, 2 engine replicas, so
2 ingress replicas sharing quotas, ``--ingress proxy`` or ``direct``; a key with per-minute and stream limits far above the load, so every quota
path runs: admission, settlement, the per-request slot call). ``llmfleet bench`` then keeps
``--concurrency`` requests in flight, each prompt unique (the prefix index only grows), for
``--duration`` seconds. Every ``--every`` seconds the resident memory of each process in the
fleet's tree is read from ``/proc`` and summed per role (proxy, ingress, replica, status
actor, controller, GCS, raylet, the CLI; vLLM's engine core and worker processes), and the
size of Ray's log directory. ``--engine vllm-bare`` puts vLLM's own server under the same
load instead: the reference for what the engine's processes do without llmfleet around
them (``--bare-engines 2``: two such servers on the same cores, each with its own
``--concurrency`` clients, as the two engines of the fleet share them). ``--rate R`` sends
Poisson arrivals at R requests/s (per server) instead of a closed loop. ``--classic`` runs
the fleet with ``server.throughput_mode: false``. The client's per-request records (token
arrival times, the replica) are left in the run's temporary directory (``bench-N.jsonl``).
Beside the load generator, ``wakeup.py`` measures how late a process outside the server
wakes from 10-ms sleeps: the CPU stops a fleet caused other groups on 2 cores.

Per role it reports the RSS after the warm-up (the first fifth of the run), at the end, and
the slope over the second half (least squares, MB per hour). A bounded process flattens:
its second-half slope is small against its size. Found with it: Ray stored a task event for
every status-actor call, so the GCS grew ~0.5 MB/s toward Ray's cap of 100,000 events
(``replicas/status_registry.py`` turns them off). Writes JSON and a PNG (RSS per role over
time). Bounded: the load stops at ``--duration`` and every request has a timeout.

    .venv/bin/python -m experiments.soak.soak --duration 600 --out results/soak.json
    .venv/bin/python -m experiments.soak.soak --engine vllm --concurrency 16 --duration 1200
    .venv/bin/python -m experiments.soak.soak --engine vllm-bare --bare-engines 2 --concurrency 8
    .venv/bin/python -m experiments.soak.soak --engine vllm-bare --rate 4 --duration 360
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cluster.keys import KeyLimits, add_key
from experiments.proctree import role, snapshot
from experiments.serverproc import start_llmfleet, start_vllm, stop, wait_http
from replicas.model_prep import ensure_default_model
from replicas.vllm_settings import VLLMSettings

PORT = 18231
ROLES = ("proxy", "ingress", "replica", "status", "controller", "gcs", "raylet", "cli")


def rss_by_role(root: int) -> dict[str, float]:
    """MB of resident memory per role in ``root``'s process tree (Ray's GCS and raylet
    apart)."""
    out: dict[str, float] = {}
    for st, cmd in snapshot(root).values():
        name = role(cmd)
        if name == "ray-system":
            name = "gcs" if "gcs_server" in cmd else "raylet"
        out[name] = out.get(name, 0.0) + st.rss_bytes / 2**20
    return out


def slope_per_hour(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MB) points, in MB per hour (0 with < 2 points)."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    if var == 0:
        return 0.0
    return sum((t - mt) * (v - mv) for t, v in points) / var * 3600.0


def summarize(samples: list[dict[str, Any]], duration_s: float) -> dict[str, dict[str, float]]:
    """Per role: RSS after warm-up and at the end, growth, second-half slope (MB/h)."""
    warm_t, half_t = duration_s / 5, duration_s / 2
    out: dict[str, dict[str, float]] = {}
    for name in sorted({r for s in samples for r in s["rss_mb"]}):
        pts = [(s["t"], s["rss_mb"][name]) for s in samples if name in s["rss_mb"]]
        warm = [v for t, v in pts if t >= warm_t]
        if not warm:
            continue
        out[name] = {
            "after_warmup_mb": round(warm[0], 1),
            "end_mb": round(pts[-1][1], 1),
            "growth_mb": round(pts[-1][1] - warm[0], 1),
            "second_half_mb_per_h": round(slope_per_hour([p for p in pts if p[0] >= half_t]), 1),
        }
    return out


def dir_mb(path: Path | None) -> float:
    """MB of files under ``path`` (0 if it is unknown or gone)."""
    if path is None or not path.is_dir():
        return 0.0
    total = 0
    for f in path.rglob("*"):
        with contextlib.suppress(OSError):  # rotated away meanwhile
            total += f.stat().st_size if f.is_file() else 0
    return total / 2**20


def log_growth(samples: list[dict[str, Any]], served: dict[str, Any]) -> dict[str, float]:
    """How fast Ray's log directory grows under this load: MB/h (least squares over the
    run) and bytes per request served (Serve's access lines, ours, Ray's own)."""
    pts = [(s["t"], s["logs_mb"]) for s in samples if "logs_mb" in s]
    if not pts:
        return {"end_mb": 0.0, "mb_per_h": 0.0, "bytes_per_request": 0.0}
    n = int(served.get("completed") or 0)
    grown = pts[-1][1] - pts[0][1]
    return {
        "end_mb": round(pts[-1][1], 2),
        "mb_per_h": round(slope_per_hour(pts), 1),
        "bytes_per_request": round(grown * 2**20 / n, 1) if n else 0.0,
    }


def fleet_yaml(
    keys: Path, engine: str = "null", ingress: str = "proxy", classic: bool = False
) -> str:
    """2 engine replicas (so 2 ingress replicas). The vLLM ones get 1 GiB of KV cache and
    one OpenMP thread each, so both fit on 2 cores beside the rest of the fleet."""
    engine_yaml = (
        "engine:\n  type: 'null'\n"
        if engine == "null"
        else "engine:\n  type: vllm\n  vllm:\n    kv_cache_gib: 1\n    omp_threads: 1\n"
    )
    return (
        f"server:\n  port: {PORT}\n  metrics_export_port: {PORT + 1}\n"
        f"  api_keys_file: {keys}\n  ingress: {ingress}\n"
        + ("  throughput_mode: false\n" if classic else "")
        + "replicas:\n  num_replicas: 2\n  num_cpus: 0.1\n"
        + engine_yaml
    )


def plot(samples: list[dict[str, Any]], path: Path, title: str = "") -> None:
    """Left: RSS per role. Right: its change since the first sample, where a slow growth
    shows beside processes ten times larger."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = sorted({r for s in samples for r in s["rss_mb"]})
    colors = [plt.get_cmap("tab20")(i) for i in range(20)]
    fig, (ax, dx) = plt.subplots(1, 2, figsize=(13, 5))
    for i, name in enumerate(names):
        pts = [(s["t"] / 60, s["rss_mb"][name]) for s in samples if name in s["rss_mb"]]
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        ax.plot(xs, ys, label=name, color=colors[i % len(colors)])
        dx.plot(xs, [y - ys[0] for y in ys], label=name, color=colors[i % len(colors)])
    ax.set_ylabel("RSS (MB, summed per role)")
    dx.set_ylabel("change since the first sample (MB)")
    for a in (ax, dx):
        a.set_xlabel("minutes under load")
        a.grid(alpha=0.3)
    dx.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    fig.suptitle(f"resident memory per process role under sustained load{title}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def start_bare(n: int, work: Path) -> list[subprocess.Popen]:
    """``n`` of vLLM's own OpenAI servers (ports ``PORT``, ``PORT + 10``, ...), each with the
    engine arguments of one of our replicas (``replicas/vllm_settings.py``), no key, ready:
    the reference for the engine's own processes."""
    settings = VLLMSettings(model_path=str(ensure_default_model()), kv_cache_gib=1.0)
    procs: list[subprocess.Popen] = []
    try:
        for i in range(n):
            log = work / f"vllm-{i}.log"
            procs.append(
                start_vllm(settings, "smollm2-135m-instruct", PORT + 10 * i, log, wait=False)
            )
        for i, proc in enumerate(procs):
            wait_http(f"http://127.0.0.1:{PORT + 10 * i}/v1/models", proc, timeout_s=300)
    except BaseException:
        for proc in procs:
            stop(proc)
        raise
    return procs


def start_target(
    engine: str, ingress: str, work: Path, bare_engines: int = 1, classic: bool = False
) -> tuple[list[subprocess.Popen], str | None, Path | None]:
    """The servers under load, ready: their processes (one for a fleet), the API key to
    send, Ray's log directory."""
    if engine == "vllm-bare":
        return start_bare(bare_engines, work), None, None
    keys = work / "keys.yaml"
    key = add_key(
        keys,
        "soak",
        limits=KeyLimits(requests_per_min=10**6, tokens_per_min=10**9, max_streams=256),
    )
    (work / "fleet.yaml").write_text(fleet_yaml(keys, engine, ingress, classic))
    fleet = start_llmfleet(work / "fleet.yaml", work / "home", work / "up.log")
    try:
        wait_http(f"http://127.0.0.1:{PORT}/health", fleet, timeout_s=300)
    except BaseException:
        stop(fleet)
        raise
    state = json.loads((work / "home" / "state.json").read_text())
    logs = Path(state["session_dir"]) / "logs" if state.get("session_dir") else None
    return [fleet], key, logs


def start_bench(url: str, key: str | None, args: argparse.Namespace, out: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "cluster.cli", "bench", "--url", url,
         *(["--api-key", key] if key else []), "--dataset", "random:input=200,output=32",
         *(["--rate", str(args.rate)] if args.rate else ["--concurrency", str(args.concurrency)]),
         "--num-requests", "10000000",
         "--duration", str(args.duration), "--timeout", "60", "--no-progress",
         "--out", str(out)],
        stdout=out.with_suffix(".log").open("w"), stderr=subprocess.STDOUT,
    )  # fmt: skip


def served_total(outs: list[Path]) -> dict[str, Any]:
    """The benches' request counts, summed over the servers (one bench per server)."""
    total: dict[str, Any] = {}
    for out in outs:
        if not out.exists():
            continue
        for k, v in json.loads(out.read_text())["requests"].items():
            if isinstance(v, dict):  # errors by kind
                merged = total.setdefault(k, {})
                for kind, n in v.items():
                    merged[kind] = merged.get(kind, 0) + n
            elif isinstance(v, (int, float)) and not isinstance(v, bool):
                total[k] = total.get(k, 0) + v
    return total


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=600.0, help="seconds under load")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--rate", type=float, default=None,
                   help="open loop instead: Poisson arrivals at this many requests/s (per server)")  # fmt: skip
    p.add_argument("--every", type=float, default=10.0, help="seconds between samples")
    p.add_argument("--engine", choices=("null", "vllm", "vllm-bare"), default="null",
                   help="vllm-bare: vLLM's own server (no llmfleet), the reference")  # fmt: skip
    p.add_argument("--bare-engines", type=int, default=1, choices=(1, 2),
                   help="vllm-bare: servers on the same cores, each with --concurrency clients")  # fmt: skip
    p.add_argument("--ingress", choices=("proxy", "direct"), default="proxy",
                   help="server.ingress: through Serve's proxy, or the ingress replicas serving the port")  # fmt: skip
    p.add_argument("--classic", action="store_true",
                   help="server.throughput_mode: false (Serve's default transport and threads)")  # fmt: skip
    p.add_argument("--out", type=Path, default=Path("results/soak.json"))
    args = p.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="llmfleet-soak-"))
    procs, key, logs = start_target(
        args.engine, args.ingress, work, args.bare_engines, args.classic
    )
    samples: list[dict[str, Any]] = []
    outs = [work / f"bench-{i}.json" for i in range(len(procs))]
    clients: list[subprocess.Popen] = []  # ours to stop if the run fails midway
    try:
        # a fleet is one server (one bench); vllm-bare one bench per server
        for i, out in enumerate(outs):
            clients.append(start_bench(f"http://127.0.0.1:{PORT + 10 * i}", key, args, out))
        benches = list(clients)
        wakeup = subprocess.Popen(
            [sys.executable, "-m", "experiments.soak.wakeup",
             "--duration", str(args.duration), "--out", str(work / "wakeup.json")]
        )  # fmt: skip
        clients.append(wakeup)
        t0 = time.monotonic()
        while (
            any(b.poll() is None for b in benches) and time.monotonic() - t0 < args.duration + 120
        ):
            rss: dict[str, float] = {}
            for proc in procs:
                for name, mb in rss_by_role(proc.pid).items():
                    rss[name] = rss.get(name, 0.0) + mb
            samples.append({
                "t": round(time.monotonic() - t0, 1),
                "rss_mb": rss,
                "logs_mb": round(dir_mb(logs), 2),
            })  # fmt: skip
            time.sleep(args.every)
        for bench in benches:
            if bench.poll() is None:
                bench.kill()
            bench.wait(timeout=30)
        served = served_total(outs)
        with contextlib.suppress(subprocess.TimeoutExpired):  # benches ended early: see finally
            wakeup.wait(timeout=30)
        woke = work / "wakeup.json"
        late = json.loads(woke.read_text()) if woke.exists() else {}
    finally:
        for client in clients:
            if client.poll() is None:
                client.kill()
                client.wait(timeout=10)
        for proc in procs:
            stop(proc)
    roles = summarize(samples, args.duration)
    logs_growth = log_growth(samples, served)
    result = {
        "config": {"duration_s": args.duration, "concurrency": args.concurrency, "rate": args.rate,
                   "every_s": args.every, "engine": args.engine,
                   **({"replicas": args.bare_engines} if args.engine == "vllm-bare" else
                      {"ingress": args.ingress, "classic": args.classic, "replicas": 2, "ingress_replicas": 2})},
        "requests": served,
        "wakeup_outside": late,
        "roles": roles,
        "ray_logs": logs_growth,
        "samples": samples,
    }  # fmt: skip
    args.out.write_text(json.dumps(result, indent=1))
    plot(samples, args.out.with_suffix(".png"), f" ({args.engine} engine)")
    print(f"requests: {served}")
    print(
        f"a process outside the server, sleeping 10 ms in a loop, woke late by: "
        f"P99 {late.get('p99_ms')} ms, worst {late.get('max_ms')} ms, "
        f"{late.get('over_100ms')} times over 100 ms"
    )
    print(f"{'role':<22}{'after warm-up':>15}{'end':>10}{'growth':>10}{'2nd-half MB/h':>15}")
    for name, r in roles.items():
        print(
            f"{name:<22}{r['after_warmup_mb']:>15.1f}{r['end_mb']:>10.1f}"
            f"{r['growth_mb']:>10.1f}{r['second_half_mb_per_h']:>15.1f}"
        )
    print(
        f"Ray's logs: {logs_growth['end_mb']:.1f} MB at the end, "
        f"{logs_growth['mb_per_h']:.0f} MB/h, {logs_growth['bytes_per_request']:.0f} bytes per request"
    )
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}; client records in {work}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
