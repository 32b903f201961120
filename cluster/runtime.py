"""Start and stop a local Ray cluster with the Serve app on it (used by the CLI and tests).

Everything binds to the configured host (127.0.0.1 by default), the Ray dashboard stays off
(it costs ~1.1 GiB here) and Ray's token authentication stays on. What ``up`` started is
recorded and found again by ``cluster/local_state.py``.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from typing import Any

import httpx

from cluster.config import FleetConfig


def base_env() -> None:
    # Ray 2.60's default (token auth on) writes ~/.ray/auth_token on the first local start;
    # setting RAY_AUTH_MODE=token before that token exists makes the GCS abort, so only
    # clients of a running cluster (status, down) set it.
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_SERVE_LOG_TO_STDERR", "0")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault(*PROXY_HEALTH_ENV)


# Serve restarts a dead HTTP proxy (the process holding the port) after 3 failed health
# checks in a row: every 2 s instead of 10, the port is back in ~6 s instead of ~24 s
PROXY_HEALTH_ENV = ("RAY_SERVE_PROXY_HEALTH_CHECK_PERIOD_S", "2")
DIRECT_PROXY_PORT_OFFSET = 100  # direct ingress: Serve's proxy still starts; keep it aside


def direct_ingress_env(cfg: FleetConfig) -> dict[str, str]:
    """Serve's direct ingress: the ingress replica serves ``server.port`` itself, so tokens
    skip the HTTP proxy's extra Ray hop (Serve still starts a proxy: it gets port + 100).
    Read by Serve's processes at start, so set before ``ray.init``."""
    if cfg.server.ingress != "direct":
        return {}
    port = cfg.server.port
    return {
        "RAY_SERVE_ENABLE_DIRECT_INGRESS": "1",
        "RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT": str(port),
        "RAY_SERVE_DIRECT_INGRESS_MAX_HTTP_PORT": str(port + 1),
        "RAY_SERVE_DEFAULT_HTTP_HOST": cfg.server.host,
        # Serve holds a released port out of its pool for HAProxy's hard-stop time + 30 s
        # (150 s) so a stale HAProxy worker cannot reach a new owner. There is no HAProxy
        # here and the pool is this one port: a redeployed or restarted ingress would wait
        # 150 s for it.
        "RAY_SERVE_PORT_QUARANTINE_S": "0",
        # A stopping direct ingress stays open at least this long (30 s by default) so an
        # external load balancer can deregister it. None is in front of it here, and `down`
        # drains the requests in flight first: found by hand, every `down` of a direct
        # fleet took 35 s instead of 10, Serve's controller waiting out the period.
        "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": "0",
    }


def throughput_env(cfg: FleetConfig) -> dict[str, str]:
    """``server.throughput_mode``: the parts of Serve's throughput-optimized mode that do not
    change where HTTP is served (``server.ingress`` decides that). Handle calls between the
    proxy, the ingress and the replicas go over gRPC, so a streamed item is a gRPC message
    rather than a Ray object with its ownership and store round trips; user code and the
    handle's router run on the replica's main loop, so no item crosses threads. Read by
    Serve's processes at import, so set before ``ray.init``."""
    if not cfg.server.throughput_mode:
        return {}
    return {
        "RAY_SERVE_USE_GRPC_BY_DEFAULT": "1",
        "RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD": "0",
        "RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP": "0",
    }


def cluster_serve_env(cfg: FleetConfig) -> dict[str, str]:
    """What every node of a multi-node fleet starts Ray with (``ray up``'s start commands,
    KubeRay's containers), as `llmfleet up` sets it locally: read by Serve's processes at
    import, so it must be in each node's environment before ``ray start``."""
    return dict([PROXY_HEALTH_ENV]) | throughput_env(cfg)


def http_options(cfg: FleetConfig) -> dict[str, Any]:
    """Where Serve's proxy listens: ``server.port``, or port + 100 where something else
    serves the port (the ingress replica itself; the front door, which alone talks to it,
    so on loopback)."""
    port = cfg.server.port
    if cfg.server.ingress == "direct":
        port += DIRECT_PROXY_PORT_OFFSET
    if cfg.server.ingress == "resume":
        return {"host": "127.0.0.1", "port": port + DIRECT_PROXY_PORT_OFFSET}
    return {"host": cfg.server.host, "port": port}


