"""Start and stop servers under test as subprocesses (bare vLLM, llmfleet), on 127.0.0.1."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

CPU_ENGINE_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "OMP_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


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
    model_dir: str,
    served_name: str,
    port: int,
    log: Path,
    *,
    max_model_len: int = 2048,
    max_num_seqs: int = 32,
    max_num_batched_tokens: int = 512,
) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        model_dir,
        "--served-model-name",
        served_name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--enforce-eager",
        "--dtype",
        "bfloat16",
        "--max-model-len",
        str(max_model_len),
        "--max-num-seqs",
        str(max_num_seqs),
        "--max-num-batched-tokens",
        str(max_num_batched_tokens),
        "--seed",
        "0",
        "--enable-prefix-caching",
    ]
    proc = subprocess.Popen(
        cmd,
        env={**os.environ, **CPU_ENGINE_ENV},
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    wait_http(f"http://127.0.0.1:{port}/v1/models", proc)
    return proc


def start_llmfleet(config: Path, home: Path, log: Path) -> subprocess.Popen:
    env = {**os.environ, "LLMFLEET_HOME": str(home)}
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
