"""``--target ray-up``: a ``ray up`` cluster YAML (Ray 2.60's cluster launcher) for AWS, GCP or
on-prem hosts over SSH (Ray's ``local`` provider), plus the files it mounts.

    ray-up/cluster.yaml          the cluster: provider, auth, node types, commands
    ray-up/README.md             how to start it, what each choice means
    ray-up/firewall.sh           gcp, ssh: the firewall rules (aws: in the security group)
    ray-up/prometheus/...        Prometheus on the head (head_services.py)
    ray-up/grafana/...           with cluster.grafana
    serve/serve-config.yaml      the Serve app (serve_config.py), `serve deploy`ed by the head

Every local path in ``file_mounts`` is relative to the directory these files were rendered
into, so ``ray up`` runs from there. The YAML's opening comment states each choice; the
shapes (security group rules, accelerator resources, the local provider's single node type,
the auth token's env and file) are read from Ray 2.60's sources, cited where used.

Contract: ``render_files(cfg)`` is pure (same config, same bytes); mappings whose order
means nothing (resources, file_mounts, CIDRs) are sorted. It raises ``ValueError`` for an
ssh fleet with several worker node types (Ray's local provider has one node type: every
listed host runs the same start command).
"""

from __future__ import annotations

import shlex
from importlib import metadata
from typing import Any

from cluster.config import FleetConfig
from cluster.deploy import firewall, head_services, ray_up_doc
from cluster.deploy.settings import NodeType
from cluster.observe.rulefile import dump_yaml

FILE = "ray-up/cluster.yaml"
REMOTE = head_services.REMOTE
# Ray 2.60's C++ AuthenticationTokenLoader (strings in ray/_raylet.so; the Python side is
# ray/_private/authentication/authentication_token_setup.py): mode from RAY_AUTH_MODE; the
# token from RAY_AUTH_TOKEN, else the file RAY_AUTH_TOKEN_PATH, else ~/.ray/auth_token.
AUTH_ENV = "RAY_AUTH_MODE=token"
TOKEN_FILE = "~/.ray/auth_token"
LOCAL_TOKEN = "~/.ray/auth_token"  # `ray get-auth-token --generate` writes it here
LOCAL_KEYS = "~/.llmfleet/keys.yaml"  # `llmfleet keys add`'s default file
GCS_PORT = 6379
OBJECT_MANAGER_PORT = 8076
DASHBOARD = "http://127.0.0.1:8265"
DISK_GIB = 256
GCP_IMAGE = "projects/deeplearning-platform-release/global/images/family/common-cu128-ubuntu-2204-nvidia-570"
# Ray accelerator_type -> GCP guestAccelerators type (N1 machines; A2/A3/G2 have theirs built in)
GCP_ACCELERATORS = {
    "A100": "nvidia-tesla-a100",
    "A100-80G": "nvidia-a100-80gb",
    "H100": "nvidia-h100-80gb",
    "L4": "nvidia-l4",
    "P100": "nvidia-tesla-p100",
    "T4": "nvidia-tesla-t4",
    "V100": "nvidia-tesla-v100",
}
GCP_GPU_FAMILIES = ("a2-", "a3-", "a4-", "g2-", "g4-")
CLOUD_HEAD_SETUP = {
    "aws": ["pip install 'boto3>=1.4.8'"],
    "gcp": ["pip install google-api-python-client"],
}


def llmfleet_version() -> str:
    try:
        return metadata.version("llmfleet")
    except metadata.PackageNotFoundError:
        return "0.0.0"


def requirement(cfg: FleetConfig) -> str:
    return cfg.cluster.llmfleet_requirement or f"llmfleet[gpu]=={llmfleet_version()}"


def render_files(cfg: FleetConfig) -> dict[str, str]:
    from cluster.deploy import serve_config

    files = {FILE: dump_yaml(cluster_config(cfg), ray_up_doc.header(cfg, requirement(cfg)))}
    files["ray-up/README.md"] = ray_up_doc.readme(cfg)
    files |= head_services.files(cfg)
    files |= serve_config.render_files(cfg, llmfleet_version())
    if cfg.cluster.provider == "gcp":
        files["ray-up/firewall.sh"] = firewall.gcp_script(cfg)
    elif cfg.cluster.provider == "ssh":
        files["ray-up/firewall.sh"] = firewall.ssh_script(cfg)
    return files


