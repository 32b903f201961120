"""`--target ray-up` (cluster/deploy/ray_up.py) and `llmfleet deploy validate`
(cluster/deploy/validate.py): every example renders and validates against the installed
Ray's schema and config checks; mutations are caught; the security choices hold."""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from cluster.config import FleetConfig, parse_config
from cluster.deploy import firewall, head_services, ray_up, render, validate
from cluster.observe import scrape

EXAMPLES = {p.stem.rsplit("-", 1)[1]: p for p in render.EXAMPLES}


def example(name: str, **cluster: Any) -> FleetConfig:
    data = yaml.safe_load(EXAMPLES[name].read_text())
    data["cluster"].update(cluster)
    return parse_config(data)


def cluster_yaml(cfg: FleetConfig) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(ray_up.render_files(cfg)[ray_up.FILE])
    return doc


def start_commands(doc: dict[str, Any]) -> list[str]:
    cmds = doc["head_start_ray_commands"] + doc["worker_start_ray_commands"]
    return [c for c in cmds if "ray start" in c]


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_each_example_renders_stably_and_validates(name: str, tmp_path: Path) -> None:
    cfg = example(name)
    files = ray_up.render_files(cfg)
    assert files == ray_up.render_files(cfg)
    for rel in (ray_up.FILE, "ray-up/README.md", "ray-up/prometheus/prometheus.yml"):
        assert rel in files
    assert "ray-up/prometheus/" + scrape.RULES_PATH in files
    render.render(cfg, "ray-up", tmp_path)
    assert validate.validate_dir(tmp_path) == []
    doc = cluster_yaml(cfg)
    mounted = {local for local in doc["file_mounts"].values() if not local.startswith("~")}
    assert all((tmp_path / local).exists() for local in mounted), mounted


def _set(path: str, value: Any) -> Any:
    def mutate(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        for key in parents:
            doc = doc[key]
        if value is KeyError:
            del doc[last]
        else:
            doc[last] = value

    return mutate


MUTATIONS = [
    ("aws", "provider.type", "awz", "Unsupported node provider: awz"),
    ("aws", "available_node_types.gpu-1x-l4.resources", KeyError, "'resources' is a required"),
    ("aws", "max_workers", "8", "$.max_workers: '8' is not of type 'integer'"),
    ("aws", "available_node_types.gpu-1x-l4.resources.GPU", 0.5, "is not of type 'integer'"),
    ("aws", "available_node_types.head.resources.GPU", 1, "the head must have GPU: 0"),
    ("aws", "head_node_type", "nope", "must be one of `available_node_types`"),
    ("aws", "max_workers", 1, "smaller than the sum of `min_workers`"),
    ("aws", "provider.security_group.VpcId", "vpc-1", "Additional properties are not allowed"),
    ("gcp", "docker", {"image": "x", "bogus": 1}, "$.docker: Additional properties"),
    (
        "onprem",
        "available_node_types",
        {"x": {"resources": {}, "node_config": {}}},
        "not supported for on-premise",
    ),
    ("onprem", "provider.head_ip", KeyError, "Please supply a `head_ip`"),
]


@pytest.mark.parametrize(("name", "path", "value", "expected"), MUTATIONS)
def test_mutations_are_caught(name: str, path: str, value: Any, expected: str) -> None:
    doc = cluster_yaml(example(name))
    assert validate.validate_cluster(doc) == []
    _set(path, value)(doc)
    problems = validate.validate_cluster(doc)
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (
            lambda c: c.replace("--dashboard-host=127.0.0.1", "--dashboard-host=0.0.0.0"),
            "127.0.0.1",
        ),
        (lambda c: c.replace(" RAY_AUTH_MODE=token", ""), "without RAY_AUTH_MODE=token"),
    ],
)
def test_policy_mutations_are_caught(edit: Any, expected: str) -> None:
    doc = cluster_yaml(example("aws"))
    doc["head_start_ray_commands"] = [edit(c) for c in doc["head_start_ray_commands"]]
    problems = validate.validate_cluster(doc)
    assert any(expected in p and "head_start_ray_commands[2]" in p for p in problems), problems


def test_validate_dir_names_the_file_and_runs_the_other_validators(tmp_path: Path) -> None:
    cfg = example("aws")
    render.render(cfg, "ray-up", tmp_path)
    bad = tmp_path / "ray-up" / "cluster.yaml"
    doc = yaml.safe_load(bad.read_text())
    doc["provider"]["type"] = 3
    bad.write_text(yaml.safe_dump(doc))
    serve = tmp_path / "serve" / "serve-config.yaml"
    serve.write_text(
        serve.read_text().replace("import_path: cluster.serve_entry:app", "import_path: x:y")
    )
    problems = validate.validate_dir(tmp_path)
    assert "ray-up/cluster.yaml: $.provider.type: 3 is not of type 'string'" in problems
    assert any("serve-config.yaml" in p and "import_path" in p for p in problems), problems


