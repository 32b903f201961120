"""Render every generated observability file into ``dashboards/`` (or check it is fresh).

Each generator module has ``render_files(cfg) -> {relative path: text}``:
``dashboards.py`` (Grafana dashboards JSON), ``rules.py`` (Prometheus rules from ``alerts.py`` and their
``promtool test rules`` file), ``scrape.py`` (a Prometheus scrape config for Ray's metrics
port with the rules wired in). ``python -m cluster.observe.render --check`` (in
``make lint``) fails when the committed files differ from what the code generates.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cluster.config import FleetConfig, load_config

DEFAULT_DIR = Path(__file__).resolve().parents[2] / "dashboards"


def generated(cfg: FleetConfig) -> dict[str, str]:
    from cluster.observe import dashboards, rules, scrape

    out: dict[str, str] = {}
    for module in (dashboards, rules, scrape):
        for rel, text in module.render_files(cfg).items():
            if rel in out:
                raise ValueError(f"two generators write {rel}")
            out[rel] = text
    return out


def render(cfg: FleetConfig, out_dir: Path) -> list[Path]:
    written = []
    for rel, text in sorted(generated(cfg).items()):
        path = out_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written


def stale(cfg: FleetConfig, out_dir: Path) -> list[str]:
    """Relative paths whose committed text differs from the generated one (or is missing)."""
    bad = []
    for rel, text in sorted(generated(cfg).items()):
        path = out_dir / rel
        if not path.exists() or path.read_text() != text:
            bad.append(rel)
    return bad


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cluster.observe.render")
    ap.add_argument("--config", default=None, help="llmfleet YAML (default: built-in defaults)")
    ap.add_argument("--out", default=str(DEFAULT_DIR))
    ap.add_argument("--check", action="store_true", help="fail if the files are not fresh")
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    out = Path(args.out)
    if args.check:
        bad = stale(cfg, out)
        if bad:
            print(
                "generated observability files are stale: "
                + ", ".join(bad)
                + "\nrun: .venv/bin/llmfleet dashboards render",
                file=sys.stderr,
            )
            return 1
        return 0
    for path in render(cfg, out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
