"""Component: `llmfleet up --autoscale ttft-queue` scaling 1 → N → 1 under `llmfleet bench`
load as `llmfleet status` shows it, `server.ingress: direct`, and `down` while a vLLM `up` is
still starting."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.component.cli_fleet import LLMFLEET, PORT, run, serves_the_api, start_fleet

pytestmark = [pytest.mark.component]


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
    proc = start_fleet(tmp_path, env, yaml_text, ("--autoscale", "ttft-queue"))
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


def test_direct_ingress_serves_the_port(tmp_path: Path, env: dict[str, str]) -> None:
    """`server.ingress: direct`: the ingress replica serves the port and Serve's proxy sits
    on port + 100 (the default, proxy, is checked the same way in test_up_status_down);
    `down` stops it as soon as the requests in flight are done."""
    port = PORT + 3
    yaml_text = (
        f"server:\n  port: {port}\n  metrics_export_port: {port + 10_000}\n  ingress: direct\n"
        "replicas:\n  num_cpus: 0.1\nengine:\n  sim:\n    speed: 5.0\n"
    )
    proc = start_fleet(tmp_path, env, yaml_text, ("--replicas", "1"))
    try:
        serves_the_api(port, "direct")
        t0 = time.monotonic()
        down = run(["down"], env)
        # found by hand: 35 s, Serve holding a stopping direct ingress open 30 s for a load
        # balancer that is not there (the proxy mode's `down` takes ~10 s)
        took = time.monotonic() - t0
        assert down.returncode == 0, down.stdout + down.stderr
        assert took < 25, took
    finally:
        run(["down"], env)
        proc.wait(timeout=60)


@pytest.mark.e2e
def test_down_while_up_is_still_starting_stops_it(tmp_path: Path, env: dict[str, str]) -> None:
    """Found by hand: Ctrl-C (or `llmfleet down`) while `up` was starting did nothing until
    the fleet was ready, and `down` printed "stopped" while `up` went on. A vLLM replica
    takes ~20 s to start: while it does, `status` says starting, `down` stops `up` (rc 130)
    and none of its processes stay. `down` comes while vLLM's engine core loads the model:
    when the replica waited for it on its event loop, Serve could not stop the replica
    until it was up (17-61 s, found by a failed CI run)."""
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
            if "Ray started" in lines[-1]:
                break
        else:
            raise AssertionError("".join(lines[-20:]))
        spawned: list[psutil.Process] = []
        while time.monotonic() < deadline and proc.poll() is None:  # until the engine loads
            spawned = psutil.Process(proc.pid).children(recursive=True)
            if any("EngineCore" in " ".join(_cmdline(p)) for p in spawned):
                break
            time.sleep(0.2)
        else:
            raise AssertionError("no vLLM engine core started")
        st = run(["status"], env)
        assert "starting" in st.stdout, st.stdout
        t0 = time.monotonic()
        down = run(["down"], env)
        assert down.returncode == 0, down.stdout + down.stderr
        rc = proc.wait(timeout=60)
        assert rc == 130, proc.stdout.read()[-3000:]
        took = time.monotonic() - t0
        print(f"down while starting: up ended {took:.1f} s after down began")
        assert took < 20  # 4-5 s; with the engine built on the loop 17-61 s
        time.sleep(1)
        left = [p for p in spawned if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        assert not left, [p.name() for p in left]
        assert not (tmp_path / "home" / "state.json").exists()
    finally:
        if proc.poll() is None:
            proc.kill()


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:  # exited meanwhile
        return []
