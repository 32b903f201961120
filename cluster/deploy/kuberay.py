"""``--target kuberay``: a KubeRay ``RayService`` as a kustomize base with two overlays,
rendered from the llmfleet config (its ``cluster:`` section and the Serve config).

    kuberay/
      base/          kustomization, namespace, rayservice, service-api, networkpolicy
      overlays/gpu/  JSON6902 patch: each GPU worker group on nodes labelled
                     llmfleet.io/accelerator=<X>, tolerating the nvidia.com/gpu taint
      overlays/dev/  JSON6902 patches: one worker group, at most one worker, Serve replicas
                     capped to what that node holds, the API Service ClusterIP
      README.md      the Secrets to create (kubectl commands, no values), image, weights

Why JSON6902 and not strategic merge for the RayService: kustomize knows no merge keys
for a custom resource, so a strategic-merge patch of ``workerGroupSpecs`` replaces the
whole list. The patches address groups by index and open with a ``test`` op on the group's
name, so a reordered base fails the build instead of patching the wrong group.

Network: the API port is open to ``cluster.api_cidrs`` only (NetworkPolicy ipBlocks, and
the load balancer's source ranges); Ray's ports only to the fleet's own pods (label
``llmfleet.io/fleet``, shared by the old and new RayCluster during an upgrade, which
``ray.io/cluster`` is not: KubeRay names a RayService's clusters with a random suffix);
the dashboard and the Serve port also to the KubeRay operator, which needs them.
"""

from __future__ import annotations

from typing import Any

import yaml

from cluster.config import FleetConfig
from cluster.deploy import kuberay_rayservice as rs
from cluster.deploy.kuberay_readme import readme
from cluster.deploy.kuberay_validate import validate_kuberay

__all__ = ["KUSTOMIZE_API", "render_files", "validate_kuberay"]

ROOT = "kuberay"
KUSTOMIZE_API = "kustomize.config.k8s.io/v1beta1"
OPERATOR_LABELS = {"app.kubernetes.io/name": "kuberay-operator"}  # the Helm chart's pod label
HEADER = (
    "# Rendered by `llmfleet deploy render --target kuberay` from {config}; re-render rather\n"
    "# than edit (docs/deploy.md, kuberay/README.md).\n"
)
IMAGE_NOTE = (
    "# Image: {image}. llmfleet itself must be installed in it (the Serve config's\n"
    "# import_path is cluster.serve_entry:app): build FROM this image with\n"
    "#   RUN pip install --no-cache-dir '{requirement}'\n"
    "# and set cluster.image to the result (kuberay/README.md).\n"
)


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, _data: Any) -> bool:  # no &id001 anchors in manifests
        return True


def _str(dumper: yaml.SafeDumper, text: str) -> yaml.Node:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_Dumper.add_representer(str, _str)


def dump(*docs: Any) -> str:
    return yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False, width=100)


def requirement(cfg: FleetConfig) -> str:
    from cluster.deploy.serve_config import llmfleet_version

    return cfg.cluster.llmfleet_requirement or f"llmfleet[gpu]=={llmfleet_version()}"


def namespace(cfg: FleetConfig) -> dict[str, Any]:
    labels = {
        **rs.fleet_labels(cfg),
        "pod-security.kubernetes.io/enforce": "baseline",
        "pod-security.kubernetes.io/warn": "restricted",
    }
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(cfg, None, labels)}


def _meta(cfg: FleetConfig, name: str | None, labels: dict[str, str]) -> dict[str, Any]:
    if name is None:
        return {"name": cfg.cluster.namespace, "labels": labels}
    return {"name": name, "namespace": cfg.cluster.namespace, "labels": labels}


def service_api(cfg: FleetConfig) -> dict[str, Any]:
    port = cfg.server.port
    spec = {
        "type": "LoadBalancer",
        "externalTrafficPolicy": "Local",  # keeps client IPs, which the ipBlocks match
        "loadBalancerSourceRanges": list(cfg.cluster.api_cidrs),
        "selector": {rs.FLEET_LABEL: cfg.cluster.name, "ray.io/serve": "true"},
        "ports": [{"name": "api", "protocol": "TCP", "port": port, "targetPort": port}],
    }
    name = f"{cfg.cluster.name}-api"
    meta = _meta(cfg, name, rs.fleet_labels(cfg))
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": spec}


def network_policies(cfg: FleetConfig) -> list[dict[str, Any]]:
    fleet = {"matchLabels": {rs.FLEET_LABEL: cfg.cluster.name}}
    api_from = [{"ipBlock": {"cidr": cidr}} for cidr in cfg.cluster.api_cidrs]
    operator_ports = sorted({rs.DASHBOARD_PORT, rs.serve_port(cfg)})
    rules = {
        "api": [{"from": api_from, "ports": [_tcp(cfg.server.port)]}],
        "ray-internal": [{"from": [{"podSelector": fleet}]}],
        "kuberay-operator": [
            {
                "from": [
                    {"namespaceSelector": {}, "podSelector": {"matchLabels": OPERATOR_LABELS}}
                ],
                "ports": [_tcp(p) for p in operator_ports],
            }
        ],
    }
    return [
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": _meta(cfg, f"{cfg.cluster.name}-{what}", rs.fleet_labels(cfg)),
            "spec": {"podSelector": fleet, "policyTypes": ["Ingress"], "ingress": ingress},
        }
        for what, ingress in rules.items()
    ]


