"""Component: the `llmfleet` command — bad config rejected early, a fleet that cannot be
placed or started refused with the reason, up/status/down (down drains the running streams),
status on a fleet with keys, down after a crash. Autoscaling and the ingress modes are in
test_cli_modes.py."""

from __future__ import annotations

import json
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psutil
import pytest

from tests.component.cli_fleet import (
    PORT,
    SIM_YAML,
    run,
    serves_the_api,
    session_procs,
    start_fleet,
)

pytestmark = [pytest.mark.component]


def test_bad_config_is_rejected_before_anything_starts(tmp_path: Path, env: dict[str, str]) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("engine:\n  vllm:\n    max_num_seqs: 0\nrouting:\n  polcy: prefix\n")
    t0 = time.monotonic()
    out = run(["up", "--config", str(cfg)], env, timeout=60)
    assert out.returncode == 2
    assert "engine.vllm.max_num_seqs" in out.stderr
    assert "routing.polcy" in out.stderr
    assert time.monotonic() - t0 < 30
    assert not (tmp_path / "home" / "state.json").exists()


def test_a_fleet_ray_cannot_place_is_refused_at_start(tmp_path: Path, env: dict[str, str]) -> None:
    """Found by hand: `up --replicas 10` on Ray's 8 logical CPUs waited for CPUs forever,
    printing nothing. Unset, `server.ray_num_cpus` is sized for the fleet; set too small,
    `up` says what is short and stops (tests/unit/test_runtime_capacity.py has the rule)."""
    cfg = tmp_path / "small.yaml"
    cfg.write_text(f"server:\n  port: {PORT}\n  metrics_export_port: 18131\n  ray_num_cpus: 2\n")
    t0 = time.monotonic()
    out = run(["up", "--config", str(cfg), "--engine", "null", "--replicas", "4"], env)
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    assert "cannot place the fleet" in out.stderr
    assert "CPU 5, the node has 2" in out.stderr  # 4 × 1 + 2 ingress × 0.5
    assert time.monotonic() - t0 < 60
    assert not (tmp_path / "home" / "state.json").exists()


def test_a_fleet_whose_replicas_cannot_start_says_why(tmp_path: Path, env: dict[str, str]) -> None:
    """Found by hand: `up --model DIR` with no weights in DIR (vLLM) ended after 81 s in a
    traceback saying only "Failed to update the deployments ['LLMReplica']". Now `up` exits
    1 and prints why each deployment Serve gave up on failed (here a broken tokenizer file,
    which the ingress reads too; the replicas' own records are in the unit tests)."""
    from replicas.model_prep import resolve_model

    model = tmp_path / "model"
    model.mkdir()
    for name in ("config.json", "tokenizer_config.json"):
        (model / name).write_bytes((resolve_model("default") / name).read_bytes())
    (model / "tokenizer.json").write_text("{ not a tokenizer")
    cfg = tmp_path / "sim.yaml"
    cfg.write_text(SIM_YAML)
    out = run(["up", "--config", str(cfg), "--model", str(model), "--replicas", "1"], env)
    assert out.returncode == 1, out.stdout[-2000:] + out.stderr[-2000:]
    assert "the fleet did not start" in out.stderr
    assert "  OpenAIIngress: Exception: key must be a string" in out.stderr, out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "home" / "state.json").exists()


