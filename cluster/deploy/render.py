"""Render a deploy target's files from one llmfleet config, and the committed goldens.

Each target is one module with ``render_files(cfg) -> {relative path: text}`` (pure: same
config, same bytes), registered here by name; ``render`` writes them under a directory.
The goldens are every example config (``deploy/llmfleet.cluster-*.yaml``) × every target,
under ``deploy/rendered/<example stem>/<target>/``; ``python -m cluster.deploy.render --all``
rewrites them and ``tests/unit/test_deploy_golden.py`` fails when they drift. A target whose
module is not there yet is skipped, by name.
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import sys
from pathlib import Path
from types import ModuleType

from cluster.config import FleetConfig, load_config

TARGETS = {
    "ray-up": "cluster.deploy.ray_up",
    "serve": "cluster.deploy.serve_config",
    "kuberay": "cluster.deploy.kuberay",
}
ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = tuple(
    ROOT / "deploy" / f"llmfleet.cluster-{name}.yaml" for name in ("aws", "gcp", "onprem")
)
GOLDEN_DIR = ROOT / "deploy" / "rendered"


def target_module(target: str) -> ModuleType | None:
    """The target's module; None while it does not exist (an import error inside it raises)."""
    name = TARGETS[target]
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name == name:
            return None
        raise


def render_files(cfg: FleetConfig, target: str) -> dict[str, str]:
    module = target_module(target)
    if module is None:
        raise ImportError(f"target {target}: {TARGETS[target]} does not exist yet")
    files: dict[str, str] = module.render_files(cfg)
    return files


def render(cfg: FleetConfig, target: str, out_dir: str | Path) -> list[Path]:
    from cluster.deploy.exposure import render_refusal

    refusal = render_refusal(cfg, target)
    if refusal:
        raise ValueError(refusal)
    out = Path(out_dir)
    written = []
    for rel, text in sorted(render_files(cfg, target).items()):
        path = out / rel
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            raise ValueError(f"target {target} rendered a path outside its directory: {rel}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written


def golden_dir(example: Path, target: str) -> Path:
    return GOLDEN_DIR / example.stem / target


def render_all() -> tuple[list[Path], list[str]]:
    """Rewrite every golden (a target's old files go first); returns what was written and
    the targets skipped for want of a module."""
    written: list[Path] = []
    skipped = [t for t in TARGETS if target_module(t) is None]
    for example in EXAMPLES:
        cfg = load_config(example)
        for target in TARGETS:
            if target in skipped:
                continue
            shutil.rmtree(golden_dir(example, target), ignore_errors=True)
            written += render(cfg, target, golden_dir(example, target))
    return written, skipped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--all", action="store_true", required=True, help="rewrite the goldens")
    parser.parse_args(argv)
    written, skipped = render_all()
    for path in written:
        print(path.relative_to(ROOT))
    for target in skipped:
        print(f"skipped {target}: {TARGETS[target]} does not exist yet", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
