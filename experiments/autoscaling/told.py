"""What a step needs on hand when it comes: a rule told when the load changes.

``hindsight.py`` gives a rule the step's loads but makes it see the step in the arrival
rate. Here the rule is told more: the times of the two load changes. It moves one decision
after each (``REACT_S``: the earliest any policy can see a change), with levels swept on
the trace itself:

    replicas = BEFORE  until the step up (+ REACT_S)
             = HIGH    until the step down (+ REACT_S)
             = AFTER   after it

A replica ordered at the step serves one boot later (30 s; a sleeper, one wake). So the
requests that come during that boot are served by what was on hand when the step came:
BEFORE awake, plus the warm pool's sleepers once woken. ``needed`` finds, per step and pool,
the smallest BEFORE for which even the largest response (HIGH = AFTER = ``RESPONSE``
replicas) reaches the goal's attainment. A policy that reacts to what it sees cannot do
better than this rule with the same BEFORE, so it must hold that many when the step comes.

The three steps of ``compare.SIM_STEPS`` share their calm phase: the same rate, the same
arrival times (their prompt lengths are drawn from the same distribution). Only the step
tells them apart, so a policy holds the same fleet before each. To reach the goal on all
three it must hold the largest of their BEFOREs; ``cheapest`` then prices each step with
that BEFORE and the best HIGH and AFTER for that step (still told), against that step's
cheapest fixed fleet at 99 %.

Each step is also priced with AFTER = BEFORE: a policy that, once it has seen a step,
holds no less in the calm load than before it (a burst seen is evidence for another, never
against one). A cheaper AFTER means dropping cover the policy held before any evidence.

Assumed, and stated with the results: the fleet before the step is held through the calm
phase (a policy cannot know when the step comes), and policies are deterministic.

  python -m experiments.autoscaling.told --out results/autoscale/told.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path
from typing import Any

from autoscaler.ttft_queue import TTFTQueuePolicy
from autoscaler.types import MetricsSnapshot, ScalingConfig
from experiments.autoscaling.compare import SIM_STATIC
from experiments.autoscaling.hindsight import (
    GOAL_ATTAINMENT,
    GOAL_RATIO,
    SCORED,
    cheapest,
    drawn,
    run_static,
    simulate,
    write,
)

STEPS = ("step-x3", "step", "step-x5")
POOLS = (0, 2, 4)
REACT_S = 1.0  # one decision after the change (decisions are 1 s apart)
RESPONSE = 20  # replicas: more than any step's fixed fleet at 99 % (6, 7, 9)
BEFORE_MAX = 12  # the search for BEFORE stops here
AFTERS = (2, 3, 4)  # the calm load (2 req/s): 3 hold it in every cheapest setting


@dataclass(slots=True)  # not frozen: ``ScalingPolicy.name`` is a plain attribute
class Told:
    before: int
    high: int
    after: int
    up_s: float
    down_s: float
    name: str = "told"

    def initial_state(self) -> None:
        return None

    def decide(
        self,
        snapshot: MetricsSnapshot,
        config: ScalingConfig,  # noqa: ARG002 (the protocol's signature)
        state: None,  # noqa: ARG002 (stateless: the times are told)
    ) -> tuple[int, None]:
        t = snapshot.now
        if t < self.up_s + REACT_S:
            return self.before, None
        return (self.high if t < self.down_s + REACT_S else self.after), None


def run_told(before: int, high: int, after: int, pool: int, name: str) -> dict[str, Any]:
    """The told rule, the fleet starting at BEFORE (no cold start)."""
    _, step = drawn(name)
    assert step is not None, f"{name} is not a step"
    rule = Told(before, high, after, step.step_up_s, step.step_down_s)
    _, row = simulate(rule, before, min(before, after), pool, name)
    return {
        "workload": name, "pool": pool, "before": before, "high": high, "after": after,
        **{k: row[k] for k in SCORED},
    }  # fmt: skip


def run_ours(pool: int, name: str) -> dict[str, Any]:
    """Ours with its defaults, from one replica, as ``compare`` runs it, and the replicas it
    has awake (running or booting) when the step comes."""
    _, step = drawn(name)
    assert step is not None, f"{name} is not a step"
    run, row = simulate(TTFTQueuePolicy(), 1, 1, pool, name)
    awake = [s.replicas for s in run.samples if s.t <= step.step_up_s][-1]
    return {"workload": name, "pool": pool, "awake_at_step": awake, **{k: row[k] for k in SCORED}}


def _run(args: tuple[int, int, int, int, str]) -> dict[str, Any]:
    return run_told(*args)


def needed(ceilings: Iterable[dict[str, Any]]) -> int | None:
    """The smallest BEFORE whose largest response reaches the goal's attainment."""
    ok = [r["before"] for r in ceilings if (r["attainment"] or 0.0) >= GOAL_ATTAINMENT]
    return min(ok, default=None)


