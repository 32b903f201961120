"""The KubeRay ``RayService`` document (``kuberay/base/rayservice.yaml``) built from the
llmfleet config: one head group, one worker group per GPU node type, the Serve config
(``cluster.deploy.serve_config``) embedded as ``serveConfigV2``.

    RayService <cluster.name>
      serveConfigV2      the `--target serve` file's applications/http_options, as a string
      rayClusterConfig
        rayVersion 2.60.0, enableInTreeAutoscaling, autoscalerOptions.idleTimeoutSeconds
        authOptions        mode token, secretName llmfleet-ray-token (key auth_token)
        headGroupSpec      num-gpus 0, no nvidia.com/gpu; cpus/memory_gib as requests = limits
        workerGroupSpecs   replicas = minReplicas = min_workers, maxReplicas = max_workers,
                           resources {"accelerator_type:<X>": 1}, nvidia.com/gpu: gpus

Contract:
- A KubeRay node is a pod: ``cpus``/``memory_gib`` become the pod's requests and limits, so
  they must fit a machine's *allocatable* resources, not its capacity.
- ``dashboard-host`` is ``0.0.0.0``, not loopback: the operator submits ``serveConfigV2``
  and reads Serve's status through the head Service's ``dashboard`` port (KubeRay
  ``FetchHeadServiceURL``); a loopback dashboard leaves the RayService never ready. The
  dashboard is closed by Ray token auth (its HTTP middleware answers 401/403 without the
  token) and by the NetworkPolicy (the operator and the fleet's own pods only).
- Token auth: ``authOptions.secretName`` (KubeRay >= 1.6) hands the operator our Secret,
  which its dashboard client needs too; the env vars are also set explicitly, so the pods
  read the same Secret whatever the operator injects.
- No secret value is rendered: every credential is a ``secretKeyRef`` or a Secret volume.
"""

from __future__ import annotations

import json
import posixpath
from typing import Any

import yaml

from cluster.config import FleetConfig
from cluster.deploy.settings import NodeType

RAY_VERSION = "2.60.0"
DEFAULT_IMAGE = f"rayproject/ray:{RAY_VERSION}-py311-gpu"
TOKEN_SECRET = "llmfleet-ray-token"
TOKEN_KEY = "auth_token"  # KubeRay's RAY_AUTH_TOKEN_SECRET_KEY
KEYS_SECRET = "llmfleet-api-keys"
KEYS_KEY = "keys.yaml"
MODELS_CLAIM = "llmfleet-models"
FLEET_LABEL = "llmfleet.io/fleet"
ACCELERATOR_LABEL = "llmfleet.io/accelerator"  # set by the operator of the k8s cluster
DASHBOARD_PORT = 8265
RUNAI_CONCURRENCY = "16"


def fleet_labels(cfg: FleetConfig) -> dict[str, str]:
    return {FLEET_LABEL: cfg.cluster.name, "app.kubernetes.io/part-of": "llmfleet"}


def serve_port(cfg: FleetConfig) -> int:
    """Serve's HTTP proxy port (the operator health-checks it as the ``serve`` port)."""
    from cluster.runtime import http_options

    return int(http_options(cfg)["port"])


def quantity_gib(gib: float) -> str:
    mib = round(gib * 1024)
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"


def weights_kind(cfg: FleetConfig) -> str:
    """``object``: s3:// or gs:// streamed by vLLM's runai loader; ``path``: a directory
    the pods mount from the ``llmfleet-models`` PVC (weights_uri, else model.path)."""
    uri = cfg.cluster.weights_uri or ""
    return "object" if uri.startswith(("s3://", "gs://")) else "path"


def models_mount_path(cfg: FleetConfig) -> str:
    return cfg.cluster.weights_uri or cfg.model.path


def serve_config_text(cfg: FleetConfig, version: str | None = None) -> str:
    """The Serve config as ``serve deploy`` takes it (cluster/deploy/serve_config.py)."""
    from cluster.deploy import serve_config

    doc = serve_config.serve_config(cfg, version or serve_config.llmfleet_version())
    return yaml.safe_dump(doc, sort_keys=False)


def _env(cfg: FleetConfig, gpu: bool) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": "RAY_AUTH_MODE", "value": "token"},
        _secret_env("RAY_AUTH_TOKEN", TOKEN_SECRET, TOKEN_KEY),
    ]
    from cluster.runtime import cluster_serve_env  # Serve's settings, as `llmfleet up` has

    env += [{"name": k, "value": v} for k, v in sorted(cluster_serve_env(cfg).items())]
    if cfg.server.api_keys_file is None:  # with a file, KeyStore would merge both: duplicates
        env.append(_secret_env("LLMFLEET_API_KEYS", KEYS_SECRET, KEYS_KEY))
    if gpu and weights_kind(cfg) == "object":
        env.append({"name": "RUNAI_STREAMER_CONCURRENCY", "value": RUNAI_CONCURRENCY})
        s3 = (cfg.cluster.weights_uri or "").startswith("s3://")
        if s3 and cfg.cluster.provider == "aws" and cfg.cluster.region:
            env.append({"name": "AWS_REGION", "value": cfg.cluster.region})
    return env


