"""``llmfleet deploy plan``: what a fleet asks of its node types, before anything starts.

One LLMReplica is one placement group, STRICT_PACK (every bundle on one node, so the
tensor-parallel all-reduce never leaves NVLink; Ray never splits such a group across nodes):

    bundle 0        {CPU: replicas.num_cpus}                 the replica actor
    bundle 1 .. tp  {GPU: 1, accelerator_type:<X>: 0.001}    vLLM's TP workers

``accelerator_type:<X>`` is the resource Ray gives a node started with that accelerator and
that Ray's own ``accelerator_type=`` option asks 0.001 of (``cluster/placement.py``); X is
``replicas.accelerator_type``, else the GPU model of the node types that hold a replica.
With STRICT_PACK the CPU bundle lands beside the GPU ones.

    fits(node type)   gpus >= tp, accelerator_type = the fleet's, cpus >= num_cpus
    per node          min(gpus // tp, cpus // num_cpus)
    R                 autoscaling.max_replicas (num_replicas when autoscaling is off)
    nodes             fill the fitting types, most replicas per node first, up to max_workers
    headroom          ceil(0.2 × R) replicas, one rolling-update batch

Headroom: Serve 2.60 replaces replicas in batches of ``rolling_update_percentage`` (0.2) of
the target. llmfleet keeps Serve's ``max_surge_percent`` 0: a batch stops before its
replacements start, so an update at R needs no extra GPUs but runs one batch short; a surge
(or replacing a failed replica during an update) needs that batch on top of R. So a
shortfall for R is an error and a shortfall for R + headroom a warning.

Refused (errors, with the field path): TP larger than every node type's GPUs; no GPU node
type for a vLLM fleet; fitting node types with different accelerators; max_workers too small
for R; Ray/llmfleet versions that disagree (``versions.py``). A head with GPUs never gets
here: the config refuses it (``cluster.head``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cluster.app import INGRESS_DEPLOYMENT, REPLICA_DEPLOYMENT, ingress_replicas
from cluster.config import FleetConfig
from cluster.deploy.capacity import NodeFit, fill, fit, headroom
from cluster.deploy.exposure import exposure_findings
from cluster.deploy.findings import Finding
from cluster.deploy.settings import NodeType
from cluster.deploy.versions import RAY_IMAGE as RAY_IMAGE_PREFIX
from cluster.deploy.versions import Installed, check_versions, installed
from cluster.placement import replica_resources

INGRESS_NUM_CPUS = 0.5  # as cluster.app gives each ingress replica


@dataclass(frozen=True, slots=True)
class DeploymentRow:
    name: str
    replicas: int  # R
    min_replicas: int
    bundles: tuple[Mapping[str, float], ...]
    strategy: str | None
    fits: tuple[NodeFit, ...]
    nodes: Mapping[str, int]  # node type -> nodes for R replicas
    headroom_replicas: int
    nodes_with_headroom: Mapping[str, int]
    headroom_short: int  # replicas of R + headroom that max_workers leave unplaced
    placement: str


@dataclass(frozen=True, slots=True)
class Plan:
    rows: tuple[DeploymentRow, ...]
    findings: tuple[Finding, ...]
    notes: tuple[str, ...]

    @property
    def errors(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.error)

    @property
    def warnings(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if not f.error)

    @property
    def refused(self) -> bool:
        return bool(self.errors)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out.pop("findings")
        out["errors"] = [dataclasses.asdict(f) for f in self.errors]
        out["warnings"] = [dataclasses.asdict(f) for f in self.warnings]
        out["refused"] = self.refused
        return out


def gpus_per_replica(cfg: FleetConfig) -> int:
    """What each replica reserves: ``replicas.num_gpus``, else the TP size for vLLM (a
    vLLM fleet is deployed on GPUs), else 0."""
    n = cfg.replicas.num_gpus
    if n is not None:
        return n
    return cfg.engine.tensor_parallel_size if cfg.engine.type == "vllm" else 0


def uses_gpus(cfg: FleetConfig) -> bool:
    return gpus_per_replica(cfg) > 0


def gpu_path(cfg: FleetConfig) -> str:
    return "replicas.num_gpus" if cfg.replicas.num_gpus else "engine.tensor_parallel_size"


def gpu_types(cfg: FleetConfig) -> list[tuple[int, NodeType]]:
    return [(i, n) for i, n in enumerate(cfg.cluster.node_types) if n.gpus]


def fleet_accelerator(cfg: FleetConfig) -> str | None:
    """The accelerator the replicas ask for: ``replicas.accelerator_type``, else that of the
    GPU node types that hold one (None when they disagree: plan refuses)."""
    if cfg.replicas.accelerator_type:
        return cfg.replicas.accelerator_type
    g = gpus_per_replica(cfg)
    names = sorted({n.accelerator_type or "" for _, n in gpu_types(cfg) if n.gpus >= g})
    return (names[0] or None) if len(names) == 1 else None


def replica_options(cfg: FleetConfig) -> dict[str, Any]:
    """The LLMReplica resources as on the fleet's nodes (not on the machine that renders):
    ``replica_resources`` with GPUs for a vLLM fleet (or ``replicas.num_gpus``), each GPU
    bundle asking the fleet's accelerator. Raises ValueError for TP > 1 without GPUs."""
    r = cfg.replicas
    return replica_resources(
        cfg.engine.tensor_parallel_size,
        r.num_cpus,
        cfg.engine.type == "vllm",
        num_gpus=r.num_gpus,
        accelerator_type=fleet_accelerator(cfg) if uses_gpus(cfg) else None,
    )