def study(workers: int) -> dict[str, Any]:
    with ProcessPoolExecutor(workers) as ex:
        fixed = {
            name: cheapest(ex.map(run_static, SIM_STATIC[name], repeat(name)), GOAL_ATTAINMENT)
            for name in STEPS
        }
        ceilings: list[dict[str, Any]] = []
        for name, pool in itertools.product(STEPS, POOLS):  # BEFORE up from 1, two at a time
            for lo in range(1, BEFORE_MAX + 1, workers):
                grid = [(b, RESPONSE, RESPONSE, pool, name) for b in range(lo, lo + workers)]
                got = list(ex.map(_run, grid))
                ceilings += got
                if needed(got) is not None:
                    break
        need = {
            (name, pool): needed(r for r in ceilings if (r["workload"], r["pool"]) == (name, pool))
            for name, pool in itertools.product(STEPS, POOLS)
        }
        grid = []
        for name, pool in itertools.product(STEPS, POOLS):
            ref = fixed[name]
            assert ref is not None, f"no fixed fleet reaches the goal on {name}"
            shared = max((need[n, pool] or BEFORE_MAX) for n in STEPS)
            for before in sorted({need[name, pool] or BEFORE_MAX, shared}):
                highs = range(ref["replicas"] - 1, ref["replicas"] + 3)
                afters = sorted({*AFTERS, before})  # AFTER = BEFORE: the calm phases alike
                grid += [(before, h, a, pool, name) for h in highs for a in afters]
        priced = list(ex.map(_run, grid))
        names, pools = zip(*itertools.product(STEPS, POOLS), strict=True)
        ours = list(ex.map(run_ours, pools, names))
    return {
        "react_s": REACT_S, "response": RESPONSE, "fixed": fixed, "ceilings": ceilings,
        "needed": [{"workload": n, "pool": p, "before": b} for (n, p), b in need.items()],
        "priced": priced, "ours": ours,
    }  # fmt: skip


def summary(data: dict[str, Any]) -> list[str]:
    """Per pool: each step's BEFORE and its cheapest told setting at 99 %; then the BEFORE
    all three need (the largest), and each step's cheapest setting with it."""
    out = []
    need = {(r["workload"], r["pool"]): r["before"] for r in data["needed"]}
    for pool in POOLS:
        shared = max((need[n, pool] or BEFORE_MAX) for n in STEPS)
        out.append(f"pool {pool}: on hand at the step for 99 % on all three steps: {shared} awake")
        for name in STEPS:
            ref = data["fixed"][name]
            mine = [r for r in data["priced"] if (r["workload"], r["pool"]) == (name, pool)]
            ceil = {r["before"]: r["attainment"] for r in data["ceilings"]
                    if (r["workload"], r["pool"]) == (name, pool)}  # fmt: skip
            below = need[name, pool] - 1 if need[name, pool] else None
            line = f"  {name} (fixed {ref['replicas']}: {ref['replica_s']:.0f}): needs {need[name, pool]}"
            if below in ceil:
                line += f" (with {below}: at most {100 * ceil[below]:.2f} %)"
            for r in data.get("ours", []):
                if (r["workload"], r["pool"]) == (name, pool):
                    line += f"; ours holds {r['awake_at_step']}: {100 * r['attainment']:.2f} %"
            for label, before, alike in (
                ("own", need[name, pool], False),
                ("own, AFTER = BEFORE", need[name, pool], True),
                ("shared", shared, False),
                ("shared, AFTER = BEFORE", shared, True),
            ):
                runs = (
                    r for r in mine if r["before"] == before and (r["after"] == before or not alike)
                )
                best = cheapest(runs, GOAL_ATTAINMENT)
                if best is None:
                    line += f"; {label}: none at 99 %"
                    continue
                ratio = best["replica_s"] / ref["replica_s"]
                mark = "meets" if ratio <= GOAL_RATIO else "misses"
                line += (
                    f"; {label} {before}: {100 * best['attainment']:.2f} % at {ratio:.2f}x "
                    f"(HIGH {best['high']}, AFTER {best['after']}; {mark} the goal)"
                )
            out.append(line)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="JSON file for every run")
    ap.add_argument("--workers", type=int, default=2, help="processes running settings")
    ap.add_argument("--summarize", action="store_true", help="only print the summary of --out")
    args = ap.parse_args(argv)
    if args.summarize:
        data = json.loads(args.out.read_text())
    else:
        data = study(args.workers)
        write(args.out, data)
    for line in summary(data):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
