"""How fast overload is refused: 100 streams at once against 2 × 4 slots and a queue of 8.

    python -m experiments.chaos.overload [--ingress proxy|direct] [--rounds 3]

The fleet of ``tests/component/test_limits_and_shedding.py``'s shedding test (2 simulated replicas,
``max_ongoing_requests`` 4, ``max_queued_requests`` 8, one ``OpenAIIngress``), started in
this process. Each round sends two bursts from one client, side by side:

- **floor**: ``--burst`` ``GET /v1/models`` at once — the same client, proxy and ingress
  path with no work behind it: what any answer costs when that many arrive together;
- **overload**: ``--burst`` streamed completions at once (200 tokens, ``ignore_eos``): at most
  16 may get a 200, every other one a 429 (``fleet_at_capacity``).

A time is from the request's start in the client to the response's status line. Printed
per round and as medians over rounds: the slowest and median 429 against the slowest floor
answer (their ratio says how much of a 429's time is the refusal itself). Writes JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

import httpx

from replicas.model_prep import DEFAULT_MODEL


def fleet_config(ingress: str = "proxy", **server: Any) -> dict[str, Any]:
    """The shedding test's fleet (``tests/component/guarded_fleet.py`` deploys it too):
    2 simulated replicas × 4 slots, 8 queued at the one ingress; ``server`` adds settings."""
    return {
        "engine": {"type": "sim", "sim": {"speed": 1.0}},
        "replicas": {
            "num_replicas": 2,
            "num_cpus": 0.1,
            "max_ongoing_requests": 4,
            "max_queued_requests": 8,
        },
        "routing": {"policy": "prefix", "stats_period_s": 0.2},
        "server": {"ingress_replicas": 1, "ingress": ingress, **server},
    }


async def _timed(c: httpx.AsyncClient, kind: str) -> tuple[int, float]:
    t0 = time.monotonic()
    if kind == "floor":
        r = await c.get("/v1/models")
        return r.status_code, time.monotonic() - t0
    body = {"model": DEFAULT_MODEL, "prompt": "hello there", "max_tokens": 200, "stream": True,
            "ignore_eos": True}  # fmt: skip
    async with c.stream("POST", "/v1/completions", json=body) as r:
        took = time.monotonic() - t0
        async for _ in r.aiter_bytes():
            pass
    return r.status_code, took


async def burst(
    url: str, kind: str, n: int, headers: dict[str, str] | None = None, warm: bool = False
) -> list[tuple[int, float]]:
    """``n`` requests of ``kind`` at once from one client: (status, seconds to the status
    line). ``warm``: the ``n`` connections are opened first (with a ``GET /v1/models`` each),
    so that the requests reach the server together instead of as each connection opens."""
    keep = 2 * n if warm else 20  # httpx's default unless the opened connections must stay
    limits = httpx.Limits(max_connections=2 * n, max_keepalive_connections=keep)
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60, limits=limits) as c:
        if warm:
            await asyncio.gather(*[c.get("/v1/models") for _ in range(n)])
        return list(await asyncio.gather(*[_timed(c, kind) for _ in range(n)]))


def round_row(floor: list[tuple[int, float]], over: list[tuple[int, float]]) -> dict[str, Any]:
    """One round: the floor burst's and the overload burst's times, by outcome."""
    base = [t for code, t in floor if code == 200]
    shed = [t for code, t in over if code == 429]
    return {
        "floor_ok": len(base),
        "floor_p50_s": statistics.median(base) if base else None,
        "floor_max_s": max(base, default=None),
        "admitted": sum(1 for code, _ in over if code == 200),
        "refused_429": len(shed),
        "other": sorted({code for code, _ in over if code not in (200, 429)}),
        "shed_p50_s": statistics.median(shed) if shed else None,
        "shed_max_s": max(shed, default=None),
    }


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over rounds, the slowest 429 over the slowest floor answer (per round, then
    the median), and the worst round."""

    def med(key: str) -> float | None:
        vals = [r[key] for r in rows if r[key] is not None]
        return statistics.median(vals) if vals else None

    ratios = [
        r["shed_max_s"] / r["floor_max_s"] for r in rows if r["shed_max_s"] and r["floor_max_s"]
    ]
    return {
        "rounds": len(rows),
        "floor_max_s": med("floor_max_s"),
        "shed_max_s": med("shed_max_s"),
        "shed_p50_s": med("shed_p50_s"),
        "shed_over_floor_max": statistics.median(ratios) if ratios else None,
        "worst_shed_max_s": max((r["shed_max_s"] or 0.0 for r in rows), default=None),
        "most_admitted": max((r["admitted"] for r in rows), default=0),
    }


def _f(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def table(rows: list[dict[str, Any]], s: dict[str, Any]) -> str:
    lines = [
        "| round | 200s | 429s | 429 P50 s | 429 max s | floor P50 s | floor max s |",
        "|---|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(rows, 1):
        lines.append(
            f"| {i} | {r['admitted']} | {r['refused_429']} | {_f(r['shed_p50_s'])} | "
            f"{_f(r['shed_max_s'])} | {_f(r['floor_p50_s'])} | {_f(r['floor_max_s'])} |"
        )
    lines.append(
        f"\nmedians over {s['rounds']} rounds: slowest 429 {_f(s['shed_max_s'])} s, slowest "
        f"floor answer {_f(s['floor_max_s'])} s, ratio {_f(s['shed_over_floor_max'])}x; "
        f"worst 429 {_f(s['worst_shed_max_s'])} s (goal < 1 s); at most "
        f"{s['most_admitted']} 200s (goal <= 16)"
    )
    return "\n".join(lines)


async def rounds(
    url: str, n: int, burst_size: int, pause_s: float, warm: bool
) -> list[dict[str, Any]]:
    rows = []
    for i in range(n):
        floor = await burst(url, "floor", burst_size, warm=warm)
        await asyncio.sleep(1.0)
        over = await burst(url, "overload", burst_size, warm=warm)  # once every stream ended
        rows.append(round_row(floor, over))
        print(f"round {i + 1}: {rows[-1]}", flush=True)
        await asyncio.sleep(pause_s)  # > one status report period: every slot free again
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ingress", choices=("proxy", "direct"), default="proxy")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--burst", type=int, default=100)
    p.add_argument(
        "--warm", action="store_true", help="open the connections first: requests arrive together"
    )
    p.add_argument("--port", type=int, default=8160)
    p.add_argument("--metrics-port", type=int, default=18160)
    p.add_argument(
        "--out", type=Path, default=None, help="default results/overload-INGRESS[-warm].json"
    )
    args = p.parse_args(argv)
    out = args.out or Path(f"results/overload-{args.ingress}{'-warm' if args.warm else ''}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    from cluster.config import parse_config
    from cluster.runtime import deploy, start_ray, stop, wait_ready

    cfg = parse_config(
        fleet_config(args.ingress, port=args.port, metrics_export_port=args.metrics_port)
    )
    start_ray(cfg)
    try:
        url = deploy(cfg)
        wait_ready(url, timeout_s=300)
        asyncio.run(burst(url, "floor", 8))  # first connections and code paths
        rows = asyncio.run(rounds(url, args.rounds, args.burst, 2.5, args.warm))
    finally:
        stop()
    summary = summarize(rows)
    out.write_text(json.dumps({"config": vars(args) | {"out": str(out)}, "rounds": rows,
                               "summary": summary}, indent=2))  # fmt: skip
    print()
    print(table(rows, summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
