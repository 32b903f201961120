"""How late a process outside the server wakes: sleeps 10 ms in a loop for ``--duration``
seconds and records by how much each sleep overran, then writes a summary as JSON.

The soak runs it beside the load generator, in the soak's own session. Found with it: a
fleet of two vLLM-CPU replicas in a session (or CPU cgroup) of its own made processes in
other groups wait up to 3.4 s for a CPU on a 2-vCPU VM, while two bare vLLM servers made
them wait 19 ms at most (docs/results/soak.md).

    .venv/bin/python -m experiments.soak.wakeup --duration 60 --out wakeup.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

SLEEP_S = 0.01


def summarize(late_s: list[float]) -> dict[str, Any]:
    """Overruns (seconds) → count, P50 / P99 / worst in ms, and how many exceeded 100 ms."""
    if not late_s:
        return {"n": 0}
    xs = sorted(late_s)

    def q(p: float) -> float:
        return round(1e3 * xs[min(len(xs) - 1, int(p * len(xs)))], 1)

    return {
        "n": len(xs),
        "p50_ms": q(0.5),
        "p99_ms": q(0.99),
        "max_ms": round(1e3 * xs[-1], 1),
        "over_100ms": sum(1 for x in xs if x > 0.1),
    }


def measure(duration_s: float) -> list[float]:
    late: list[float] = []
    end = time.monotonic() + duration_s
    while (now := time.monotonic()) < end:
        time.sleep(SLEEP_S)
        late.append(max(0.0, time.monotonic() - now - SLEEP_S))
    return late


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, required=True, help="seconds to measure")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    args.out.write_text(json.dumps(summarize(measure(args.duration))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
