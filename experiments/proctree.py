"""CPU seconds and memory of a server's whole process tree, read from ``/proc``.

A server under test is a process and everything it started (vLLM's API server and engine
core; llmfleet's CLI, Ray's GCS and raylet, and every Serve actor). ``Tree(pid)`` finds
the descendants each time it is read (Ray starts actors late), attributes CPU time per
process *role* (from the command line: ``ServeReplica:…:LLMReplica``, ``ProxyActor``,
``EngineCore``, …) and sums resident memory, so a benchmark can report serving CPU
seconds per 1k output tokens per role and the peak RSS of all processes.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
PROC = Path("/proc")


@dataclass(frozen=True, slots=True)
class Stat:
    pid: int
    ppid: int
    cpu_s: float  # utime + stime
    rss_bytes: int


def parse_stat(line: str) -> Stat:
    """One ``/proc/<pid>/stat`` line (the command name may hold spaces and parentheses)."""
    head, _, rest = line.rpartition(")")
    pid = int(head.split("(", 1)[0])
    f = rest.split()
    # fields after the name, 0-based: state=0 ppid=1 … utime=11 stime=12 … rss=21
    return Stat(pid, int(f[1]), (int(f[11]) + int(f[12])) / CLK_TCK, int(f[21]) * PAGE)


_ROLES = (
    ("LLMReplica", "replica"),
    ("OpenAIIngress", "ingress"),
    ("LLMServer", "replica"),  # Ray Serve LLM's replica and ingress
    ("OpenAiIngress", "ingress"),
    ("ProxyActor", "proxy"),
    ("haproxy", "proxy"),
    ("ServeController", "controller"),
    ("EngineCore", "engine-core"),
    ("VLLM::Worker", "engine-worker"),
    ("raylet", "ray-system"),
    ("gcs_server", "ray-system"),
    ("FleetStatus", "status"),  # the status actor (replicas/status_registry.py)
    ("cluster.cli", "cli"),
    ("api_server", "api-server"),
    ("floor_server", "floor"),
    ("ceiling.rayllm", "rayllm-driver"),
)


def role(cmdline: str) -> str:
    for needle, name in _ROLES:
        if needle in cmdline:
            return name
    m = re.search(r"ray::(\w+)", cmdline)
    return f"ray:{m.group(1)}" if m else "other"


def _read(pid: int) -> tuple[Stat, str] | None:
    try:
        stat = parse_stat((PROC / str(pid) / "stat").read_text())
        cmd = (
            (PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except (OSError, ValueError, IndexError):
        return None
    return stat, cmd


def snapshot(root: int) -> dict[int, tuple[Stat, str]]:
    """Every live process under ``root`` (inclusive)."""
    procs: dict[int, tuple[Stat, str]] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            got = _read(int(entry.name))
            if got is not None:
                procs[got[0].pid] = got
    keep = {root}
    changed = True
    while changed:
        changed = False
        for pid, (st, _) in procs.items():
            if pid not in keep and st.ppid in keep:
                keep.add(pid)
                changed = True
    return {pid: procs[pid] for pid in keep if pid in procs}


def cpu_by_role(root: int) -> dict[str, float]:
    out: dict[str, float] = {}
    for st, cmd in snapshot(root).values():
        r = role(cmd)
        out[r] = out.get(r, 0.0) + st.cpu_s
    return out


def rss_total(root: int) -> int:
    return sum(st.rss_bytes for st, _ in snapshot(root).values())


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU seconds per role between two reads (a process that exited in between is lost)."""
    return {r: round(after[r] - before.get(r, 0.0), 3) for r in after}


@dataclass
class PeakRSS:
    """Samples the tree's total RSS every ``period_s`` in a thread; ``peak`` is the max."""

    root: int
    period_s: float = 0.5
    peak: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> PeakRSS:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_total(self.root))
            self._stop.wait(self.period_s)

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
