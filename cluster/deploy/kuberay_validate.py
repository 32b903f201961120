"""``validate_kuberay(dir)``: the rendered ``kuberay/`` tree checked offline.

* Core kinds (Namespace, Service, NetworkPolicy, Secret, and each RayService pod template
  as a PodTemplate) against Kubernetes' own OpenAPI schemas, strict (unknown fields are
  errors), as packaged by ``kubernetes-validate`` for Kubernetes ``K8S_VERSION``.
* The RayService against ``schemas/rayservice.schema.json`` (ours: the fields we emit),
  then what a schema cannot say: replicas within [minReplicas, maxReplicas], a
  ``serveConfigV2`` that is a Serve config with applications and a non-loopback proxy.
* No credential in clear: no Secret with data, no token or key env var with a ``value``.
* Every kustomization (base and each overlay) is built with ``kustomize_lite``: files it
  references exist, overlays reach the base, patch targets exist and patches apply; the
  documents an overlay changes are validated again. With ``use_kubectl`` and ``kubectl`` on
  the PATH, ``kubectl kustomize`` must build each overlay too.

Every message starts with the file (relative to the directory given) and names the field
path within the document.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from cluster.deploy import kustomize_lite

K8S_VERSION = "1.30"
SCHEMA = Path(__file__).parent / "schemas" / "rayservice.schema.json"
SECRET_ENV = {"RAY_AUTH_TOKEN", "LLMFLEET_API_KEYS"}
CORE_KINDS = {"Namespace", "Service", "NetworkPolicy", "Secret", "PersistentVolumeClaim"}


def _path(parts: Iterable[Any]) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else f".{p}"
    return out.lstrip(".") or "(document)"


@cache
def _rayservice_validator() -> Any:
    import jsonschema

    return jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text()))


def check_core(doc: dict[str, Any]) -> list[str]:
    import kubernetes_validate as kv

    try:
        kv.validate(doc, K8S_VERSION, strict=True)
    except kv.ValidationError as err:
        return [f"{_path(err.absolute_path)}: {err.message}"]
    except kv.SchemaNotFoundError as err:
        return [f"(document): {err.message}"]
    return []


def _templates(doc: dict[str, Any]) -> list[tuple[str, Any]]:
    rcc = (doc.get("spec") or {}).get("rayClusterConfig") or {}
    out = [("spec.rayClusterConfig.headGroupSpec.template", (rcc.get("headGroupSpec") or {}))]
    for i, g in enumerate(rcc.get("workerGroupSpecs") or []):
        out.append((f"spec.rayClusterConfig.workerGroupSpecs[{i}].template", g))
    return [(at, g.get("template")) for at, g in out if isinstance(g, dict) and "template" in g]


def check_rayservice(doc: dict[str, Any]) -> list[str]:
    errors = sorted(_rayservice_validator().iter_errors(doc), key=lambda e: list(e.path))
    out = [f"{_path(e.absolute_path)}: {e.message}" for e in errors]
    for at, template in _templates(doc):
        pod = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}}
        out += [f"{at}.{msg}" for msg in check_core({**pod, "template": template})]
    if not out:
        out += _semantics(doc)
    return out


def _semantics(doc: dict[str, Any]) -> list[str]:
    out = []
    rcc = doc["spec"]["rayClusterConfig"]
    for i, g in enumerate(rcc["workerGroupSpecs"]):
        if not g["minReplicas"] <= g["replicas"] <= g["maxReplicas"]:
            out.append(f"spec.rayClusterConfig.workerGroupSpecs[{i}]: replicas outside min..max")
    try:
        serve = yaml.safe_load(doc["spec"]["serveConfigV2"])
    except yaml.YAMLError as err:
        return [*out, f"spec.serveConfigV2: not YAML: {err}"]
    if not isinstance(serve, dict) or not serve.get("applications"):
        return [*out, "spec.serveConfigV2: no applications"]
    host = (serve.get("http_options") or {}).get("host", "127.0.0.1")
    if host in ("127.0.0.1", "localhost", "::1"):
        out.append(f"spec.serveConfigV2.http_options.host: {host}: no Service can reach it")
    return out


def check_secrets(doc: dict[str, Any]) -> list[str]:
    """Credentials only by reference: no Secret data, no token/key env var by value."""
    if doc.get("kind") == "Secret" and (doc.get("data") or doc.get("stringData")):
        return ["data: a Secret with values is rendered (create it with kubectl instead)"]
    out = []

    def walk(node: Any, at: list[Any]) -> None:
        if isinstance(node, dict):
            if node.get("name") in SECRET_ENV and "value" in node:
                out.append(f"{_path(at)}: {node['name']} given by value, not from a Secret")
            for k, v in node.items():
                walk(v, [*at, k])
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, [*at, i])

    walk(doc, [])
    return out


def check_doc(doc: Any) -> list[str]:
    if not isinstance(doc, dict) or "kind" not in doc:
        return ["(document): not a Kubernetes object"]
    kind = doc["kind"]
    found = check_rayservice(doc) if kind == "RayService" else check_core(doc)
    if kind not in CORE_KINDS | {"RayService"}:
        found = [f"(document): kind {kind} is not one llmfleet renders"]
    name = (doc.get("metadata") or {}).get("name")
    return [f"{kind}/{name}: {msg}" for msg in found + check_secrets(doc)]


def _rel(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve().parent))
    except ValueError:
        return str(path)


def validate_kuberay(directory: str | Path, use_kubectl: bool = True) -> list[str]:
    root = Path(directory)
    if (root / "kuberay").is_dir():
        root = root / "kuberay"
    base = root / "base"
    problems: list[str] = []
    base_docs, errs = kustomize_lite.build(base)
    problems += errs
    for r in base_docs:
        problems += [f"{_rel(r.source, root)}: {m}" for m in check_doc(r.doc)]
    built = {r.key: r.doc for r in base_docs}
    overlays = sorted(
        p.parent for p in (root / "overlays").glob(f"*/{kustomize_lite.KUSTOMIZATION}")
    )
    for overlay in overlays:
        problems += _check_overlay(overlay, base, built, root)
        if use_kubectl and shutil.which("kubectl"):
            problems += _kubectl_build(overlay, root)
    return [p.replace(str(root.resolve().parent) + "/", "") for p in problems]


def _check_overlay(overlay: Path, base: Path, built: dict[str, Any], root: Path) -> list[str]:
    docs, problems = kustomize_lite.build(overlay)
    sources = {r.source.resolve() for r in docs}
    kfile = _rel(overlay / kustomize_lite.KUSTOMIZATION, root)
    if not any(s.is_relative_to(base.resolve()) for s in sources):
        problems.append(f"{kfile}: does not include the base ({_rel(base, root)})")
    for r in docs:
        if built.get(r.key) != r.doc:  # new or patched here: validate what the overlay makes
            problems += [f"{kfile}: {m}" for m in check_doc(r.doc)]
    return problems


def _kubectl_build(overlay: Path, root: Path) -> list[str]:
    run = subprocess.run(
        ["kubectl", "kustomize", str(overlay)], capture_output=True, text=True, timeout=60
    )
    if run.returncode != 0:
        return [f"{_rel(overlay, root)}: kubectl kustomize: {run.stderr.strip()}"]
    return []
