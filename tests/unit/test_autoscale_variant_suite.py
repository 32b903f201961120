"""The rule-variant runner (``experiments/autoscaling/variant_suite.py``): its reference is the
smallest fixed fleet that reaches 99 %, measured, and its patch is what runs."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from experiments.autoscaling import variant_suite as vs


def fake_run(attainment_by_size: dict[int, float], calls: list[tuple[str, int, int]]) -> vs.Run:
    def run(name: str, pool: int, fixed: int) -> dict:
        calls.append((name, pool, fixed))
        if fixed:
            return {
                "attainment": attainment_by_size[fixed],
                "replica_s": 100.0 * fixed,
                "reversals": 0,
            }
        return {"attainment": 0.995, "replica_s": 250.0 + pool, "reversals": pool}

    return run


def test_reference_is_the_smallest_fleet_reaching_the_goal_and_the_search_stops_there() -> None:
    calls: list[tuple[str, int, int]] = []
    run = fake_run({3: 0.95, 4: 0.9899, 5: 0.99, 6: 1.0}, calls)
    assert vs.cheapest_fixed(run, "step", [6, 4, 5, 3]) == (5, 500.0)
    assert [c[2] for c in calls] == [3, 4, 5]  # increasing, and 6 never run
    assert vs.cheapest_fixed(fake_run({1: 0.5, 2: 0.98}, []), "step", [1, 2]) is None


def test_suite_rows_carry_the_reference_and_every_cell(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vs, "SIM_STATIC", {n: range(3, 7) for n in vs.SIM_STATIC})
    calls: list[tuple[str, int, int]] = []
    rows = vs.suite(fake_run({3: 0.9, 4: 0.991, 5: 1.0, 6: 1.0}, calls), "prefix", workers=2)
    assert [(r["trace"], r["pool"]) for r in rows] == list(vs.CELLS)
    assert {r["reference_replicas"] for r in rows} == {4}
    line = vs.cell_line("prefix", "step", 4, rows[1], rows[1]["reference_replica_s"])
    assert line.endswith("99.50 % 0.64x rev 4")  # 254 / 400
    assert sorted({c for c in calls if c[2] == 0}) == sorted((n, p, 0) for n, p in vs.CELLS)


def test_patched_tree_applies_the_patch_to_a_throwaway_worktree(tmp_path: Path) -> None:
    root = Path(vs.__file__).resolve().parents[2]
    if subprocess.run(
        ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True
    ).returncode:
        pytest.skip("not a git checkout")
    target = "pyproject.toml"  # any file committed at HEAD
    patch = tmp_path / "p.patch"
    first, second = (root / target).read_text().splitlines(keepends=True)[:2]
    patch.write_text(  # a line added after the first (git wants context on both sides)
        f"--- a/{target}\n+++ b/{target}\n@@ -1,2 +1,3 @@\n {first}+# patched\n {second}"
    )
    before = subprocess.run(
        ["git", "-C", str(root), "worktree", "list"], capture_output=True, text=True, check=True
    ).stdout
    with vs.patched_tree(patch, "HEAD") as tree:
        assert tree != root
        assert (tree / target).read_text().splitlines()[1] == "# patched"
    assert not tree.exists()
    after = subprocess.run(
        ["git", "-C", str(root), "worktree", "list"], capture_output=True, text=True, check=True
    ).stdout
    assert after == before
    with vs.patched_tree(None, "HEAD") as tree:
        assert tree == root
