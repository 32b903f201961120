"""``llmfleet bench`` end to end against a stub SSE server in a subprocess: files written,
sweep, bad arguments, and Ctrl-C writing what was measured."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import cli

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.fakes import closed_port

ROOT = Path(__file__).resolve().parents[2]


def _start_stub(mode: str, delay_s: float = 0.0) -> tuple[subprocess.Popen, str]:
    port = closed_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench.stub_server",
            "--port",
            str(port),
            "--mode",
            mode,
            "--chunks",
            "4",
            "--delay-s",
            str(delay_s),
            "--lifetime-s",
            "60",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert "stub server" in proc.stdout.readline()
    return proc, f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def stub_ok() -> Iterator[str]:
    proc, url = _start_stub("ok", 0.002)
    yield url
    proc.terminate()
    proc.wait(5)


def test_single_run_writes_json_jsonl_png(stub_ok: str, tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    rc = cli.main(
        [
            "--url",
            stub_ok,
            "--dataset",
            "shared-prefix:groups=2,system=16,question=4",
            "--rate",
            "40",
            "--arrival",
            "constant",
            "--duration",
            "1",
            "--tokenizer",
            "none",
            "--out",
            str(out),
            "--plot",
            str(tmp_path / "run.png"),
            "--slo",
            "ttft_ms=1000,e2e_ms=2000",
            "--warmup",
            "2",
            "--no-progress",
        ]
    )
    assert rc == 0
    res = json.loads(out.read_text())
    assert res["config"]["model"] == "stub-model"
    assert res["config"]["num_requests"] == 40
    assert res["requests"]["total"] == res["requests"]["completed"] == 40  # no warm-up rows
    assert res["goodput"]["attainment"] == 1.0
    assert len((tmp_path / "run.jsonl").read_text().splitlines()) == res["requests"]["total"]
    assert (tmp_path / "run.png").stat().st_size > 1000


def test_sweep_writes_per_rate_results(stub_ok: str, tmp_path: Path) -> None:
    out = tmp_path / "sweep.json"
    rc = cli.main(
        [
            "--url",
            stub_ok,
            "--model",
            "m",
            "--dataset",
            "random:input=8,output=4",
            "--sweep",
            "20,40",
            "--duration",
            "0.5",
            "--tokenizer",
            "none",
            "--out",
            str(out),
            "--plot",
            str(tmp_path / "sweep.png"),
            "--slo",
            "ttft_ms=500",
            "--no-progress",
        ]
    )
    assert rc == 0
    res = json.loads(out.read_text())
    assert [row["rate"] for row in res["sweep"]] == [20.0, 40.0]
    assert (tmp_path / "sweep.rate-20.json").exists()
    assert (tmp_path / "sweep.png").exists()
    done = [row["result"]["requests"]["completed"] for row in res["sweep"]]
    assert done[1] > done[0]


def test_bad_arguments_exit_2(tmp_path: Path) -> None:
    base = ["--url", "http://127.0.0.1:1", "--out", str(tmp_path / "x.json")]
    assert cli.main([*base, "--dataset", "random", "--slo", "ttft=3"]) == 2
    assert cli.main([*base, "--dataset", "nope"]) == 2


def test_ctrl_c_writes_partial_results(tmp_path: Path) -> None:
    stub, url = _start_stub("stall")
    out = tmp_path / "int.json"
    try:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.cli",
                "--url",
                url,
                "--dataset",
                "random:input=4,output=2",
                "--rate",
                "20",
                "--duration",
                "30",
                "--timeout",
                "60",
                "--tokenizer",
                "none",
                "--out",
                str(out),
                "--no-progress",
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 15
        time.sleep(2.5)
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(max(1.0, deadline - time.monotonic()))
    finally:
        stub.terminate()
        stub.wait(5)
    assert rc == 130, proc.stderr.read() if proc.stderr else ""
    res = json.loads(out.read_text())
    assert res["interrupted"] is True
    assert res["requests"]["errors"].get("cancelled", 0) >= 5
