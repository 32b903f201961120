"""The cheapest two-level rule that knows a step workload's loads: what hindsight buys.

``reach.py`` bounds attainment; this bounds cost. A step (``StepLoad``: a calm load, a
high one, the calm one again) is the easiest trace to scale for if its loads are known,
so the rule here is given them, with everything else a reactive policy has:

    replicas = HIGH  from the first decision at which the arrival rate >= T
             = LOW   once it has stayed under T for HOLD_S

The arrival rate is an EWMA (time constant ``tau_s``) of the requests the engines counted
(``ReplicaMetrics.arrived_requests``, per replica, a replica's first reading its baseline;
our policy's ``arrived_work`` counts a replica it has never seen from zero instead), read
at each decision as our policy reads them; an up-move wakes the warm pool's sleepers
first, as for every policy. LOW, HIGH, T and
``tau_s`` come from a sweep on the trace itself (``GRID``), which no policy can do: the
cheapest setting reaching the goal is what a policy that reacted perfectly to these two
loads would cost. A policy that is not told them (ours must also cover a return of the
high load, and bursts inside it) can approach that cost but not be expected to beat it.
It is an estimate for this family of rules, not a proof for every rule.

Across steps (``--grid across --workload W``, then ``--across``): the same family, and ours
with its defaults, on the step and on the same step with other high loads
(``compare.SIM_STEPS``: 2 -> 6 -> 2 and 2 -> 10 -> 2 req/s), each with its own cheapest
fixed fleet as the reference. A setting that met the goal on every step could be a
default; if none does, meeting the step's goal takes knowing the step's loads.

  python -m experiments.autoscaling.hindsight --out results/autoscale/hindsight-step.json
  python -m experiments.autoscaling.hindsight --grid across --workload step-x3 --out F3
  python -m experiments.autoscaling.hindsight --across F3 F4 F5
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import math
import sys
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, replace
from itertools import repeat
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from autoscaler.ttft_queue import TTFTQueuePolicy
from autoscaler.types import MetricsSnapshot, ScalingConfig, ScalingPolicy
from bench.types import RequestSpec
from experiments.autoscaling.compare import SIM_SETUPS, SIM_STATIC, SIM_STEPS, SLO_S, workload
from experiments.autoscaling.workloads import StepLoad

if TYPE_CHECKING:
    from experiments.autoscaling.sim import PolicyRun

T = TypeVar("T")
HOLD_S = 20.0  # under T this long before going back to LOW (our policy's downscale_stable_s)
GOAL_ATTAINMENT = 0.99
GOAL_RATIO = 0.8
STEP_REVERSALS = 2  # the goal's "no more reversals than one per load step": up, then down
# LOW, HIGH (replicas), T (req/s), tau (s), warm pool; the step is 2 -> 8 -> 2 req/s
GRID = {
    "low": (2, 3, 4),
    "high": (7, 8, 9),
    "threshold": (4.0, 5.0),
    "tau_s": (1.0, 2.0),
    "pool": (1, 2, 4, 8),
}


# Wide enough for each step of ``compare.SIM_STEPS`` (its own best setting is inside it):
# HIGH 5-11 for high loads of 6-10 req/s, T between the calm and the lowest high load;
# tau 2 s (1 s flips on the calm phase's noise, above)
ACROSS_GRID = {
    "low": (2, 3, 4),
    "high": tuple(range(5, 12)),
    "threshold": (3.0, 4.0, 5.0),
    "tau_s": (2.0,),
    "pool": (2, 4),
}
GRIDS = {"step": GRID, "across": ACROSS_GRID}
KEY = ("low", "high", "threshold", "tau_s", "pool")  # a setting's fields, in a row
SCORED = ("attainment", "replica_s", "reversals")  # what a run's row keeps of its scorecard


@dataclass(frozen=True, slots=True)
class TwoLevelState:
    level: int
    rate: float = 0.0  # arrivals, req/s (EWMA)
    counted: tuple[tuple[str, float], ...] = ()  # each replica's arrived_requests, last seen
    t: float | None = None
    under_since: float | None = None


@dataclass(slots=True)  # not frozen: ``ScalingPolicy.name`` is a plain attribute
class TwoLevel:
    low: int
    high: int
    threshold: float  # req/s
    tau_s: float
    hold_s: float = HOLD_S
    name: str = "two-level"

    def initial_state(self) -> TwoLevelState:
        return TwoLevelState(self.low)

    def decide(
        self,
        snapshot: MetricsSnapshot,
        config: ScalingConfig,  # noqa: ARG002 (the protocol's signature; bounds are LOW/HIGH)
        state: TwoLevelState,
    ) -> tuple[int, TwoLevelState]:
        # per replica: one that wakes brings its old count, one that leaves takes its count
        seen = dict(state.counted)
        counted = tuple((m.replica_id, m.arrived_requests) for m in snapshot.replicas)
        arrived = sum(max(0.0, c - seen.get(rid, c)) for rid, c in counted)
        rate = state.rate
        if state.t is not None and snapshot.now > state.t:
            dt = snapshot.now - state.t
            rate += (1.0 - math.exp(-dt / self.tau_s)) * (arrived / dt - rate)
        level, under = state.level, state.under_since
        if rate >= self.threshold:
            level, under = self.high, None
        else:
            under = snapshot.now if under is None else under
            if snapshot.now - under >= self.hold_s:
                level = self.low
        return level, TwoLevelState(level, rate, counted, snapshot.now, under)


@dataclass(frozen=True, slots=True)
class Setting:
    low: int
    high: int
    threshold: float
    tau_s: float
    pool: int


def settings(grid: dict[str, tuple[Any, ...]] = GRID) -> list[Setting]:
    return [Setting(*v) for v in itertools.product(*(grid[k] for k in KEY)) if v[0] < v[1]]


@functools.cache
def drawn(name: str) -> tuple[list[RequestSpec], StepLoad | None]:
    """A sim workload's requests (the step's take ~11 s to draw from the trace): once per
    process, not per run."""
    return workload("sim", name)


def simulate(
    rule: ScalingPolicy[Any] | None,
    start: int,
    floor: int,
    pool: int,
    name: str = "step",
    max_replicas: int | None = None,
    router: str | None = None,
) -> tuple[PolicyRun, dict[str, Any]]:
    """One run of a sim workload as ``compare`` runs it (setup, SLO, look-back), the fleet
    starting at ``start``, never below ``floor``: the run and its scorecard. ``rule`` None:
    the registry's ``none`` (the fleet stays as it started). ``router``: route the simulated
    fleet with that policy instead of the setup's (as ``compare --router``)."""
    from experiments.autoscaling import sim
    from experiments.autoscaling.metrics import scorecard

    specs, step = drawn(name)
    setup = replace(SIM_SETUPS[name], min_replicas=start, warm_pool=pool)
    if max_replicas is not None:
        setup = replace(setup, max_replicas=max_replicas)
    if router is not None:
        setup = replace(setup, router=router)
    scaling = ScalingConfig(min_replicas=floor, max_replicas=setup.max_replicas, ttft_slo_s=SLO_S)
    run = sim.run_sim(specs, "none", scaling, setup, policy_obj=rule)
    row = scorecard(
        run.summary, run.samples, end_s=run.end_s, step_t=step.step_up_s if step else None,
        exact_replica_s=run.replica_s,
    )  # fmt: skip
    return run, row


