"""How closely per-key quotas hold across 2 ingress replicas (``cluster/quota_sync.py``).

Starts ``llmfleet up`` (null engine, 2 engine replicas, so 2 ingress replicas, keys on
127.0.0.1), then, per round: one concurrent burst per key (3x its per-minute limit of short
requests; 10x its stream limit of held streams), and 3x a limit of sequential requests.
Rounds are a minute apart so that the buckets refill (what a burst overspent is owed).
Prints and writes JSON: 200s per burst against each limit. Bounded: a fixed number of
requests per round, ``--rounds`` rounds, every request with a timeout.

    .venv/bin/python -m experiments.chaos.quota_bursts --rounds 2 --out results/quota_bursts.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from cluster.keys import KeyLimits, add_key
from experiments.serverproc import start_llmfleet, stop, wait_http

PORT = 18217
MODEL = "smollm2-135m-instruct"
LIMITS = {"rpm20": KeyLimits(requests_per_min=20), "rpm100": KeyLimits(requests_per_min=100)}
STREAMS = 4


async def _burst(c: httpx.AsyncClient, key: str, n: int, stream: bool) -> list[int]:
    body: dict[str, Any] = {"model": MODEL, "prompt": "hi", "max_tokens": 2}
    if stream:
        body.update(stream=True, ignore_eos=True, max_tokens=300)
    headers = {"authorization": f"Bearer {key}"}
    hold = asyncio.Event()

    async def one() -> int:
        if not stream:
            return (await c.post("/v1/completions", json=body, headers=headers)).status_code
        async with c.stream("POST", "/v1/completions", json=body, headers=headers) as r:
            if r.status_code == 200:
                await asyncio.wait_for(hold.wait(), 60)  # held open until all have answers
            return r.status_code

    tasks = [asyncio.create_task(one()) for _ in range(n)]
    await asyncio.sleep(0)
    if stream:
        deadline = time.monotonic() + 15  # (more than STREAMS admitted: fewer ever finish)
        while sum(t.done() for t in tasks) < n - STREAMS and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)
        hold.set()
    return list(await asyncio.gather(*tasks))


async def _round(url: str, keys: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    limits = httpx.Limits(max_connections=400)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as c:
        for name, lim in LIMITS.items():
            assert lim.requests_per_min is not None
            codes = await _burst(c, keys[name], 3 * lim.requests_per_min, stream=False)
            out[f"burst_{name}"] = {"limit": lim.requests_per_min, "ok": codes.count(200)}
        codes = await _burst(c, keys["streams"], 10 * STREAMS, stream=True)
        out["burst_streams"] = {"limit": STREAMS, "ok": codes.count(200)}
        seq = []
        for _ in range(30):
            r = await c.post(
                "/v1/completions",
                json={"model": MODEL, "prompt": "hi", "max_tokens": 2},
                headers={"authorization": f"Bearer {keys['seq10']}"},
            )
            seq.append(r.status_code)
        first = seq.index(429) if 429 in seq else None
        out["sequential_seq10"] = {"limit": 10, "ok": seq.count(200), "first_429": first}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default="results/quota_bursts.json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        keyfile = d / "keys.yaml"
        keys = {name: add_key(keyfile, name, limits=lim) for name, lim in LIMITS.items()}
        keys["streams"] = add_key(keyfile, "streams", limits=KeyLimits(max_streams=STREAMS))
        keys["seq10"] = add_key(keyfile, "seq10", limits=KeyLimits(requests_per_min=10))
        cfg = d / "fleet.yaml"
        cfg.write_text(
            f"engine: {{type: 'null'}}\nreplicas: {{num_replicas: 2, num_cpus: 0.1}}\n"
            f"routing: {{policy: p2c}}\nserver: {{port: {PORT}, api_keys_file: {keyfile}}}\n"
        )
        proc = start_llmfleet(cfg, d / "home", d / "up.log")
        url = f"http://127.0.0.1:{PORT}"
        rounds = []
        try:
            wait_http(f"{url}/health", proc, timeout_s=300)
            for i in range(args.rounds):
                if i:
                    time.sleep(61)  # a minute's refill
                rounds.append(asyncio.run(_round(url, keys)))
                print(json.dumps({"round": i + 1, **rounds[-1]}))
        finally:
            stop(proc)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"ingress_replicas": 2, "rounds": rounds}, indent=2))


if __name__ == "__main__":
    main()
