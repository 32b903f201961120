"""What ``llmfleet up`` started, found again from any process: the state file ``up`` writes
(so ``status`` and ``down`` can find the fleet, also after a crash), and that Ray session's
processes (``down`` stops them; chaos tests and benchmarks kill some)."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

STATE_DIR = Path(os.environ.get("LLMFLEET_HOME", Path.home() / ".llmfleet"))
STATE_FILE = STATE_DIR / "state.json"


def write_state(data: dict[str, Any]) -> None:
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    STATE_FILE.write_text(json.dumps(data, indent=2))


def read_state() -> dict[str, Any] | None:
    try:
        return json.loads(STATE_FILE.read_text())
    except (OSError, ValueError):
        return None


def clear_state() -> None:
    STATE_FILE.unlink(missing_ok=True)


def pid_alive(pid: int) -> bool:
    """The process runs: a zombie (exited, not yet reaped by its parent, e.g. a supervisor
    or test harness that started ``up``) counts as gone, so ``down`` does not wait out its
    timeout for it."""
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True


def node_processes(name_part: str) -> list[Any]:
    """Live processes of the Ray node this process started whose title contains
    ``name_part`` (Ray titles workers ``ray::ServeReplica:<app>:<deployment>``); other Ray
    clusters on the machine are not touched. For chaos tests and benchmarks."""
    import psutil
    import ray

    node = ray._private.worker._global_node  # the head node this process started
    if node is None:
        raise RuntimeError("Ray is not started in this process")
    out = []
    for raylet in node.all_processes.get("raylet", []):
        for child in psutil.Process(raylet.process.pid).children(recursive=True):
            try:
                if child.status() == psutil.STATUS_ZOMBIE:
                    continue
                title = " ".join(child.cmdline()) or child.name()
            except psutil.Error:
                continue
            if name_part in title:
                out.append(child)
    return out


def session_processes(session_dir: str) -> dict[int, Any]:
    """The Ray processes of one session by pid, from any process (daemons carry the session
    name in their command line; workers are their descendants); this process excluded."""
    import psutil

    name = os.path.basename(session_dir.rstrip("/"))
    if not name.startswith("session_"):
        return {}
    found: dict[int, psutil.Process] = {}
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if name in " ".join(proc.info["cmdline"] or []):
                found[proc.pid] = proc
                for child in proc.children(recursive=True):
                    found[child.pid] = child
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    found.pop(os.getpid(), None)
    return found


def kill_ray_session(session_dir: str) -> int:
    """Kill the Ray processes of one session. Other Ray clusters on the machine are left
    alone."""
    import psutil

    victims = session_processes(session_dir)
    for proc in victims.values():
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(list(victims.values()), timeout=10)
    return len(victims)