def run_rule(
    low: int, high: int, pool: int, rule: ScalingPolicy[Any] | None, name: str = "step"
) -> dict[str, Any]:
    """The scorecard of one run, the fleet starting at ``low`` (the rule's floor); ``rule``
    None: a fixed fleet of ``low`` (``high`` = ``low``)."""
    return simulate(rule, low, low, pool, name, max_replicas=high if rule is None else None)[1]


def run_one(s: Setting, name: str = "step") -> dict[str, Any]:
    """One setting of the rule on a step, the fleet starting at LOW (no cold start)."""
    rule = TwoLevel(s.low, s.high, s.threshold, s.tau_s)
    row = run_rule(s.low, s.high, s.pool, rule, name)
    return {**asdict(s), **{k: row[k] for k in SCORED}}


def run_ours(pool: int, name: str) -> dict[str, Any]:
    """Ours with its defaults, from one replica, as ``compare`` runs it."""
    row = run_rule(1, SIM_SETUPS[name].max_replicas, pool, TTFTQueuePolicy(), name)
    return {"pool": pool, **{k: row[k] for k in SCORED}}


def run_static(n: int, name: str = "step") -> dict[str, Any]:
    """A fixed fleet of ``n`` (``compare``'s static rows): the goal's reference."""
    row = run_rule(n, n, 0, None, name)
    return {"replicas": n, "attainment": row["attainment"], "replica_s": row["replica_s"]}