def loopback_node(cfg: FleetConfig) -> None:
    """Keep a loopback fleet's Ray node on loopback. Ray replaces a loopback
    ``_node_ip_address`` by the machine's reachable address, and its metrics exporter (no
    authentication, even with token auth) then listens on all interfaces. Ray keeps the
    node on 127.0.0.1 where it does not support clusters; that switch, read at import and
    by the node's processes from the environment, is what a single-machine fleet wants."""
    from cluster.guard import is_loopback

    if not is_loopback(cfg.server.host):
        return
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = False


DEFAULT_RAY_CPUS = 8


def ray_cpus(cfg: FleetConfig) -> int:
    """The logical CPUs the local Ray node advertises: ``server.ray_num_cpus``, else enough
    for the fleet at its largest, at least ``DEFAULT_RAY_CPUS`` (they are bookkeeping:
    nothing is pinned)."""
    import math

    from cluster.app import fleet_demand, serves_on_gpu

    if cfg.server.ray_num_cpus is not None:
        return cfg.server.ray_num_cpus
    need, _ = fleet_demand(cfg, serves_on_gpu(cfg), peak=True)
    return max(DEFAULT_RAY_CPUS, math.ceil(need["CPU"]))


def check_capacity(cfg: FleetConfig, have: dict[str, float]) -> str | None:
    """``ValueError`` when a Ray node holding ``have`` cannot place the fleet at start (Serve
    would wait for resources forever, and ``up`` with it, silently); a warning when it
    cannot place it at its largest."""
    from cluster.app import fleet_demand, serves_on_gpu
    from cluster.placement import shortfall

    gpu = serves_on_gpu(cfg)
    hints = {
        "CPU": "leave server.ray_num_cpus unset (Ray is then sized for the fleet) or lower "
        "replicas.num_cpus",
        "GPU": "lower the replica count, engine.tensor_parallel_size or replicas.num_gpus",
    }

    def say(short: dict[str, tuple[float, float]]) -> str:
        return "; ".join(
            f"{name} {need:g}, the node has {held:g}"
            + (f": {hints[name]}" if name in hints else "")
            for name, (need, held) in short.items()
        )

    need, words = fleet_demand(cfg, gpu, peak=False)
    short = shortfall(need, have)
    if short:
        raise ValueError(f"this Ray node cannot place the fleet: {words} need {say(short)}")
    need, words = fleet_demand(cfg, gpu, peak=True)
    short = shortfall(need, have)
    if short:
        return (
            f"at autoscaling.max_replicas the fleet would need {say(short)}: "
            "replicas beyond what fits wait for resources"
        )
    return None


def _drop_token_auth_notice(record: logging.LogRecord) -> bool:
    """Ray warns at every local start that token authentication is on, and how to turn it
    off. llmfleet keeps it on by design (README, "Security and failure behaviour"), so ``up``
    drops that one notice; Ray's warning that authentication is *off* still shows."""
    return not record.getMessage().startswith("Token authentication is enabled")


def start_ray(cfg: FleetConfig) -> str:
    import ray

    base_env()
    auth_log = logging.getLogger("ray._private.authentication.authentication_token_setup")
    if _drop_token_auth_notice not in auth_log.filters:
        auth_log.addFilter(_drop_token_auth_notice)
    loopback_node(cfg)
    os.environ.update(direct_ingress_env(cfg))
    os.environ.update(throughput_env(cfg))
    ctx: Any = ray.init(  # a RayContext: address_info is not in its annotated base type
        num_cpus=ray_cpus(cfg),
        include_dashboard=cfg.server.include_dashboard,
        _node_ip_address=cfg.server.host if cfg.server.host != "0.0.0.0" else "127.0.0.1",
        _metrics_export_port=cfg.server.metrics_export_port,
        namespace="llmfleet",
        logging_level=logging.WARNING,
        log_to_driver=False,
        configure_logging=True,
    )
    port = str(ctx.address_info["gcs_address"]).rsplit(":", 1)[1]
    os.environ["LLMFLEET_RAY_SESSION_DIR"] = str(ctx.address_info["session_dir"])
    return f"127.0.0.1:{port}"  # clients connect over loopback


def quiet_serve_driver_log() -> None:
    """Serve's INFO lines in ``up``'s own process go; its warnings and errors stay. Found by
    hand: they said "New http_options/controller_options will not be applied" at every
    start (they had been, by ``serve.start``), and "Application 'llmfleet' is ready" while
    the fleet was stopping (the drain redeploys it). ``up`` prints its own progress."""
    from ray.serve._private.constants import SERVE_LOGGER_NAME

    logging.getLogger(SERVE_LOGGER_NAME).setLevel(logging.WARNING)


