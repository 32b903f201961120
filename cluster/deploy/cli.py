"""``llmfleet deploy render|plan|validate``: the thin command line over ``render``,
``plan`` and D2's ``validate``. Exit codes: 0 fine, 1 refused (plan's errors, validate's
problems, a target that cannot render), 2 an unusable config file (as ``llmfleet up``)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cluster.config import ConfigError, load_config
from cluster.deploy.plan import Plan, plan
from cluster.deploy.render import TARGETS, render


def cmd_render(args: argparse.Namespace) -> int:
    try:
        paths = render(load_config(args.config), args.target, args.out)
    except ConfigError as err:
        print(f"llmfleet: {err}", file=sys.stderr)
        return 2
    except (ImportError, OSError, ValueError) as err:
        print(f"llmfleet: deploy render: {err}", file=sys.stderr)
        return 1
    for path in paths:
        print(path)
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    try:
        result = plan(load_config(args.config))
    except ConfigError as err:
        print(f"llmfleet: {err}", file=sys.stderr)
        return 2
    print(json.dumps(result.to_dict(), indent=2) if args.json else format_plan(result))
    return 1 if result.refused else 0


def cmd_validate(args: argparse.Namespace) -> int:
    from cluster.deploy.validate import validate_dir  # issue 17 D2

    problems = validate_dir(args.dir)
    for line in problems:
        print(line)
    print(f"llmfleet: {args.dir}: {len(problems) or 'no'} problem(s)", file=sys.stderr)
    return 1 if problems else 0


def _bundles(bundles: tuple[Mapping[str, float], ...]) -> str:
    groups: list[list[Any]] = []
    for b in bundles:
        text = "{" + ", ".join(f"{k}: {v:g}" for k, v in b.items()) + "}"
        if groups and groups[-1][1] == text:
            groups[-1][0] += 1
        else:
            groups.append([1, text])
    return " + ".join(f"{n}×{text}" for n, text in groups)


def _nodes(nodes: Mapping[str, int]) -> str:
    return ", ".join(f"{name} × {n}" for name, n in nodes.items()) or "none"


def format_plan(p: Plan) -> str:
    lines = [f"{'deployment':<14} {'replicas':>8}  {'strategy':<11} bundles (one replica)"]
    for row in p.rows:
        count = (
            f"{row.min_replicas}..{row.replicas}"
            if row.min_replicas != row.replicas
            else str(row.replicas)
        )
        lines.append(
            f"{row.name:<14} {count:>8}  {row.strategy or '-':<11} {_bundles(row.bundles)}"
        )
    for row in p.rows:
        lines.append(f"\n{row.name}: {row.placement}")
        if row.fits:
            lines.append(
                f"  {'node type':<16} {'GPUs':>4} {'accel':<6} {'per node':>8} {'max_workers':>11}  why"
            )
        for f in row.fits:
            lines.append(
                f"  {f.node_type:<16} {f.gpus:>4} {f.accelerator or '-':<6} {f.per_node:>8} {f.max_workers:>11}  {f.reason}"
            )
        if row.fits:
            lines.append(f"  nodes for {row.replicas} replicas: {_nodes(row.nodes)}")
            short = f" ({row.headroom_short} replicas short)" if row.headroom_short else ""
            lines.append(
                f"  with rolling-update headroom (+{row.headroom_replicas}): {_nodes(row.nodes_with_headroom)}{short}"
            )
    lines += ["", *(f"note: {n}" for n in p.notes)]
    lines += [f"warning: {f}" for f in p.warnings] + [f"error: {f}" for f in p.errors]
    lines.append("plan: REFUSED" if p.refused else "plan: ok")
    return "\n".join(lines)


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "deploy", help="multi-node fleet: render ray up / Serve / KubeRay files, plan, validate"
    )
    dsub = p.add_subparsers(dest="deploy_command", required=True)
    r = dsub.add_parser("render", help="write one target's files from the config")
    r.add_argument("--config", required=True, help="llmfleet YAML with a cluster: section")
    r.add_argument("--target", required=True, choices=sorted(TARGETS))
    r.add_argument("--out", type=Path, required=True, help="directory to write into")
    r.set_defaults(func=cmd_render)
    r = dsub.add_parser(
        "plan", help="bundles, fitting node types, node counts; refuses impossible fleets"
    )
    r.add_argument("--config", required=True, help="llmfleet YAML with a cluster: section")
    r.add_argument("--json", action="store_true", help="machine-readable output")
    r.set_defaults(func=cmd_plan)
    r = dsub.add_parser(
        "validate", help="check rendered files against Ray's and Kubernetes' schemas"
    )
    r.add_argument("dir", type=Path, help="a directory `deploy render` wrote")
    r.set_defaults(func=cmd_validate)
