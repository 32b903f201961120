"""``--target serve``: a Ray Serve config file (Serve 2.60's ``ServeDeploySchema``) for
``serve deploy`` on a running cluster, ``serve run``, or a KubeRay RayService's
``serveConfigV2``.

    applications[llmfleet]
      import_path  cluster.serve_entry:app      the builder; runs build_app(parse_config(args.config))
      args         config: the llmfleet config (no cluster:, no fields of `deployments`)
                   llmfleet_version: the builder refuses another installed version
      deployments  LLMReplica     replica count or autoscaling bounds, max_ongoing_requests,
                                  the GPU placement group (bundles, STRICT_PACK, accelerator)
                   OpenAIIngress  replica count

What ``serve deploy`` of a changed file does (read from Serve 2.60: DeploymentConfig's
``update_type`` per field, ``get_app_code_version``, ``DeploymentVersion``):

* In place, no replica restarts: ``num_replicas``, ``autoscaling_config`` (min/max replicas,
  delays, look-back; not its ``policy`` block), ``max_ongoing_requests``,
  ``max_queued_requests``, ``user_config``, ``graceful_shutdown_timeout_s``,
  ``health_check_period_s``/``timeout_s``, ``rolling_update_percentage``, ``max_surge_percent``.
* Restart that deployment's replicas (a rolling update): ``ray_actor_options``,
  ``placement_group_bundles``/``strategy``.
* Restart every replica of the app (a new code version, the builder runs again):
  ``import_path``, ``runtime_env``, ``args``, ``autoscaling_config.policy``, a
  ``request_router_config`` given here.

So the fields an operator changes live are rendered under ``deployments`` and left out of
``args``: re-rendering after changing replica counts, bounds or ``max_ongoing_requests`` gives
an in-place update. The autoscaling policy reads its bounds from Serve's context, so they
are left out of its ``policy_kwargs`` too. An llmfleet upgrade is a new ``llmfleet_version``
in ``args``, so a restart, as it must be.

The builder runs on a node without GPUs: the file carries the GPU resources
(``plan.replica_options``) and vLLM's GPU KV block size (16, unless set), which the ingress's
and routers' prefix hashing must share with the engine.
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

from cluster.app import (
    APP_NAME,
    GPU_BLOCK_SIZE,
    INGRESS_DEPLOYMENT,
    REPLICA_DEPLOYMENT,
    autoscaling_options,
    ingress_replicas,
)
from cluster.config import ConfigError, FleetConfig, parse_config
from cluster.deploy.plan import replica_options, uses_gpus
from cluster.runtime import http_options

FILE = "serve/serve-config.yaml"
IMPORT_PATH = "cluster.serve_entry:app"
HEADER = """\
# Ray Serve config (Serve 2.60) rendered by `llmfleet deploy render --target serve`; re-render
# rather than edit: `serve deploy` this file to a running llmfleet cluster (docs/deploy.md).
# In place (no restarts): num_replicas, autoscaling_config bounds and delays (not its policy),
#   max_ongoing_requests, max_queued_requests, user_config, graceful_shutdown_timeout_s,
#   health_check_period_s/timeout_s, rolling_update_percentage, max_surge_percent.
# Restart a deployment's replicas (rolling): ray_actor_options, placement_group_*.
# Restart every replica (new code version): import_path, runtime_env, args,
#   autoscaling_config.policy, request_router_config.
# args.config leaves out cluster: and the fields set under deployments: so that changing
# those re-renders to an in-place update.
"""
# llmfleet config fields rendered under `deployments:` instead of args (section, field)
LIVE_FIELDS = (
    ("replicas", "num_replicas"),
    ("replicas", "max_ongoing_requests"),
    ("autoscaling", "min_replicas"),
    ("autoscaling", "max_replicas"),
)


def llmfleet_version() -> str:
    return metadata.version("llmfleet")


def app_args(cfg: FleetConfig, version: str) -> dict[str, Any]:
    data = cfg.model_dump(mode="json", exclude={"cluster"})
    for section, field in LIVE_FIELDS:
        del data[section][field]
    if cfg.server.ingress != "direct":  # the builder splits quotas by the ingress count
        data["server"]["ingress_replicas"] = ingress_replicas(cfg)
    if uses_gpus(cfg) and cfg.engine.vllm.block_size is None:
        data["engine"]["vllm"]["block_size"] = GPU_BLOCK_SIZE
    if cfg.cluster.weights_uri:  # the one cluster field the replicas read (object-store weights)
        data["cluster"] = {"weights_uri": cfg.cluster.weights_uri}
    return {"config": data, "llmfleet_version": version}


def replica_scaling(cfg: FleetConfig) -> dict[str, Any]:
    opts = autoscaling_options(cfg)
    if "num_replicas" in opts:
        return opts
    asc = opts["autoscaling_config"].model_dump(mode="json", exclude_unset=True)
    policy = asc.get("policy")
    if policy and "config" in policy.get("policy_kwargs", {}):
        for bound in ("min_replicas", "max_replicas"):  # read from Serve's context
            policy["policy_kwargs"]["config"].pop(bound, None)
    return {"autoscaling_config": asc}


def serve_config(cfg: FleetConfig, version: str) -> dict[str, Any]:
    replica = {
        "name": REPLICA_DEPLOYMENT,
        **replica_scaling(cfg),
        "max_ongoing_requests": cfg.replicas.max_ongoing_requests,
        **replica_options(cfg),
    }
    ingress = {"name": INGRESS_DEPLOYMENT, "num_replicas": ingress_replicas(cfg)}
    return {
        "proxy_location": "EveryNode",
        "http_options": http_options(cfg),
        "applications": [
            {
                "name": APP_NAME,
                "route_prefix": "/",
                "import_path": IMPORT_PATH,
                "args": app_args(cfg, version),
                "deployments": [replica, ingress],
            }
        ],
    }


def render_files(cfg: FleetConfig, version: str | None = None) -> dict[str, str]:
    body = yaml.safe_dump(serve_config(cfg, version or llmfleet_version()), sort_keys=False)
    return {FILE: HEADER + body}


def validate_serve(path: str | Path) -> list[str]:
    """Problems of a Serve config file: Serve's own schema, then what llmfleet's builder
    needs (its import path, deployment names, an llmfleet config that parses)."""
    from pydantic import ValidationError
    from ray.serve.schema import ServeDeploySchema

    where = str(path)
    try:
        data = yaml.safe_load(Path(path).read_text())
        ServeDeploySchema.model_validate(data)
    except (OSError, yaml.YAMLError) as err:
        return [f"{where}: cannot read: {err}"]
    except ValidationError as err:
        return [f"{where}: {'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors()]
    problems = []
    for i, app in enumerate(data.get("applications", [])):
        at = f"{where}: applications[{i}]"
        if app.get("import_path") != IMPORT_PATH:
            problems.append(f"{at}.import_path: {app.get('import_path')!r}, expected {IMPORT_PATH}")
        names = {d.get("name") for d in app.get("deployments", [])}
        unknown = names - {REPLICA_DEPLOYMENT, INGRESS_DEPLOYMENT}
        if unknown:
            problems.append(f"{at}.deployments: no such llmfleet deployment {sorted(unknown)}")
        try:
            parse_config((app.get("args") or {}).get("config"))
        except ConfigError as err:
            problems.append(f"{at}.args.config: {err}")
    return problems
