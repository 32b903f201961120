"""Component: the `llmfleet` command — bad config rejected early, up/status/down, down after a crash."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

pytestmark = [pytest.mark.component]
PORT = 8131
LLMFLEET = [sys.executable, "-m", "cluster.cli"]


def run(
    args: list[str], env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(LLMFLEET + args, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture()
def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "LLMFLEET_HOME": str(tmp_path / "home")}


def test_bad_config_is_rejected_before_anything_starts(tmp_path: Path, env: dict[str, str]) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("engine:\n  vllm:\n    max_num_seqs: 0\nrouting:\n  polcy: prefix\n")
    t0 = time.monotonic()
    out = run(["up", "--config", str(cfg)], env, timeout=60)
    assert out.returncode == 2
    assert "engine.vllm.max_num_seqs" in out.stderr and "routing.polcy" in out.stderr
    assert time.monotonic() - t0 < 30 and not (tmp_path / "home" / "state.json").exists()


def _start(tmp_path: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    cfg = tmp_path / "sim.yaml"
    cfg.write_text(
        f"server:\n  port: {PORT}\n  metrics_export_port: 18131\n"
        "replicas:\n  num_cpus: 0.1\nengine:\n  sim:\n    speed: 5.0\n"
    )
    proc = subprocess.Popen(
        LLMFLEET + ["up", "--config", str(cfg), "--engine", "sim", "--replicas", "2"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 240
    lines = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        lines.append(line)
        if "llmfleet ready" in line:
            return proc
        if proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError("llmfleet up did not become ready:\n" + "".join(lines[-30:]))


def _session_procs(state_file: Path) -> list[psutil.Process]:
    import json

    name = os.path.basename(json.loads(state_file.read_text())["session_dir"])
    return [
        p for p in psutil.process_iter(["cmdline"]) if name in " ".join(p.info["cmdline"] or [])
    ]


def test_up_status_down(tmp_path: Path, env: dict[str, str]) -> None:
    proc = _start(tmp_path, env)
    try:
        r = httpx.post(
            f"http://127.0.0.1:{PORT}/v1/completions",
            timeout=60,
            json={"model": "smollm2-135m-instruct", "prompt": "hello", "max_tokens": 3},
        )
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3
        deadline = time.monotonic() + 20
        while True:
            st = run(["status"], env)
            rows = [ln for ln in st.stdout.splitlines() if ln[:1].isalnum() and " True " in ln]
            if len(rows) == 2 or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert st.returncode == 0 and "LLMReplica" in st.stdout, st.stdout + st.stderr
        assert len(rows) == 2, st.stdout
        down = run(["down"], env)
        assert down.returncode == 0 and "stopped" in down.stdout
        proc.wait(timeout=60)
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{PORT}/health", timeout=3)
        assert run(["status"], env).stdout.strip() == "llmfleet: not running"
    finally:
        if proc.poll() is None:
            proc.kill()


def test_down_after_crash_cleans_up_that_session_only(tmp_path: Path, env: dict[str, str]) -> None:
    proc = _start(tmp_path, env)
    state = tmp_path / "home" / "state.json"
    assert _session_procs(state)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    survivors_before = _session_procs(state)
    down = run(["down"], env)
    assert down.returncode == 0
    time.sleep(1)
    assert not [
        p for p in survivors_before if p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    ]
    assert not state.exists()