def cluster_config(cfg: FleetConfig) -> dict[str, Any]:
    c = cfg.cluster
    ssh = c.provider == "ssh"
    body: dict[str, Any] = {
        "cluster_name": c.name,
        "max_workers": len(c.worker_ips) if ssh else sum(n.max_workers for n in c.node_types),
        "idle_timeout_minutes": c.idle_timeout_minutes,
        "provider": provider(cfg),
        "auth": {"ssh_user": c.ssh_user}
        | ({"ssh_private_key": c.ssh_private_key} if c.ssh_private_key else {}),
    }
    if c.image:
        body["docker"] = {
            "image": c.image,
            "container_name": "llmfleet",
            "pull_before_run": True,
            "run_options": ["--ulimit nofile=65536:65536"],
        }
    if not ssh:  # Ray's local provider refuses available_node_types (local/config.py)
        body["available_node_types"] = node_types(cfg)
        body["head_node_type"] = c.head.name
    body["file_mounts"] = file_mounts(cfg)
    body["initialization_commands"] = []
    body["setup_commands"] = setup_commands(cfg)
    body["head_setup_commands"] = CLOUD_HEAD_SETUP.get(
        c.provider, []
    ) + head_services.setup_commands(cfg)
    body["worker_setup_commands"] = []
    body["head_start_ray_commands"] = head_start(cfg)
    body["worker_start_ray_commands"] = worker_start(cfg)
    return body


def provider(cfg: FleetConfig) -> dict[str, Any]:
    c = cfg.cluster
    if c.provider == "ssh":
        return {"type": "local", "head_ip": c.head_ip, "worker_ips": list(c.worker_ips)}
    if c.provider == "gcp":
        return {
            "type": "gcp",
            "region": c.region,
            "availability_zone": c.availability_zone,
            "project_id": c.project_id,
        }
    out: dict[str, Any] = {"type": "aws", "region": c.region}
    if c.availability_zone:
        out["availability_zone"] = c.availability_zone
    out["cache_stopped_nodes"] = False  # a scaled-down GPU node is terminated, not kept
    out["security_group"] = {
        "GroupName": f"ray-autoscaler-{c.name}",
        "IpPermissions": firewall.aws_ip_permissions(cfg),
    }
    return out


def resources(node: NodeType, head: bool = False) -> dict[str, int]:
    out = {"CPU": node.cpus, "GPU": 0 if head else node.gpus}
    if node.accelerator_type and not head:
        # Ray's name (ray/_common/utils.py RESOURCE_CONSTRAINT_PREFIX, resource_and_label_spec.py)
        out[f"accelerator_type:{node.accelerator_type}"] = 1
    return dict(sorted(out.items()))


def node_types(cfg: FleetConfig) -> dict[str, Any]:
    c = cfg.cluster
    out: dict[str, Any] = {
        c.head.name: {
            "resources": resources(c.head, head=True),
            "node_config": node_config(cfg, c.head, head=True),
            "min_workers": 0,
            "max_workers": 0,
        }
    }
    for n in c.node_types:
        out[n.name] = {
            "resources": resources(n),
            "node_config": node_config(cfg, n),
            "min_workers": n.min_workers,
            "max_workers": n.max_workers,
        }
    return out


def node_config(cfg: FleetConfig, node: NodeType, head: bool = False) -> dict[str, Any]:
    if cfg.cluster.provider == "aws":
        # No ImageId: Ray picks its Deep Learning AMI for the region (aws/config.py _check_ami).
        return {
            "InstanceType": node.instance_type,
            "BlockDeviceMappings": [
                {"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": DISK_GIB, "VolumeType": "gp3"}}
            ],
        }
    node_tag, head_tag = firewall.gcp_tags(cfg)
    out: dict[str, Any] = {
        "machineType": node.instance_type,
        "disks": [
            {
                "boot": True,
                "autoDelete": True,
                "type": "PERSISTENT",
                "initializeParams": {"diskSizeGb": DISK_GIB, "sourceImage": GCP_IMAGE},
            }
        ],
        "tags": {"items": sorted([node_tag, head_tag] if head else [node_tag])},
    }
    if node.gpus:
        machine = node.instance_type or ""
        if not machine.startswith(GCP_GPU_FAMILIES):
            kind = GCP_ACCELERATORS.get(node.accelerator_type or "", node.accelerator_type)
            out["guestAccelerators"] = [{"acceleratorType": kind, "acceleratorCount": node.gpus}]
        out["scheduling"] = {"onHostMaintenance": "TERMINATE"}  # GPUs cannot live-migrate
        out["metadata"] = {"items": [{"key": "install-nvidia-driver", "value": "True"}]}
    return out


