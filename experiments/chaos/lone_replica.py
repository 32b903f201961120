"""A fleet's only replica killed under load: do its streams and the requests sent meanwhile
wait for the replacement and finish there?

    llmfleet up --replicas 1          # vLLM (the default engine), in another shell
    python -m experiments.chaos.lone_replica [--url http://127.0.0.1:8000] [--streams 4]

Against a running one-replica fleet on 127.0.0.1: opens ``--streams`` chat streams
(``--max-tokens`` each, ``ignore_eos``), SIGKILLs the replica's process (the
``ServeReplica:…:LLMReplica`` actor of this machine) after ``--kill-after`` seconds, then
sends ``--requests`` non-streamed completions, one every ``--every`` seconds. Prints how
each ended (status, ``finish_reason``, in-band error, seconds) and the totals. With
``--impatient N``, N more clients send at the kill and give up after ``--give-up-after``
seconds, while their requests are held for the replacement; afterwards the replacement must
have seen only the streams and requests, the ingress must hold no request for a replica
(``/fleet/status`` ``ingress.waiting``), and ``--burst`` one-token requests (default 128:
the default slots, 64, plus queue, 64, of one ingress) must all get 200. Bounded: every
request has a client timeout (``--timeout``), the loop sends a fixed number. The fleet keeps
running; Serve replaces the replica.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import time
from typing import Any

import httpx

from cluster.local_state import read_state, session_processes
from replicas.model_prep import DEFAULT_MODEL


async def stream(c: httpx.AsyncClient, i: int, max_tokens: int) -> dict[str, Any]:
    body = {
        "model": DEFAULT_MODEL,
        "messages": [{"role": "user", "content": f"Count to a thousand, stream {i}."}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
    }
    t0, finish, error, done = time.monotonic(), None, None, False
    async with c.stream("POST", "/v1/chat/completions", json=body) as r:
        async for line in r.aiter_lines():
            if line == "data: [DONE]":
                done = True
            elif line.startswith("data: "):
                event = json.loads(line[6:])
                error = event.get("error", error)
                for choice in event.get("choices") or ():
                    finish = choice.get("finish_reason") or finish
    ok = r.status_code == 200 and done and finish is not None and error is None
    return {
        "kind": "stream",
        "status": r.status_code,
        "finish": finish,
        "error": error and error.get("code"),
        "s": round(time.monotonic() - t0, 1),
        "ok": ok,
    }


async def request(c: httpx.AsyncClient, delay_s: float) -> dict[str, Any]:
    await asyncio.sleep(delay_s)
    body = {"model": DEFAULT_MODEL, "prompt": "Hello", "max_tokens": 4}
    t0 = time.monotonic()
    r = await c.post("/v1/completions", json=body)
    code = r.json().get("error", {}).get("code") if r.status_code != 200 else None
    return {
        "kind": f"request sent at +{delay_s:g} s",
        "status": r.status_code,
        "error": code,
        "s": round(time.monotonic() - t0, 1),
        "ok": r.status_code == 200,
    }


async def impatient(url: str, i: int, give_up_s: float) -> dict[str, Any]:
    """A client that gives up while its request is held for the replacement replica: it
    must leave nothing behind (no engine request, no admission entry)."""
    body = {"model": DEFAULT_MODEL, "prompt": f"Hi {i}", "max_tokens": 8, "stream": i % 2 == 0}
    t0 = time.monotonic()
    try:
        async with httpx.AsyncClient(base_url=url, timeout=give_up_s) as c:
            r = await c.post("/v1/completions", json=body)
        got = f"answered {r.status_code}"
    except httpx.TimeoutException:
        got = "gave up"
    return {"kind": "impatient", "got": got, "s": round(time.monotonic() - t0, 1), "ok": True}


async def leftovers(url: str, expected_arrivals: int, burst: int) -> bool:
    """After the run: the replacement saw only the requests that waited for it, and a burst
    of ``burst`` one-token requests (at most the ingress's slots plus its queue) all get 200
    (an admission entry left by a client that gave up would shed some with 429)."""
    async with httpx.AsyncClient(base_url=url, timeout=120) as c:
        status = (await c.get("/fleet/status")).json()
        arrived = sum(int(r.get("arrived_requests", 0)) for r in status.get("replicas", []))
        waiting = status.get("ingress", {}).get("waiting")
        print(f"the replacement saw {arrived} requests (expected {expected_arrivals})")
        print(f"requests the ingress still holds for a replica: {waiting} (expected 0)")
        if waiting != 0 or arrived != expected_arrivals:
            return False
        if not burst:
            return True
        body = {"model": DEFAULT_MODEL, "prompt": "Hello", "max_tokens": 1}
        answers = await asyncio.gather(
            *[c.post("/v1/completions", json=body) for _ in range(burst)],
            return_exceptions=True,
        )
    codes: dict[str, int] = {}
    for a in answers:
        key = str(a.status_code) if isinstance(a, httpx.Response) else type(a).__name__
        codes[key] = codes.get(key, 0) + 1
    print(f"burst of {burst} afterwards: {codes}")
    return codes == {"200": burst}


def kill_the_replica() -> int:
    """SIGKILL the one LLMReplica process of the fleet ``llmfleet up`` runs (its Ray session's
    processes only)."""
    import psutil

    state = read_state()
    if not state or not state.get("session_dir"):
        raise SystemExit("no fleet: start one with `llmfleet up --replicas 1`")
    victims = []
    for pid, proc in session_processes(str(state["session_dir"])).items():
        with contextlib.suppress(psutil.Error):
            if "LLMReplica" in " ".join(proc.cmdline()):
                victims.append(pid)
    if len(victims) != 1:
        raise SystemExit(f"expected one LLMReplica process, found {len(victims)}")
    pid = victims[0]
    os.kill(pid, signal.SIGKILL)
    return pid


async def main(args: argparse.Namespace) -> int:
    if httpx.URL(args.url).host not in ("127.0.0.1", "localhost"):
        raise SystemExit("this kills a local process: --url must be on 127.0.0.1")
    async with httpx.AsyncClient(base_url=args.url, timeout=args.timeout) as c:
        streams = [
            asyncio.ensure_future(stream(c, i, args.max_tokens)) for i in range(args.streams)
        ]
        await asyncio.sleep(args.kill_after)
        pid = kill_the_replica()
        print(f"SIGKILL replica process {pid}")
        sent = [request(c, k * args.every) for k in range(args.requests)]
        gone = [impatient(args.url, i, args.give_up_after) for i in range(args.impatient)]
        results = await asyncio.gather(*streams, *sent, *gone, return_exceptions=True)
    ok = 0
    for res in results:
        print(res)
        ok += isinstance(res, dict) and bool(res["ok"])
    print(f"{ok} of {len(results)} ended well (streams: finish_reason and [DONE], no error)")
    clean = True
    if args.impatient:
        await asyncio.sleep(2.0)  # the replica's stats reach the status actor every second
        clean = await leftovers(args.url, args.streams + args.requests, args.burst)
    return 0 if ok == len(results) and clean else 1


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:8000")
    p.add_argument("--streams", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=150)
    p.add_argument("--kill-after", type=float, default=3.0)
    p.add_argument("--requests", type=int, default=4)
    p.add_argument("--every", type=float, default=3.0)
    p.add_argument("--timeout", type=float, default=240.0)
    p.add_argument("--impatient", type=int, default=0, help="clients that give up during the hold")
    p.add_argument("--give-up-after", type=float, default=4.0)
    p.add_argument(
        "--burst", type=int, default=128, help="1-token requests sent after (with --impatient)"
    )
    raise SystemExit(asyncio.run(main(p.parse_args())))
