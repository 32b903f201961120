"""The ``llmfleet`` command: up, status, down, bench, sim, keys, prepare-model, dashboards,
report."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cluster.config import ConfigError, FleetConfig, load_config
from cluster.start_view import describe as describe_start_failures
from cluster.start_view import describe_serve
from cluster.status_cli import cmd_status

# `llmfleet up` flag -> (config section, field)
_FLAG_FIELDS = {
    "replicas": ("replicas", "num_replicas"),
    "engine": ("engine", "type"),
    "model": ("model", "path"),
    "host": ("server", "host"),
    "port": ("server", "port"),
    "router": ("routing", "policy"),
}


def _overrides(cfg: FleetConfig, args: argparse.Namespace) -> FleetConfig:
    from cluster.config import parse_config

    data = cfg.model_dump()
    for flag, (section, field) in _FLAG_FIELDS.items():
        value = getattr(args, flag)
        if value is not None:
            data[section][field] = value
    if args.autoscale is not None:
        data["autoscaling"]["enabled"] = args.autoscale != "none"
        data["autoscaling"]["policy"] = args.autoscale
    return parse_config(data)


def cmd_up(args: argparse.Namespace) -> int:
    from cluster import lifecycle, local_state, runtime

    try:
        cfg = _overrides(load_config(args.config), args)
    except ConfigError as err:
        print(f"llmfleet: {err}", file=sys.stderr)
        return 2
    print("# effective config\n" + cfg.to_yaml(), flush=True)
    try:
        runtime.check_deploy_exposure(cfg)
    except ValueError as err:  # an open API off loopback, or an unreadable key file
        print(f"llmfleet: {err}", file=sys.stderr)
        return 2
    running = local_state.read_state()
    if running and local_state.pid_alive(int(running["pid"])):
        print(
            f"llmfleet: already running (pid {running['pid']}, {running['url']}); run `llmfleet down` first",
            file=sys.stderr,
        )
        return 1
    try:
        runtime.check_ports(cfg)  # before Ray: a taken port fails deep inside its start
    except ValueError as err:
        print(f"llmfleet: {err}", file=sys.stderr)
        return 1
    from replicas.model_prep import resolve_model

    try:
        resolve_model(cfg.model.path)
    except FileNotFoundError as err:
        print(f"llmfleet: model.path: {err}", file=sys.stderr)
        return 2
    # `down` and a second `up` see this fleet from now on, while it is still starting
    state: dict[str, Any] = {
        "pid": os.getpid(),
        "url": f"http://{cfg.server.host}:{cfg.server.port}",
        "started": time.time(),
        "starting": True,
    }
    local_state.write_state(state)
    # ready: running (a signal asks the loop below to stop); hold: inside ray.init, which
    # cut short leaves Ray's agents running or crashes the shutdown (seen by hand)
    # now: a second signal (or `down --now`): stop without letting requests finish
    stopping = {"flag": False, "ready": False, "hold": True, "now": False}

    def _stop(_signum: int, _frame: Any) -> None:
        first = not stopping["flag"]
        stopping["flag"] = True
        stopping["now"] = not first
        if first and not stopping["ready"] and not stopping["hold"]:
            raise KeyboardInterrupt  # Ctrl-C (or `down`) while starting: stop starting now

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    rc = 0
    try:
        state["gcs_address"] = runtime.start_ray(cfg)
        state["session_dir"] = os.environ.get("LLMFLEET_RAY_SESSION_DIR", "")
        node = state["gcs_address"].rsplit(":", 1)[0]  # the head node: Serve's controller
        state["metrics_url"] = f"http://{node}:{cfg.server.metrics_export_port}/metrics"
        state["min_replicas"] = cfg.autoscaling.min_replicas  # the floor `status` names
        state["shutdown_timeout_s"] = cfg.server.shutdown_timeout_s  # `down` waits for it
        local_state.write_state(state)
        stopping["hold"] = False
        if stopping["flag"]:  # asked to stop during ray.init
            raise KeyboardInterrupt
        import ray

        try:
            note = runtime.check_capacity(cfg, ray.cluster_resources())
        except ValueError as err:
            print(f"llmfleet: {err}", file=sys.stderr, flush=True)
            return 2
        if note:
            print(f"llmfleet: warning: {note}", file=sys.stderr, flush=True)
        runtime.quiet_serve_driver_log()
        print(f"llmfleet: Ray started; {starting_line(cfg)}", flush=True)
        try:
            state["url"] = runtime.deploy(cfg)
            runtime.wait_ready(state["url"], timeout_s=args.ready_timeout)
        except (RuntimeError, TimeoutError) as err:  # e.g. Serve gave up starting replicas
            # found by hand: a model that cannot load ended in a traceback saying only
            # "Failed to update the deployments ['LLMReplica']"
            print(f"llmfleet: the fleet did not start: {err}", file=sys.stderr)
            failed = describe_serve(lifecycle.failed_deployments())
            failed += describe_start_failures(lifecycle.start_failures(), time.time(), True)
            print("\n".join(failed), file=sys.stderr, flush=True)
            return 1
        local_state.write_state({**state, "starting": False})
        stopping["ready"] = True
        print(
            f"llmfleet ready: {state['url']}/v1 (model {cfg.model.served_name}); Ctrl-C to stop",
            flush=True,
        )
        while not stopping["flag"]:
            time.sleep(0.5)
        _drain(cfg, state, lambda: stopping["now"])
    except KeyboardInterrupt:
        print("llmfleet: interrupted while starting", file=sys.stderr, flush=True)
        rc = 130
    finally:
        stopping["ready"] = True  # a second signal must not cut the shutdown short
        print("llmfleet: shutting down", flush=True)
        runtime.stop()
        local_state.clear_state()
        # stopped: a late signal must not kill the exit (after a stop during the start, 1
        # run in 5 was killed by SIGINT while the interpreter shut down, rc -2)
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)
    return rc


def starting_line(cfg: FleetConfig) -> str:
    """What ``up`` says while the replicas start (vLLM's take ~20-30 s to load a model)."""
    a = cfg.autoscaling
    n = a.min_replicas if a.enabled else cfg.replicas.num_replicas
    what = f"{n} {cfg.engine.type} replica{'s' if n != 1 else ''}"
    if a.enabled:
        what += f" (autoscaling {a.min_replicas}-{a.max_replicas})"
    return f"starting {what} of {cfg.model.served_name}; waiting until the fleet serves"


def _drain(cfg: FleetConfig, state: dict[str, Any], now: Callable[[], bool]) -> None:
    """Let the requests in flight finish (``lifecycle.drain``) before the fleet stops."""
    from cluster import lifecycle, local_state

    timeout_s = cfg.server.shutdown_timeout_s
    if timeout_s <= 0 or now():
        return
    local_state.write_state({**state, "starting": False, "stopping": True})
    print(
        f"llmfleet: stopping: requests in flight get up to {timeout_s:g} s to finish, new "
        "ones are refused (Ctrl-C again, or `llmfleet down --now`, to stop now)",
        flush=True,
    )
    if not lifecycle.drain(cfg, timeout_s, now):
        print("llmfleet: requests still in flight are cut", file=sys.stderr, flush=True)


def cmd_down(args: argparse.Namespace) -> int:
    from cluster import local_state

    state = local_state.read_state()
    if state and local_state.pid_alive(int(state["pid"])):
        pid = int(state["pid"])
        os.kill(pid, signal.SIGINT)
        if args.now:  # a second signal: `up` stops without letting requests finish
            time.sleep(0.2)
            os.kill(pid, signal.SIGINT)
        wait = args.timeout
        if wait is None:  # the requests in flight get their time, the shutdown its own
            wait = 0.0 if args.now else float(state.get("shutdown_timeout_s", 0.0))
            wait += 60.0
        deadline = time.monotonic() + wait
        while local_state.pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if local_state.pid_alive(pid):
            os.kill(pid, signal.SIGKILL)
    # After a crash Ray's processes can outlive `up`: stop that session's processes (only).
    if state and state.get("session_dir"):
        killed = local_state.kill_ray_session(state["session_dir"])
        if killed:
            print(f"llmfleet: killed {killed} leftover Ray processes")
    local_state.clear_state()
    print("llmfleet: stopped")
    return 0


def _add_up(sub: Any) -> None:
    p = sub.add_parser("up", help="start a local Ray cluster and serve the OpenAI API (foreground)")
    p.add_argument("--config", default=None, help="YAML config file")
    p.add_argument("--replicas", type=int, default=None)
    p.add_argument("--engine", choices=["vllm", "sim", "null"], default=None)
    p.add_argument(
        "--model", default=None, help="local HF model dir (default: SmolLM2-135M-Instruct)"
    )
    p.add_argument("--host", default=None)
    p.add_argument("--port", type=int, default=None)
    p.add_argument("--router", default=None, help="routing policy name")
    p.add_argument("--autoscale", default=None, help="autoscaling policy name (none = off)")
    p.add_argument("--ready-timeout", type=float, default=600.0)
    p.set_defaults(func=cmd_up)


def _add_status(sub: Any) -> None:
    p = sub.add_parser("status", help="replicas, queue depth and KV usage")
    p.add_argument(
        "--api-key",
        default=None,
        help="an admin key, needed when the fleet has keys (default: $LLMFLEET_API_KEY)",
    )
    p.set_defaults(func=cmd_status)


def _add_down(sub: Any) -> None:
    p = sub.add_parser("down", help="stop what `up` started (also after a crash)")
    p.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds to wait for `up` to stop before killing it (default: the fleet's "
        "server.shutdown_timeout_s + 60)",
    )
    p.add_argument(
        "--now",
        action="store_true",
        help="do not let the requests in flight finish (server.shutdown_timeout_s)",
    )
    p.set_defaults(func=cmd_down)


# Commands an operator runs often (and scripts poll) that need none of the other commands'
# modules: `main` parses them without importing Ray, matplotlib or the load generator, so
# `llmfleet status` answers in well under a second instead of ~4 s on a small machine.
_LIGHT = {"status": _add_status, "down": _add_down}


def _parser() -> tuple[argparse.ArgumentParser, Any]:
    parser = argparse.ArgumentParser(prog="llmfleet", description=__doc__)
    return parser, parser.add_subparsers(dest="command", required=True)


def build_parser() -> argparse.ArgumentParser:
    parser, sub = _parser()
    _add_up(sub)
    _add_status(sub)
    _add_down(sub)
    p = sub.add_parser("prepare-model", help="convert the default model once (no hub)")
    p.set_defaults(func=lambda _args: __import__("replicas.model_prep", fromlist=["main"]).main([]))
    _add_bench(sub)
    _add_sim(sub)
    from cluster import keys_cli

    keys_cli.add_parser(sub)  # keys add|list|remove
    _add_observe(sub)
    from cluster.deploy import cli as deploy_cli

    deploy_cli.add_parser(sub)  # deploy render|plan|validate
    return parser


def _add_bench(sub: Any) -> None:
    from bench import cli as bench_cli
    from replicas.model_prep import default_model_dir

    p = sub.add_parser("bench", help="load generator and SLA report")
    bench_cli.add_arguments(p, default_tokenizer=str(default_model_dir()))
    p.set_defaults(func=bench_cli.run)


def _add_sim(sub: Any) -> None:
    from cluster.twin import cli as twin_cli

    p = sub.add_parser("sim", help="virtual-time twin of a fleet (simulated replicas)")
    twin_cli.add_arguments(p)
    p.set_defaults(func=twin_cli.run)


# ---- observability: `dashboards render|push`, `report` (cluster/observe/) ----------------
def _dashboards_dir() -> Path:
    """The checkout's dashboards/ when run from one (an editable install), else ./dashboards."""
    from cluster.observe.render import DEFAULT_DIR

    root = DEFAULT_DIR.parent
    if (root / "pyproject.toml").exists() and (root / "cluster").is_dir():
        return DEFAULT_DIR
    return Path("dashboards")


def cmd_dashboards_render(args: argparse.Namespace) -> int:
    from cluster.observe import render

    try:
        cfg = load_config(args.config)
        if args.check:
            bad = render.stale(cfg, args.out)
            if bad:
                print(
                    f"llmfleet: generated observability files in {args.out} are stale: "
                    f"{', '.join(bad)}; run: llmfleet dashboards render",
                    file=sys.stderr,
                )
                return 1
            print(f"llmfleet: {args.out} is fresh")
            return 0
        for path in render.render(cfg, args.out):
            print(path)
    except ConfigError as err:
        print(f"llmfleet: {err}", file=sys.stderr)
        return 2
    except (ImportError, OSError) as err:  # a generator module missing; an unwritable dir
        print(f"llmfleet: dashboards render: {err}", file=sys.stderr)
        return 1
    return 0


def _add_observe(sub: Any) -> None:
    from cluster.observe import push, report

    default_dir = _dashboards_dir()
    p = sub.add_parser("dashboards", help="Grafana dashboards, alert rules, scrape config")
    dsub = p.add_subparsers(dest="dashboards_command", required=True)
    r = dsub.add_parser("render", help="generate them from the catalogue and the config")
    r.add_argument("--config", default=None, help="YAML config file (default: built-in)")
    r.add_argument("--out", type=Path, default=default_dir, help=f"default: {default_dir}")
    r.add_argument("--check", action="store_true", help="fail if the files there are stale")
    r.set_defaults(func=cmd_dashboards_render)
    r = dsub.add_parser("push", help="upload the dashboards to Grafana (token auth)")
    push.add_arguments(r, default_dir=default_dir)
    r.set_defaults(func=push.run)
    p = sub.add_parser("report", help="SLA panels of a time window from Prometheus: PNG + HTML")
    report.add_arguments(p)
    p.set_defaults(func=report.run)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in _LIGHT:
        parser, sub = _parser()
        _LIGHT[argv[0]](sub)
    else:
        parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:
        # the reader left (found by hand: `llmfleet status | head -3` printed a traceback);
        # point stdout at /dev/null so that the interpreter's final flush cannot fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # as a shell reports a command ended by SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
