"""A fleet's only replica killed under load: do its streams and the requests sent meanwhile
wait for the replacement and finish there?

    llmfleet up --replicas 1          # vLLM (the default engine), in another shell
    python -m experiments.chaos.lone_replica [--url http://127.0.0.1:8000] [--streams 4]

Against a running one-replica fleet on 127.0.0.1: opens ``--streams`` chat streams
(``--max-tokens`` each, ``ignore_eos``), SIGKILLs the replica's process (the
``ServeReplica:…:LLMReplica`` actor of this machine) after ``--kill-after`` seconds, then
sends ``--requests`` non-streamed completions, one every ``--every`` seconds. Prints how
each ended (status, ``finish_reason``, in-band error, seconds) and the totals. Bounded: every
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

from cluster.runtime import read_state
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


def kill_the_replica() -> int:
    """SIGKILL the one LLMReplica process of the fleet ``llmfleet up`` runs (its Ray session's
    processes only)."""
    import psutil

    state = read_state()
    if not state or not state.get("session_dir"):
        raise SystemExit("no fleet: start one with `llmfleet up --replicas 1`")
    session = os.path.basename(str(state["session_dir"]).rstrip("/"))
    victims = {}
    for proc in psutil.process_iter(["cmdline"]):
        if session in " ".join(proc.info["cmdline"] or []):
            for child in proc.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    if "LLMReplica" in " ".join(child.cmdline()):
                        victims[child.pid] = child
    if len(victims) != 1:
        raise SystemExit(f"expected one LLMReplica process, found {len(victims)}")
    pid = next(iter(victims))
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
        results = await asyncio.gather(*streams, *sent, return_exceptions=True)
    ok = 0
    for res in results:
        print(res)
        ok += isinstance(res, dict) and bool(res["ok"])
    print(f"{ok} of {len(results)} ended well (streams: finish_reason and [DONE], no error)")
    return 0 if ok == len(results) else 1


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:8000")
    p.add_argument("--streams", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=150)
    p.add_argument("--kill-after", type=float, default=3.0)
    p.add_argument("--requests", type=int, default=4)
    p.add_argument("--every", type=float, default=3.0)
    p.add_argument("--timeout", type=float, default=240.0)
    raise SystemExit(asyncio.run(main(p.parse_args())))
