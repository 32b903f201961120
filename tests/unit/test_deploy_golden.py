"""The committed deploy/rendered/<example>/<target>/ files are what the renderers produce
now (drift check). Rewrite them with: python -m cluster.deploy.render --all"""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster.config import load_config
from cluster.deploy.render import EXAMPLES, TARGETS, golden_dir, render_files, target_module

CASES = [(e, t) for e in EXAMPLES for t in TARGETS]


@pytest.mark.parametrize(("example", "target"), CASES, ids=[f"{e.stem}-{t}" for e, t in CASES])
def test_golden_files_match_the_renderer(example: Path, target: str) -> None:
    if target_module(target) is None:
        pytest.skip(f"{TARGETS[target]} does not exist yet: no {target} goldens to compare")
    files = render_files(load_config(example), target)
    root = golden_dir(example, target)
    committed = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}
    fix = "run: python -m cluster.deploy.render --all"
    assert committed == set(files), f"{root}: files differ from the renderer's; {fix}"
    for rel, text in files.items():
        assert (root / rel).read_text() == text, f"{root / rel} drifted; {fix}"