def cheapest(
    rows: Iterable[dict[str, Any]], attainment: float, reversals: int | None = None
) -> dict[str, Any] | None:
    ok = [
        r for r in rows
        if (r["attainment"] or 0.0) >= attainment and (reversals is None or r["reversals"] <= reversals)
    ]  # fmt: skip
    return min(ok, key=lambda r: r["replica_s"], default=None)


def summary(rows: list[dict[str, Any]], static_replica_s: float) -> list[str]:
    """Per pool size: the cheapest setting reaching the goal's attainment, as a ratio to the
    fixed fleet, with any number of reversals and with at most the goal's."""
    out = []
    for pool in sorted({r["pool"] for r in rows}):
        mine = [r for r in rows if r["pool"] == pool]
        for cap, label in (
            (None, "any reversals"),
            (STEP_REVERSALS, f"<= {STEP_REVERSALS} reversals"),
        ):
            best = cheapest(mine, GOAL_ATTAINMENT, cap)
            head = f"pool {pool}, {label}:"
            if best is None:
                out.append(f"{head} no setting reaches {100 * GOAL_ATTAINMENT:.0f} %")
                continue
            ratio = best["replica_s"] / static_replica_s
            out.append(
                f"{head} {100 * best['attainment']:.2f} % at {best['replica_s']:.0f} replica-s "
                f"({ratio:.2f}x; goal <= {GOAL_RATIO}x), {best['reversals']} reversals, with "
                f"LOW {best['low']}, HIGH {best['high']}, T {best['threshold']:g} req/s, "
                f"tau {best['tau_s']:g} s"
            )
    return out


def sweep(
    name: str, run: Callable[[T], dict[str, Any]], grid: Iterable[T], workers: int
) -> dict[str, Any]:
    """``compare``'s fixed fleets on workload ``name`` (the reference: the cheapest reaching
    the goal's attainment), then ``run`` on every setting of ``grid``, each row printed as
    it comes; the fixed fleets, the reference and the rows, for the JSON."""
    rows = []
    with ProcessPoolExecutor(workers) as pool:
        fixed = list(pool.map(run_static, SIM_STATIC[name], repeat(name)))
        static = cheapest(fixed, GOAL_ATTAINMENT)
        assert static is not None, f"no fixed fleet reaches the goal: {fixed}"
        print(
            f"reference: static {static['replicas']} replicas, {static['replica_s']:.0f} replica-s",
            flush=True,
        )
        for row in pool.map(run, grid):
            rows.append(row)
            print(json.dumps(row), flush=True)
    return {"workload": name, "static": static, "fixed": fixed, "rows": rows}


def at_goal(attainment: float, ratio: float) -> bool:
    """The goal: at least ``GOAL_ATTAINMENT`` at most ``GOAL_RATIO`` x the fixed fleet."""
    return attainment >= GOAL_ATTAINMENT and ratio <= GOAL_RATIO


def meets(row: dict[str, Any], static_replica_s: float) -> bool:
    return at_goal(row["attainment"] or 0.0, row["replica_s"] / static_replica_s)


Scores = dict[tuple[Any, ...], list[tuple[float, float]]]  # setting -> (attainment, ratio) each


def scores(datas: list[dict[str, Any]], key: tuple[str, ...]) -> Scores:
    """Each setting (its ``key`` fields) with its attainment and cost ratio to that
    workload's fixed fleet on every workload, for the settings run on all of them."""
    table: Scores = {}
    for data in datas:
        ref = data["static"]["replica_s"]
        for r in data["rows"]:
            table.setdefault(tuple(r[k] for k in key), []).append(
                (r["attainment"] or 0.0, r["replica_s"] / ref)
            )
    return {s: v for s, v in table.items() if len(v) == len(datas)}


