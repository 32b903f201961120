"""``llmfleet status``: the running fleet's deployments, replicas, failed starts and the
autoscaler's latest decision (``cli.py`` registers it among the light commands: nothing
heavy is imported to answer)."""

from __future__ import annotations

import argparse
import os
import time

from cluster.start_view import describe as describe_start_failures


def cmd_status(args: argparse.Namespace) -> int:
    import httpx

    from cluster import local_state
    from contracts.stats import from_wire

    state = local_state.read_state()
    if not state or not local_state.pid_alive(int(state["pid"])):
        print("llmfleet: not running")
        return 1
    key = args.api_key or os.environ.get("LLMFLEET_API_KEY")
    headers = {"authorization": f"Bearer {key}"} if key else {}
    if state.get("starting") or state.get("stopping"):
        what = "starting" if state.get("starting") else "stopping (requests in flight finish)"
        print(f"llmfleet: {what} (pid {state['pid']}, {state['url']})")
        return 1
    try:
        r = httpx.get(f"{state['url']}/fleet/status", headers=headers, timeout=10.0)
        data = r.json()
    except (httpx.HTTPError, ValueError) as err:
        print(f"llmfleet: {state['url']} did not answer: {err!r}")
        return 1
    if r.status_code != 200:  # e.g. a fleet with keys: 401 without one, 403 for a user key
        error = data.get("error") if isinstance(data, dict) else None
        message = error.get("message", r.text[:200]) if isinstance(error, dict) else r.text[:200]
        print(
            f"llmfleet: /fleet/status answered {r.status_code}: {message} "
            "(an admin key: --api-key or LLMFLEET_API_KEY)"
        )
        return 1
    print(f"url: {state['url']}   pid: {state['pid']}   ray: {state['gcs_address']}")
    ing = data.get("ingress", {})
    quotas = ing.get("quotas", {}).get("mode", "?")
    print(
        f"ingress (the one answering): retried={ing.get('retried')} "
        f"migrated={ing.get('migrated')} resumed={ing.get('resumed')} failed={ing.get('failed')} "
        f"waiting_for_a_replica={ing.get('waiting')} quotas={quotas}"
    )
    for dep, info in data.get("deployments", {}).items():
        print(f"deployment {dep}: {info['status']} replicas={info['replicas']}")
    print(
        f"{'replica':<12} {'healthy':>7} {'waiting':>7} {'running':>7} {'prefill_tok':>11} {'queue_s':>8} "
        f"{'kv_usage':>8} {'hit_rate':>8}"
    )
    for r in data.get("replicas", []):
        s = from_wire(r, strict=False)  # an undecodable row prints as "unknown"
        if not s.reported:
            print(f"{r.get('replica', '?')[:12]:<12} unknown stats (version {r.get('version')})")
            continue
        hit = s.prefix_hits / s.prefix_queries if s.prefix_queries else 0.0
        print(
            f"{r['replica'][:12]:<12} {s.healthy!s:>7} {int(s.waiting):>7} {int(s.running):>7} "
            f"{int(s.waiting_prefill_tokens):>11} {s.queue_delay_s:>8.2f} {s.kv_usage:>8.1%} {hit:>8.1%}"
        )
    for line in describe_start_failures(data.get("start_failures") or [], time.time()):
        print(line)
    _print_autoscaler(state.get("metrics_url"), state.get("min_replicas"))
    return 0


def _print_autoscaler(metrics_url: str | None, min_replicas: int | None) -> None:
    """The scaling policy's latest decision and why (``cluster/autoscaler_view.py``), from
    Ray's metrics port on this (head) node; nothing when no policy of ours exports one."""
    import httpx

    from cluster.autoscaler_view import describe, parse

    if not metrics_url:
        return
    try:
        text = httpx.get(metrics_url, timeout=5.0).text
    except httpx.HTTPError as err:
        print(f"autoscaler: Ray's metrics port {metrics_url} did not answer: {err!r}")
        return
    for view in parse(text).values():
        print("\n".join(describe(view, min_replicas)))