def test_missing_kuberay_validator_is_a_problem_only_with_kuberay_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "cluster.deploy.kuberay", None)
    render.render(example("gcp"), "ray-up", tmp_path)
    assert validate.validate_dir(tmp_path) == []
    (tmp_path / "kuberay" / "base").mkdir(parents=True)
    assert validate.validate_dir(tmp_path) == ["kuberay: kuberay validator not available"]


def test_aws_security_group_opens_only_the_api_port_to_api_cidrs() -> None:
    cfg = example("aws", api_cidrs=["10.0.0.0/8", "192.168.1.7/24", "2001:db8::/32"])
    sg = cluster_yaml(cfg)["provider"]["security_group"]
    assert sg["GroupName"] == f"ray-autoscaler-{cfg.cluster.name}"
    [rule] = sg["IpPermissions"]
    assert (rule["FromPort"], rule["ToPort"], rule["IpProtocol"]) == (8000, 8000, "tcp")
    assert [r["CidrIp"] for r in rule["IpRanges"]] == ["10.0.0.0/8", "192.168.1.0/24"]
    assert [r["CidrIpv6"] for r in rule["Ipv6Ranges"]] == ["2001:db8::/32"]


def test_gcp_and_ssh_firewall_scripts_open_only_the_api_port_outside() -> None:
    gcp = ray_up.render_files(example("gcp", api_cidrs=["203.0.113.0/24"]))["ray-up/firewall.sh"]
    [api] = [line for line in gcp.splitlines() if "-api " in line]
    assert "--rules=tcp:8000" in api
    assert "--source-ranges=203.0.113.0/24" in api
    assert "--target-tags=llmfleet-gcp-head" in api
    [internal] = [line for line in gcp.splitlines() if "ray-internal" in line]
    assert "--source-tags=llmfleet-gcp-node" in internal
    assert "source-ranges" not in internal
    head_cfg = cluster_yaml(example("gcp"))["available_node_types"]["head"]["node_config"]
    assert head_cfg["tags"]["items"] == list(firewall.gcp_tags(example("gcp")))[::-1]
    ssh = ray_up.render_files(example("onprem"))["ray-up/firewall.sh"]
    ports = [line for line in ssh.splitlines() if " port " in line and line.startswith("sudo")]
    assert ports == [
        "sudo ufw allow proto tcp from 10.1.0.0/16 to any port 8000 comment 'llmfleet OpenAI API'"
    ]


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_token_auth_dashboard_and_head_without_gpus(name: str) -> None:
    doc = cluster_yaml(example(name))
    assert doc["file_mounts"][ray_up.TOKEN_FILE] == ray_up.LOCAL_TOKEN
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        cmds = doc[key]
        chmod = next(i for i, c in enumerate(cmds) if c.startswith("chmod 600 ~/.ray/auth_token"))
        start = next(i for i, c in enumerate(cmds) if "ray start" in c)
        assert chmod < start
    assert all(c.startswith("export RAY_AUTH_MODE=token ") for c in start_commands(doc))
    [head] = [c for c in doc["head_start_ray_commands"] if "ray start" in c]
    assert "--dashboard-host=127.0.0.1" in head
    assert "--num-gpus=0" in head
    assert "--metrics-export-port=8080" in head
    assert "serve deploy ~/llmfleet/serve/serve-config.yaml" in doc["head_start_ray_commands"][-1]
    if name != "onprem":
        assert doc["available_node_types"]["head"]["resources"] == {"CPU": 8, "GPU": 0}


@pytest.mark.parametrize("throughput", [True, False])
def test_every_node_starts_ray_with_serves_settings_as_llmfleet_up_does(throughput: bool) -> None:
    """Found in review: `server.throughput_mode` (on by default) and the proxy's health
    period were set only by `llmfleet up`; a `ray up` fleet ran Serve's defaults."""
    from cluster.deploy import kuberay_rayservice
    from cluster.runtime import PROXY_HEALTH_ENV

    cfg = example("aws")
    cfg.server.throughput_mode = throughput
    grpc = "RAY_SERVE_USE_GRPC_BY_DEFAULT"
    exports = [c.split(";")[0] for c in start_commands(cluster_yaml(cfg))]
    assert len(exports) >= 2  # head and worker
    for line in exports:
        assert "=".join(PROXY_HEALTH_ENV) in line.split()
        assert (f"{grpc}=1" in line.split()) is throughput
    for gpu in (False, True):
        env = {e["name"]: e.get("value") for e in kuberay_rayservice._env(cfg, gpu)}
        assert env[PROXY_HEALTH_ENV[0]] == PROXY_HEALTH_ENV[1]
        assert (env.get(grpc) == "1") is throughput


