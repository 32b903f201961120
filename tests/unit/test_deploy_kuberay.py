"""The KubeRay target: every example config renders a kuberay/ tree that validates; the
validator catches mutations (a typo'd RayService field, a bad NetworkPolicy port, a missing
patch file, ...); the security properties hold in the rendered documents."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from cluster.config import FleetConfig, load_config
from cluster.deploy import kustomize_lite
from cluster.deploy.kuberay import render_files, validate_kuberay
from cluster.deploy.kuberay_rayservice import DASHBOARD_PORT, KEYS_SECRET, TOKEN_SECRET

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "deploy").glob("llmfleet.cluster-*.yaml"))


def write(cfg: FleetConfig, out: Path) -> Path:
    for rel, text in render_files(cfg, version="0.1.0").items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(text)
    return out / "kuberay"


def docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))


@pytest.fixture(scope="module")
def aws(tmp_path_factory: pytest.TempPathFactory) -> FleetConfig:
    return load_config(ROOT / "deploy/llmfleet.cluster-aws.yaml")


@pytest.fixture
def tree(aws: FleetConfig, tmp_path: Path) -> Path:
    return write(aws, tmp_path)


def rayservice(tree: Path) -> dict[str, Any]:
    return docs(tree / "base/rayservice.yaml")[0]


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_each_example_renders_and_validates(example: Path, tmp_path: Path) -> None:
    tree = write(load_config(example), tmp_path)
    assert validate_kuberay(tmp_path, use_kubectl=False) == []
    assert validate_kuberay(tree, use_kubectl=False) == []


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="no kubectl (kustomize) here")
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_builtin_build_matches_kubectl_kustomize(example: Path, tmp_path: Path) -> None:
    tree = write(load_config(example), tmp_path)
    for kdir in [tree / "base", *sorted((tree / "overlays").iterdir())]:
        run = subprocess.run(["kubectl", "kustomize", str(kdir)], capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        ours, problems = kustomize_lite.build(kdir)
        assert problems == []
        canon = sorted(json.dumps(d, sort_keys=True) for d in yaml.safe_load_all(run.stdout))
        assert canon == sorted(json.dumps(r.doc, sort_keys=True) for r in ours), kdir.name


@pytest.mark.parametrize(
    ("file", "old", "new", "expected"),
    [
        (
            "base/rayservice.yaml",
            "enableInTreeAutoscaling:",
            "enableInTreeAutoscalling:",
            "base/rayservice.yaml: RayService/llmfleet-prod: spec.rayClusterConfig:",
        ),
        (
            "base/rayservice.yaml",
            "num-gpus: '0'",
            "num-gpus: 0",
            "spec.rayClusterConfig.headGroupSpec.rayStartParams.num-gpus:",
        ),
        (
            "base/rayservice.yaml",
            "imagePullPolicy: IfNotPresent",
            "imagePulPolicy: IfNotPresent",
            "spec.rayClusterConfig.headGroupSpec.template.template.spec.containers[0]:",
        ),
        (
            "base/networkpolicy.yaml",
            "port: 8000",
            "port: [8000]",
            "base/networkpolicy.yaml: NetworkPolicy/llmfleet-prod-api: spec.ingress[0].ports[0].port:",
        ),
        (
            "base/service-api.yaml",
            "externalTrafficPolicy:",
            "externalTraficPolicy:",
            "base/service-api.yaml: Service/llmfleet-prod-api:",
        ),
        (
            "base/kustomization.yaml",
            "- networkpolicy.yaml",
            "- networkpolicies.yaml",
            "base/kustomization.yaml: resources[3]: networkpolicies.yaml does not exist",
        ),
        (
            "overlays/gpu/kustomization.yaml",
            "- ../../base",
            "- ../../bases",
            "does not include the base",
        ),
        (
            "overlays/gpu/rayservice-gpu.yaml",
            "value: gpu-1x-l4",
            "value: gpu-1x-a10g",
            "overlays/gpu/kustomization.yaml: patches[0]: rayservice-gpu.yaml: op 1 (test",
        ),
        (
            "overlays/dev/kustomization.yaml",
            "name: llmfleet-prod-api",
            "name: llmfleet-api",
            "patches[1]: target {'version': 'v1', 'kind': 'Service', 'name': 'llmfleet-api'} matches 0",
        ),
        (
            "overlays/dev/rayservice-dev.yaml",
            "path: /spec/rayClusterConfig/workerGroupSpecs/0/maxReplicas\n  value: 1",
            "path: /spec/rayClusterConfig/workerGroupSpecs/0/maxReplicas\n  value: '1'",
            "overlays/dev/kustomization.yaml: RayService/llmfleet-prod: "
            "spec.rayClusterConfig.workerGroupSpecs[0].maxReplicas",
        ),
    ],
    ids=[
        "rayservice-typo",
        "start-param-not-string",
        "container-field-typo",
        "networkpolicy-port-type",
        "service-typo",
        "missing-resource",
        "overlay-without-base",
        "patch-test-fails",
        "patch-target-missing",
        "overlay-result-invalid",
    ],
)
def test_mutations_are_caught(tree: Path, file: str, old: str, new: str, expected: str) -> None:
    edit(tree / file, old, new)
    problems = validate_kuberay(tree.parent, use_kubectl=False)
    assert any(expected in p for p in problems), problems


def test_missing_patch_file_is_caught(tree: Path) -> None:
    (tree / "overlays/gpu/rayservice-gpu.yaml").unlink()
    problems = validate_kuberay(tree, use_kubectl=False)
    assert problems == [
        "kuberay/overlays/gpu/kustomization.yaml: patches[0]: "
        "patch file rayservice-gpu.yaml does not exist"
    ]


def test_secret_values_and_clear_tokens_are_caught(tree: Path) -> None:
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": TOKEN_SECRET}}
    (tree / "base/secret.yaml").write_text(
        yaml.safe_dump({**secret, "data": {"auth_token": "eA=="}})
    )
    edit(
        tree / "base/kustomization.yaml",
        "- networkpolicy.yaml",
        "- networkpolicy.yaml\n- secret.yaml",
    )
    edit(tree / "base/rayservice.yaml", "valueFrom:\n", "value: abc\n              valueFrom:\n")
    problems = validate_kuberay(tree, use_kubectl=False)
    assert any("Secret/llmfleet-ray-token: data: a Secret with values" in p for p in problems)
    assert any("RAY_AUTH_TOKEN given by value" in p for p in problems), problems


def test_head_has_no_gpus_and_token_auth(tree: Path) -> None:
    rcc = rayservice(tree)["spec"]["rayClusterConfig"]
    head = rcc["headGroupSpec"]
    assert head["rayStartParams"]["num-gpus"] == "0"
    (container,) = head["template"]["spec"]["containers"]
    assert "nvidia.com/gpu" not in json.dumps(container["resources"])
    assert "nodeSelector" not in head["template"]["spec"]
    assert rcc["authOptions"] == {"mode": "token", "secretName": TOKEN_SECRET}
    # KubeRay deploys serveConfigV2 through the head Service's dashboard port: it must not
    # be loopback, so it is closed by token auth and the NetworkPolicy instead.
    assert head["rayStartParams"]["dashboard-host"] == "0.0.0.0"


def test_worker_groups_follow_node_types(aws: FleetConfig, tree: Path) -> None:
    groups = rayservice(tree)["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    for node, g in zip(aws.cluster.node_types, groups, strict=True):
        assert (g["groupName"], g["replicas"], g["minReplicas"], g["maxReplicas"]) == (
            node.name, node.min_workers, node.min_workers, node.max_workers,
        )  # fmt: skip
        resources = json.loads(g["rayStartParams"]["resources"])
        assert resources == {f"accelerator_type:{node.accelerator_type}": 1}
        limits = g["template"]["spec"]["containers"][0]["resources"]["limits"]
        assert limits["nvidia.com/gpu"] == str(node.gpus)


def test_networkpolicy_opens_only_the_api_port_to_api_cidrs(aws: FleetConfig, tree: Path) -> None:
    fleet = {"matchLabels": {"llmfleet.io/fleet": aws.cluster.name}}
    operator = {"app.kubernetes.io/name": "kuberay-operator"}
    for policy in docs(tree / "base/networkpolicy.yaml"):
        assert policy["spec"]["podSelector"] == fleet
        for rule in policy["spec"]["ingress"]:
            peers = rule["from"]
            ports = [p["port"] for p in rule.get("ports", [])]
            if any("ipBlock" in p for p in peers):
                assert [p["ipBlock"]["cidr"] for p in peers] == aws.cluster.api_cidrs
                assert all("except" not in p["ipBlock"] for p in peers)
                assert ports == [aws.server.port]
            elif ports:  # the operator: dashboard and Serve's proxy, nothing else
                assert peers == [
                    {"namespaceSelector": {}, "podSelector": {"matchLabels": operator}}
                ]
                assert sorted(ports) == sorted({DASHBOARD_PORT, aws.server.port})
            else:  # all ports: the fleet's own pods only
                assert peers == [{"podSelector": fleet}]
    (svc,) = docs(tree / "base/service-api.yaml")
    assert [p["port"] for p in svc["spec"]["ports"]] == [aws.server.port]
    assert svc["spec"]["loadBalancerSourceRanges"] == aws.cluster.api_cidrs


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e for e in container["env"]}


def test_credentials_come_from_secrets(aws: FleetConfig, tmp_path: Path) -> None:
    no_file = aws.model_copy(deep=True)
    no_file.server.api_keys_file = None
    for cfg, out in [(aws, tmp_path / "file"), (no_file, tmp_path / "env")]:
        tree = write(cfg, out)
        rendered = "".join(p.read_text() for p in tree.rglob("*") if p.is_file())
        assert "kind: Secret" not in rendered
        assert "sk-llmfleet-" not in rendered
        rcc = rayservice(tree)["spec"]["rayClusterConfig"]
        pods = [rcc["headGroupSpec"]] + rcc["workerGroupSpecs"]
        for pod in pods:
            spec = pod["template"]["spec"]
            env = _env(spec["containers"][0])
            ref = {"secretKeyRef": {"name": TOKEN_SECRET, "key": "auth_token"}}
            assert env["RAY_AUTH_TOKEN"] == {"name": "RAY_AUTH_TOKEN", "valueFrom": ref}
            assert env["RAY_AUTH_MODE"]["value"] == "token"
            keys_volumes = [v for v in spec["volumes"] if "secret" in v]
            if cfg.server.api_keys_file:  # the file the config names, from the Secret
                assert "LLMFLEET_API_KEYS" not in env
                assert keys_volumes[0]["secret"]["secretName"] == KEYS_SECRET
            else:
                assert env["LLMFLEET_API_KEYS"]["valueFrom"]["secretKeyRef"]["name"] == KEYS_SECRET
                assert keys_volumes == []
        assert validate_kuberay(tree, use_kubectl=False) == []


def test_overlays(aws: FleetConfig, tree: Path) -> None:
    gpu, problems = kustomize_lite.build(tree / "overlays/gpu")
    assert problems == []
    rs = next(r.doc for r in gpu if r.doc["kind"] == "RayService")
    for g in rs["spec"]["rayClusterConfig"]["workerGroupSpecs"]:
        assert g["template"]["spec"]["nodeSelector"] == {"llmfleet.io/accelerator": "L4"}
    dev, problems = kustomize_lite.build(tree / "overlays/dev")
    assert problems == []
    rs = next(r.doc for r in dev if r.doc["kind"] == "RayService")
    (group,) = rs["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    assert (group["minReplicas"], group["maxReplicas"]) == (0, 1)
    (replica, _) = yaml.safe_load(rs["spec"]["serveConfigV2"])["applications"][0]["deployments"]
    assert replica["autoscaling_config"]["max_replicas"] == 1  # one L4, TP 1
    svc = next(r.doc for r in dev if r.doc["kind"] == "Service")
    assert svc["spec"]["type"] == "ClusterIP"
    assert "loadBalancerSourceRanges" not in svc["spec"]


def test_weights(tmp_path: Path) -> None:
    s3 = write(load_config(ROOT / "deploy/llmfleet.cluster-aws.yaml"), tmp_path / "s3")
    worker = rayservice(s3)["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["template"]["spec"]
    assert not any("persistentVolumeClaim" in v for v in worker["volumes"])
    assert _env(worker["containers"][0])["AWS_REGION"]["value"] == "us-east-1"
    onprem = load_config(ROOT / "deploy/llmfleet.cluster-onprem.yaml")
    path = write(onprem, tmp_path / "path")
    spec = rayservice(path)["spec"]["rayClusterConfig"]
    worker = spec["workerGroupSpecs"][0]["template"]["spec"]
    (claim,) = [v for v in worker["volumes"] if "persistentVolumeClaim" in v]
    mount = next(m for m in worker["containers"][0]["volumeMounts"] if m["name"] == claim["name"])
    assert mount == {"name": "models", "mountPath": onprem.cluster.weights_uri, "readOnly": True}
    head = spec["headGroupSpec"]["template"]["spec"]
    assert not any("persistentVolumeClaim" in v for v in head["volumes"])