def _secret_env(name: str, secret: str, key: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}


def _volumes(cfg: FleetConfig, gpu: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumes, volumeMounts): /dev/shm in memory (Ray's object store, NCCL), the key file
    when server.api_keys_file is set, the models PVC on GPU pods when weights are a path."""
    volumes: list[dict[str, Any]] = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    mounts: list[dict[str, Any]] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    if cfg.server.api_keys_file:
        path = cfg.server.api_keys_file
        items = [{"key": KEYS_KEY, "path": posixpath.basename(path), "mode": 0o400}]
        volumes.append({"name": "api-keys", "secret": {"secretName": KEYS_SECRET, "items": items}})
        mounts.append(
            {"name": "api-keys", "mountPath": posixpath.dirname(path) or "/", "readOnly": True}
        )
    if gpu and weights_kind(cfg) == "path":
        claim = {"claimName": MODELS_CLAIM, "readOnly": True}
        volumes.append({"name": "models", "persistentVolumeClaim": claim})
        mounts.append({"name": "models", "mountPath": models_mount_path(cfg), "readOnly": True})
    return volumes, mounts


def _ports(cfg: FleetConfig, head: bool) -> list[dict[str, Any]]:
    ports = []
    if head:
        ports += [
            {"name": "gcs-server", "containerPort": 6379},
            {"name": "dashboard", "containerPort": DASHBOARD_PORT},
            {"name": "client", "containerPort": 10001},
        ]
    ports.append({"name": "serve", "containerPort": serve_port(cfg)})
    if serve_port(cfg) != cfg.server.port:  # ingress: direct serves the API port itself
        ports.append({"name": "api", "containerPort": cfg.server.port})
    ports.append({"name": "metrics", "containerPort": cfg.server.metrics_export_port})
    return ports


def _container(cfg: FleetConfig, node: NodeType, head: bool) -> dict[str, Any]:
    size = {"cpu": str(node.cpus), "memory": quantity_gib(node.memory_gib)}
    limits = {**size, "nvidia.com/gpu": str(node.gpus)} if node.gpus else dict(size)
    _, mounts = _volumes(cfg, bool(node.gpus))
    return {
        "name": "ray-head" if head else "ray-worker",
        "image": cfg.cluster.image or DEFAULT_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "ports": _ports(cfg, head),
        "env": _env(cfg, bool(node.gpus)),
        "resources": {"requests": dict(limits), "limits": limits},
        "volumeMounts": mounts,
        "securityContext": {"allowPrivilegeEscalation": False},
    }


def _template(cfg: FleetConfig, node: NodeType, head: bool) -> dict[str, Any]:
    volumes, _ = _volumes(cfg, bool(node.gpus))
    labels = {**fleet_labels(cfg), "llmfleet.io/node-type": node.name}
    spec = {"containers": [_container(cfg, node, head)], "volumes": volumes}
    return {"metadata": {"labels": labels}, "spec": spec}


def head_group(cfg: FleetConfig) -> dict[str, Any]:
    params = {
        "num-gpus": "0",
        "dashboard-host": "0.0.0.0",
        "metrics-export-port": str(cfg.server.metrics_export_port),
    }
    return {"rayStartParams": params, "template": _template(cfg, cfg.cluster.head, head=True)}


def worker_group(cfg: FleetConfig, node: NodeType) -> dict[str, Any]:
    params = {"metrics-export-port": str(cfg.server.metrics_export_port)}
    if node.accelerator_type:
        params["resources"] = json.dumps({f"accelerator_type:{node.accelerator_type}": 1})
    return {
        "groupName": node.name,
        "replicas": node.min_workers,
        "minReplicas": node.min_workers,
        "maxReplicas": node.max_workers,
        "rayStartParams": params,
        "template": _template(cfg, node, head=False),
    }


def rayservice(cfg: FleetConfig, serve_text: str) -> dict[str, Any]:
    c = cfg.cluster
    cluster_config = {
        "rayVersion": RAY_VERSION,
        "enableInTreeAutoscaling": True,
        "autoscalerOptions": {
            "idleTimeoutSeconds": c.idle_timeout_minutes * 60,
            "upscalingMode": "Default",
        },
        "authOptions": {"mode": "token", "secretName": TOKEN_SECRET},
        "headGroupSpec": head_group(cfg),
        "workerGroupSpecs": [worker_group(cfg, n) for n in c.node_types],
    }
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": c.name, "namespace": c.namespace, "labels": fleet_labels(cfg)},
        "spec": {"serveConfigV2": serve_text, "rayClusterConfig": cluster_config},
    }
