"""``kuberay/README.md``: what an operator of the Kubernetes cluster does around the
rendered manifests: the two Secrets (commands, never values), the image, the weights, the
node labels the gpu overlay selects, what the NetworkPolicy lets through."""

from __future__ import annotations

from cluster.config import FleetConfig
from cluster.deploy import kuberay_rayservice as rs


def _keys_section(cfg: FleetConfig) -> str:
    path = cfg.server.api_keys_file
    how = (
        f"mounted as the file `{path}`\n(server.api_keys_file) from a Secret volume: an "
        "updated Secret reaches the ingress's\nhot reload within about a minute"
        if path
        else "given to every Ray container as\n`LLMFLEET_API_KEYS` (fixed when a pod starts: "
        "restart the pods after a change)"
    )
    ns = cfg.cluster.namespace
    return (
        f"API keys: Secret `{rs.KEYS_SECRET}`, key `{rs.KEYS_KEY}`, {how}. The file holds\n"
        "only SHA-256 digests; `llmfleet keys add NAME --file keys.yaml` prints each key once.\n"
        "Create or update it with:\n\n"
        "```sh\n"
        f"kubectl -n {ns} create secret generic {rs.KEYS_SECRET} \\\n"
        f"  --from-file={rs.KEYS_KEY}=keys.yaml --dry-run=client -o yaml | kubectl apply -f -\n"
        "```\n"
    )


def _weights_section(cfg: FleetConfig) -> str:
    if rs.weights_kind(cfg) == "object":
        return (
            f"Weights: `{cfg.cluster.weights_uri}`, streamed by vLLM's runai loader on the GPU\n"
            f"pods (`RUNAI_STREAMER_CONCURRENCY={rs.RUNAI_CONCURRENCY}`). Give the pods read\n"
            "access without a key in a manifest: an IAM role for the pods' ServiceAccount (EKS\n"
            "IRSA / Pod Identity) or GKE Workload Identity; `AWS_REGION` is set from\n"
            "cluster.region on AWS. An S3-compatible store: add `RUNAI_STREAMER_S3_ENDPOINT`.\n"
        )
    return (
        f"Weights: a directory, mounted read-only on the GPU pods at `{rs.models_mount_path(cfg)}`\n"
        f"from the PersistentVolumeClaim `{rs.MODELS_CLAIM}` (create it, ReadOnlyMany: an NFS\n"
        "or CSI volume holding the model's files at its root). The manifests do not render\n"
        "the claim: its storage class and size are the cluster's.\n"
    )


def readme(cfg: FleetConfig, requirement: str) -> str:
    c = cfg.cluster
    ns = c.namespace
    image = c.image or rs.DEFAULT_IMAGE
    accel = sorted({n.accelerator_type for n in c.node_types if n.accelerator_type})
    labels = "\n".join(
        f"kubectl label node <node> {rs.ACCELERATOR_LABEL}={a}   # nodes with {a} GPUs"
        for a in accel
    )
    return f"""# llmfleet on KubeRay: RayService `{c.name}` in namespace `{ns}`

Rendered by `llmfleet deploy render --target kuberay`; checked by `llmfleet deploy validate`.
Needs the KubeRay operator >= 1.6 (`authOptions.secretName`) and Ray {rs.RAY_VERSION} in the image.

```sh
kubectl apply -k kuberay/overlays/gpu    # production: GPU groups pinned to labelled nodes
kubectl apply -k kuberay/overlays/dev    # one worker at most, API Service ClusterIP
kubectl apply -k kuberay/base            # no node pinning (any node with nvidia.com/gpu)
```

## Secrets (create them first; nothing here holds a value)

Ray token auth (Ray {rs.RAY_VERSION}, `RAY_AUTH_MODE=token`): Secret `{rs.TOKEN_SECRET}`, key
`{rs.TOKEN_KEY}` (the key KubeRay reads). The RayService names it in `authOptions.secretName`,
so the operator authenticates its own dashboard calls with it, and every Ray container gets
it as `RAY_AUTH_TOKEN`:

```sh
kubectl create namespace {ns}   # or apply the base once; it renders the Namespace
kubectl -n {ns} create secret generic {rs.TOKEN_SECRET} \\
  --from-literal={rs.TOKEN_KEY}="$(python -c 'import secrets; print(secrets.token_hex(32))')"
```

{_keys_section(cfg)}
## Image

`{image}`. llmfleet must be installed in it: Serve imports
`cluster.serve_entry:app` on the cluster. Build and push once per llmfleet version, then set `cluster.image` and re-render:

```dockerfile
FROM {rs.DEFAULT_IMAGE}
RUN pip install --no-cache-dir '{requirement}'
```

## Weights

{_weights_section(cfg)}
## GPU nodes

Each worker group asks `nvidia.com/gpu` (the NVIDIA device plugin) and advertises Ray's
`accelerator_type:<X>` resource. The gpu overlay also pins a group to nodes labelled
`{rs.ACCELERATOR_LABEL}=<X>` and tolerates the `nvidia.com/gpu` NoSchedule taint. The
cluster's operator sets that label (a node pool label; GPU feature discovery's
`nvidia.com/gpu.product` names differ by driver, so llmfleet does not guess them):

```sh
{labels or "# no GPU node types in this config"}
```

A node type's `cpus` and `memory_gib` are the pod's requests and limits: keep them below
the machine's allocatable resources (capacity minus the kubelet's reserve).

## Network

The API Service `{c.name}-api` (LoadBalancer, `externalTrafficPolicy: Local`, so the
ipBlocks see client addresses) exposes port {cfg.server.port} only, and only to
{", ".join(c.api_cidrs)} (its `loadBalancerSourceRanges` and the NetworkPolicy's ipBlocks).
Ray's ports admit the fleet's own pods (label `{rs.FLEET_LABEL}={c.name}`). The
dashboard ({rs.DASHBOARD_PORT}) and Serve's port also admit the KubeRay operator's pods (`app.kubernetes.io/name: kuberay-operator`, any namespace): it deploys
`serveConfigV2` through the dashboard and health-checks Serve's proxy. The dashboard listens
on the pod's address for that reason, behind token auth. A Prometheus outside the fleet
needs its own NetworkPolicy rule for port {cfg.server.metrics_export_port}.
Use `server.ingress: proxy` on KubeRay: with `direct`, only the ingress replica's node
serves the API port.
"""
