"""Running the `llmfleet` command in component tests: its ports, a simulated fleet started
with `up` (foreground, as an operator runs it), and the checks both ingress modes share."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

PORT = 8131
LLMFLEET = [sys.executable, "-m", "cluster.cli"]


def run(
    args: list[str], env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(LLMFLEET + args, env=env, capture_output=True, text=True, timeout=timeout)


SIM_YAML = (
    f"server:\n  port: {PORT}\n  metrics_export_port: 18131\n"
    "replicas:\n  num_cpus: 0.1\nengine:\n  sim:\n    speed: 5.0\n"
)


def start_fleet(
    tmp_path: Path,
    env: dict[str, str],
    yaml_text: str = SIM_YAML,
    args: tuple[str, ...] = ("--replicas", "2"),
) -> subprocess.Popen[str]:
    cfg = tmp_path / "sim.yaml"
    cfg.write_text(yaml_text)
    proc = subprocess.Popen(
        [*LLMFLEET, "up", "--config", str(cfg), "--engine", "sim", *args],
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


def session_procs(state_file: Path) -> list[psutil.Process]:
    name = os.path.basename(json.loads(state_file.read_text())["session_dir"])
    return [
        p for p in psutil.process_iter(["cmdline"]) if name in " ".join(p.info["cmdline"] or [])
    ]


def serves_the_api(port: int, ingress: str) -> None:
    """The same API in either ``server.ingress`` mode: a stream with the replica header, an
    OpenAI-shaped 404, a client that drops a stream; Serve's proxy on port + 100 only with
    direct."""
    url = f"http://127.0.0.1:{port}"
    body = {"model": "smollm2-135m-instruct", "messages": [{"role": "user", "content": "hi"}]}
    with httpx.stream(
        "POST", f"{url}/v1/chat/completions", timeout=60,
        json={**body, "stream": True, "max_tokens": 5},
    ) as r:  # fmt: skip
        assert r.status_code == 200
        assert r.headers["x-llmfleet-replica"]
        lines = [ln for ln in r.iter_lines() if ln]
    assert lines[-1] == "data: [DONE]"
    assert sum('"content"' in ln for ln in lines) >= 5
    bad = httpx.post(f"{url}/v1/chat/completions", json={**body, "model": "x"}, timeout=30)
    assert bad.status_code == 404
    assert bad.json()["error"]["code"] == "model_not_found"
    with httpx.stream(
        "POST", f"{url}/v1/chat/completions", timeout=60,
        json={**body, "stream": True, "max_tokens": 400},
    ) as r:  # fmt: skip
        next(r.iter_lines())  # drop the stream after its first event
    again = httpx.post(f"{url}/v1/chat/completions", json={**body, "max_tokens": 2}, timeout=60)
    assert again.status_code == 200
    other = f"http://127.0.0.1:{port + 100}/v1/models"
    if ingress == "direct":  # Serve's proxy still runs, aside
        assert httpx.get(other, timeout=30).status_code == 200
    else:
        with pytest.raises(httpx.HTTPError):
            httpx.get(other, timeout=3)
