"""Component: `make bench-ceiling`'s machinery, small — the null engine served by llmfleet and
by the one-process floor, driven by the load generator, with serving CPU attributed per role."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.ceiling import ceiling

pytestmark = [pytest.mark.component]
STEP_S = 0.01


def test_ceiling_small_run(tmp_path: Path) -> None:
    out = tmp_path / "ceiling.json"
    argv = ["--targets", "floor,llmfleet", "--concurrency", "4", "--rounds", "1"]
    argv += ["--duration", "3", "--sim-users", "0", "--output", "32", "--step-s", str(STEP_S)]
    assert ceiling.main([*argv, "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert out.with_suffix(".png").stat().st_size > 0
    for name in ("floor", "llmfleet"):
        (row,) = res["runs"][name]["4"]
        assert row["failed"] == 0
        assert row["output_tokens"] > 0
        # every request ran to its 32 tokens, one per step: ITL is the step plus serving cost
        assert row["output_tokens"] % 32 == 0
        assert STEP_S * 1000 * 0.5 < row["itl_p50_ms"] < STEP_S * 1000 * 5
        assert 0.2 < row["delivered_fraction"] <= 1.05
        assert row["tokens_per_serving_cpu_s"] > 0
    roles = res["runs"]["llmfleet"]["4"][0]["serving_cpu_by_role"]
    assert {"ingress", "replica", "proxy"} <= set(roles), roles
    assert set(res["runs"]["floor"]["4"][0]["serving_cpu_by_role"]) == {"floor"}
    assert res["summary"]["floor"]["by_concurrency"]["4"]["output_tok_s"] > 0