def target_replicas(cfg: FleetConfig) -> tuple[int, int]:
    a = cfg.autoscaling
    if a.enabled:
        return a.min_replicas, a.max_replicas
    return cfg.replicas.num_replicas, cfg.replicas.num_replicas


def plan(cfg: FleetConfig, inst: Installed | None = None) -> Plan:
    findings: list[Finding] = []
    rows = [_replica_row(cfg, findings), _ingress_row(cfg)]
    findings += check_versions(cfg.cluster, inst or installed(), cfg.engine.type)
    findings += exposure_findings(cfg)
    return Plan(tuple(rows), tuple(findings), tuple(_notes(cfg)))


def _replica_row(cfg: FleetConfig, findings: list[Finding]) -> DeploymentRow:
    tp, gpu = gpus_per_replica(cfg), uses_gpus(cfg)
    low, high = target_replicas(cfg)
    r_path = "autoscaling.max_replicas" if cfg.autoscaling.enabled else "replicas.num_replicas"
    findings += _shape_findings(cfg)
    try:
        opts = replica_options(cfg)
    except ValueError as err:  # TP > 1 on an engine without GPUs
        findings.append(Finding("engine.tensor_parallel_size", str(err), True))
        opts = replica_resources(1, cfg.replicas.num_cpus, False)
    accel = fleet_accelerator(cfg) if gpu else None
    types = cfg.cluster.node_types
    fits = tuple(fit(n, tp, cfg.replicas.num_cpus, accel, gpu) for n in types if n.gpus or not gpu)
    nodes, short = fill(high, fits)
    extra = headroom(high)
    with_headroom, short_h = fill(high + extra, fits)
    capacity = sum(f.per_node * f.max_workers for f in fits)
    if any(f.per_node for f in fits) and short:
        findings.append(
            Finding(
                r_path,
                f"{high} replicas need more nodes than max_workers allows: the fitting node types hold {capacity} (raise their max_workers or lower {r_path.split('.')[1]})",
                True,
            )
        )
    elif any(f.per_node for f in fits) and short_h:
        findings.append(
            Finding(
                r_path,
                f"no headroom for a rolling update: {high} + {extra} replicas need more than the {capacity} the fitting types hold (max_workers)",
                False,
            )
        )
    findings += _fit_warnings(cfg, fits, high)
    bundles = opts.get("placement_group_bundles") or [
        {"CPU": opts["ray_actor_options"]["num_cpus"]}
    ]
    return DeploymentRow(
        name=REPLICA_DEPLOYMENT,
        replicas=high,
        min_replicas=low,
        bundles=tuple(bundles),
        strategy=opts.get("placement_group_strategy"),
        fits=fits,
        nodes=nodes,
        headroom_replicas=extra,
        nodes_with_headroom=with_headroom,
        headroom_short=short_h,
        placement=f"one {'placement group' if gpu else 'actor'} per replica on {accel or 'a CPU'} node",
    )


