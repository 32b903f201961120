"""Component: the `llmfleet` command — bad config rejected early, up/status/down, down after a
crash, and autoscaling 1 → N → 1 under `llmfleet bench` load as `llmfleet status` shows it
(replica counts and the autoscaler's decisions)."""

from __future__ import annotations

import ast
import json
import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

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


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "LLMFLEET_HOME": str(tmp_path / "home")}


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


SIM_YAML = (
    f"server:\n  port: {PORT}\n  metrics_export_port: 18131\n"
    "replicas:\n  num_cpus: 0.1\nengine:\n  sim:\n    speed: 5.0\n"
)


def _start(
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
        assert r.status_code == 200
        assert r.json()["usage"]["completion_tokens"] == 3
        _serves_the_api(PORT, "proxy")  # the default ingress mode
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
    proc = _start(
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


def _running(status_out: str) -> int | None:
    """RUNNING replicas of the LLMReplica deployment in `llmfleet status` output."""
    m = re.search(r"deployment LLMReplica: \S+ replicas=(\{[^}]*\})", status_out)
    return int(ast.literal_eval(m.group(1)).get("RUNNING", 0)) if m else None


def test_up_autoscale_scales_1_to_n_to_1_under_bench_load(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """The issue's "done means": `llmfleet up --engine sim --autoscale ttft-queue`, load from
    `llmfleet bench`, and `llmfleet status` shows 1 → ≥ 2 → 1 replicas with no failed request.
    The load is 3x what one simulated CPU replica can prefill (sized from its profile)."""
    from replicas.sim.core import CoreConfig, EngineCore

    rate, n = 4.0, 40
    one = EngineCore(CoreConfig(model="smollm2-135m", hardware="cpu", block_size=16))
    prompt = max(64, min(1500, round(3.0 * one.stats().prefill_tokens_per_s / rate)))
    port = PORT + 1  # own ports: the crash test before may leave 8131/18131 briefly taken
    yaml_text = (
        f"server:\n  port: {port}\n  metrics_export_port: {port + 10_000}\n"
        "replicas:\n  num_cpus: 0.1\n"
        "engine:\n  sim:\n    hardware: cpu\n    model_profile: smollm2-135m\n"
        "autoscaling:\n  min_replicas: 1\n  max_replicas: 3\n  ttft_slo_s: 2.0\n"
        "  metrics_interval_s: 0.5\n  look_back_period_s: 2.0\n  params:\n"
        "    downscale_stable_s: 3.0\n    downscale_cooldown_s: 3.0\n"
        "    upscale_cooldown_s: 2.0\n    target_attainment: 0.0\n"
    )
    proc = _start(tmp_path, env, yaml_text, ("--autoscale", "ttft-queue"))
    out = tmp_path / "bench.json"
    seen: list[int | None] = []

    def poll_until(cond: Any, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            seen.append(_running(run(["status"], env, timeout=30).stdout))
            if cond():
                return
            time.sleep(1.0)

    try:
        poll_until(lambda: seen[-1] == 1, 60)
        assert seen[-1] == 1, seen
        bench = subprocess.Popen(
            [*LLMFLEET, "bench", "--url", f"http://127.0.0.1:{port}", "--no-progress", "--dataset", f"random:input={prompt},output=8,spread=0", "--rate", str(rate), "--arrival", "constant", "--num-requests", str(n), "--duration", "15", "--timeout", "60", "--seed", "3", "--out", str(out)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        poll_until(lambda: bench.poll() is not None, 90)
        bench_out = bench.communicate(timeout=30)[0]
        assert bench.returncode == 0, bench_out[-2000:]
        poll_until(lambda: seen[-1] == 1, 60)
        peak = max((c or 0) for c in seen)
        result = json.loads(out.read_text())
        assert result["requests"]["completed"] == n
        assert result["requests"]["failed"] == 0
        assert peak >= 2, seen
        assert seen[-1] == 1, seen
        # and status says what the autoscaler decided and why (cluster/autoscaler_view.py)
        deadline, said = time.monotonic() + 15, ""
        back = "running 1, wants 1: at its floor (autoscaling.min_replicas 1)"
        while back not in said and time.monotonic() < deadline:
            time.sleep(1.0)
            said = run(["status"], env, timeout=30).stdout
        assert f"autoscaler LLMReplica (ttft-queue): {back}" in said, said
        moves = next(ln for ln in said.splitlines() if ln.startswith("  moves so far: "))
        assert "up " in moves, said
        assert "down " in moves, said
    finally:
        run(["down"], env)
        proc.wait(timeout=60)


def _serves_the_api(port: int, ingress: str) -> None:
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


def test_direct_ingress_serves_the_port(tmp_path: Path, env: dict[str, str]) -> None:
    """`server.ingress: direct`: the ingress replica serves the port and Serve's proxy sits
    on port + 100 (the default, proxy, is checked the same way in test_up_status_down)."""
    port = PORT + 3
    yaml_text = (
        f"server:\n  port: {port}\n  metrics_export_port: {port + 10_000}\n  ingress: direct\n"
        "replicas:\n  num_cpus: 0.1\nengine:\n  sim:\n    speed: 5.0\n"
    )
    proc = _start(tmp_path, env, yaml_text, ("--replicas", "1"))
    try:
        _serves_the_api(port, "direct")
    finally:
        run(["down"], env)
        proc.wait(timeout=60)


@pytest.mark.e2e
def test_down_while_up_is_still_starting_stops_it(tmp_path: Path, env: dict[str, str]) -> None:
    """Found by hand: Ctrl-C (or `llmfleet down`) while `up` was starting did nothing until
    the fleet was ready, and `down` printed "stopped" while `up` went on. A vLLM replica
    takes ~20 s to start: while it does, `status` says starting, `down` stops `up` (rc 130)
    and none of its processes stay."""
    cfg = tmp_path / "vllm.yaml"
    cfg.write_text(f"server:\n  port: {PORT}\n  metrics_export_port: 18131\n")
    proc = subprocess.Popen(
        [*LLMFLEET, "up", "--config", str(cfg), "--engine", "vllm", "--replicas", "1"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    try:
        lines: list[str] = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            lines.append(proc.stdout.readline())
            if "Started Serve" in lines[-1]:
                break
        else:
            raise AssertionError("".join(lines[-20:]))
        time.sleep(5)  # the replica's process exists; its engine is still loading
        spawned = psutil.Process(proc.pid).children(recursive=True)
        assert spawned
        st = run(["status"], env)
        assert "starting" in st.stdout, st.stdout
        t0 = time.monotonic()
        down = run(["down"], env)
        assert down.returncode == 0, down.stdout + down.stderr
        rc = proc.wait(timeout=60)
        assert rc == 130, proc.stdout.read()[-3000:]
        assert time.monotonic() - t0 < 45
        time.sleep(1)
        left = [p for p in spawned if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        assert not left, [p.name() for p in left]
        assert not (tmp_path / "home" / "state.json").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
