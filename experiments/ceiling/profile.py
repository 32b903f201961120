"""Where llmfleet's serving CPU goes at the ceiling: ``py-spy`` on every serving process.

Starts ``llmfleet up`` with the null engine, drives ``--users`` closed-loop users, and
meanwhile samples the ingress, the replica and Serve's HTTP proxy with ``py-spy record``
(collapsed stacks, native frames off, idle samples dropped). For each process it writes the
busy share of samples by bucket (Ray's core worker / Serve's internals / the HTTP stack /
asyncio / llmfleet's own code / JSON) and the top functions by inclusive and self samples.

    python -m experiments.ceiling.profile --out results/ceiling_profile.json
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from experiments import proctree, serverproc
from experiments.ceiling import ceiling

ROLES = ("ingress", "replica", "proxy")
# first match wins, tested against "file:function" of each frame, innermost first
BUCKETS = (
    ("json", ("json/", "orjson")),
    ("llmfleet", ("/cluster/", "/replicas/", "/contracts/", "/router/")),
    ("ray-serve", ("ray/serve/",)),
    ("ray-core", ("ray/_private/", "ray/_raylet", "_raylet.pyx", "ray/actor", "ray/util/")),
    ("http-stack", ("starlette/", "uvicorn/", "fastapi/", "h11/", "httptools", "anyio/")),
    ("pickle", ("pickle", "cloudpickle")),
    ("asyncio", ("asyncio/", "uvloop")),
)


def bucket(frame: str) -> str:
    for name, needles in BUCKETS:
        if any(n in frame for n in needles):
            return name
    return "other"


def parse_collapsed(text: str) -> dict[str, Any]:
    """py-spy's collapsed output: ``frame;frame;... count`` per line, outermost first."""
    total = 0
    self_counts: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    buckets: collections.Counter[str] = collections.Counter()
    for line in text.splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        count = int(n)
        frames = [f for f in stack.split(";") if f]
        if not frames:
            continue
        total += count
        self_counts[frames[-1]] += count
        for f in set(frames):
            incl[f] += count
        # attribute the sample to the innermost frame that falls in a known bucket
        for f in reversed(frames):
            b = bucket(f)
            if b != "other":
                buckets[b] += count
                break
        else:
            buckets["other"] += count
    share = {k: round(v / total, 3) for k, v in buckets.most_common()} if total else {}
    return {
        "samples": total,
        "bucket_share": share,
        "top_self": [(f, round(c / total, 3)) for f, c in self_counts.most_common(15)],
        "top_inclusive": [(f, round(c / total, 3)) for f, c in incl.most_common(25)],
    }


def pids_by_role(root: int) -> dict[str, int]:
    out: dict[str, int] = {}
    for pid, (_, cmd) in proctree.snapshot(root).items():
        r = proctree.role(cmd)
        if r in ROLES and r not in out:
            out[r] = pid
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("results/ceiling_profile.json"))
    p.add_argument("--users", type=int, default=128)
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    p.add_argument("--step-s", type=float, default=0.007)
    p.add_argument("--ingress", choices=("proxy", "direct"), default="proxy")
    p.add_argument("--target", default="llmfleet", help="llmfleet or a variant (ceiling.py)")
    args = p.parse_args(argv)
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    work = Path(tempfile.mkdtemp(prefix="llmfleet-profile-"))
    bench_args = argparse.Namespace(
        step_s=args.step_s, max_num_seqs=1024, input=64, output=256, router="prefix",
        ingress=args.ingress, fleet_env=[], duration=args.seconds + 5,
    )  # fmt: skip
    proc = ceiling.start(args.target, "null", bench_args, work)
    url = f"http://127.0.0.1:{ceiling.PORTS['llmfleet']}"
    result: dict[str, Any] = {"target": args.target}
    try:
        ceiling.wait_first_token(url, proc)
        pids = pids_by_role(proc.pid)
        spies: dict[str, subprocess.Popen] = {}

        def sample() -> None:  # after the users have ramped up
            threading.Event().wait(3.0)
            for role, pid in pids.items():
                cmd = [spy, "record", "--pid", str(pid), "--format", "raw", "--rate",
                       str(args.rate), "--duration", str(int(args.seconds)), "--nonblocking",
                       "--output", str(work / f"{role}.txt")]  # fmt: skip
                spies[role] = subprocess.Popen(
                    cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
                )

        sampler = threading.Thread(target=sample)
        sampler.start()
        ceiling.drive(url, args.users, bench_args, work / "load.json")
        sampler.join()
        for s in spies.values():
            s.wait(timeout=args.seconds + 60)
        for role in spies:
            path = work / f"{role}.txt"
            result[role] = parse_collapsed(path.read_text()) if path.exists() else {}
        load_res = json.loads((work / "load.json").read_text())
        result["load"] = {
            "users": args.users,
            "output_tok_s": load_res["throughput"]["output_tok_s"],
            "itl_p50_ms": load_res["itl_ms"]["p50"],
        }
    finally:
        serverproc.stop(proc)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    for role in ROLES:
        r = result.get(role) or {}
        print(f"{role}: {r.get('samples', 0)} busy samples; buckets {r.get('bucket_share')}")
        for f, share in (r.get("top_inclusive") or [])[:12]:
            print(f"    {share:6.1%}  {f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