def _shape_findings(cfg: FleetConfig) -> list[Finding]:
    """TP against the node types' GPUs and accelerators (only for a vLLM fleet)."""
    if not uses_gpus(cfg):
        return []
    tp, gpus = gpus_per_replica(cfg), gpu_types(cfg)
    if not gpus:
        return [
            Finding("cluster.node_types", "no node type has GPUs: vLLM replicas need them", True)
        ]
    biggest = max(gpus, key=lambda ix: ix[1].gpus)[1]
    if tp > biggest.gpus:
        return [
            Finding(
                gpu_path(cfg),
                f"a replica's {tp} GPUs must be on one node (STRICT_PACK: tensor parallelism never crosses nodes); the largest node type, {biggest.name}, has {biggest.gpus}",
                True,
            )
        ]
    fitting = [(i, n) for i, n in gpus if n.gpus >= tp]
    want = cfg.replicas.accelerator_type
    if want:
        if not any(n.accelerator_type == want for _, n in fitting):
            return [
                Finding(
                    "replicas.accelerator_type",
                    f"no node type with {tp}+ GPUs has accelerator {want}",
                    True,
                )
            ]
        return []
    if len({n.accelerator_type for _, n in fitting}) > 1:
        i = fitting[-1][0]
        kinds = ", ".join(sorted({str(m.accelerator_type) for _, m in fitting}))
        return [
            Finding(
                f"cluster.node_types[{i}].accelerator_type",
                f"node types that hold a {tp}-GPU replica have different accelerators ({kinds}); a replica asks for one accelerator_type: one fleet per GPU model",
                True,
            )
        ]
    return []


def _fit_warnings(cfg: FleetConfig, fits: tuple[NodeFit, ...], high: int) -> list[Finding]:
    out = []
    index = {n.name: i for i, n in enumerate(cfg.cluster.node_types)}
    tp = gpus_per_replica(cfg)
    for f in fits:
        path = f"cluster.node_types[{index[f.node_type]}]"
        if not f.per_node:
            out.append(Finding(path, f"{f.node_type} never holds a replica ({f.reason})", False))
        elif uses_gpus(cfg) and f.gpus % tp:
            idle = f.gpus - f.per_node * tp
            out.append(
                Finding(
                    f"{path}.gpus",
                    f"{idle} of {f.gpus} GPUs on each {f.node_type} stay idle ({tp} per replica)",
                    False,
                )
            )
    slots = sum(f.per_node * cfg.cluster.node_types[index[f.node_type]].min_workers for f in fits)
    if slots > high:
        out.append(
            Finding(
                "cluster.node_types",
                f"min_workers keep room for {slots} replicas but the fleet runs at most {high}",
                False,
            )
        )
    return out


def _ingress_row(cfg: FleetConfig) -> DeploymentRow:
    n = ingress_replicas(cfg)
    head = cfg.cluster.head
    return DeploymentRow(
        name=INGRESS_DEPLOYMENT,
        replicas=n,
        min_replicas=n,
        bundles=({"CPU": INGRESS_NUM_CPUS},),
        strategy=None,
        fits=(),
        nodes={},
        headroom_replicas=0,
        nodes_with_headroom={},
        headroom_short=0,
        placement=f"an actor per replica on any node with {INGRESS_NUM_CPUS:g} CPU free (the head, {head.name!r}, has {head.cpus} CPUs); no extra node",
    )


def _notes(cfg: FleetConfig) -> list[str]:
    c = cfg.cluster
    uri = c.weights_uri
    if uri and uri.split("://", 1)[0] in ("s3", "gs"):
        weights = f"weights: {uri} is streamed by vLLM's loader (runai_streamer) on each GPU node (vLLM's runai extra: add `pip install 'vllm[runai]==0.32.0'` to cluster.setup_commands unless the image has it)"
    elif uri:
        weights = f"weights: {uri} must be present on every GPU node (local or shared path)"
    else:
        weights = f"weights: model.path {cfg.model.path} must exist on every GPU node"
    notes = [
        weights,
        f"the Serve app builds where Serve puts it (the head): {cfg.model.path}/config.json and the tokenizer must be readable there and wherever an ingress replica runs",
    ]
    if c.image and not RAY_IMAGE_PREFIX.match(c.image):
        notes.append(
            f"image {c.image}: not a rayproject/ray tag; it must carry the pinned Ray and Python (not checked)"
        )
    return notes