def _tcp(port: int) -> dict[str, Any]:
    return {"protocol": "TCP", "port": port}


def kustomization(resources: list[str], patches: list[dict[str, Any]] | None = None) -> str:
    doc: dict[str, Any] = {"apiVersion": KUSTOMIZE_API, "kind": "Kustomization"}
    doc["resources"] = resources
    if patches:
        doc["patches"] = patches
    return dump(doc)


def _target(kind: str, name: str) -> dict[str, str]:
    if kind == "RayService":
        return {"group": "ray.io", "version": "v1", "kind": kind, "name": name}
    return {"version": "v1", "kind": kind, "name": name}


def _groups_path(i: int) -> str:
    return f"/spec/rayClusterConfig/workerGroupSpecs/{i}"


def gpu_patch(cfg: FleetConfig) -> list[dict[str, Any]]:
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": "/metadata/name", "value": cfg.cluster.name}
    ]
    taint = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    for i, node in enumerate(cfg.cluster.node_types):
        if not node.gpus:
            continue
        at = _groups_path(i)
        ops += [
            {"op": "test", "path": f"{at}/groupName", "value": node.name},
            {
                "op": "add",
                "path": f"{at}/template/spec/nodeSelector",
                "value": {rs.ACCELERATOR_LABEL: node.accelerator_type},
            },
            {"op": "add", "path": f"{at}/template/spec/tolerations", "value": taint},
        ]
    return ops


def dev_serve_text(serve_text: str, cap: int) -> str:
    """The Serve config with every deployment's replica counts capped at ``cap``."""
    doc = yaml.safe_load(serve_text)
    for app in doc.get("applications", []):
        for dep in app.get("deployments", []):
            if isinstance(dep.get("num_replicas"), int):
                dep["num_replicas"] = min(dep["num_replicas"], cap)
            asc = dep.get("autoscaling_config") or {}
            for bound in ("min_replicas", "initial_replicas", "max_replicas"):
                if isinstance(asc.get(bound), int):
                    asc[bound] = min(asc[bound], cap)
    return yaml.safe_dump(doc, sort_keys=False)


def dev_patches(cfg: FleetConfig, serve_text: str) -> tuple[list[Any], list[Any]]:
    """(RayService ops, Service ops): the first worker group only, 0..1 workers."""
    nodes = cfg.cluster.node_types
    ops: list[dict[str, Any]] = []
    for i in reversed(range(1, len(nodes))):
        ops += [
            {"op": "test", "path": f"{_groups_path(i)}/groupName", "value": nodes[i].name},
            {"op": "remove", "path": _groups_path(i)},
        ]
    cap = 1
    if nodes:
        first, at = nodes[0], _groups_path(0)
        if first.gpus:
            cap = max(1, first.gpus // cfg.engine.tensor_parallel_size)
        ops += [
            {"op": "test", "path": f"{at}/groupName", "value": first.name},
            {"op": "replace", "path": f"{at}/replicas", "value": min(first.min_workers, 1)},
            {"op": "replace", "path": f"{at}/minReplicas", "value": 0},
            {"op": "replace", "path": f"{at}/maxReplicas", "value": 1},
        ]
    dev_text = dev_serve_text(serve_text, cap)
    ops.append({"op": "replace", "path": "/spec/serveConfigV2", "value": dev_text})
    service = [
        {"op": "replace", "path": "/spec/type", "value": "ClusterIP"},
        {"op": "remove", "path": "/spec/externalTrafficPolicy"},
        {"op": "remove", "path": "/spec/loadBalancerSourceRanges"},
    ]
    return ops, service


def render_files(cfg: FleetConfig, version: str | None = None) -> dict[str, str]:
    serve_text = rs.serve_config_text(cfg, version)
    head = HEADER.format(config="the llmfleet config")
    note = IMAGE_NOTE.format(
        image=cfg.cluster.image or rs.DEFAULT_IMAGE, requirement=requirement(cfg)
    )
    name = cfg.cluster.name
    svc = f"{name}-api"
    resources = ["namespace.yaml", "rayservice.yaml", "service-api.yaml", "networkpolicy.yaml"]
    dev_ops, dev_service = dev_patches(cfg, serve_text)
    files = {
        "base/kustomization.yaml": head + kustomization(resources),
        "base/namespace.yaml": head + dump(namespace(cfg)),
        "base/rayservice.yaml": head + note + dump(rs.rayservice(cfg, serve_text)),
        "base/service-api.yaml": head + dump(service_api(cfg)),
        "base/networkpolicy.yaml": head + dump(*network_policies(cfg)),
        "overlays/gpu/kustomization.yaml": head
        + kustomization(
            ["../../base"],
            [{"path": "rayservice-gpu.yaml", "target": _target("RayService", name)}],
        ),
        "overlays/gpu/rayservice-gpu.yaml": head + dump(gpu_patch(cfg)),
        "overlays/dev/kustomization.yaml": head
        + kustomization(
            ["../../base"],
            [
                {"path": "rayservice-dev.yaml", "target": _target("RayService", name)},
                {"path": "service-dev.yaml", "target": _target("Service", svc)},
            ],
        ),
        "overlays/dev/rayservice-dev.yaml": head + dump(dev_ops),
        "overlays/dev/service-dev.yaml": head + dump(dev_service),
        "README.md": readme(cfg, requirement(cfg)),
    }
    return {f"{ROOT}/{path}": text for path, text in files.items()}
