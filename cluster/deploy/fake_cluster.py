"""A multi-node Ray cluster on one machine, from the node types of the ``cluster:`` section.

Ray's fake multi-node provider (``RAY_FAKE_CLUSTER=1 ray start --head
--autoscaling-config=...``) runs the real cluster autoscaler; a "node" it launches is a
raylet with its own resources, started in the autoscaler's process on this machine. So a
fleet whose replicas reserve (logical) GPUs exercises what a cloud cluster does: a
pending placement group makes the autoscaler launch a node of a fitting type, and a node
left idle for ``idle_timeout_minutes`` is terminated. ``ray up`` with this provider fails
in Ray 2.60 (it wants an ``example.yaml`` the wheel lacks), hence ``ray start``.

- Node types: those ``ray up`` gets (``ray_up.node_types``): each worker type advertises
  ``CPU``, ``GPU`` and ``accelerator_type:<name>``; the head, with no GPUs, goes under the
  fake provider's fixed type name ``ray.head.default``.
- Isolation: its own ``--temp-dir`` and explicit ports, every node on 127.0.0.1 (Ray keeps
  nodes on loopback where it does not support clusters: ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``,
  which the fake provider's in-process nodes honour), token authentication on.
- Stop: ``ray stop`` would stop every Ray cluster of this user on the machine; ``stop()``
  kills only the processes of the session under its temp dir (fake worker nodes included:
  they run in the head's session).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cluster.config import FleetConfig

HEAD_TYPE = "ray.head.default"  # the fake provider tags its head node with this type
OBJECT_STORE_BYTES = 200 * 1024 * 1024  # per node; Ray's floor is 75 MiB
CONFIG_FILE = "autoscaling.json"  # in the temp dir; stop() reads the GCS address back


def fake_node_types(cfg: FleetConfig, object_store_bytes: int) -> dict[str, Any]:
    """``ray up``'s node types (``ray_up.node_types``: resources with
    ``accelerator_type:<name>``, min/max workers) as the fake provider takes them: the head
    under its fixed type name, no machine specs (a fake node is a raylet with resources), a
    small object store per worker node."""
    from cluster.deploy.ray_up import node_types

    rendered = node_types(cfg)
    out: dict[str, Any] = {}
    for name, spec in rendered.items():
        head = name == cfg.cluster.head.name
        resources = dict(spec["resources"])
        if not head:
            resources["object_store_memory"] = object_store_bytes
        out[HEAD_TYPE if head else name] = {**spec, "resources": resources, "node_config": {}}
    return out


def fake_autoscaling_config(
    cfg: FleetConfig,
    *,
    gcs_address: str,
    idle_timeout_minutes: float | None = None,
    object_store_bytes: int = OBJECT_STORE_BYTES,
) -> dict[str, Any]:
    """The autoscaling config for ``ray start --head --autoscaling-config``, from the
    ``cluster:`` section; read as-is by the autoscaler (no defaults are merged in, so every
    key its reader expects is here). ``idle_timeout_minutes`` may be fractional here."""
    c = cfg.cluster
    idle = c.idle_timeout_minutes if idle_timeout_minutes is None else idle_timeout_minutes
    return {
        "cluster_name": c.name,
        "max_workers": sum(n.max_workers for n in c.node_types),
        "upscaling_speed": 1.0,
        "idle_timeout_minutes": idle,
        "provider": {
            "type": "fake_multinode",
            "gcs_address": gcs_address,
            "use_node_id_as_ip": True,
            "disable_node_updaters": True,
            "disable_launch_config_check": True,
        },
        "available_node_types": fake_node_types(cfg, object_store_bytes),
        "head_node_type": HEAD_TYPE,
        # Unused by the fake provider, but the autoscaler reads them.
        "auth": {},
        "docker": {},
        "initialization_commands": [],
        "setup_commands": [],
        "head_setup_commands": [],
        "worker_setup_commands": [],
        "head_start_ray_commands": [],
        "worker_start_ray_commands": [],
        "file_mounts": {},
        "cluster_synced_files": [],
        "file_mounts_sync_continuously": False,
        "rsync_exclude": [],
        "rsync_filter": [],
    }


def free_ports(n: int, avoid: Iterable[int] = ()) -> list[int]:
    """``n`` distinct ports free on 127.0.0.1 now, none of them in ``avoid``. Every socket
    is held until all are picked: ports picked one by one (bind, close, bind again) may
    repeat, and ``ray start`` refuses a port given to two of its components."""
    taken = set(avoid)
    picked: list[int] = []
    with contextlib.ExitStack() as held:
        for _ in range(n + len(taken)):  # a held port is not handed out again
            sock = held.enter_context(socket.socket())
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
            if port not in taken:
                taken.add(port)
                picked.append(port)
            if len(picked) == n:
                return picked
    raise OSError(f"found {len(picked)} free ports of {n}")


PORT_FLAGS = (
    "port", "node-manager-port", "object-manager-port", "ray-client-server-port",
    "dashboard-agent-listen-port", "dashboard-agent-grpc-port", "runtime-env-agent-port",
    "metrics-export-port",
)  # fmt: skip


@dataclass(slots=True)
class FakeCluster:
    """``start()`` returns the GCS address; ``stop()`` is idempotent and safe after a crash."""

    cfg: FleetConfig
    temp_dir: Path
    idle_timeout_minutes: float | None = None
    update_interval_s: int = 1  # the autoscaler's loop (Ray's default: 5 s)
    ports: dict[str, int] = field(default_factory=dict)

    def start(self, env: dict[str, str] | None = None, timeout_s: float = 120.0) -> str:
        self.temp_dir.mkdir(parents=True, exist_ok=True)
        server = self.cfg.server  # Serve's ports (its proxy at port + 100 when direct)
        serve_ports = (server.port, server.port + 100, server.metrics_export_port)
        picked = free_ports(len(PORT_FLAGS), avoid=serve_ports)
        self.ports = dict(zip(PORT_FLAGS, picked, strict=True))
        address = f"127.0.0.1:{self.ports['port']}"
        config = fake_autoscaling_config(
            self.cfg, gcs_address=address, idle_timeout_minutes=self.idle_timeout_minutes
        )
        config_path = self.temp_dir / CONFIG_FILE
        config_path.write_text(json.dumps(config, indent=1))
        head = self.cfg.cluster.head
        cmd = [
            str(Path(sys.executable).with_name("ray")), "start", "--head",
            f"--autoscaling-config={config_path}", f"--temp-dir={self.temp_dir}",
            "--node-ip-address=127.0.0.1", "--include-dashboard=false",
            f"--num-cpus={head.cpus}", "--num-gpus=0",
            f"--object-store-memory={OBJECT_STORE_BYTES}", "--disable-usage-stats",
            *(f"--{flag}={port}" for flag, port in self.ports.items()),
        ]  # fmt: skip
        full_env = {
            **os.environ,
            **(env or {}),
            "RAY_FAKE_CLUSTER": "1",
            "AUTOSCALER_UPDATE_INTERVAL_S": str(self.update_interval_s),
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        }
        full_env.setdefault("RAY_AUTH_MODE", "token")
        subprocess.run(
            cmd, env=full_env, check=True, timeout=timeout_s, capture_output=True, text=True
        )
        return address

    def session_dirs(self) -> list[Path]:
        return sorted(p for p in self.temp_dir.glob("session_*") if p.is_dir())

    def markers(self) -> tuple[list[str], str]:
        """What names a process of this cluster: one of its session names anywhere in the
        command line, or its GCS address as ``--address`` (Ray's client server names no
        session)."""
        try:
            gcs = json.loads((self.temp_dir / CONFIG_FILE).read_text())["provider"]["gcs_address"]
        except (OSError, ValueError, KeyError):
            gcs = None
        return [p.name for p in self.session_dirs()], f"--address={gcs}" if gcs else ""

    def live_processes(self) -> list[Any]:
        """This cluster's processes (psutil), their descendants included."""
        import psutil

        names, address_arg = self.markers()
        found: dict[int, Any] = {}
        for proc in psutil.process_iter(["cmdline"]):
            with contextlib.suppress(psutil.Error):
                args = proc.info["cmdline"] or []
                if (address_arg and address_arg in args) or any(
                    n in a for a in args for n in names
                ):
                    found[proc.pid] = proc
                    found.update((c.pid, c) for c in proc.children(recursive=True))
        found.pop(os.getpid(), None)
        return [p for p in found.values() if _alive(p)]

    def stop(self) -> int:
        """Kill this cluster's processes (head, autoscaler, fake worker nodes, workers, client
        server); other Ray clusters on the machine are left alone."""
        import psutil

        procs = self.live_processes()
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(procs, timeout=10)
        return len(procs)


def _alive(proc: Any) -> bool:
    import psutil

    try:
        return bool(proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False
