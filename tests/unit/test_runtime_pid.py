"""``local_state.pid_alive``: what ``llmfleet down`` and ``status`` take for a running ``up``."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from cluster.local_state import pid_alive


def test_a_running_process_is_alive_and_an_exited_unreaped_one_is_not() -> None:
    assert pid_alive(os.getpid())
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert not pid_alive(proc.pid)  # exited and reaped


def test_a_zombie_counts_as_gone() -> None:
    # ``up`` started by a harness that has not reaped it yet: ``down`` used to wait out its
    # whole timeout (60 s) for a process that had already exited.
    import psutil

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    ps = psutil.Process(proc.pid)
    deadline = time.monotonic() + 10
    while ps.status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
        time.sleep(0.02)
    assert ps.status() == psutil.STATUS_ZOMBIE
    assert not pid_alive(proc.pid)
    proc.wait()