def deploy(cfg: FleetConfig, *, enable_metrics: bool = True) -> str:
    from ray import serve

    from cluster.app import APP_NAME, build_app
    from replicas.status_registry import ensure_status_actor

    check_deploy_exposure(cfg)
    ensure_status_actor()
    serve.start(http_options=http_options(cfg))
    serve.run(
        build_app(cfg, enable_metrics=enable_metrics),
        name=APP_NAME,
        route_prefix="/",
        blocking=False,
    )
    if cfg.server.ingress == "resume":
        from cluster.serve_front_door import start_front_door

        start_front_door(cfg, f"http://127.0.0.1:{http_options(cfg)['port']}")
    return f"http://{cfg.server.host}:{cfg.server.port}"


def check_ports(cfg: FleetConfig) -> None:
    """Refuse to start while a port the fleet will listen on is taken, naming the setting.
    Found by hand: a taken API port ended `llmfleet up` in a traceback from Serve's proxy
    actor, a taken metrics port in Ray's "The current node timed out during startup"."""
    node = cfg.server.host if cfg.server.host != "0.0.0.0" else "127.0.0.1"
    wanted = [(cfg.server.host, cfg.server.port, "server.port")]
    if cfg.server.ingress != "proxy":
        proxy = cfg.server.port + DIRECT_PROXY_PORT_OFFSET
        what = f"server.port + 100 (Serve's proxy, {cfg.server.ingress})"
        wanted.append((http_options(cfg)["host"], proxy, what))
    wanted.append((node, cfg.server.metrics_export_port, "server.metrics_export_port"))
    for host, port, what in wanted:
        family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is no owner
            try:
                s.bind(addr)
            except OSError as err:
                raise ValueError(
                    f"{what}: cannot listen on {host}:{port} ({err.strerror}); if a fleet "
                    "still holds it, `llmfleet down` stops it; else choose another port"
                ) from None


def check_deploy_exposure(cfg: FleetConfig) -> None:
    """Refuse an open API on a non-loopback host (``cluster/guard.py``)."""
    from cluster.guard import check_exposure
    from cluster.keys import KeyStore

    keys = KeyStore.from_config(cfg.server.api_keys_file).configured()
    check_exposure(cfg.server.host, keys, cfg.server.allow_unauthenticated)


def wait_ready(url: str, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            r = httpx.get(f"{url}/health", timeout=5.0)
            if r.status_code == 200:
                return
            last = f"HTTP {r.status_code}"
        except httpx.HTTPError as err:
            last = repr(err)
        time.sleep(0.5)
    raise TimeoutError(f"{url} not ready after {timeout_s:.0f} s ({last})")


def stop(timeout_s: float = 30.0) -> None:
    import ray
    from ray import serve

    if not ray.is_initialized():  # interrupted before Ray started (serve.shutdown would start it)
        return
    try:
        _stop_serve_controller(timeout_s)
        serve.shutdown()  # forgets the client; a controller still there is stopped its way
    finally:
        ray.shutdown()


def _stop_serve_controller(timeout_s: float) -> None:
    """Ask Serve's controller to stop everything and itself, and wait until it is gone.
    ``serve.shutdown`` alone waits on a controller call that ends only when the controller
    kills itself, so Ray printed "Task ServeController.graceful_shutdown failed ... killed by
    `ray.kill`" at every clean stop (found by hand). Asked without waiting, nothing of ours
    is pending when it exits."""
    import ray
    from ray.serve._private.constants import SERVE_CONTROLLER_NAME, SERVE_NAMESPACE

    def controller() -> Any:
        try:
            return ray.get_actor(SERVE_CONTROLLER_NAME, namespace=SERVE_NAMESPACE)
        except ValueError:  # none (Serve never started, or already gone)
            return None

    handle = controller()
    if handle is None:
        return
    try:
        ray.get(handle.graceful_shutdown.remote(wait=False), timeout=10)
    except Exception:  # unreachable or dying: serve.shutdown's own path takes over
        return
    deadline = time.monotonic() + timeout_s
    while controller() is not None and time.monotonic() < deadline:
        time.sleep(0.1)
