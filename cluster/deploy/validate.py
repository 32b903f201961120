"""``llmfleet deploy validate``: check rendered deploy files offline, before anything starts.

    <dir>/**/ray-up/*.yaml   1. Ray's cluster schema (ray/autoscaler/ray-schema.json of the
                                installed Ray, draft-07, with jsonschema)
                             2. what ``ray up`` itself does before it calls the cloud:
                                ``prepare_config`` (provider defaults, the local provider's
                                rules) then ``validate_config`` (schema again on the filled
                                config, head_node_type, sum of min_workers <= max_workers);
                                the provider's ``bootstrap_config`` needs cloud credentials
                                and is not run
                             3. llmfleet's own rules: token auth on every ``ray start``, the
                                dashboard on 127.0.0.1, a head without GPUs, no security
                                group rule open to all ports
    <dir>/**/serve/*.yaml    ``serve_config.validate_serve`` (Serve's ServeDeploySchema)
    <dir>/**/kuberay/        ``kuberay.validate_kuberay``

``validate_dir(path) -> list[str]``: one line per problem, naming the file and the JSON path
(``$.available_node_types.head.resources``); empty means valid. Validators of other targets
are imported only when their files are there; a missing one is itself a problem.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
from functools import cache
from pathlib import Path
from typing import Any

import yaml

AUTH = "RAY_AUTH_MODE=token"
DASHBOARD_HOST = "--dashboard-host=127.0.0.1"


def validate_dir(path: str | Path) -> list[str]:
    root = Path(path)
    if not root.is_dir():
        return [f"{root}: not a directory"]
    problems: list[str] = []
    for f in sorted(root.rglob("ray-up/*.yaml")):
        problems += [f"{_rel(f, root)}: {m}" for m in validate_cluster_file(f)]
    serve_files = sorted(root.rglob("serve/*.yaml"))
    if serve_files:
        problems += _other("serve_config", "validate_serve", serve_files, root)
    # a target directory kuberay/ holding the rendered kuberay/: validate the inner one once
    kuberay_dirs = sorted(
        p for p in root.rglob("kuberay") if p.is_dir() and not (p / "kuberay").is_dir()
    )
    if kuberay_dirs:
        problems += _other("kuberay", "validate_kuberay", kuberay_dirs, root)
    return problems


def validate_cluster_file(path: Path) -> list[str]:
    try:
        config = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        return [f"cannot read: {err}"]
    return validate_cluster(config)


def validate_cluster(config: Any) -> list[str]:
    """Problems of one ray up cluster config (a parsed YAML document)."""
    problems = schema_problems(config)
    if problems:  # Ray's own checks assume a config of the schema's shape
        return problems
    return ray_problems(config) + policy_problems(config)


@cache
def ray_schema() -> dict[str, Any]:
    import ray.autoscaler

    text = (Path(ray.autoscaler.__file__).parent / "ray-schema.json").read_text()
    schema: dict[str, Any] = json.loads(text)
    return schema


def schema_problems(config: Any) -> list[str]:
    import jsonschema

    validator = jsonschema.Draft7Validator(ray_schema())
    errors = sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path)))
    return [f"{e.json_path}: {e.message}" for e in errors]


def ray_problems(config: dict[str, Any]) -> list[str]:
    """``ray up``'s offline steps (commands.py ``_bootstrap_config`` before the provider)."""
    from ray.autoscaler._private.util import prepare_config, validate_config

    quiet = io.StringIO()
    try:
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            prepared = prepare_config(copy.deepcopy(config))
            validate_config(prepared)
    except Exception as err:  # Ray raises ValueError, NotImplementedError, ClickException...
        message = getattr(err, "message", None) or str(err) or type(err).__name__
        return [f"$: ray's config check: {message}"]
    return []


def policy_problems(config: dict[str, Any]) -> list[str]:
    out = []
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        for i, cmd in enumerate(config.get(key) or []):
            if "ray start" in cmd and AUTH not in cmd:
                out.append(f"$.{key}[{i}]: ray start without {AUTH}")
            if key.startswith("head") and "ray start" in cmd and DASHBOARD_HOST not in cmd:
                out.append(
                    f"$.{key}[{i}]: the dashboard must listen on 127.0.0.1 ({DASHBOARD_HOST})"
                )
    head = config.get("head_node_type")
    types = config.get("available_node_types") or {}
    if head in types and types[head].get("resources", {}).get("GPU") != 0:
        out.append(f"$.available_node_types.{head}.resources.GPU: the head must have GPU: 0")
    rules = (config.get("provider", {}).get("security_group") or {}).get("IpPermissions") or []
    for i, rule in enumerate(rules):
        if rule.get("IpProtocol") == "-1" or (rule.get("FromPort"), rule.get("ToPort")) == (
            0,
            65535,
        ):
            out.append(f"$.provider.security_group.IpPermissions[{i}]: opens every port")
    return out


def _other(module: str, func: str, targets: list[Path], root: Path) -> list[str]:
    try:
        mod = __import__(f"cluster.deploy.{module}", fromlist=[func])
        check = getattr(mod, func)
    except (ImportError, AttributeError):
        return [f"{_rel(targets[0], root)}: {module} validator not available"]
    out = []
    for target in targets:
        out += [
            m if m.startswith(str(target)) else f"{_rel(target, root)}: {m}" for m in check(target)
        ]
    return out


def _rel(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)
