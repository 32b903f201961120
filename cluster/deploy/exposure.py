"""Who can reach a deployed fleet's API: ``server.host`` and keys, checked before ``ray up``.

On a cluster the API must bind a non-loopback address to be reached from anywhere but the
head, and a non-loopback API needs keys: the app refuses to build without them
(``cluster/serve_entry.py``, the rule ``llmfleet up`` applies, ``cluster/guard.py``), unless
``server.allow_unauthenticated`` says otherwise. The kuberay target always has keys (from
its Secret, ``LLMFLEET_API_KEYS``); ``ray-up`` and ``serve`` only from
``server.api_keys_file`` (or an environment the operator sets up). Found by hand: the
local example config rendered a KubeRay bundle on 127.0.0.1 that our own ``validate``
refused, and a ``ray up`` fleet on 0.0.0.0 without keys would have served an open API.
"""

from __future__ import annotations

from cluster.config import FleetConfig
from cluster.deploy.findings import Finding
from cluster.guard import is_loopback

FIX = "set server.host: 0.0.0.0 and server.api_keys_file (`llmfleet keys add NAME`)"


def exposure_findings(cfg: FleetConfig) -> list[Finding]:
    """Warnings for ``deploy plan`` (it is not told the target)."""
    s = cfg.server
    if is_loopback(s.host):
        return [
            Finding(
                "server.host",
                f"{s.host}: the API answers only on the head itself (ray-up: through a "
                f"tunnel); the kuberay target refuses it; {FIX}",
                False,
            )
        ]
    if s.api_keys_file is None and not s.allow_unauthenticated:
        return [
            Finding(
                "server.api_keys_file",
                f"unset with server.host {s.host}: the ray-up and serve targets refuse to "
                "build an open API (kuberay takes its keys from a Secret); add a key file "
                "or set server.allow_unauthenticated: true",
                False,
            )
        ]
    return []


def render_refusal(cfg: FleetConfig, target: str) -> str | None:
    """Why ``target``'s files would not serve anyone, if they would not."""
    s = cfg.server
    if s.ingress == "resume":
        return (
            "server.ingress: resume: its front door is started by `llmfleet up` on one "
            "machine, and no cluster target starts one; use server.ingress: proxy"
        )
    if target == "kuberay" and is_loopback(s.host):
        return f"server.host {s.host}: no Kubernetes Service can reach it; {FIX}"
    open_api = not is_loopback(s.host) and s.api_keys_file is None
    if target == "ray-up" and open_api and not s.allow_unauthenticated:
        return (
            f"server.host {s.host} with no server.api_keys_file: the fleet would refuse to "
            "build an open API; add a key file (`llmfleet keys add NAME`) or set "
            "server.allow_unauthenticated: true"
        )
    return None
