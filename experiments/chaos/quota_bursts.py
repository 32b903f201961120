"""How closely per-key quotas hold across 2 ingress replicas (``cluster/quota_sync.py``).

Starts ``llmfleet up`` (null engine, 2 engine replicas, so 2 ingress replicas, keys on
127.0.0.1), then, per round: one concurrent burst per key (3x its per-minute limit of short
requests; 10x its stream limit of held streams), 3x a limit of sequential requests, and
requests one after another on a 1-stream key (none should be refused), alone (40) and
while another key keeps 16 requests in flight (100).
Rounds are a minute apart so that the buckets refill (what a burst overspent is owed).
Then the cost of sharing: ``--rate-requests`` short requests at concurrency 16 with a key
without limits (nothing shared), one with per-minute limits only (every admission and
settlement shared) and one that also has a concurrency limit (plus one status-actor call
per request for the slot), all far above the load; alternating, twice each per round;
ratios of the medians of requests per second. The null engine leaves the ingress as the
bottleneck, so this is the worst case.
Prints and writes JSON: 200s per burst against each limit. Bounded: a fixed number of
requests per round, ``--rounds`` rounds, every request with a timeout.

    .venv/bin/python -m experiments.chaos.quota_bursts --rounds 2 --out results/quota_bursts.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
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
        # as long as the server allows (model.max_tokens_cap: ~7 s at the null engine's
        # 7 ms a token), to outlast the burst's answers: a stream that ended frees its
        # slot, and a late request could take it
        body.update(stream=True, ignore_eos=True, max_tokens=1024)
    headers = {"authorization": f"Bearer {key}"}
    hold = asyncio.Event()
    # open the connections first, so that the burst reaches the ingresses at once
    await asyncio.gather(*(c.get("/v1/models", headers=headers) for _ in range(n)))

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


async def _rate(url: str, key: str, n: int, concurrency: int = 16) -> float:
    """Requests per second for ``n`` short requests at ``concurrency`` (all must be 200)."""
    body = {"model": MODEL, "prompt": "hi", "max_tokens": 2}
    headers = {"authorization": f"Bearer {key}"}
    left = iter(range(n))
    codes: list[int] = []
    async with httpx.AsyncClient(base_url=url, timeout=60) as c:

        async def worker() -> None:
            for _ in left:
                codes.append(
                    (await c.post("/v1/completions", json=body, headers=headers)).status_code
                )

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        took = time.perf_counter() - t0
    if codes.count(200) != n:
        raise RuntimeError(f"rate run: {n - codes.count(200)} of {n} not 200: {set(codes)}")
    return n / took


RATE_KEYS = ("unlimited", "per_minute", "all_three")


async def _rates(url: str, keys: dict[str, str], n: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {name: [] for name in RATE_KEYS}
    for _ in range(2):
        for name in RATE_KEYS:
            out[name].append(round(await _rate(url, keys[name], n), 1))
    return out


async def _round(url: str, keys: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    limits = httpx.Limits(max_connections=400)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as c:
        for name, lim in LIMITS.items():
            assert lim.requests_per_min is not None
            codes = await _burst(c, keys[name], 3 * lim.requests_per_min, stream=False)
            out[f"burst_{name}"] = {"limit": lim.requests_per_min, "ok": codes.count(200)}
        codes = await _burst(c, keys["streams"], 10 * STREAMS, stream=True)
        out["burst_streams"] = {
            "limit": STREAMS,
            "ok": codes.count(200),
            "codes": sorted(set(codes)),
        }
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
        out["sequential_one_stream"] = await _one_at_a_time(c, keys["one"], 40)
        out["sequential_one_stream_busy"] = await _busy(url, keys, c)
    return out


async def _busy(url: str, keys: dict[str, str], c: httpx.AsyncClient) -> dict[str, int]:
    """``_one_at_a_time`` (100 requests) while another key keeps 16 requests in flight, so
    the ingresses and the status actor are busy (the case that once got a 429 in 400)."""
    stop = asyncio.Event()
    body = {"model": MODEL, "prompt": "hi", "max_tokens": 2}
    headers = {"authorization": f"Bearer {keys['all_three']}"}

    async def worker(load: httpx.AsyncClient) -> None:
        for _ in range(5000):  # bounded; stopped once the measured client is done
            if stop.is_set():
                return
            await load.post("/v1/completions", json=body, headers=headers)

    async with httpx.AsyncClient(base_url=url, timeout=60) as load:
        tasks = [asyncio.create_task(worker(load)) for _ in range(16)]
        await asyncio.sleep(1.0)
        try:
            return await _one_at_a_time(c, keys["one"], 100)
        finally:
            stop.set()
            await asyncio.gather(*tasks)


async def _one_at_a_time(c: httpx.AsyncClient, key: str, n: int) -> dict[str, int]:
    """``n`` requests one after another, plain and streamed alternately, on a 1-stream key:
    each is sent as soon as the previous answer ended, so every one should get its 200 (a
    429 would mean a replica still counted the ended one)."""
    headers = {"authorization": f"Bearer {key}"}
    ok = 0
    for i in range(n):
        body: dict[str, Any] = {"model": MODEL, "prompt": "hi", "max_tokens": 3}
        if i % 2:
            body["stream"] = True
            async with c.stream("POST", "/v1/completions", json=body, headers=headers) as r:
                async for _ in r.aiter_bytes():
                    pass
                ok += r.status_code == 200
        else:
            r = await c.post("/v1/completions", json=body, headers=headers)
            ok += r.status_code == 200
    return {"sent": n, "ok": ok}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default="results/quota_bursts.json")
    ap.add_argument("--rate-requests", type=int, default=800, help="per rate run (0: none)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        keyfile = d / "keys.yaml"
        keys = {name: add_key(keyfile, name, limits=lim) for name, lim in LIMITS.items()}
        keys["streams"] = add_key(keyfile, "streams", limits=KeyLimits(max_streams=STREAMS))
        keys["seq10"] = add_key(keyfile, "seq10", limits=KeyLimits(requests_per_min=10))
        keys["one"] = add_key(keyfile, "one", limits=KeyLimits(max_streams=1))
        per_min = KeyLimits(requests_per_min=10**6, tokens_per_min=10**9)
        keys["per_minute"] = add_key(keyfile, "per_minute", limits=per_min)
        big = KeyLimits(requests_per_min=10**6, tokens_per_min=10**9, max_streams=1000)
        keys["all_three"] = add_key(keyfile, "all_three", limits=big)
        keys["unlimited"] = add_key(keyfile, "unlimited")
        cfg = d / "fleet.yaml"
        cfg.write_text(
            f"engine: {{type: 'null'}}\nreplicas: {{num_replicas: 2, num_cpus: 0.1}}\n"
            f"routing: {{policy: p2c}}\nserver: {{port: {PORT}, api_keys_file: {keyfile}}}\n"
        )
        proc = start_llmfleet(cfg, d / "home", d / "up.log")
        url = f"http://127.0.0.1:{PORT}"
        rounds: list[dict[str, Any]] = []
        rates: dict[str, list[float]] = {name: [] for name in RATE_KEYS}
        try:
            wait_http(f"{url}/health", proc, timeout_s=300)
            for i in range(args.rounds):
                if i:
                    time.sleep(61)  # a minute's refill
                rounds.append(asyncio.run(_round(url, keys)))
                print(json.dumps({"round": i + 1, **rounds[-1]}))
                if args.rate_requests > 0:
                    got = asyncio.run(_rates(url, keys, args.rate_requests))
                    for name, values in got.items():
                        rates[name] += values
                    print(json.dumps({"round": i + 1, "req_per_s": got}))
        finally:
            stop(proc)
    out: dict[str, Any] = {"ingress_replicas": 2, "rounds": rounds}
    if rates["unlimited"]:
        med = {k: statistics.median(v) for k, v in rates.items()}
        ratio = {k: round(med[k] / med["unlimited"], 3) for k in RATE_KEYS[1:]}
        out["rate"] = {"req_per_s": rates, "median": med, "ratio_to_unlimited": ratio}
        runs = len(rates["unlimited"])
        print(f"req/s (medians of {runs} runs each): {med}; ratios to no limits: {ratio}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