def worst_case(
    mine: Scores,
) -> tuple[list[tuple[Any, ...]], tuple[Any, ...] | None, tuple[Any, ...] | None]:
    """One setting judged on its worst workload: the settings meeting the goal on all; the
    one whose worst ratio is lowest among those reaching the attainment on all; the one
    whose worst attainment is highest among those within the cost on all."""
    every = [s for s, v in mine.items() if all(at_goal(a, x) for a, x in v)]
    reaching = [s for s, v in mine.items() if min(a for a, _ in v) >= GOAL_ATTAINMENT]
    cheap = min(reaching, key=lambda s: max(x for _, x in mine[s]), default=None)
    within = [s for s, v in mine.items() if max(x for _, x in v) <= GOAL_RATIO]
    best = max(within, key=lambda s: min(a for a, _ in mine[s]), default=None)
    return every, cheap, best


def across(datas: list[dict[str, Any]]) -> list[str]:
    """Each step's cheapest setting at the goal and ours there; then one setting on every
    step (nothing tuned per step), per pool: how many meet the goal on all of them, the
    one whose worst cost ratio is lowest among those reaching the attainment on all, and
    the one whose worst attainment is highest among those within the cost on all."""
    out = []
    for data in datas:
        ref = data["static"]["replica_s"]
        name = data["workload"]
        ok = [r for r in data["rows"] if meets(r, ref)]
        best = min(ok, key=lambda r: r["replica_s"], default=None)
        head = f"{name} (fixed {data['static']['replicas']}, {ref:.0f} replica-s):"
        if best is None:
            out.append(f"{head} no setting meets the goal")
        else:
            setting = ", ".join(f"{k} {best[k]:g}" for k in KEY)
            out.append(
                f"{head} {len(ok)} of {len(data['rows'])} settings meet the goal; cheapest "
                f"{100 * best['attainment']:.2f} % at {best['replica_s'] / ref:.2f}x "
                f"({best['reversals']} reversals; {setting})"
            )
        for r in data.get("ours", []):
            out.append(
                f"{name}: ours, pool {r['pool']}: {100 * r['attainment']:.2f} % at "
                f"{r['replica_s'] / ref:.2f}x, {r['reversals']} reversals"
            )
    full = scores(datas, KEY)
    names = ", ".join(d["workload"] for d in datas)
    for pool in sorted({k[-1] for k in full}):
        mine = {k: v for k, v in full.items() if k[-1] == pool}
        every, cheap, best = worst_case(mine)
        out.append(
            f"pool {pool}, one setting on {names}: {len(every)} of {len(mine)} meet the goal on all"
        )
        for label, k in (
            ("cheapest at the attainment on all", cheap),
            ("best within the cost on all", best),
        ):
            got = "none" if k is None else (
                ", ".join(f"{f} {v:g}" for f, v in zip(KEY, k, strict=True)) + ": "
                + "; ".join(f"{100 * a:.2f} % at {x:.2f}x" for a, x in mine[k])
            )  # fmt: skip
            out.append(f"  {label}: {got}")
    return out


def write(out: Path, data: dict[str, Any]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="JSON file for every setting's row")
    ap.add_argument("--workers", type=int, default=2, help="processes running settings")
    ap.add_argument("--summarize", action="store_true", help="only print the summary of --out")
    ap.add_argument("--workload", default="step", choices=sorted(SIM_STEPS))
    ap.add_argument("--grid", default="step", choices=sorted(GRIDS))
    ap.add_argument("--across", type=Path, nargs="+", help="judge one setting on these files")
    args = ap.parse_args(argv)
    if args.across:
        for line in across([json.loads(p.read_text()) for p in args.across]):
            print(line)
        return 0
    if args.out is None:
        ap.error("--out is required")
    if args.summarize:
        data = json.loads(args.out.read_text())
    else:
        name, grid = args.workload, GRIDS[args.grid]
        run = functools.partial(run_one, name=name)
        data = {"hold_s": HOLD_S, **sweep(name, run, settings(grid), args.workers)}
        if args.grid == "across":  # ours beside it, with the pools of the grid and none
            pools = (0, *grid["pool"])
            with ProcessPoolExecutor(args.workers) as ex:
                data["ours"] = list(ex.map(run_ours, pools, repeat(name)))
        write(args.out, data)
    for line in summary(data["rows"], data["static"]["replica_s"]):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