def test_up_status_down(tmp_path: Path, env: dict[str, str]) -> None:
    proc = start_fleet(tmp_path, env)
    try:
        r = httpx.post(
            f"http://127.0.0.1:{PORT}/v1/completions",
            timeout=60,
            json={"model": "smollm2-135m-instruct", "prompt": "hello", "max_tokens": 3},
        )
        assert r.status_code == 200
        assert r.json()["usage"]["completion_tokens"] == 3
        serves_the_api(PORT, "proxy")  # the default ingress mode
        deadline = time.monotonic() + 20
        while True:
            st = run(["status"], env)
            rows = [ln for ln in st.stdout.splitlines() if ln[:1].isalnum() and " True " in ln]
            if len(rows) == 2 or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert st.returncode == 0, st.stdout + st.stderr
        assert "LLMReplica" in st.stdout, st.stdout
        assert len(rows) == 2, st.stdout
        with ThreadPoolExecutor(3) as pool:  # streams that are running when `down` comes
            streams = [pool.submit(_long_stream, PORT) for _ in range(2)]
            time.sleep(1.5)
            stopping = pool.submit(run, ["down"], env)
            time.sleep(2.0)  # draining: a new request is refused at once, OpenAI-shaped
            late = httpx.post(
                f"http://127.0.0.1:{PORT}/v1/completions",
                timeout=10,
                json={"model": "smollm2-135m-instruct", "prompt": "hi", "max_tokens": 3},
            )
            ended = [s.result(timeout=60) for s in streams]
            down = stopping.result(timeout=120)
        assert down.returncode == 0
        assert "stopped" in down.stdout
        # found by hand: `down` cut running streams mid-answer; now they finish (drained)
        assert ended == [(600, True)] * 2, ended
        assert late.status_code == 503, late.text
        assert late.json()["error"]["code"] == "shutting_down"
        proc.wait(timeout=60)
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{PORT}/health", timeout=3)
        assert run(["status"], env).stdout.strip() == "llmfleet: not running"
        # found by hand: a clean stop printed Ray's "Task ServeController.graceful_shutdown
        # failed", and Serve said "Application 'llmfleet' is ready" while it stopped
        assert proc.stdout is not None
        said = proc.stdout.read()
        assert "llmfleet: shutting down" in said, said[-3000:]
        assert "failed" not in said, said[-3000:]
        assert "is ready at" not in said, said[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()


def _long_stream(port: int) -> tuple[int, bool]:
    """Stream 600 tokens (a few seconds of the sim engine at speed 5): (tokens, [DONE] seen)."""
    body = {
        "model": "smollm2-135m-instruct",
        "prompt": "hello",
        "max_tokens": 600,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    tokens, done = 0, False
    try:
        with httpx.stream(
            "POST", f"http://127.0.0.1:{port}/v1/completions", json=body, timeout=60
        ) as r:
            for line in r.iter_lines():
                if line == "data: [DONE]":
                    done = True
                elif line.startswith("data: ") and '"usage": {' in line.replace('":{', '": {'):
                    usage = json.loads(line[6:]).get("usage") or {}
                    tokens = usage.get("completion_tokens", tokens)
    except httpx.HTTPError:
        pass
    return tokens, done


def test_status_on_a_fleet_with_keys_needs_an_admin_key(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """Found by hand: ``llmfleet status`` sent no key, so on a fleet with keys it printed an
    empty table and exited 0 (the ingress had answered 401)."""
    from cluster.keys import add_key

    keys = tmp_path / "keys.yaml"
    admin = add_key(keys, "ops", admin=True)
    user = add_key(keys, "app")
    proc = start_fleet(
        tmp_path, env, SIM_YAML.replace("server:\n", f"server:\n  api_keys_file: {keys}\n")
    )
    try:
        st = run(["status"], env)
        assert st.returncode == 1, st.stdout
        assert "answered 401" in st.stdout
        assert "--api-key or LLMFLEET_API_KEY" in st.stdout
        assert "answered 403" in run(["status", "--api-key", user], env).stdout
        st = run(["status"], {**env, "LLMFLEET_API_KEY": admin})
        assert st.returncode == 0, st.stdout
        assert "LLMReplica" in st.stdout
        assert "quotas=shared" in st.stdout, st.stdout  # 2 ingress replicas share the quotas
    finally:
        run(["down"], env)
        proc.wait(timeout=60)


def test_down_after_crash_cleans_up_that_session_only(tmp_path: Path, env: dict[str, str]) -> None:
    proc = start_fleet(tmp_path, env)
    state = tmp_path / "home" / "state.json"
    assert session_procs(state)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    survivors_before = session_procs(state)
    down = run(["down"], env)
    assert down.returncode == 0
    time.sleep(1)
    assert not [
        p for p in survivors_before if p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    ]
    assert not state.exists()