def file_mounts(cfg: FleetConfig) -> dict[str, str]:
    """remote path (on every node) -> local path (relative to the render directory)."""
    from cluster.deploy import serve_config

    out = {TOKEN_FILE: LOCAL_TOKEN, f"{REMOTE}/serve": serve_config.FILE.rsplit("/", 1)[0]}
    out |= head_services.mounts(cfg)
    if cfg.server.api_keys_file:
        out[cfg.server.api_keys_file] = LOCAL_KEYS
    return dict(sorted(out.items()))


def setup_commands(cfg: FleetConfig) -> list[str]:
    login_env = f"grep -qx 'export {AUTH_ENV}' ~/.bashrc || echo 'export {AUTH_ENV}' >> ~/.bashrc"
    return [login_env, f"pip install {shlex.quote(requirement(cfg))}", *cfg.cluster.setup_commands]


def _secrets(cfg: FleetConfig) -> str:
    paths = [TOKEN_FILE] + ([cfg.server.api_keys_file] if cfg.server.api_keys_file else [])
    return "chmod 600 " + " ".join(paths)


def _serve_exports(cfg: FleetConfig) -> str:
    """Serve's settings that `llmfleet up` sets locally (``runtime.cluster_serve_env``)."""
    from cluster.runtime import cluster_serve_env

    return "".join(f" {k}={shlex.quote(v)}" for k, v in sorted(cluster_serve_env(cfg).items()))


def head_start(cfg: FleetConfig) -> list[str]:
    flags = [
        "--head",
        f"--port={GCS_PORT}",
        f"--object-manager-port={OBJECT_MANAGER_PORT}",
        "--autoscaling-config=~/ray_bootstrap_config.yaml",
        "--num-gpus=0",
        "--dashboard-host=127.0.0.1",
        f"--metrics-export-port={cfg.server.metrics_export_port}",
        "--disable-usage-stats",
    ]
    if cfg.cluster.provider == "ssh":
        flags.insert(4, f"--num-cpus={cfg.cluster.head.cpus}")
    from cluster.deploy import serve_config

    serve_file = f"{REMOTE}/serve/{serve_config.FILE.rsplit('/', 1)[1]}"
    deploy = f"serve deploy {serve_file} --address {DASHBOARD}"
    return [
        "ray stop",
        _secrets(cfg),
        f"export {AUTH_ENV}{_serve_exports(cfg)}; ulimit -n 65536; ray start {' '.join(flags)}",
        *head_services.start_commands(cfg),
        # the dashboard (serve deploy's API) may need a few seconds after ray start
        f"export {AUTH_ENV}; timeout 300 bash -c 'until {deploy}; do sleep 10; done'",
    ]


def worker_start(cfg: FleetConfig) -> list[str]:
    flags = [
        f"--address=$RAY_HEAD_IP:{GCS_PORT}",
        f"--object-manager-port={OBJECT_MANAGER_PORT}",
        f"--metrics-export-port={cfg.server.metrics_export_port}",
        "--disable-usage-stats",
    ]
    node = ssh_worker_type(cfg)
    if node is not None:  # local provider: the node advertises what its ray start says
        flags += [f"--num-cpus={node.cpus}", f"--num-gpus={node.gpus}"]
        extra = {k: v for k, v in resources(node).items() if k not in ("CPU", "GPU")}
        if extra:
            flags.append("--resources=" + shlex.quote(_json(extra)))
    return [
        "ray stop",
        _secrets(cfg),
        f"export {AUTH_ENV}{_serve_exports(cfg)}; ulimit -n 65536; ray start {' '.join(flags)}",
    ]


def ssh_worker_type(cfg: FleetConfig) -> NodeType | None:
    c = cfg.cluster
    if c.provider != "ssh" or not c.node_types:
        return None
    if len(c.node_types) > 1:
        raise ValueError(
            "cluster.node_types: provider ssh takes one worker node type (Ray's local provider"
            " runs one start command on every worker host)"
        )
    return c.node_types[0]


def _json(d: dict[str, int]) -> str:
    return "{" + ", ".join(f'"{k}": {v}' for k, v in d.items()) + "}"
