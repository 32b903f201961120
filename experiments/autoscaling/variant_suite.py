"""Rule changes side by side: ours, or ours with a rule patch applied, on the seven cells
the variant tables of ``docs/results/autoscale-sim.md`` use, under one router.

  python -m experiments.autoscaling.variant_suite --router prefix
  python -m experiments.autoscaling.variant_suite --router prefix \\
      --patch experiments/autoscaling/rule_patches/rules-2026-12-07.patch --base 4f428a7 \\
      --set VAR_S=1 --set VAR_C2=1 --set H_COV=20 --set VAR_E=1

Cells: the step with 0 and 4 sleepers, the step x3 with 4, the 8B and 70B hours with 0
and 4 (``hindsight.simulate``, as ``compare`` runs ours: the fleet starting at one replica).
The reference of each trace is measured in the same run: the smallest fixed fleet (no pool)
reaching 99 %, searched upward from the bottom of ``compare.SIM_STATIC``. Each cell prints
attainment, cost against that reference and reversals.

A patch is applied to a throwaway ``git worktree`` of ``--base`` (removed afterwards); the
``--set`` switches go to the environment of the processes that run it. Every run is a
separate process started in the tree it measures, so the patched code is what runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from experiments.autoscaling.compare import SIM_STATIC
from experiments.autoscaling.hindsight import GOAL_ATTAINMENT
from router.registry import POLICY_NAMES

CELLS = (
    ("step", 0),
    ("step", 4),
    ("step-x3", 4),
    ("azure-hour-8b", 0),
    ("azure-hour-8b", 4),
    ("azure-hour", 0),
    ("azure-hour", 4),
)
RUN_TIMEOUT_S = 900  # one simulated run; the 70B hour takes under a minute on 2 cores
# One run, in the tree under test (cwd): ``fixed`` > 0 is a fixed fleet of that size. It
# sets the router through ``hindsight.SIM_SETUPS``, in its own process, because the trees it
# runs in (the patches' base, 4f428a7) predate ``hindsight.simulate(router=...)``.
WORKER = """
import json, sys
from dataclasses import replace
from experiments.autoscaling import hindsight
from experiments.autoscaling.compare import SIM_SETUPS
from autoscaler.ttft_queue import TTFTQueuePolicy
router, name, pool, fixed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
hindsight.SIM_SETUPS = {k: replace(v, router=router) for k, v in SIM_SETUPS.items()}
if fixed:
    _, row = hindsight.simulate(None, fixed, fixed, 0, name, max_replicas=fixed)
else:
    _, row = hindsight.simulate(TTFTQueuePolicy(), 1, 1, pool, name)
print(json.dumps({k: row[k] for k in ("attainment", "replica_s", "reversals")}))
"""

Run = Callable[[str, int, int], dict[str, Any]]  # (trace, pool, fixed fleet or 0) -> row


def cheapest_fixed(run: Run, name: str, sizes: Iterable[int]) -> tuple[int, float] | None:
    """The smallest fixed fleet reaching the goal and its replica-seconds; None if none in
    ``sizes`` does. Sizes are tried in increasing order and the search stops at the first
    that reaches it (a bigger fleet of the same replicas costs more)."""
    for n in sorted(sizes):
        row = run(name, 0, n)
        if row["attainment"] >= GOAL_ATTAINMENT:
            return n, row["replica_s"]
    return None


def cell_line(router: str, name: str, pool: int, row: dict[str, Any], ref: float | None) -> str:
    ratio = f"{row['replica_s'] / ref:.2f}x" if ref else "n/a"
    return (
        f"{router} {name:14s} pool {pool}: {100 * row['attainment']:.2f} % {ratio} "
        f"rev {row['reversals']}"
    )


def process_runner(tree: Path, router: str, env: dict[str, str]) -> Run:
    def run(name: str, pool: int, fixed: int) -> dict[str, Any]:
        args = [sys.executable, "-c", WORKER, router, name, str(pool), str(fixed)]
        full_env = {**os.environ, **env, "PYTHONPATH": str(tree)}
        out = subprocess.run(
            args, cwd=tree, env=full_env, capture_output=True, text=True,
            timeout=RUN_TIMEOUT_S, check=False,
        )  # fmt: skip
        if out.returncode != 0:
            raise RuntimeError(f"{name} pool {pool} fixed {fixed}: {out.stderr[-2000:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])

    return run


@contextmanager
def patched_tree(patch: Path | None, base: str) -> Iterator[Path]:
    """The repository root, or a worktree of ``base`` with ``patch`` applied (removed after)."""
    root = Path(__file__).resolve().parents[2]
    if patch is None:
        yield root
        return
    with tempfile.TemporaryDirectory(prefix="llmfleet-variant-") as tmp:
        tree = Path(tmp) / "tree"
        git = ["git", "-C", str(root)]
        subprocess.run([*git, "worktree", "add", "--detach", str(tree), base], check=True)
        try:
            subprocess.run(["git", "-C", str(tree), "apply", str(patch.resolve())], check=True)
            yield tree
        finally:
            subprocess.run([*git, "worktree", "remove", "--force", str(tree)], check=False)
            subprocess.run([*git, "worktree", "prune"], check=False)


def suite(run: Run, router: str, workers: int) -> list[dict[str, Any]]:
    """References first (one search per trace, in parallel), then the cells."""
    names = sorted({name for name, _ in CELLS})
    with ThreadPoolExecutor(workers) as pool:
        searches = pool.map(lambda n: cheapest_fixed(run, n, SIM_STATIC[n]), names)
        refs = dict(zip(names, searches, strict=True))
        rows = list(pool.map(lambda c: run(c[0], c[1], 0), CELLS))
    out = []
    for (name, sleepers), row in zip(CELLS, rows, strict=True):
        ref = refs[name]
        out.append({
            "router": router, "trace": name, "pool": sleepers, **row,
            "reference_replicas": ref[0] if ref else None,
            "reference_replica_s": ref[1] if ref else None,
        })  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--router", choices=POLICY_NAMES, default="least-loaded")
    ap.add_argument("--patch", type=Path, help="a rule patch to apply to --base")
    ap.add_argument("--base", default="HEAD", help="commit the patch applies to")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="environment switch for the patched rule (repeatable)")  # fmt: skip
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path, help="also write the rows as JSON")
    args = ap.parse_args(argv)
    env = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key:
            ap.error(f"--set wants KEY=VALUE, got {item!r}")
        env[key] = value
    with patched_tree(args.patch, args.base) as tree:
        rows = suite(process_runner(tree, args.router, env), args.router, args.workers)
    for r in rows:
        ref = r["reference_replica_s"]
        print(cell_line(args.router, r["trace"], r["pool"], r, ref), flush=True)
    if args.out:
        args.out.write_text(
            json.dumps({"switches": env, "patch": str(args.patch), "rows": rows}, indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
