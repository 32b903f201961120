"""The ``cluster:`` section of the llmfleet YAML: where the fleet runs (provider, region or
hosts), the node types by GPU shape, the image or setup, where the weights come from.

One source for every target: ``llmfleet deploy render --target ray-up|serve|kuberay`` and
``llmfleet deploy plan`` read only this section plus the rest of the config (model, engine
tensor parallelism, replicas, autoscaling bounds, server port, keys). Weights are never
downloaded from a model hub at run time: ``weights_uri`` is a local or shared path present
on every GPU node, or an object-store URI (``s3://``, ``gs://``) the engine's own loader
streams (vLLM's ``runai_streamer``); ``plan`` says which.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from cluster.settings_base import Strict as _Strict

NAME_PATTERN = r"^[a-z][a-z0-9-]{0,38}[a-z0-9]$"


class NodeType(_Strict):
    name: str = Field(
        "gpu-node",
        pattern=NAME_PATTERN,
        description="Node type name (Ray's available_node_types key, KubeRay worker group).",
    )
    instance_type: str | None = Field(
        None, description="Cloud machine type (AWS InstanceType, GCP machineType); unused for ssh."
    )
    cpus: int = Field(8, ge=1, description="CPUs Ray advertises on such a node.")
    memory_gib: float = Field(
        32.0, gt=0, description="Memory of such a node (KubeRay requests/limits, planning)."
    )
    gpus: int = Field(0, ge=0, le=16, description="GPUs per node (0 for the head and CPU workers).")
    accelerator_type: str | None = Field(
        None,
        description="GPU model as Ray names it (e.g. L4, A10G, A100, H100): the node advertises `accelerator_type:<name>` and replicas ask for it.",
    )
    min_workers: int = Field(0, ge=0, description="Nodes of this type kept running.")
    max_workers: int = Field(
        4, ge=0, description="Most nodes of this type Ray's autoscaler launches."
    )

    @model_validator(mode="after")
    def _shape(self) -> NodeType:
        if self.min_workers > self.max_workers:
            raise ValueError("min_workers must be <= max_workers")
        if self.gpus and not self.accelerator_type:
            raise ValueError("a GPU node type needs accelerator_type (e.g. L4, A100, H100)")
        if not self.gpus and self.accelerator_type:
            raise ValueError("accelerator_type set on a node type with gpus: 0")
        return self


def _default_head() -> NodeType:
    return NodeType(name="head", instance_type="m6i.2xlarge", cpus=8, memory_gib=32, gpus=0)


def _default_workers() -> list[NodeType]:
    return [
        NodeType(
            name="gpu-1x-l4", instance_type="g6.4xlarge", cpus=16, memory_gib=64,
            gpus=1, accelerator_type="L4", max_workers=4,
        )
    ]  # fmt: skip


class ClusterSection(_Strict):
    name: str = Field(
        "llmfleet",
        pattern=NAME_PATTERN,
        description="Cluster name (ray up cluster_name, RayService name).",
    )
    provider: Literal["aws", "gcp", "ssh"] = Field(
        "aws",
        description="Where `ray up` launches nodes: aws, gcp, or ssh (on-prem hosts you list).",
    )
    region: str | None = Field("us-east-1", description="Cloud region (aws, gcp).")
    availability_zone: str | None = Field(
        None, description="Zone(s), comma-separated (aws optional; gcp required)."
    )
    project_id: str | None = Field(None, description="GCP project id (gcp).")
    head_ip: str | None = Field(None, description="ssh: the head host.")
    worker_ips: list[str] = Field(default_factory=list, description="ssh: worker hosts.")
    ssh_user: str = Field("ubuntu", description="SSH user on the nodes.")
    ssh_private_key: str | None = Field(
        None, description="SSH private key file for the nodes (ray up's auth)."
    )
    head: NodeType = Field(
        default_factory=_default_head,
        description="The head node: no GPUs; runs Ray's control plane, Serve's controller, the ingress and Prometheus.",
    )
    node_types: list[NodeType] = Field(
        default_factory=_default_workers, description="Worker node types by GPU shape."
    )
    image: str | None = Field(
        None,
        description="Container image for every node (ray up docker, KubeRay); None: the nodes' own Python gets `setup_commands`.",
    )
    llmfleet_requirement: str | None = Field(
        None,
        description="What `pip install` installs on the nodes; unset: `llmfleet[gpu]==<this version>` (the versions must agree, plan checks).",
    )
    setup_commands: list[str] = Field(
        default_factory=list,
        description="Extra shell commands run on every node after the install.",
    )
    weights_uri: str | None = Field(
        None,
        description="Where GPU nodes read the model: a local/shared path (/mnt/models/x), or s3:// / gs:// (streamed by vLLM's loader). Unset: model.path must exist on every node.",
    )
    idle_timeout_minutes: int = Field(
        5, ge=1, description="An idle worker node leaves after this long."
    )
    api_cidrs: list[str] = Field(
        default_factory=lambda: ["0.0.0.0/0"],
        description="Who may reach the API port (firewall / security group / NetworkPolicy); Ray's own ports stay inside the cluster.",
    )
    grafana: bool = Field(
        False, description="Also run Grafana on the head with the dashboards provisioned."
    )
    namespace: str = Field(
        "llmfleet", pattern=NAME_PATTERN, description="KubeRay: the Kubernetes namespace."
    )

    @model_validator(mode="after")
    def _provider_fields(self) -> ClusterSection:
        names = [self.head.name] + [n.name for n in self.node_types]
        if len(set(names)) != len(names):
            raise ValueError("node type names must be unique (the head's included)")
        if self.head.gpus:
            raise ValueError("the head node must have no GPUs (head.gpus: 0)")
        if self.provider == "gcp" and not (self.project_id and self.availability_zone):
            raise ValueError("provider gcp needs project_id and availability_zone")
        if self.provider == "ssh" and not self.head_ip:
            raise ValueError("provider ssh needs head_ip (and worker_ips)")
        if self.provider in ("aws", "gcp"):
            missing = [n.name for n in [self.head, *self.node_types] if not n.instance_type]
            if missing:
                raise ValueError(f"provider {self.provider} needs instance_type on {missing}")
        return self
