"""Start and stop servers under test as subprocesses (bare vLLM, llmfleet), on 127.0.0.1."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from replicas.vllm_settings import VLLMSettings, cpu_env, on_gpu, server_argv


def wait_http(url: str, proc: subprocess.Popen, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before {url} answered")
        try:
            if httpx.get(url, timeout=3).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1.0)
    raise TimeoutError(f"{url} not ready after {timeout_s:.0f} s")


def start_vllm(
    settings: VLLMSettings, served_name: str, port: int, log: Path, *, wait: bool = True
) -> subprocess.Popen:
    """The bare vLLM OpenAI server with the engine arguments our replicas use."""
    gpu = on_gpu()
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
    cmd += server_argv(settings, gpu, served_name=served_name, port=port)
    env = {**os.environ, **({} if gpu else cpu_env(settings))}
    proc = subprocess.Popen(
        cmd,
        env=env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    if wait:
        wait_http(f"http://127.0.0.1:{port}/v1/models", proc)
    return proc


def start_llmfleet(
    config: Path, home: Path, log: Path, env: dict[str, str] | None = None
) -> subprocess.Popen:
    env = {**os.environ, "LLMFLEET_HOME": str(home), **(env or {})}
    cmd = [sys.executable, "-m", "cluster.cli", "up", "--config", str(config)]
    proc = subprocess.Popen(
        cmd, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True
    )
    return proc


def stop(proc: subprocess.Popen, timeout_s: float = 60.0) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