def test_the_token_variable_is_the_one_ray_reads() -> None:
    from ray._private.authentication import authentication_token_setup as ats

    assert f"{ats.AUTH_MODE_ENV_VAR}=token" == ray_up.AUTH_ENV
    assert Path(ray_up.TOKEN_FILE).expanduser() == ats._get_default_token_path()


def test_worker_types_advertise_rays_accelerator_resource() -> None:
    from ray._common.utils import RESOURCE_CONSTRAINT_PREFIX

    doc = cluster_yaml(example("gcp"))
    gpu = doc["available_node_types"]["gpu-4x-a100"]
    assert gpu["resources"] == {"CPU": 48, "GPU": 4, f"{RESOURCE_CONSTRAINT_PREFIX}A100": 1}
    assert (gpu["min_workers"], gpu["max_workers"]) == (1, 4)
    assert gpu["node_config"]["scheduling"] == {"onHostMaintenance": "TERMINATE"}
    assert "guestAccelerators" not in gpu["node_config"]  # a2 machines carry their GPUs
    n1 = cluster_yaml(example("gcp", node_types=[_gpu("n1-standard-16", "T4")]))
    assert n1["available_node_types"]["gpu-t4"]["node_config"]["guestAccelerators"] == [
        {"acceleratorType": "nvidia-tesla-t4", "acceleratorCount": 1}
    ]
    [worker] = [
        c for c in cluster_yaml(example("onprem"))["worker_start_ray_commands"] if "ray start" in c
    ]
    assert "--num-gpus=2 --resources='{\"accelerator_type:H100\": 1}'" in worker


def _gpu(machine: str, accel: str) -> dict[str, Any]:
    return {"name": "gpu-t4", "instance_type": machine, "gpus": 1, "accelerator_type": accel}


def test_ssh_takes_one_worker_node_type() -> None:
    two = [_gpu("x", "H100") | {"name": "gpu-a"}, _gpu("x", "H100") | {"name": "gpu-b"}]
    with pytest.raises(ValueError, match="one worker node type"):
        ray_up.render_files(example("onprem", node_types=two))


def test_setup_installs_the_pinned_requirement_then_the_extra_commands() -> None:
    doc = cluster_yaml(example("aws", setup_commands=["echo hi"]))
    version = ray_up.llmfleet_version()
    assert doc["setup_commands"][1:] == [f"pip install 'llmfleet[gpu]=={version}'", "echo hi"]
    pinned = cluster_yaml(example("aws", llmfleet_requirement="llmfleet[gpu]==9.9.9"))
    assert "pip install 'llmfleet[gpu]==9.9.9'" in pinned["setup_commands"]
    assert "docker" not in doc
    image = cluster_yaml(example("aws", image="rayproject/ray:2.60.0-py311-gpu"))
    assert image["docker"]["image"] == "rayproject/ray:2.60.0-py311-gpu"


def test_head_prometheus_reads_rays_service_discovery_file_and_keeps_the_job_name() -> None:
    from ray._private.ray_constants import PROMETHEUS_SERVICE_DISCOVERY_FILE

    cfg = example("aws")
    prom = yaml.safe_load(ray_up.render_files(cfg)["ray-up/prometheus/prometheus.yml"])
    [job] = prom["scrape_configs"]
    assert job["job_name"] == scrape.JOB
    assert job["file_sd_configs"][0]["files"] == [f"/tmp/ray/{PROMETHEUS_SERVICE_DISCOVERY_FILE}"]
    assert job["relabel_configs"] == [{"target_label": "job", "replacement": scrape.JOB}]
    assert prom["rule_files"] == [scrape.RULES_PATH]
    assert not any(p.startswith("ray-up/grafana/") for p in ray_up.render_files(cfg))
    with_grafana = ray_up.render_files(example("aws", grafana=True))
    assert "ray-up/grafana/dashboards/overview.json" in with_grafana
    doc = yaml.safe_load(with_grafana[ray_up.FILE])
    assert doc["file_mounts"]["~/llmfleet/grafana"] == "ray-up/grafana"
    grafana = [c for c in doc["head_start_ray_commands"] if "grafana server" in c]
    assert len(grafana) == 1
    assert "GF_SERVER_HTTP_ADDR=127.0.0.1" in grafana[0]
    assert any(
        f"127.0.0.1:{head_services.PROMETHEUS_PORT}" in c for c in doc["head_start_ray_commands"]
    )


def test_validate_cluster_does_not_mutate_its_input() -> None:
    doc = cluster_yaml(example("onprem"))
    before = copy.deepcopy(doc)
    assert validate.validate_cluster(doc) == []
    assert doc == before
